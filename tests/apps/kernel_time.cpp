// kernel_time: a kernel's own time as the application reads it from its
// dispatch's completion signal, beside the time from launch to
// hipDeviceSynchronize. HIPLITE_KERNEL_SIGNALS=1 is set here, before the
// first HIP call: each dispatch then carries a completion signal on a
// queue with profiling on, as CLR's dispatches of a profiled kernel do
// (hipExtLaunchKernel with events, rocprof).
//
//   kernel_time [--mib N]     (default 256)
//
// mark_one writes out[0] = 7 with one work-item into an N MiB buffer from
// hipMalloc: a kernel of microseconds whose capture (the whole allocation)
// takes much longer. out[0] is checked (a wrong value exits 1).
//
// Prints one line on stdout, in ticks of HSA_SYSTEM_INFO_TIMESTAMP:
//   kernel_time: before=<launch> start=<kernel start> end=<kernel end> after=<synchronized>
#include "hiplite.hpp"

__global__ void mark_one(float* out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = 7.0f;
}
DITTO_KERNEL(mark_one)

#ifndef DITTO_DEVICE_PASS
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t timestamp() {
  uint64_t t = 0;
  hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP, &t);
  return t;
}

int main(int argc, char** argv) {
  long mib = 256;
  if (argc == 3 && strcmp(argv[1], "--mib") == 0) {
    char* end = nullptr;
    mib = strtol(argv[2], &end, 10);
    if (*end != '\0' || mib < 1 || mib > 16384) {
      fprintf(stderr, "kernel_time: --mib must be an integer from 1 to 16384, not \"%s\"\n", argv[2]);
      return 2;
    }
  } else if (argc != 1) {
    fprintf(stderr, "usage: kernel_time [--mib N]\n");
    return 2;
  }
  setenv("HIPLITE_KERNEL_SIGNALS", "1", 1);
  float* out = nullptr;
  HIP_CHECK(hipMalloc(&out, static_cast<size_t>(mib) << 20));
  const uint64_t before = timestamp();
  hipLaunchKernelGGL(mark_one, dim3(1), dim3(64), 0, nullptr, out);
  HIP_CHECK(hipGetLastError());
  HIP_CHECK(hipDeviceSynchronize());
  const uint64_t after = timestamp();
  uint64_t start = 0, end = 0;
  HIP_CHECK(hipliteLastKernelTime(&start, &end));
  float first = 0;
  HIP_CHECK(hipMemcpy(&first, out, sizeof first, hipMemcpyDeviceToHost));
  if (first != 7.0f) {
    fprintf(stderr, "kernel_time: out[0] = %g, expected 7\n", first);
    return 1;
  }
  HIP_CHECK(hipFree(out));
  printf("kernel_time: before=%llu start=%llu end=%llu after=%llu\n", (unsigned long long)before,
         (unsigned long long)start, (unsigned long long)end, (unsigned long long)after);
  return 0;
}
#endif
