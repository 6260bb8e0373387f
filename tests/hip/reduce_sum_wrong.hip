// reduce_sum_wrong: a deliberately wrong reduction that writes 0. ditto must
// report it as a mismatch on argument 1 (output) against the baseline.
#include <hip/hip_runtime.h>

__global__ void reduce_sum(const float* input, float* output, int n) {
  (void)input;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i == 0 && n > 0) *output = 0.0f;
}

#include "reduce_sum_main.hpp"
