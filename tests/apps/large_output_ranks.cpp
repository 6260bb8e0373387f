// large_output_ranks: one of several processes (ranks) that each capture one
// large buffer at the same moment (the ranks test and scripts/bench item 6).
//
//   large_output_ranks [--barrier DIR --ranks N] [--mib M]   (default 256)
//
// hipMalloc M MiB and fill it with ranks_fill (out[i] = i % 4096; another
// kernel: under `--kernel ranks_mark` it is not captured). Then the barrier,
// where one is given: the process creates DIR/arrived.<pid> and waits until
// N such files exist (polling every 100 µs; 60 s at most, else exit 1), so
// the N processes leave it within a fraction of a millisecond of each
// other (without --barrier the process goes on at once). Then
// ranks_mark, which takes the whole buffer as its output and rewrites
// out[0] with the value it has, is launched and synchronised (timed: under
// ditto this includes the capture of the M MiB, which completes before the
// application sees the dispatch complete). A few elements are checked (a
// wrong one exits 1).
//
// Prints one line on stdout, the instants on CLOCK_MONOTONIC (comparable
// between the processes of one machine):
//   large_output_ranks: mib=<M> start_s=<s> end_s=<s> dispatch_s=<s>
#include "hiplite.hpp"

__global__ void ranks_fill(float* out, long n) {
  const long stride = static_cast<long>(gridDim.x) * blockDim.x;
  for (long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = static_cast<float>(i % 4096);
  }
}
DITTO_KERNEL(ranks_fill)

__global__ void ranks_mark(float* out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = 0.0f;
}
DITTO_KERNEL(ranks_mark)

#ifndef DITTO_DEVICE_PASS
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <string>

// Files named arrived.* in dir; -1 when it cannot be read.
static int arrivals(const char* dir) {
  DIR* d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  while (dirent* e = readdir(d)) n += strncmp(e->d_name, "arrived.", 8) == 0;
  closedir(d);
  return n;
}

// Announces this process in dir and waits until `ranks` processes have.
static bool barrier(const char* dir, long ranks) {
  const std::string mine = std::string(dir) + "/arrived." + std::to_string(getpid());
  const int fd = open(mine.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) {
    fprintf(stderr, "large_output_ranks: cannot create %s\n", mine.c_str());
    return false;
  }
  close(fd);
  const double deadline = hiplite::now_seconds() + 60.0;
  for (;;) {
    const int n = arrivals(dir);
    if (n < 0) {
      fprintf(stderr, "large_output_ranks: cannot read the barrier directory %s\n", dir);
      return false;
    }
    if (n >= ranks) return true;
    if (hiplite::now_seconds() > deadline) {
      fprintf(stderr, "large_output_ranks: only %d of %ld ranks reached the barrier within 60 s\n", n, ranks);
      return false;
    }
    usleep(100);
  }
}

static bool positive(const char* text, long max, long* out) {
  char* end = nullptr;
  *out = strtol(text, &end, 10);
  return *end == '\0' && *out >= 1 && *out <= max;
}

int main(int argc, char** argv) {
  long mib = 256, ranks = 0;
  const char* dir = nullptr;
  for (int a = 1; a < argc; ++a) {
    if (strcmp(argv[a], "--mib") == 0 && a + 1 < argc) {
      if (!positive(argv[++a], 16384, &mib)) {
        fprintf(stderr, "large_output_ranks: --mib must be an integer from 1 to 16384, not \"%s\"\n", argv[a]);
        return 2;
      }
    } else if (strcmp(argv[a], "--ranks") == 0 && a + 1 < argc) {
      if (!positive(argv[++a], 1024, &ranks)) {
        fprintf(stderr, "large_output_ranks: --ranks must be an integer from 1 to 1024, not \"%s\"\n", argv[a]);
        return 2;
      }
    } else if (strcmp(argv[a], "--barrier") == 0 && a + 1 < argc) {
      dir = argv[++a];
    } else {
      fprintf(stderr,
              "large_output_ranks: unknown argument \"%s\" (usage: large_output_ranks [--barrier DIR --ranks N] "
              "[--mib M])\n",
              argv[a]);
      return 2;
    }
  }
  if ((dir == nullptr) != (ranks == 0)) {
    fprintf(stderr, "large_output_ranks: --barrier DIR and --ranks N go together\n");
    return 2;
  }
  const size_t bytes = static_cast<size_t>(mib) << 20;
  const long n = static_cast<long>(bytes / sizeof(float));

  float* out = nullptr;
  HIP_CHECK(hipMalloc(&out, bytes));
  hipLaunchKernelGGL(ranks_fill, dim3(256), dim3(256), 0, 0, out, n);
  HIP_CHECK(hipGetLastError());
  HIP_CHECK(hipDeviceSynchronize());

  if (dir && !barrier(dir, ranks)) return 1;
  const double start = hiplite::now_seconds();
  hipLaunchKernelGGL(ranks_mark, dim3(1), dim3(64), 0, 0, out);
  HIP_CHECK(hipGetLastError());
  HIP_CHECK(hipDeviceSynchronize());
  const double end = hiplite::now_seconds();

  int wrong = 0;
  const long checked[] = {0, 1, 4095, 4096, n / 2 + 3, n - 1};
  for (long i : checked) {
    float v = 0.0f;
    HIP_CHECK(hipMemcpy(&v, out + i, sizeof(float), hipMemcpyDeviceToHost));
    wrong += v != static_cast<float>(i % 4096);
  }
  HIP_CHECK(hipFree(out));
  if (wrong != 0) {
    fprintf(stderr, "large_output_ranks: %d of the checked outputs are wrong\n", wrong);
    return 1;
  }
  printf("large_output_ranks: mib=%ld start_s=%.6f end_s=%.6f dispatch_s=%.6f\n", mib, start, end, end - start);
  return 0;
}
#endif
