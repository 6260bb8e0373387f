// address_reuse: a freed allocation's address handed out again. One
// hipMalloc of n = 256 floats gets stamp(out, 100, n) then stamp(out, 200, n);
// it is freed, a hipMalloc of the same size follows (the runtime's pool
// hands back the same address), and stamp(out, 300, n) runs on the new one.
// stamp(float* out, float value, int n): out[i] = value + i.
// Prints whether the address came back and the values read after each
// dispatch; exits 0 when every value is right.
#include "hiplite.hpp"

__global__ void stamp(float* out, float value, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value + static_cast<float>(i);
}
DITTO_KERNEL(stamp)

#ifndef DITTO_DEVICE_PASS
#include <stdio.h>

#include <vector>

static int wrong_after(float* device, float value, int n) {
  std::vector<float> host(n, -1.0f);
  HIP_CHECK(hipMemcpy(host.data(), device, n * sizeof(float), hipMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += host[i] != value + static_cast<float>(i);
  printf("address_reuse: after stamp %g: out[0] = %g, out[%d] = %g\n", value, host[0], n - 1, host[n - 1]);
  return wrong;
}

int main() {
  const int n = 256;
  const int block = 64;
  const dim3 grid((n + block - 1) / block);
  int wrong = 0;

  float* first = nullptr;
  HIP_CHECK(hipMalloc(&first, n * sizeof(float)));
  hipLaunchKernelGGL(stamp, grid, dim3(block), 0, 0, first, 100.0f, n);
  HIP_CHECK(hipGetLastError());
  wrong += wrong_after(first, 100.0f, n);
  hipLaunchKernelGGL(stamp, grid, dim3(block), 0, 0, first, 200.0f, n);
  HIP_CHECK(hipGetLastError());
  wrong += wrong_after(first, 200.0f, n);
  HIP_CHECK(hipFree(first));

  float* second = nullptr;
  HIP_CHECK(hipMalloc(&second, n * sizeof(float)));
  printf("address_reuse: same address = %s\n", second == first ? "yes" : "no");
  hipLaunchKernelGGL(stamp, grid, dim3(block), 0, 0, second, 300.0f, n);
  HIP_CHECK(hipGetLastError());
  wrong += wrong_after(second, 300.0f, n);
  HIP_CHECK(hipFree(second));

  printf("address_reuse: wrong = %d\n", wrong);
  return wrong == 0 ? 0 : 1;
}
#endif
