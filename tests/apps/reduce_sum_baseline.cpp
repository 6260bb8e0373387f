// reduce_sum_baseline: the reference reduction, one atomicAdd per element.
#include "hiplite.hpp"

__global__ void reduce_sum(const float* input, float* output, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(output, input[i]);
}
DITTO_KERNEL(reduce_sum)

#include "reduce_sum_main.hpp"
