// include/ditto_hip_host/hip/hip_runtime.h — the host build of a HIP source.
//
// ditto's CPU runtime (crates/hsa-cpu) runs hipcc-built applications on the
// real HIP runtime (libamdhip64): the application, its HIP calls, its code
// object, kernel arguments and packets are the real ones, but AMDGPU machine
// code cannot run on the CPU. Each kernel therefore runs from a HOST BUILD
// of the same HIP source: a CPU code object (ditto_hsa_cpu.h, ABI 2) that
// the runtime finds by the kernel's mangled name (crates/hsa-cpu/src/
// host_kernels.rs: DITTO_HIP_HOST_KERNELS, then <executable>.host.so).
//
// This directory stands in for HIP's headers in that build. With it first on
// the include path, `#include <hip/hip_runtime.h>` gives the HIP kernel
// language on the CPU (include/ditto_hip_cpu.hpp, device pass: threadIdx,
// blockIdx, blockDim, gridDim, __shared__, __syncthreads, atomics,
// __global__, templates) and declarations of the host API that let the
// host part of the source compile. The host part never runs: `main` is
// renamed away, and every host API function below returns
// hipErrorNotSupported without doing anything.
//
// Recipe (crates/test-apps/build.rs does exactly this):
//   1. hipcc --offload-arch=gfx90a app.hip -o app
//   2. list the kernels of app's code object (`ditto kernels --json app`, or
//      ditto_kernels::device_code_objects + parse_code_object) and write a
//      registration file:
//          #include "/abs/path/app.hip"
//          DITTO_KERNEL(scale_values<float>)   // one line per kernel `name`
//   3. g++ -std=c++17 -O2 -fPIC -shared -fno-gnu-unique -Wl,-Bsymbolic
//          -I include/ditto_hip_host -I include -Dmain=ditto_hip_host_build_main
//          app.host.cpp -o app.host.so
// Kernel names must be unambiguous (no overloaded non-template kernels), and
// the kernel-language limits of ditto_hip_cpu.hpp apply (no warp built-ins,
// no `<<<>>>` launches: use hipLaunchKernelGGL, which is ordinary HIP).
#ifndef DITTO_HIP_HOST_HIP_RUNTIME_H
#define DITTO_HIP_HOST_HIP_RUNTIME_H

#ifndef DITTO_DEVICE_PASS
#define DITTO_DEVICE_PASS 1
#endif
#include "ditto_hip_cpu.hpp"

#include <stddef.h>
#include <stdint.h>

// ───────────────────────── host API: declarations only ─────────────────────
typedef enum hipError_t {
  hipSuccess = 0,
  hipErrorInvalidValue = 1,
  hipErrorOutOfMemory = 2,
  hipErrorNotSupported = 801,
} hipError_t;

typedef enum hipMemcpyKind {
  hipMemcpyHostToHost = 0,
  hipMemcpyHostToDevice = 1,
  hipMemcpyDeviceToHost = 2,
  hipMemcpyDeviceToDevice = 3,
  hipMemcpyDefault = 4,
} hipMemcpyKind;

typedef struct ihipStream_t* hipStream_t;
typedef struct ihipEvent_t* hipEvent_t;
typedef struct hipIpcMemHandle_st {
  char reserved[64];
} hipIpcMemHandle_t;
#define hipIpcMemLazyEnablePeerAccess 0

namespace ditto {
namespace host_build {
// What every host API call does in a host build: nothing (it never runs).
inline hipError_t not_run() { return hipErrorNotSupported; }
}  // namespace host_build
}  // namespace ditto

template <typename T>
inline hipError_t hipMalloc(T**, size_t) { return ::ditto::host_build::not_run(); }
inline hipError_t hipFree(void*) { return ::ditto::host_build::not_run(); }
inline hipError_t hipMemcpy(void*, const void*, size_t, hipMemcpyKind) { return ::ditto::host_build::not_run(); }
inline hipError_t hipMemcpyAsync(void*, const void*, size_t, hipMemcpyKind, hipStream_t = nullptr) {
  return ::ditto::host_build::not_run();
}
inline hipError_t hipMemset(void*, int, size_t) { return ::ditto::host_build::not_run(); }
inline hipError_t hipMemsetD32(void*, int, size_t) { return ::ditto::host_build::not_run(); }
inline hipError_t hipMemsetD16(void*, unsigned short, size_t) { return ::ditto::host_build::not_run(); }
inline hipError_t hipMemcpy2D(void*, size_t, const void*, size_t, size_t, size_t, hipMemcpyKind) {
  return ::ditto::host_build::not_run();
}
inline hipError_t hipMemset2D(void*, size_t, int, size_t, size_t) { return ::ditto::host_build::not_run(); }
inline hipError_t hipStreamWriteValue32(hipStream_t, void*, uint32_t, unsigned int) {
  return ::ditto::host_build::not_run();
}
inline hipError_t hipStreamWriteValue64(hipStream_t, void*, uint64_t, unsigned int) {
  return ::ditto::host_build::not_run();
}
inline hipError_t hipStreamWaitValue32(hipStream_t, void*, uint32_t, unsigned int, uint32_t = 0xffffffffu) {
  return ::ditto::host_build::not_run();
}
inline hipError_t hipStreamWaitValue64(hipStream_t, void*, uint64_t, unsigned int, uint64_t = ~0ull) {
  return ::ditto::host_build::not_run();
}
#define hipStreamWaitValueGte 0x0
#define hipStreamWaitValueEq 0x1
#define hipStreamWaitValueAnd 0x2
#define hipStreamWaitValueNor 0x3
inline hipError_t hipDeviceSynchronize() { return ::ditto::host_build::not_run(); }
inline hipError_t hipStreamSynchronize(hipStream_t) { return ::ditto::host_build::not_run(); }
inline hipError_t hipGetLastError() { return ::ditto::host_build::not_run(); }
inline hipError_t hipPeekAtLastError() { return ::ditto::host_build::not_run(); }
inline const char* hipGetErrorString(hipError_t) { return "host build: the host API does not run"; }
inline hipError_t hipIpcGetMemHandle(hipIpcMemHandle_t*, void*) { return ::ditto::host_build::not_run(); }
inline hipError_t hipIpcOpenMemHandle(void**, hipIpcMemHandle_t, unsigned int) {
  return ::ditto::host_build::not_run();
}
inline hipError_t hipIpcCloseMemHandle(void*) { return ::ditto::host_build::not_run(); }
// The launch never happens in a host build; the arguments are still
// evaluated by nothing, so any expression compiles.
#define hipLaunchKernelGGL(...) ((void)0)

#endif  // DITTO_HIP_HOST_HIP_RUNTIME_H
