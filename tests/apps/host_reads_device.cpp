// host_reads_device [--copy]: fills a hipMalloc'd buffer with a kernel, then
// reads it on the host. Plainly, it dereferences the device pointer, as a
// program written for an integrated GPU might: on a discrete GPU (and on
// ditto's CPU runtime, which models one) that load faults. With --copy it
// reads the buffer through hipMemcpy, as HIP requires, and prints the sum.
#include "hiplite.hpp"

__global__ void fill_index(float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<float>(i);
}
DITTO_KERNEL(fill_index)

#ifndef DITTO_DEVICE_PASS
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  const bool copy = argc > 1 && strcmp(argv[1], "--copy") == 0;
  constexpr int n = 256;
  float* out = nullptr;
  HIP_CHECK(hipMalloc(&out, n * sizeof(float)));
  hipLaunchKernelGGL(fill_index, dim3(1), dim3(n), 0, 0, out, n);
  HIP_CHECK(hipDeviceSynchronize());
  float host[n];
  if (copy) {
    HIP_CHECK(hipMemcpy(host, out, sizeof host, hipMemcpyDeviceToHost));
  } else {
    printf("host_reads_device: reading device memory on the host\n");
    fflush(stdout);
    for (int i = 0; i < n; ++i) host[i] = reinterpret_cast<volatile float*>(out)[i];
  }
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += host[i];
  printf("host_reads_device: sum=%.0f\n", sum);
  HIP_CHECK(hipFree(out));
  return 0;
}
#endif
