// host_output: a kernel whose output buffer is host memory. The output is
// allocated with malloc and registered with hsa_amd_memory_lock — what
// hipHostRegister does — and the kernel writes through the agent address
// the lock returned; the input is ordinary pool memory (hipMalloc).
// output[i] = input[i] * input[i] + 1 with input[i] = (i % 17) * 0.25, all
// exact in float. n = 3000 (not a multiple of the block size). Prints a few
// outputs, their sum and the number of wrong elements.
// With `--pause-dir DIR` it synchronises after the dispatch, creates
// DIR/synced-0 and waits until DIR/resume-0 exists: a test can look at the
// collector right after the dispatch was acknowledged.
#include "hiplite.hpp"

__global__ void square_into_host(const float* input, float* output, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) output[i] = input[i] * input[i] + 1.0f;
}
DITTO_KERNEL(square_into_host)

#ifndef DITTO_DEVICE_PASS
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string>
#include <vector>

static void pause_after_dispatch(const char* dir) {
  if (!dir) return;
  HIP_CHECK(hipDeviceSynchronize());
  const std::string synced = std::string(dir) + "/synced-0";
  const std::string resume = std::string(dir) + "/resume-0";
  FILE* f = fopen(synced.c_str(), "w");
  if (!f) {
    fprintf(stderr, "host_output: cannot create %s\n", synced.c_str());
    exit(1);
  }
  fclose(f);
  for (int waited_ms = 0; access(resume.c_str(), F_OK) != 0; ++waited_ms) {
    if (waited_ms > 60000) {
      fprintf(stderr, "host_output: %s never appeared\n", resume.c_str());
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
    fprintf(stderr, "usage: host_output [--pause-dir DIR]\n");
    return 2;
  }
  const int n = 3000;
  const size_t bytes = n * sizeof(float);
  std::vector<float> input(n);
  for (int i = 0; i < n; ++i) input[i] = static_cast<float>(i % 17) * 0.25f;
  float* d_input = nullptr;
  HIP_CHECK(hipMalloc(&d_input, bytes));
  HIP_CHECK(hipMemcpy(d_input, input.data(), bytes, hipMemcpyHostToDevice));

  // Host output, registered as hipHostRegister does (the runtime is
  // initialised by hipMalloc above).
  float* output = static_cast<float*>(malloc(bytes));
  if (!output) {
    fprintf(stderr, "host_output: malloc failed\n");
    return 1;
  }
  for (int i = 0; i < n; ++i) output[i] = -1.0f;
  hsa_agent_t gpu = hiplite::runtime().gpu;
  void* agent_output = nullptr;
  hsa_status_t status = hsa_amd_memory_lock(output, bytes, &gpu, 1, &agent_output);
  if (status != HSA_STATUS_SUCCESS) {
    fprintf(stderr, "host_output: hsa_amd_memory_lock failed with status 0x%x\n", status);
    return 1;
  }

  const int block = 256;
  hipLaunchKernelGGL(square_into_host, dim3((n + block - 1) / block), dim3(block), 0, 0, d_input,
                     static_cast<float*>(agent_output), n);
  HIP_CHECK(hipGetLastError());
  pause_after_dispatch(pause_dir);
  HIP_CHECK(hipDeviceSynchronize());

  status = hsa_amd_memory_unlock(output);
  if (status != HSA_STATUS_SUCCESS) {
    fprintf(stderr, "host_output: hsa_amd_memory_unlock failed with status 0x%x\n", status);
    return 1;
  }
  int wrong = 0;
  double sum = 0.0;
  for (int i = 0; i < n; ++i) {
    wrong += output[i] != input[i] * input[i] + 1.0f;
    sum += output[i];
  }
  printf("host_output: n = %d, output[0] = %g, output[1] = %g, output[16] = %g, output[%d] = %g, sum = %.2f, wrong = %d\n",
         n, output[0], output[1], output[16], n - 1, output[n - 1], sum, wrong);
  free(output);
  HIP_CHECK(hipFree(d_input));
  return wrong == 0 ? 0 : 1;
}
#endif
