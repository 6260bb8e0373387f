// Virtual memory management as HIP programmers write it (hipMemCreate,
// hipMemAddressReserve, hipMemMap, hipMemSetAccess): a kernel fills a
// mapped buffer, the host reads it back through hipMemcpy; then the range
// is unmapped and freed.
#include <hip/hip_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                               \
  do {                                                                            \
    hipError_t e_ = (call);                                                       \
    if (e_ != hipSuccess) {                                                       \
      std::fprintf(stderr, "%s failed: %s\n", #call, hipGetErrorString(e_));     \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

__global__ void fill_mapped(float* out, int n, float value) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value + static_cast<float>(i);
}

int main() {
  int supported = 0;
  CHECK(hipDeviceGetAttribute(&supported, hipDeviceAttributeVirtualMemoryManagementSupported, 0));
  if (!supported) {
    std::printf("virtual_memory: not supported\n");
    return 3;
  }
  hipMemAllocationProp prop = {};
  prop.type = hipMemAllocationTypePinned;
  prop.location.type = hipMemLocationTypeDevice;
  prop.location.id = 0;
  size_t granularity = 0;
  CHECK(hipMemGetAllocationGranularity(&granularity, &prop, hipMemAllocationGranularityMinimum));
  const int n = 1024;
  const size_t size = ((n * sizeof(float) + granularity - 1) / granularity) * granularity;
  hipMemGenericAllocationHandle_t handle;
  CHECK(hipMemCreate(&handle, size, &prop, 0));
  void* ptr = nullptr;
  CHECK(hipMemAddressReserve(&ptr, size, 0, nullptr, 0));
  CHECK(hipMemMap(ptr, size, 0, handle, 0));
  hipMemAccessDesc access = {};
  access.location = prop.location;
  access.flags = hipMemAccessFlagsProtReadWrite;
  CHECK(hipMemSetAccess(ptr, size, &access, 1));
  fill_mapped<<<n / 256, 256>>>(static_cast<float*>(ptr), n, 5.0f);
  CHECK(hipDeviceSynchronize());
  float host[n];
  CHECK(hipMemcpy(host, ptr, sizeof host, hipMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += host[i] != 5.0f + static_cast<float>(i);
  CHECK(hipMemUnmap(ptr, size));
  CHECK(hipMemRelease(handle));
  CHECK(hipMemAddressFree(ptr, size));
  std::printf("virtual_memory: %d wrong of %d, last %g\n", wrong, n, host[n - 1]);
  return wrong == 0 ? 0 : 1;
}
