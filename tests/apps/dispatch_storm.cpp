// dispatch_storm: many dispatches of a tiny kernel, timed by the application
// itself (the benchmark application of scripts/bench).
//
//   dispatch_storm <count> [--items N] [--sync-every K] [--pause-every P --pause-dir DIR]
//
// Dispatches storm_fill `count` times, each as ONE work-group of N work-items
// (default 64) writing the 1024 floats (4 KiB) of one output buffer, and
// waits for the queue (hipDeviceSynchronize) after every K dispatches
// (default 1000) and at the end. Dispatch i writes out[j] = i + j, so the
// output is checked after the run (a wrong result exits 1). The code object
// also holds storm_unused, never dispatched: a tool told to capture it sees
// every storm_fill dispatch pass by and captures nothing.
//
// With `--pause-every P --pause-dir DIR` it synchronises after every P
// dispatches of the loop, creates DIR/paused-<n> (n = 1, 2, ...: P*n
// dispatches done) and waits until DIR/resume-<n> exists: a test can look at
// the process and its collector between captures (leak checks).
//
// Prints one line on stdout:
//   dispatch_storm: dispatches=<count> items=<N> sync_every=<K> elapsed_s=<s> per_dispatch_us=<us> cpu_s=<s>
// where elapsed_s covers the dispatch loop only (from before the first launch
// to after the last synchronisation), not start-up or loading, and cpu_s is
// the CPU time all threads of the process spent in that same loop.
#include "hiplite.hpp"

constexpr int kOutputFloats = 1024;  // 4 KiB of output per dispatch

__global__ void storm_fill(float* out, int n, int dispatch) {
  for (int j = static_cast<int>(threadIdx.x); j < n; j += static_cast<int>(blockDim.x)) {
    out[j] = static_cast<float>(dispatch + j);
  }
}
DITTO_KERNEL(storm_fill)

__global__ void storm_unused(float* out, int n) {
  for (int j = static_cast<int>(threadIdx.x); j < n; j += static_cast<int>(blockDim.x)) out[j] = -1.0f;
}
DITTO_KERNEL(storm_unused)

#ifndef DITTO_DEVICE_PASS
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <string>

#include <vector>

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

static void pause_at(const char* dir, long n) {
  HIP_CHECK(hipDeviceSynchronize());
  const std::string paused = std::string(dir) + "/paused-" + std::to_string(n);
  const std::string resume = std::string(dir) + "/resume-" + std::to_string(n);
  FILE* f = fopen(paused.c_str(), "w");
  if (!f) {
    fprintf(stderr, "dispatch_storm: cannot create %s\n", paused.c_str());
    exit(1);
  }
  fclose(f);
  for (int waited_ms = 0; access(resume.c_str(), F_OK) != 0; ++waited_ms) {
    if (waited_ms > 120000) {
      fprintf(stderr, "dispatch_storm: %s never appeared\n", resume.c_str());
      exit(1);
    }
    usleep(1000);
  }
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: dispatch_storm <count> [--items N] [--sync-every K] [--pause-every P --pause-dir DIR]\n");
    return 2;
  }
  const long count = parse_count(argv[1], "count", 1, 100000000);
  long items = 64;
  long sync_every = 1000;
  long pause_every = 0;
  const char* pause_dir = nullptr;
  for (int a = 2; a < argc; ++a) {
    if (strcmp(argv[a], "--items") == 0 && a + 1 < argc) {
      items = parse_count(argv[++a], "--items", 1, 1024);
    } else if (strcmp(argv[a], "--sync-every") == 0 && a + 1 < argc) {
      sync_every = parse_count(argv[++a], "--sync-every", 1, 100000000);
    } else if (strcmp(argv[a], "--pause-every") == 0 && a + 1 < argc) {
      pause_every = parse_count(argv[++a], "--pause-every", 1, 100000000);
    } else if (strcmp(argv[a], "--pause-dir") == 0 && a + 1 < argc) {
      pause_dir = argv[++a];
    } else {
      fprintf(stderr, "dispatch_storm: unknown argument \"%s\"\n", argv[a]);
      return 2;
    }
  }
  if ((pause_every > 0) != (pause_dir != nullptr)) {
    fprintf(stderr, "dispatch_storm: --pause-every and --pause-dir go together\n");
    return 2;
  }

  float* out = nullptr;
  HIP_CHECK(hipMalloc(&out, kOutputFloats * sizeof(float)));
  // One warm-up dispatch: loads the code object and finds the kernel.
  hipLaunchKernelGGL(storm_fill, dim3(1), dim3(static_cast<uint32_t>(items)), 0, 0, out, kOutputFloats, -1);
  HIP_CHECK(hipGetLastError());
  HIP_CHECK(hipDeviceSynchronize());

  const double start = clock_s(CLOCK_MONOTONIC);
  const double cpu_start = clock_s(CLOCK_PROCESS_CPUTIME_ID);
  for (long i = 0; i < count; ++i) {
    hipLaunchKernelGGL(storm_fill, dim3(1), dim3(static_cast<uint32_t>(items)), 0, 0, out, kOutputFloats,
                       static_cast<int>(i));
    HIP_CHECK(hipGetLastError());
    if ((i + 1) % sync_every == 0) HIP_CHECK(hipDeviceSynchronize());
    if (pause_every > 0 && (i + 1) % pause_every == 0) pause_at(pause_dir, (i + 1) / pause_every);
  }
  HIP_CHECK(hipDeviceSynchronize());
  const double elapsed = clock_s(CLOCK_MONOTONIC) - start;
  const double cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - cpu_start;

  std::vector<float> result(kOutputFloats);
  HIP_CHECK(hipMemcpy(result.data(), out, kOutputFloats * sizeof(float), hipMemcpyDeviceToHost));
  int wrong = 0;
  for (int j = 0; j < kOutputFloats; ++j) wrong += result[j] != static_cast<float>(count - 1 + j);
  HIP_CHECK(hipFree(out));
  if (wrong != 0) {
    fprintf(stderr, "dispatch_storm: %d of %d outputs of the last dispatch are wrong\n", wrong, kOutputFloats);
    return 1;
  }
  printf("dispatch_storm: dispatches=%ld items=%ld sync_every=%ld elapsed_s=%.6f per_dispatch_us=%.3f cpu_s=%.6f\n",
         count, items, sync_every, elapsed, elapsed * 1e6 / static_cast<double>(count), cpu);
  return 0;
}
#endif
