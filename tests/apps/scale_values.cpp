// scale_values <float|double|half|bfloat16> [N]: output[i] = input[i] *
// factor with input[i] = i and factor 2, N = 1024 by default. Both pointers
// are non-const, as in the seed (so a tool captures both buffers). `half` is
// _Float16, `bfloat16` is __hip_bfloat16 (both as HIP spells them in kernel
// signatures, so ditto types them float16 and bfloat16 from the name).
#include "hiplite.hpp"

// HIP's bfloat16 (amd_hip_bf16.h): the upper 16 bits of a float, rounded to
// nearest even. Only what this application needs.
struct __hip_bfloat16 {
  unsigned short data;
  __hip_bfloat16() = default;
  __hip_bfloat16(float f) {
    unsigned int u;
    __builtin_memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    data = static_cast<unsigned short>(u >> 16);
  }
  operator float() const {
    unsigned int u = static_cast<unsigned int>(data) << 16;
    float f;
    __builtin_memcpy(&f, &u, sizeof f);
    return f;
  }
};
inline __hip_bfloat16 operator*(__hip_bfloat16 a, __hip_bfloat16 b) {
  return __hip_bfloat16(static_cast<float>(a) * static_cast<float>(b));
}

template <typename T>
__global__ void scale_values(T* input, T* output, T factor, int N) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) output[i] = input[i] * factor;
}
DITTO_KERNEL(scale_values<float>)
DITTO_KERNEL(scale_values<double>)
DITTO_KERNEL(scale_values<_Float16>)
DITTO_KERNEL(scale_values<__hip_bfloat16>)

#ifndef DITTO_DEVICE_PASS
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

template <typename T>
static int run(const char* type_name, int n) {
  std::vector<T> input(n), output(n, static_cast<T>(-1.0f));
  for (int i = 0; i < n; ++i) input[i] = static_cast<T>(static_cast<float>(i));
  T* d_input = nullptr;
  T* d_output = nullptr;
  HIP_CHECK(hipMalloc(&d_input, n * sizeof(T)));
  HIP_CHECK(hipMalloc(&d_output, n * sizeof(T)));
  HIP_CHECK(hipMemcpy(d_input, input.data(), n * sizeof(T), hipMemcpyHostToDevice));

  const int block = 256;
  hipLaunchKernelGGL(scale_values<T>, dim3((n + block - 1) / block), dim3(block), 0, 0, d_input, d_output,
                     static_cast<T>(2.0f), n);
  HIP_CHECK(hipGetLastError());
  HIP_CHECK(hipDeviceSynchronize());
  HIP_CHECK(hipMemcpy(output.data(), d_output, n * sizeof(T), hipMemcpyDeviceToHost));

  printf("scale_values<%s>: N = %d, output[0..3] =", type_name, n);
  for (int i = 0; i < n && i < 4; ++i) printf(" %g", static_cast<double>(static_cast<float>(output[i])));
  printf(", output[%d] = %g\n", n - 1, static_cast<double>(static_cast<float>(output[n - 1])));

  HIP_CHECK(hipFree(d_input));
  HIP_CHECK(hipFree(d_output));
  return 0;
}

int main(int argc, char** argv) {
  static const char* const types[] = {"float", "double", "half", "bfloat16"};
  int type = -1;
  for (int t = 0; argc >= 2 && t < 4; ++t)
    if (strcmp(argv[1], types[t]) == 0) type = t;
  if (argc < 2 || argc > 3 || type < 0) {
    fprintf(stderr, "usage: %s <float|double|half|bfloat16> [N]\n", argv[0]);
    return 2;
  }
  int n = 1024;
  if (argc == 3) {
    char* end = nullptr;
    long value = strtol(argv[2], &end, 10);
    if (end == argv[2] || *end != '\0' || value < 1 || value > (1L << 28)) {
      fprintf(stderr, "%s: N must be an integer between 1 and 2^28, got '%s'\n", argv[0], argv[2]);
      return 2;
    }
    n = static_cast<int>(value);
  }
  switch (type) {
    case 0: return run<float>("float", n);
    case 1: return run<double>("double", n);
    case 2: return run<_Float16>("half", n);
    default: return run<__hip_bfloat16>("bfloat16", n);
  }
}
#endif
