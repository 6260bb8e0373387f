// scale_twice: two dispatches of scale_values<float>, factors 2 then 3,
// the second reading the first's output: middle = 2 * input, output = 3 * middle.
// N = 1024, input[i] = i. No synchronisation between the two dispatches
// (the queue runs them in order), one hipDeviceSynchronize after both.
// With `--pause-dir DIR` it synchronises after each dispatch instead, then
// creates DIR/synced-<k> and waits until DIR/resume-<k> exists: a test can
// look at the collector between two acknowledged dispatches.
#include "hiplite.hpp"

template <typename T>
__global__ void scale_values(T* input, T* output, T factor, int N) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) output[i] = input[i] * factor;
}
DITTO_KERNEL(scale_values<float>)

#ifndef DITTO_DEVICE_PASS
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <string>
#include <vector>

// After dispatch k has completed (and so has been acknowledged by ditto's
// collector, if one is capturing), announce it and wait to be resumed.
static void pause_after(const char* dir, int k) {
  if (!dir) return;
  HIP_CHECK(hipDeviceSynchronize());
  const std::string synced = std::string(dir) + "/synced-" + std::to_string(k);
  const std::string resume = std::string(dir) + "/resume-" + std::to_string(k);
  FILE* f = fopen(synced.c_str(), "w");
  if (!f) {
    fprintf(stderr, "scale_twice: cannot create %s\n", synced.c_str());
    exit(1);
  }
  fclose(f);
  for (int waited_ms = 0; access(resume.c_str(), F_OK) != 0; ++waited_ms) {
    if (waited_ms > 60000) {
      fprintf(stderr, "scale_twice: %s never appeared\n", resume.c_str());
      exit(1);
    }
    usleep(1000);
  }
}

int main(int argc, char** argv) {
  const char* pause_dir = nullptr;
  if (argc == 3 && strcmp(argv[1], "--pause-dir") == 0) {
    pause_dir = argv[2];
  } else if (argc != 1) {
    fprintf(stderr, "usage: scale_twice [--pause-dir DIR]\n");
    return 2;
  }
  const int n = 1024;
  std::vector<float> input(n), middle(n, -1.0f), output(n, -1.0f);
  for (int i = 0; i < n; ++i) input[i] = static_cast<float>(i);
  float *d_input = nullptr, *d_middle = nullptr, *d_output = nullptr;
  HIP_CHECK(hipMalloc(&d_input, n * sizeof(float)));
  HIP_CHECK(hipMalloc(&d_middle, n * sizeof(float)));
  HIP_CHECK(hipMalloc(&d_output, n * sizeof(float)));
  HIP_CHECK(hipMemcpy(d_input, input.data(), n * sizeof(float), hipMemcpyHostToDevice));

  const int block = 256;
  const dim3 grid((n + block - 1) / block);
  hipLaunchKernelGGL(scale_values<float>, grid, dim3(block), 0, 0, d_input, d_middle, 2.0f, n);
  HIP_CHECK(hipGetLastError());
  pause_after(pause_dir, 0);
  hipLaunchKernelGGL(scale_values<float>, grid, dim3(block), 0, 0, d_middle, d_output, 3.0f, n);
  HIP_CHECK(hipGetLastError());
  pause_after(pause_dir, 1);
  HIP_CHECK(hipDeviceSynchronize());
  HIP_CHECK(hipMemcpy(middle.data(), d_middle, n * sizeof(float), hipMemcpyDeviceToHost));
  HIP_CHECK(hipMemcpy(output.data(), d_output, n * sizeof(float), hipMemcpyDeviceToHost));

  printf("scale_twice: N = %d, middle[1] = %g, middle[%d] = %g, output[1] = %g, output[%d] = %g\n", n, middle[1],
         n - 1, middle[n - 1], output[1], n - 1, output[n - 1]);

  HIP_CHECK(hipFree(d_input));
  HIP_CHECK(hipFree(d_middle));
  HIP_CHECK(hipFree(d_output));
  return 0;
}
#endif
