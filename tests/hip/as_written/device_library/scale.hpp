// scale.hpp — the interface of the static device library of
// two_files_main.hip: a device function other files' kernels call
// (relocatable device code, -fgpu-rdc).
#pragma once
#include <hip/hip_runtime.h>

__device__ float scaled(float value, int index);
