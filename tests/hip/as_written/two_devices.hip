// Two GPUs driven from one process as HIP programmers do it: for each
// device, hipSetDevice, a 2 MiB buffer of its own, a kernel filling it with
// device * 1000 + i, and the result read back through hipMemcpy.
#include <hip/hip_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(call)                                                           \
  do {                                                                        \
    hipError_t e_ = (call);                                                   \
    if (e_ != hipSuccess) {                                                   \
      std::fprintf(stderr, "%s failed: %s\n", #call, hipGetErrorString(e_)); \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

__global__ void fill_on_device(float* out, int n, float base) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = base + static_cast<float>(i);
}

int main() {
  int devices = 0;
  CHECK(hipGetDeviceCount(&devices));
  if (devices < 2) {
    std::printf("two_devices: %d device(s), need 2\n", devices);
    return 3;
  }
  const int n = (2 << 20) / sizeof(float);
  int wrong = 0;
  for (int device = 0; device < 2; ++device) {
    CHECK(hipSetDevice(device));
    float* out = nullptr;
    CHECK(hipMalloc(&out, n * sizeof(float)));
    fill_on_device<<<n / 256, 256>>>(out, n, 1000.0f * device);
    CHECK(hipDeviceSynchronize());
    std::vector<float> host(n);
    CHECK(hipMemcpy(host.data(), out, n * sizeof(float), hipMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) wrong += host[i] != 1000.0f * device + static_cast<float>(i);
    CHECK(hipFree(out));
  }
  std::printf("two_devices: %d wrong\n", wrong);
  return wrong == 0 ? 0 : 1;
}
