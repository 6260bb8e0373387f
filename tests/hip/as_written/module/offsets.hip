// A code object the program loads itself (hipModuleLoad), built with
// `ditto hipcc --genco offsets.hip -o offsets.co`: its host build is
// offsets.co.host.so, found beside the program.
#include <hip/hip_runtime.h>

extern "C" __global__ void offset_by(int* out, int offset, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i + offset;
}
