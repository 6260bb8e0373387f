// large_output: one dispatch writing one large output buffer, and a plain
// memcpy of the same size between two host buffers, each timed by the
// application itself (the capture-bandwidth application of scripts/bench).
//
//   large_output [--mib N] [--offset-kib K]     (default 1024: 1 GiB; K 0)
//
// With --offset-kib K the output is a slice K KiB into an allocation of
// N MiB + K KiB (an interior pointer, as a caching allocator hands out).
//
// A warm-up dispatch of large_warmup (another kernel: under
// `ditto run --kernel large_fill` it is not captured) loads the code object.
// Then N MiB are copied with memcpy from one malloc'd, already written host
// buffer to another (timed: memcpy_s), both are freed, and large_fill writes
// out[i] = i % 4096 into the N MiB buffer from hipMalloc in one dispatch,
// launch to hipDeviceSynchronize timed (dispatch_s: under ditto this
// includes the capture, which completes before the application sees the
// dispatch complete). A few elements are checked (a wrong one exits 1).
// Peak memory: 3 × N MiB during the memcpy (the output buffer and the two
// host buffers), N MiB after.
//
// Prints one line on stdout:
//   large_output: mib=<N> memcpy_s=<s> dispatch_s=<s>
#include "hiplite.hpp"

__global__ void large_fill(float* out, long n) {
  const long stride = static_cast<long>(gridDim.x) * blockDim.x;
  for (long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = static_cast<float>(i % 4096);
  }
}
DITTO_KERNEL(large_fill)

__global__ void large_warmup(float* out) {
  if (threadIdx.x == 0) out[0] = -1.0f;
}
DITTO_KERNEL(large_warmup)

#ifndef DITTO_DEVICE_PASS
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char** argv) {
  long mib = 1024;
  long offset_kib = 0;
  for (int a = 1; a < argc; ++a) {
    if (strcmp(argv[a], "--offset-kib") == 0 && a + 1 < argc) {
      char* end = nullptr;
      offset_kib = strtol(argv[++a], &end, 10);
      if (*end != '\0' || offset_kib < 0 || offset_kib > 1048576) {
        fprintf(stderr, "large_output: --offset-kib must be an integer from 0 to 1048576, not \"%s\"\n", argv[a]);
        return 2;
      }
    } else if (strcmp(argv[a], "--mib") == 0 && a + 1 < argc) {
      char* end = nullptr;
      mib = strtol(argv[++a], &end, 10);
      if (*end != '\0' || mib < 1 || mib > 16384) {
        fprintf(stderr, "large_output: --mib must be an integer from 1 to 16384, not \"%s\"\n", argv[a]);
        return 2;
      }
    } else {
      fprintf(stderr, "large_output: unknown argument \"%s\" (usage: large_output [--mib N] [--offset-kib K])\n",
              argv[a]);
      return 2;
    }
  }
  const size_t bytes = static_cast<size_t>(mib) << 20;
  const long n = static_cast<long>(bytes / sizeof(float));

  const size_t offset = static_cast<size_t>(offset_kib) << 10;
  char* allocation = nullptr;
  HIP_CHECK(hipMalloc(reinterpret_cast<void**>(&allocation), bytes + offset));
  float* out = reinterpret_cast<float*>(allocation + offset);
  hipLaunchKernelGGL(large_warmup, dim3(1), dim3(64), 0, 0, out);
  HIP_CHECK(hipGetLastError());
  HIP_CHECK(hipDeviceSynchronize());

  char* src = static_cast<char*>(malloc(bytes));
  char* dst = static_cast<char*>(malloc(bytes));
  if (!src || !dst) {
    fprintf(stderr, "large_output: cannot allocate 2 x %ld MiB of host memory\n", mib);
    return 1;
  }
  memset(src, 1, bytes);
  memset(dst, 2, bytes);
  // The barriers keep the compiler from eliding or moving the copy.
  asm volatile("" : : "r"(src), "r"(dst) : "memory");
  double start = hiplite::now_seconds();
  memcpy(dst, src, bytes);
  asm volatile("" : : "r"(src), "r"(dst) : "memory");
  const double memcpy_s = hiplite::now_seconds() - start;
  const int copied = dst[bytes - 1] == 1 && dst[0] == 1;
  free(src);
  free(dst);
  if (!copied) {
    fprintf(stderr, "large_output: memcpy did not copy\n");
    return 1;
  }

  start = hiplite::now_seconds();
  hipLaunchKernelGGL(large_fill, dim3(256), dim3(256), 0, 0, out, n);
  HIP_CHECK(hipGetLastError());
  HIP_CHECK(hipDeviceSynchronize());
  const double dispatch_s = hiplite::now_seconds() - start;

  int wrong = 0;
  const long checked[] = {0, 1, 4095, 4096, n / 2 + 3, n - 1};
  for (long i : checked) {
    float v = 0.0f;
    HIP_CHECK(hipMemcpy(&v, out + i, sizeof(float), hipMemcpyDeviceToHost));
    wrong += v != static_cast<float>(i % 4096);
  }
  HIP_CHECK(hipFree(allocation));
  if (wrong != 0) {
    fprintf(stderr, "large_output: %d of the checked outputs are wrong\n", wrong);
    return 1;
  }
  printf("large_output: mib=%ld memcpy_s=%.6f dispatch_s=%.6f\n", mib, memcpy_s, dispatch_s);
  return 0;
}
#endif
