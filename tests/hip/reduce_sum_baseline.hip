// reduce_sum_baseline: one atomicAdd per element.
#include <hip/hip_runtime.h>

__global__ void reduce_sum(const float* input, float* output, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(output, input[i]);
}

#include "reduce_sum_main.hpp"
