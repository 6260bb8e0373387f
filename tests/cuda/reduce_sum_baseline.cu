// reduce_sum_baseline: the reference reduction, one atomicAdd per element.
__global__ void reduce_sum(const float* input, float* output, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(output, input[i]);
}
#include "reduce_sum_main.cuh"
