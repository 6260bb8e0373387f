// reduce_sum_renamed: the optimized reduction of reduce_sum_optimized.cpp
// under another name, as an optimized build often renames its kernel
// (`ditto validate --opt-kernel reduce_sum_v2`).
#include "hiplite.hpp"

#define REDUCE_SUM_BLOCK 256
#define REDUCE_SUM_KERNEL reduce_sum_v2

__global__ void reduce_sum_v2(const float* input, float* output, int n) {
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
DITTO_KERNEL(reduce_sum_v2)

#include "reduce_sum_main.hpp"
