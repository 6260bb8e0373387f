// reduce_sum_faulty: a replacement reduce_sum that reads far past its
// input (an address no allocation holds): on a GPU a memory access fault.
// `ditto replay --from` must report it as the replacement's fault and
// never fault itself.
#include <hip/hip_runtime.h>

__global__ void reduce_sum(const float* input, float* output, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i == 0 && n > 0) *output = input[static_cast<size_t>(1) << 40];
}

#include "reduce_sum_main.hpp"
