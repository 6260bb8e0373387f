// bandwidth [MiB]: times, in one process, (a) a launch of the non-target
// kernel fill_plain and (b) of the target kernel fill_target, each with
// the device synchronised after it, and (c) cudaMemcpy device-to-host of
// the same bytes into pageable host memory. Under ditto with
// --kernel fill_target, (b) - (a) is the capture's cost. A first
// fill_target on 4 KiB is timed apart (w): it pays the collector's one-time
// CUDA start. Prints the times in milliseconds on one line:
//   bandwidth: bytes=<B> plain_ms=<a> target_ms=<b> memcpy_ms=<c> first_small_ms=<w>
#include <chrono>
#include <vector>
#include "check.cuh"

__global__ void fill_plain(float* out, long n, float value) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
    out[i] = value;
}
__global__ void fill_target(float* out, long n, float value) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
    out[i] = value;
}

static double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

int main(int argc, char** argv) {
  const long mib = argc > 1 ? atol(argv[1]) : 512;
  const long n = mib * (1 << 20) / sizeof(float);
  float* buf = nullptr;
  CUDA_CHECK(cudaMalloc(&buf, n * sizeof(float)));
  float* small = nullptr;
  CUDA_CHECK(cudaMalloc(&small, 1024 * sizeof(float)));
  std::vector<float> host(n);
  // Warm-up: both kernels' modules loaded, the host pages touched.
  fill_plain<<<1024, 256>>>(buf, n, 0.0f);
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(host.data(), buf, n * sizeof(float), cudaMemcpyDeviceToHost));
  auto t0 = std::chrono::steady_clock::now();
  fill_target<<<1, 256>>>(small, 1024, 3.0f);
  CUDA_CHECK(cudaDeviceSynchronize());
  const double first_small = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  fill_plain<<<1024, 256>>>(buf, n, 1.0f);
  CUDA_CHECK(cudaDeviceSynchronize());
  const double plain = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  fill_target<<<1024, 256>>>(buf, n, 2.0f);
  CUDA_CHECK(cudaDeviceSynchronize());
  const double target = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  CUDA_CHECK(cudaMemcpy(host.data(), buf, n * sizeof(float), cudaMemcpyDeviceToHost));
  const double copy = ms_since(t0);
  if (host[n - 1] != 2.0f) {
    fprintf(stderr, "bandwidth: read back %g, expected 2\n", host[n - 1]);
    return 1;
  }
  printf("bandwidth: bytes=%ld plain_ms=%.3f target_ms=%.3f memcpy_ms=%.3f first_small_ms=%.3f\n",
         n * (long)sizeof(float), plain, target, copy, first_small);
  CUDA_CHECK(cudaFree(buf));
  CUDA_CHECK(cudaFree(small));
  return 0;
}
