// scale_values <float|double> [N]: output[i] = input[i] * factor with
// input[i] = i and factor 2, N = 1024 by default. Both pointers are
// non-const (so a tool captures both buffers).
#include <string.h>

#include <vector>

#include "hip_check.hpp"

template <typename T>
__global__ void scale_values(T* input, T* output, T factor, int N) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) output[i] = input[i] * factor;
}

template <typename T>
static int run(const char* type_name, int n) {
  std::vector<T> input(n), output(n, static_cast<T>(-1));
  for (int i = 0; i < n; ++i) input[i] = static_cast<T>(i);
  T* d_input = nullptr;
  T* d_output = nullptr;
  HIP_CHECK(hipMalloc(&d_input, n * sizeof(T)));
  HIP_CHECK(hipMalloc(&d_output, n * sizeof(T)));
  HIP_CHECK(hipMemcpy(d_input, input.data(), n * sizeof(T), hipMemcpyHostToDevice));

  const int block = 256;
  hipLaunchKernelGGL(scale_values<T>, dim3((n + block - 1) / block), dim3(block), 0, 0, d_input, d_output,
                     static_cast<T>(2), n);
  HIP_CHECK(hipGetLastError());
  HIP_CHECK(hipDeviceSynchronize());
  HIP_CHECK(hipMemcpy(output.data(), d_output, n * sizeof(T), hipMemcpyDeviceToHost));

  printf("scale_values<%s>: N = %d, output[0..3] =", type_name, n);
  for (int i = 0; i < n && i < 4; ++i) printf(" %g", static_cast<double>(output[i]));
  printf(", output[%d] = %g\n", n - 1, static_cast<double>(output[n - 1]));

  HIP_CHECK(hipFree(d_input));
  HIP_CHECK(hipFree(d_output));
  return 0;
}

int main(int argc, char** argv) {
  int n = 1024;
  if (argc == 3) n = atoi(argv[2]);
  if (argc < 2 || argc > 3 || n < 1) {
    fprintf(stderr, "usage: %s <float|double> [N]\n", argv[0]);
    return 2;
  }
  if (strcmp(argv[1], "float") == 0) return run<float>("float", n);
  if (strcmp(argv[1], "double") == 0) return run<double>("double", n);
  fprintf(stderr, "usage: %s <float|double> [N]\n", argv[0]);
  return 2;
}
