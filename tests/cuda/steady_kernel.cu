// steady_kernel.cu — the CUDA twin of tests/hip/steady_kernel.hip (the
// application of the replay kernel-time figure, bench item 8b, on an
// NVIDIA GPU): polynomial_map evaluates a 64-term polynomial at each of n
// floats, launched `launches` times on the same input, the device
// synchronised after each, so every launch after the first runs warm.
//
//   steady_kernel [launches] [n]      (defaults 24 and 16777216)
//
// Prints `checksum = <value>` of the last output.
#include <stdlib.h>

#include <vector>

#include "check.cuh"

__global__ void polynomial_map(const float* in, float* out, int n, int terms) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    const float x = in[i];
    float acc = 0.0f;
    for (int t = 0; t < terms; ++t) acc = acc * x + 1.0f / static_cast<float>(t + 1);
    out[i] = acc;
  }
}

int main(int argc, char** argv) {
  const int launches = argc > 1 ? atoi(argv[1]) : 24;
  const int n = argc > 2 ? atoi(argv[2]) : 1 << 24;
  if (launches < 1 || n < 1) {
    fprintf(stderr, "steady_kernel: launches and n must be positive\n");
    return 2;
  }
  std::vector<float> host(n);
  for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i % 1000) / 1000.0f;
  float* in = nullptr;
  float* out = nullptr;
  CUDA_CHECK(cudaMalloc(&in, n * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&out, n * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(in, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  const int block = 256;
  for (int l = 0; l < launches; ++l) {
    polynomial_map<<<(n + block - 1) / block, block>>>(in, out, n, 64);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  CUDA_CHECK(cudaMemcpy(host.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost));
  double checksum = 0.0;
  for (int i = 0; i < n; ++i) checksum += host[i];
  printf("checksum = %.3f\n", checksum);
  CUDA_CHECK(cudaFree(in));
  CUDA_CHECK(cudaFree(out));
  return 0;
}
