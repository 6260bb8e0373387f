// caching_allocator: a caching allocator in the style of PyTorch's hands
// out slices of ONE large hipMalloc (1 MiB); a kernel runs on three of
// them. scale_add(const float* x, const float* y, float* out, int n):
// out[i] = 2 * x[i] + y[i], n = 1000, x[i] = i, y[i] = 1. The slices are
// 4096-byte aligned, in order x, y, out, followed by a slice the kernel
// never touches (filled with 7.0): a capture that reads past `out` sees it.
#include "hiplite.hpp"

__global__ void scale_add(const float* x, const float* y, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2.0f * x[i] + y[i];
}
DITTO_KERNEL(scale_add)

#ifndef DITTO_DEVICE_PASS
#include <stdio.h>

#include <vector>

// Bump allocator over one device allocation: never frees slices.
struct CachingAllocator {
  char* pool = nullptr;
  size_t size = 0;
  size_t used = 0;
  explicit CachingAllocator(size_t bytes) : size(bytes) { HIP_CHECK(hipMalloc(reinterpret_cast<void**>(&pool), bytes)); }
  ~CachingAllocator() { HIP_CHECK(hipFree(pool)); }
  float* slice(size_t bytes) {
    const size_t aligned = (bytes + 4095) / 4096 * 4096;
    if (used + aligned > size) {
      fprintf(stderr, "caching_allocator: pool exhausted\n");
      exit(1);
    }
    float* p = reinterpret_cast<float*>(pool + used);
    used += aligned;
    return p;
  }
};

int main() {
  const int n = 1000;
  CachingAllocator cache(1 << 20);
  std::vector<float> x(n), y(n, 1.0f), out(n, -1.0f), tail(n, 7.0f);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(i);
  float* dx = cache.slice(n * sizeof(float));
  float* dy = cache.slice(n * sizeof(float));
  float* dout = cache.slice(n * sizeof(float));
  float* dtail = cache.slice(n * sizeof(float));
  HIP_CHECK(hipMemcpy(dx, x.data(), n * sizeof(float), hipMemcpyHostToDevice));
  HIP_CHECK(hipMemcpy(dy, y.data(), n * sizeof(float), hipMemcpyHostToDevice));
  HIP_CHECK(hipMemcpy(dtail, tail.data(), n * sizeof(float), hipMemcpyHostToDevice));

  const int block = 256;
  hipLaunchKernelGGL(scale_add, dim3((n + block - 1) / block), dim3(block), 0, 0, dx, dy, dout, n);
  HIP_CHECK(hipGetLastError());
  HIP_CHECK(hipDeviceSynchronize());
  HIP_CHECK(hipMemcpy(out.data(), dout, n * sizeof(float), hipMemcpyDeviceToHost));

  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += out[i] != 2.0f * x[i] + y[i];
  printf("caching_allocator: n = %d, out[0] = %g, out[%d] = %g, wrong = %d\n", n, out[0], n - 1, out[n - 1], wrong);
  return wrong == 0 ? 0 : 1;
}
#endif
