// dispatch_storm (HIP): the benchmark application of scripts/bench item 1,
// built by hipcc and run by the real HIP runtime. The same loop as
// tests/apps/dispatch_storm.cpp (the HIP-like one):
//
//   dispatch_storm <count> [--items N] [--sync-every K] [--floats F]
//
// Launches storm_fill `count` times, each as ONE work-group of N work-items
// (default 64) writing the F floats (default 1024: 4 KiB) of one output
// buffer (scripts/bench-model's capture bandwidth uses millions), and
// waits for the device (hipDeviceSynchronize) after every K launches
// (default 1000) and at the end. Launch i writes out[j] = i + j; the output
// of the last launch is checked (a wrong result exits 1). storm_unused is in
// the code object and never launched: a tool told to capture it sees every
// storm_fill dispatch pass by and captures nothing.
//
// Prints one line on stdout:
//   dispatch_storm: dispatches=<count> items=<N> sync_every=<K> elapsed_s=<s> per_dispatch_us=<us> cpu_s=<s>
// where elapsed_s covers the launch loop only (from before the first launch
// to after the last synchronisation) and cpu_s is the CPU time all threads
// of the process spent in that same loop.
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <vector>

#include "hip_check.hpp"

constexpr long kDefaultOutputFloats = 1024;  // 4 KiB of output per launch

__global__ void storm_fill(float* out, int n, int dispatch) {
  for (int j = static_cast<int>(threadIdx.x); j < n; j += static_cast<int>(blockDim.x)) {
    out[j] = static_cast<float>(dispatch + j);
  }
}

__global__ void storm_unused(float* out, int n) {
  for (int j = static_cast<int>(threadIdx.x); j < n; j += static_cast<int>(blockDim.x)) out[j] = -1.0f;
}

static double clock_s(clockid_t clock) {
  timespec t;
  clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

static long parse_count(const char* text, const char* what, long min, long max) {
  char* end = nullptr;
  long value = strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < min || value > max) {
    fprintf(stderr, "dispatch_storm: %s must be an integer from %ld to %ld, not \"%s\"\n", what, min, max, text);
    exit(2);
  }
  return value;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: dispatch_storm <count> [--items N] [--sync-every K] [--floats F]\n");
    return 2;
  }
  const long count = parse_count(argv[1], "count", 1, 100000000);
  long items = 64;
  long sync_every = 1000;
  long floats = kDefaultOutputFloats;
  for (int a = 2; a < argc; ++a) {
    if (strcmp(argv[a], "--items") == 0 && a + 1 < argc) {
      items = parse_count(argv[++a], "--items", 1, 1024);
    } else if (strcmp(argv[a], "--sync-every") == 0 && a + 1 < argc) {
      sync_every = parse_count(argv[++a], "--sync-every", 1, 100000000);
    } else if (strcmp(argv[a], "--floats") == 0 && a + 1 < argc) {
      floats = parse_count(argv[++a], "--floats", 1, 1L << 28);
    } else {
      fprintf(stderr, "dispatch_storm: unknown argument \"%s\"\n", argv[a]);
      return 2;
    }
  }

  const int output_floats = static_cast<int>(floats);
  float* out = nullptr;
  HIP_CHECK(hipMalloc(&out, floats * sizeof(float)));
  // One warm-up launch: loads the code object and finds the kernel.
  hipLaunchKernelGGL(storm_fill, dim3(1), dim3(static_cast<uint32_t>(items)), 0, 0, out, output_floats, -1);
  HIP_CHECK(hipGetLastError());
  HIP_CHECK(hipDeviceSynchronize());

  const double start = clock_s(CLOCK_MONOTONIC);
  const double cpu_start = clock_s(CLOCK_PROCESS_CPUTIME_ID);
  for (long i = 0; i < count; ++i) {
    hipLaunchKernelGGL(storm_fill, dim3(1), dim3(static_cast<uint32_t>(items)), 0, 0, out, output_floats,
                       static_cast<int>(i));
    HIP_CHECK(hipGetLastError());
    if ((i + 1) % sync_every == 0) HIP_CHECK(hipDeviceSynchronize());
  }
  HIP_CHECK(hipDeviceSynchronize());
  const double elapsed = clock_s(CLOCK_MONOTONIC) - start;
  const double cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - cpu_start;

  std::vector<float> result(output_floats);
  HIP_CHECK(hipMemcpy(result.data(), out, output_floats * sizeof(float), hipMemcpyDeviceToHost));
  int wrong = 0;
  for (int j = 0; j < output_floats; ++j) wrong += result[j] != static_cast<float>(count - 1 + j);
  HIP_CHECK(hipFree(out));
  if (wrong != 0) {
    fprintf(stderr, "dispatch_storm: %d of %d outputs of the last launch are wrong\n", wrong, output_floats);
    return 1;
  }
  printf("dispatch_storm: dispatches=%ld items=%ld sync_every=%ld elapsed_s=%.6f per_dispatch_us=%.3f cpu_s=%.6f\n",
         count, items, sync_every, elapsed, elapsed * 1e6 / static_cast<double>(count), cpu);
  return 0;
}
