// reduce_sum_main.cuh — the host program shared by the reduce_sum_*.cu
// programs (the CUDA twins of tests/apps/reduce_sum_*.cpp). Each defines
//   __global__ void reduce_sum(const float* input, float* output, int n)
// then includes this file, which sums n = 65536 values (i % 7) * 0.5f on
// the GPU and prints `sum = <value>`. Every partial sum is a multiple of 0.5
// below 2^23, so a correct kernel prints exactly 98301.5 in any order.
#ifndef REDUCE_SUM_MAIN_CUH
#define REDUCE_SUM_MAIN_CUH
#include <vector>
#include "check.cuh"
#ifndef REDUCE_SUM_BLOCK
#define REDUCE_SUM_BLOCK 256
#endif
int main() {
  const int n = 65536;
  std::vector<float> host(n);
  for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i % 7) * 0.5f;
  float* input = nullptr;
  float* output = nullptr;
  CUDA_CHECK(cudaMalloc(&input, n * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&output, sizeof(float)));
  CUDA_CHECK(cudaMemcpy(input, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemset(output, 0, sizeof(float)));
  const int blocks = (n + REDUCE_SUM_BLOCK - 1) / REDUCE_SUM_BLOCK;
  reduce_sum<<<blocks, REDUCE_SUM_BLOCK>>>(input, output, n);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  float sum = -1.0f;
  CUDA_CHECK(cudaMemcpy(&sum, output, sizeof(float), cudaMemcpyDeviceToHost));
  printf("sum = %.1f\n", sum);
  CUDA_CHECK(cudaFree(input));
  CUDA_CHECK(cudaFree(output));
  return 0;
}
#endif
