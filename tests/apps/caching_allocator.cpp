// caching_allocator: a caching allocator in the style of PyTorch's hands
// out slices of ONE large hipMalloc (1 MiB); a kernel runs on three of
// them. scale_add(const float* x, const float* y, float* out, int n):
// out[i] = 2 * x[i] + y[i], n = 1000, x[i] = i, y[i] = 1. The slices are
// 4096-byte aligned, in order x, y, out, followed by a slice the kernel
// never touches (filled with 7.0): a capture that reads past `out` sees it.
//
//   caching_allocator [--tail V] [--write K]
//
// --tail V fills the untouched slice with V instead (another tensor that
// differs between two runs); --write K makes the kernel write K elements
// instead of n (a kernel that writes past its output, K > n, or stops
// short, K < n). x, y and the whole out slice (1024 floats, -1 past the
// kernel's writes) are initialised first; the program checks the elements
// below min(n, K) and exits 1 when one is wrong.
#include "hiplite.hpp"

__global__ void scale_add(const float* x, const float* y, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2.0f * x[i] + y[i];
}
DITTO_KERNEL(scale_add)

#ifndef DITTO_DEVICE_PASS
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int main(int argc, char** argv) {
  const int n = 1000;
  float tail_value = 7.0f;
  int written = n;
  for (int a = 1; a + 1 < argc; a += 2) {
    if (strcmp(argv[a], "--tail") == 0) {
      tail_value = static_cast<float>(atof(argv[a + 1]));
    } else if (strcmp(argv[a], "--write") == 0) {
      written = atoi(argv[a + 1]);
    } else {
      fprintf(stderr, "usage: caching_allocator [--tail V] [--write K]\n");
      return 2;
    }
  }
  if (written < 1 || written > 1024) {
    fprintf(stderr, "caching_allocator: --write must be 1..1024\n");
    return 2;
  }
  const int slice = 1024;  // floats per 4096-byte slice
  CachingAllocator cache(1 << 20);
  std::vector<float> x(slice), y(slice, 1.0f), out(slice, -1.0f), tail(n, tail_value);
  for (int i = 0; i < slice; ++i) x[i] = static_cast<float>(i);
  float* dx = cache.slice(n * sizeof(float));
  float* dy = cache.slice(n * sizeof(float));
  float* dout = cache.slice(n * sizeof(float));
  float* dtail = cache.slice(n * sizeof(float));
  HIP_CHECK(hipMemcpy(dx, x.data(), slice * sizeof(float), hipMemcpyHostToDevice));
  HIP_CHECK(hipMemcpy(dy, y.data(), slice * sizeof(float), hipMemcpyHostToDevice));
  HIP_CHECK(hipMemcpy(dout, out.data(), slice * sizeof(float), hipMemcpyHostToDevice));
  HIP_CHECK(hipMemcpy(dtail, tail.data(), n * sizeof(float), hipMemcpyHostToDevice));

  const int block = 256;
  hipLaunchKernelGGL(scale_add, dim3((written + block - 1) / block), dim3(block), 0, 0, dx, dy, dout, written);
  HIP_CHECK(hipGetLastError());
  HIP_CHECK(hipDeviceSynchronize());
  HIP_CHECK(hipMemcpy(out.data(), dout, n * sizeof(float), hipMemcpyDeviceToHost));

  int wrong = 0;
  for (int i = 0; i < n && i < written; ++i) wrong += out[i] != 2.0f * x[i] + y[i];
  printf("caching_allocator: n = %d, out[0] = %g, out[%d] = %g, wrong = %d\n", n, out[0], n - 1, out[n - 1], wrong);
  return wrong == 0 ? 0 : 1;
}
#endif
