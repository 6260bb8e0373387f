// reduce_sum_main.hpp — the host program shared by the reduce_sum_* apps.
//
// Each reduce_sum_<variant>.cpp defines the kernel
//   __global__ void reduce_sum(const float* input, float* output, int n)
// (or another name, given as REDUCE_SUM_KERNEL) then includes this file, which (host pass only) sums n = 65536 values
// (i % 7) * 0.5f on the device and prints `sum = <value>`. Every partial sum
// is a multiple of 0.5 below 2^23, so float addition is exact in ANY order:
// a correct kernel prints exactly 98301.5, whatever its summation order.
// The program exits 0 whenever the HIP/HSA calls succeed (also for the
// deliberately wrong variant: judging the result is ditto's job).
#ifndef REDUCE_SUM_MAIN_HPP
#define REDUCE_SUM_MAIN_HPP

#ifndef DITTO_DEVICE_PASS
#include <stdio.h>

#include <vector>

#ifndef REDUCE_SUM_BLOCK
#define REDUCE_SUM_BLOCK 256
#endif
// The kernel launched: a variant may name it differently (a renamed build).
#ifndef REDUCE_SUM_KERNEL
#define REDUCE_SUM_KERNEL reduce_sum
#endif

int main() {
  const int n = 65536;
  std::vector<float> host(n);
  for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i % 7) * 0.5f;

  float* input = nullptr;
  float* output = nullptr;
  HIP_CHECK(hipMalloc(&input, n * sizeof(float)));
  HIP_CHECK(hipMalloc(&output, sizeof(float)));
  HIP_CHECK(hipMemcpy(input, host.data(), n * sizeof(float), hipMemcpyHostToDevice));
  const float zero = 0.0f;
  HIP_CHECK(hipMemcpy(output, &zero, sizeof(float), hipMemcpyHostToDevice));

  const int blocks = (n + REDUCE_SUM_BLOCK - 1) / REDUCE_SUM_BLOCK;
  hipLaunchKernelGGL(REDUCE_SUM_KERNEL, dim3(blocks), dim3(REDUCE_SUM_BLOCK), 0, 0, input, output, n);
  HIP_CHECK(hipGetLastError());
  HIP_CHECK(hipDeviceSynchronize());

  float sum = -1.0f;
  HIP_CHECK(hipMemcpy(&sum, output, sizeof(float), hipMemcpyDeviceToHost));
  printf("sum = %.1f\n", sum);

  HIP_CHECK(hipFree(input));
  HIP_CHECK(hipFree(output));
  return 0;
}
#endif  // DITTO_DEVICE_PASS

#endif  // REDUCE_SUM_MAIN_HPP
