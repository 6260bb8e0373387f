// bandwidth [MiB]: times, in one process, (a) a launch of the non-target
// kernel fill_plain and (b) of the target kernel fill_target, each with
// the device synchronised after it, and (c) cudaMemcpy device-to-host of
// the same bytes into pageable host memory. Under ditto with
// --kernel fill_target, (b) - (a) is the capture's cost. A first
// fill_target on 256 MiB is timed apart (w): it pays the collector's
// one-time CUDA start and the making of its page-locked copy buffers. With BANDWIDTH_WRITE_DIR set, (d) writes the bytes copied
// in (c) from host memory into a fresh file there with one write call: what
// the file system takes from memory, the cap of any capture stored there.
// fill_target's values depend on the position (value + i % PERIOD, exact in
// float), so a snapshot whose chunks were misplaced does not pass for right.
// Prints the times in milliseconds on one line:
//   bandwidth: bytes=<B> plain_ms=<a> target_ms=<b> memcpy_ms=<c> first_warm_ms=<w> write_ms=<d>
#include <chrono>
#include <fcntl.h>
#include <string>
#include <unistd.h>
#include <vector>
#include "check.cuh"

#define PERIOD 1048573L

__global__ void fill_plain(float* out, long n, float value) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
    out[i] = value;
}
__global__ void fill_target(float* out, long n, float value) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
    out[i] = value + (float)(i % PERIOD);
}

static double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

int main(int argc, char** argv) {
  const long mib = argc > 1 ? atol(argv[1]) : 512;
  const long n = mib * (1 << 20) / sizeof(float);
  float* buf = nullptr;
  CUDA_CHECK(cudaMalloc(&buf, n * sizeof(float)));
  const long warm_n = 256L * (1 << 20) / sizeof(float);
  float* warm = nullptr;
  CUDA_CHECK(cudaMalloc(&warm, warm_n * sizeof(float)));
  std::vector<float> host(n);
  // Warm-up: both kernels' modules loaded, the host pages touched.
  fill_plain<<<1024, 256>>>(buf, n, 0.0f);
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(host.data(), buf, n * sizeof(float), cudaMemcpyDeviceToHost));
  auto t0 = std::chrono::steady_clock::now();
  fill_target<<<1024, 256>>>(warm, warm_n, 3.0f);
  CUDA_CHECK(cudaDeviceSynchronize());
  const double first_warm = ms_since(t0);
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
  const float last = 2.0f + (float)((n - 1) % PERIOD);
  if (host[n - 1] != last) {
    fprintf(stderr, "bandwidth: read back %g, expected %g\n", host[n - 1], last);
    return 1;
  }
  double write_ms = -1;
  if (const char* dir = getenv("BANDWIDTH_WRITE_DIR")) {
    const std::string path = std::string(dir) + "/bandwidth-write-test";
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
      t0 = std::chrono::steady_clock::now();
      const char* p = reinterpret_cast<const char*>(host.data());
      size_t left = n * sizeof(float);
      while (left > 0) {
        const ssize_t w = write(fd, p, left);
        if (w <= 0) break;
        p += w;
        left -= (size_t)w;
      }
      write_ms = left == 0 ? ms_since(t0) : -1;
      close(fd);
      unlink(path.c_str());
    }
  }
  printf("bandwidth: bytes=%ld plain_ms=%.3f target_ms=%.3f memcpy_ms=%.3f first_warm_ms=%.3f write_ms=%.3f\n",
         n * (long)sizeof(float), plain, target, copy, first_warm, write_ms);
  CUDA_CHECK(cudaFree(buf));
  CUDA_CHECK(cudaFree(warm));
  return 0;
}
