// reduce_sum_optimized: a shared-memory tree per block, then one atomicAdd
// per block. Same result as the baseline (exact in any order for its input).
#include <hip/hip_runtime.h>

#define REDUCE_SUM_BLOCK 256

__global__ void reduce_sum(const float* input, float* output, int n) {
  __shared__ float partial[REDUCE_SUM_BLOCK];
  const int tid = threadIdx.x;
  const int i = blockIdx.x * blockDim.x + tid;
  partial[tid] = i < n ? input[i] : 0.0f;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (tid < stride) partial[tid] += partial[tid + stride];
    __syncthreads();
  }
  if (tid == 0) atomicAdd(output, partial[0]);
}

#include "reduce_sum_main.hpp"
