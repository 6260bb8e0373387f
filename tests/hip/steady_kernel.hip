// steady_kernel: the application of scripts/bench item 8b, a kernel run in a
// loop as training and solver loops run theirs. polynomial_map evaluates a
// polynomial of `terms` terms at each of n floats (out-of-place, the same
// input every time); the program launches it `launches` times, waiting for
// the device after each, so every launch after the first runs warm:
//
//   steady_kernel [launches] [n]      (defaults 24 and 262144)
//
// Prints `checksum = <value>` of the last output (a fixed value for given
// arguments; the loop's outputs are all the same).
#include <stdlib.h>

#include <vector>

#include "hip_check.hpp"

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
  const int n = argc > 2 ? atoi(argv[2]) : 1 << 18;
  const int terms = 64;
  if (launches < 1 || n < 1) {
    fprintf(stderr, "steady_kernel: launches and n must be positive (usage: steady_kernel [launches] [n])\n");
    return 2;
  }
  std::vector<float> host(n);
  for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i % 1000) / 1000.0f;

  float* in = nullptr;
  float* out = nullptr;
  HIP_CHECK(hipMalloc(&in, n * sizeof(float)));
  HIP_CHECK(hipMalloc(&out, n * sizeof(float)));
  HIP_CHECK(hipMemcpy(in, host.data(), n * sizeof(float), hipMemcpyHostToDevice));

  const int block = 256;
  const int grid = (n + block - 1) / block;
  for (int l = 0; l < launches; ++l) {
    hipLaunchKernelGGL(polynomial_map, dim3(grid), dim3(block), 0, 0, in, out, n, terms);
    HIP_CHECK(hipGetLastError());
    HIP_CHECK(hipDeviceSynchronize());
  }

  HIP_CHECK(hipMemcpy(host.data(), out, n * sizeof(float), hipMemcpyDeviceToHost));
  double checksum = 0.0;
  for (int i = 0; i < n; ++i) checksum += host[i];
  printf("checksum = %.3f\n", checksum);

  HIP_CHECK(hipFree(in));
  HIP_CHECK(hipFree(out));
  return 0;
}
