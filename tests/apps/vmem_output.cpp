// vmem_output: a kernel's output in virtual memory, as HIP's hipMemMap
// (and PyTorch's expandable segments) give it: an address range reserved
// with hsa_amd_vmem_address_reserve, a handle of the GPU's coarse-grained
// pool mapped into it and opened to the GPU with hsa_amd_vmem_set_access.
// The kernel writes 1024 floats at 64 KiB into the mapping (an interior
// pointer): out[j] = value + j, first with value 1, then, after the
// mapping was unmapped and another handle mapped at the same address, with
// value 100. Each result is read back through hipMemcpy and checked (a
// wrong one exits 1). Prints "vmem_output: ok".
//
// The vmem entries are in no ROCm 5.2 header: they are declared here as
// ROCm 7.2's hsa_ext_amd.h has them and found in the loaded runtime.
#include "hiplite.hpp"

__global__ void vmem_fill(float* out, int n, float value) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < n) out[j] = value + static_cast<float>(j);
}
DITTO_KERNEL(vmem_fill)

#ifndef DITTO_DEVICE_PASS
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

struct vmem_handle_t {
  uint64_t handle;
};
struct access_desc_t {
  uint32_t permissions;  // hsa_access_permission_t: 3 = RW
  hsa_agent_t agent_handle;
};
using reserve_fn = hsa_status_t (*)(void** va, size_t size, uint64_t address, uint64_t flags);
using free_fn = hsa_status_t (*)(void* va, size_t size);
using create_fn = hsa_status_t (*)(hsa_amd_memory_pool_t pool, size_t size, uint32_t type, uint64_t flags,
                                   vmem_handle_t* handle);
using release_fn = hsa_status_t (*)(vmem_handle_t handle);
using map_fn = hsa_status_t (*)(void* va, size_t size, size_t in_offset, vmem_handle_t handle, uint64_t flags);
using unmap_fn = hsa_status_t (*)(void* va, size_t size);
using set_access_fn = hsa_status_t (*)(void* va, size_t size, const access_desc_t* desc, size_t count);

template <typename F>
static F entry(const char* name) {
  void* f = dlsym(RTLD_DEFAULT, name);
  if (f == nullptr) {
    fprintf(stderr, "vmem_output: the HSA runtime has no %s\n", name);
    exit(2);
  }
  return reinterpret_cast<F>(f);
}

static void check(hsa_status_t st, const char* what) {
  if (st != HSA_STATUS_SUCCESS) {
    fprintf(stderr, "vmem_output: %s failed: 0x%x\n", what, st);
    exit(1);
  }
}

constexpr size_t kMapping = 2 << 20;
constexpr int kFloats = 1024;
constexpr size_t kOffset = 64 << 10;

static bool fill_and_check(float* out, float value) {
  hipLaunchKernelGGL(vmem_fill, dim3(kFloats / 256), dim3(256), 0, 0, out, kFloats, value);
  HIP_CHECK(hipDeviceSynchronize());
  static float host[kFloats];
  HIP_CHECK(hipMemcpy(host, out, sizeof host, hipMemcpyDeviceToHost));
  for (int j = 0; j < kFloats; ++j) {
    if (host[j] != value + static_cast<float>(j)) {
      fprintf(stderr, "vmem_output: out[%d] = %g, expected %g\n", j, host[j], value + j);
      return false;
    }
  }
  return true;
}

int main() {
  hiplite::Runtime& rt = hiplite::runtime();
  {
    std::lock_guard<std::mutex> lock(rt.mutex);
    HIP_CHECK(hiplite::ensure_initialized(rt));
  }
  const auto reserve = entry<reserve_fn>("hsa_amd_vmem_address_reserve");
  const auto address_free = entry<free_fn>("hsa_amd_vmem_address_free");
  const auto create = entry<create_fn>("hsa_amd_vmem_handle_create");
  const auto release = entry<release_fn>("hsa_amd_vmem_handle_release");
  const auto map = entry<map_fn>("hsa_amd_vmem_map");
  const auto unmap = entry<unmap_fn>("hsa_amd_vmem_unmap");
  const auto set_access = entry<set_access_fn>("hsa_amd_vmem_set_access");
  void* va = nullptr;
  check(reserve(&va, kMapping, 0, 0), "hsa_amd_vmem_address_reserve");
  float* out = reinterpret_cast<float*>(static_cast<char*>(va) + kOffset);
  const access_desc_t gpu_rw{3, rt.gpu};
  bool ok = true;
  for (float value : {1.0f, 100.0f}) {
    vmem_handle_t handle{};
    check(create(rt.coarse_pool, kMapping, 0, 0, &handle), "hsa_amd_vmem_handle_create");
    check(map(va, kMapping, 0, handle, 0), "hsa_amd_vmem_map");
    check(set_access(va, kMapping, &gpu_rw, 1), "hsa_amd_vmem_set_access");
    ok = fill_and_check(out, value) && ok;
    check(unmap(va, kMapping), "hsa_amd_vmem_unmap");
    check(release(handle), "hsa_amd_vmem_handle_release");
  }
  check(address_free(va, kMapping), "hsa_amd_vmem_address_free");
  printf("vmem_output: %s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
#endif
