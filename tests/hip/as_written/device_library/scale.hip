// scale.hip — a device function compiled into a static device library:
//   hipcc -fgpu-rdc -c scale.hip -o scale.o && ar rcs libscale.a scale.o
#include "scale.hpp"

__device__ float scaled(float value, int index) { return value * static_cast<float>(1 + index % 3); }
