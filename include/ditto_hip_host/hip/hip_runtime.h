// include/ditto_hip_host/hip/hip_runtime.h — the host build of a HIP source.
//
// ditto's CPU runtime (crates/hsa-cpu) runs hipcc-built applications on the
// real HIP runtime (libamdhip64): the application, its HIP calls, its code
// object, kernel arguments and packets are the real ones, but AMDGPU machine
// code cannot run on the CPU. Each kernel therefore runs from a HOST BUILD
// of the same HIP source: a CPU code object (ditto_hsa_cpu.h, ABI 2) that
// the runtime finds by the kernel's mangled name (crates/hsa-cpu/src/
// code_objects/host_kernels.rs: DITTO_HIP_HOST_KERNELS, then <executable>.host.so).
//
// `ditto hipcc ARGS...` makes it: it runs hipcc with ARGS, then compiles
// each HIP source again with g++, this directory first on the include path,
// and links <executable>.host.so beside the executable (crates/hipcc/).
// With this directory first, `#include <hip/hip_runtime.h>` gives:
//   - the macros of hipcc's DEVICE pass (ditto_hip_platform.h): every `#if`
//     picks the code the GPU runs;
//   - HIP's own host API (<hip/hip_runtime_api.h>: types, enums, every
//     function declared; none of them runs in a host build, and the host
//     code is discarded at link time), HIP's vector types with HIP's layout;
//   - the kernel language on the CPU (include/ditto_hip_cpu.hpp: threadIdx,
//     __shared__, __syncthreads, atomics, wavefronts of 64 with shuffles and
//     ballots) and the device built-ins (ditto_device_functions.h).
// The host part of the source is compiled (it must parse) but never runs:
// `main` is renamed away, launches are plain calls nobody makes, and the
// linker drops every function no kernel reaches.
#ifndef DITTO_HIP_HOST_HIP_RUNTIME_H
#define DITTO_HIP_HOST_HIP_RUNTIME_H

#ifndef DITTO_DEVICE_PASS
#define DITTO_DEVICE_PASS 1
#endif

#include "ditto_hip_platform.h"

#include <hip/hip_runtime_api.h>
#include <hip/hip_vector_types.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// What HIP's own hip_runtime.h brings in under hipcc (ROCm 5.2 and 6.4:
// <thread>, and with it <memory>'s unique_ptr, <chrono>, <tuple>; <cmath>,
// <cstdlib>, <cstring>, <climits>, <cassert>, <cerrno>), so that a source
// relying on them compiles the same in the host build.
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <cmath>
#include <cstdlib>
#include <thread>
#include <tuple>

// HIP's headers define the keywords empty for g++; the kernel language
// below gives them their host-build meaning.
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __constant__
#undef __forceinline__
#undef __noinline__
#undef __launch_bounds__
#define DITTO_HIP_HAS_DIM3 1
#include "ditto_hip_cpu.hpp"

// Device variables are ordinary globals of the host build: the CPU runtime
// hands their addresses to HIP (hipMemcpyToSymbol, hipGetSymbolAddress), and
// kernels read what the host wrote there.
#undef __constant__
#define __constant__
#define __managed__

#include "ditto_device_functions.h"

#define HIP_SYMBOL(X) X
#define HIP_DYNAMIC_SHARED_ATTRIBUTE

// A launch in a host build is never made: `hipLaunchKernelGGL(k, ...)` and
// `k<<<...>>>(args)` (which `ditto hipcc` rewrites to `k(args)`) only have to
// compile.
#define hipLaunchKernelGGL(...) ((void)0)

// hipThreadIdx_x and friends, HIP's older spellings.
#define hipThreadIdx_x (threadIdx.x)
#define hipThreadIdx_y (threadIdx.y)
#define hipThreadIdx_z (threadIdx.z)
#define hipBlockIdx_x (blockIdx.x)
#define hipBlockIdx_y (blockIdx.y)
#define hipBlockIdx_z (blockIdx.z)
#define hipBlockDim_x (blockDim.x)
#define hipBlockDim_y (blockDim.y)
#define hipBlockDim_z (blockDim.z)
#define hipGridDim_x (gridDim.x)
#define hipGridDim_y (gridDim.y)
#define hipGridDim_z (gridDim.z)

#endif  // DITTO_HIP_HOST_HIP_RUNTIME_H
