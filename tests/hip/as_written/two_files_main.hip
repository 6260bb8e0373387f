// two_files_main.hip — a kernel that calls a device function of a static
// device library (device_library/), linked with -fgpu-rdc:
//   hipcc -fgpu-rdc -I device_library two_files_main.hip -L. -lscale -o app
// Prints the sum of the scaled vector and whether it is right.
#include <hip/hip_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "scale.hpp"

#define HIP_CHECK(call)                                                    \
  do {                                                                     \
    hipError_t status_ = (call);                                           \
    if (status_ != hipSuccess) {                                           \
      std::fprintf(stderr, "%s: %s\n", #call, hipGetErrorString(status_)); \
      std::exit(2);                                                        \
    }                                                                      \
  } while (0)

__global__ void scale_all(const float* in, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = scaled(in[i], i);
}

int main() {
  const int n = 1000;
  std::vector<float> in(n), out(n);
  for (int i = 0; i < n; ++i) in[i] = 0.25f * static_cast<float>(i % 17);
  float *d_in, *d_out;
  HIP_CHECK(hipMalloc(&d_in, n * sizeof(float)));
  HIP_CHECK(hipMalloc(&d_out, n * sizeof(float)));
  HIP_CHECK(hipMemcpy(d_in, in.data(), n * sizeof(float), hipMemcpyHostToDevice));
  scale_all<<<(n + 127) / 128, 128>>>(d_in, d_out, n);
  HIP_CHECK(hipMemcpy(out.data(), d_out, n * sizeof(float), hipMemcpyDeviceToHost));
  double sum = 0, expect = 0;
  for (int i = 0; i < n; ++i) {
    sum += out[i];
    expect += in[i] * (1 + i % 3);
  }
  std::printf("two files: sum %.2f expected %.2f %s\n", sum, expect, sum == expect ? "PASS" : "FAIL");
  return sum == expect ? 0 : 1;
}
