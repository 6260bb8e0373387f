// scale_twice: two dispatches of scale_values<float> (x2 into middle, then
// x3 into output), synchronised once at the end.
#include <vector>

#include "hip_check.hpp"

template <typename T>
__global__ void scale_values(T* input, T* output, T factor, int N) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) output[i] = input[i] * factor;
}

int main() {
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
  hipLaunchKernelGGL(scale_values<float>, grid, dim3(block), 0, 0, d_middle, d_output, 3.0f, n);
  HIP_CHECK(hipGetLastError());
  HIP_CHECK(hipDeviceSynchronize());
  HIP_CHECK(hipMemcpy(middle.data(), d_middle, n * sizeof(float), hipMemcpyDeviceToHost));
  HIP_CHECK(hipMemcpy(output.data(), d_output, n * sizeof(float), hipMemcpyDeviceToHost));

  printf("scale_twice: N = %d, middle[1] = %g, middle[%d] = %g, output[1] = %g, output[%d] = %g\n", n,
         middle[1], n - 1, middle[n - 1], output[1], n - 1, output[n - 1]);

  HIP_CHECK(hipFree(d_input));
  HIP_CHECK(hipFree(d_middle));
  HIP_CHECK(hipFree(d_output));
  return 0;
}
