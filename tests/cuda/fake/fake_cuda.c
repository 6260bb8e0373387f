// fake_cuda.c — a stand-in for libcuda.so.1 AND libcupti.so, for CI
// machines without CUDA: the entry points ditto's tool loads at run time,
// over host memory. Kernels are host functions that run DEFERRED, when
// their stream is synchronised (or at fake_device_synchronize), as on a GPU:
// a snapshot taken without synchronising would see the old values.
// fake_launch drives the tool's CUPTI callback around each launch as the
// driver does (API_ENTER, then API_EXIT), with the real structure layouts.
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef void (*callback_t)(void*, uint32_t, uint32_t, const void*);

typedef struct {
  uint32_t callbackSite;
  const char* functionName;
  const void* functionParams;
  void* functionReturnValue;
  const char* symbolName;
  void* context;
  uint32_t contextUid;
  uint64_t* correlationData;
  uint32_t correlationId;
} CallbackData;

typedef struct {
  void* f;
  unsigned grid[3], block[3], sharedMemBytes;
  void* hStream;
  void** kernelParams;
  void** extra;
} LaunchKernelParams;

typedef struct {
  unsigned grid[3], block[3], sharedMemBytes;
  void* hStream;
  void* attrs;
  unsigned numAttrs;
} LaunchConfig;

typedef struct {
  const LaunchConfig* config;
  void* f;
  void** kernelParams;
  void** extra;
} LaunchKernelExParams;

typedef struct fake_function {
  const char* name;
  int nparams;
  size_t offset[8], size[8];
  void (*run)(unsigned char* args);  // args packed at the offsets
} fake_function;

static callback_t g_callback;
static uint32_t g_enabled[16];
static int g_nenabled;
static int g_capturing;
static int g_syncs;
static struct { uint64_t base; size_t size; } g_allocs[64];
static int g_nallocs;
static const fake_function* g_pending;
static unsigned char g_pending_args[256];

// --- CUPTI ---------------------------------------------------------------
int cuptiSubscribe(void** subscriber, callback_t callback, void* userdata) {
  (void)userdata;
  g_callback = callback;
  *subscriber = (void*)0x5;
  return 0;
}
int cuptiEnableCallback(uint32_t enable, void* subscriber, uint32_t domain, uint32_t cbid) {
  (void)subscriber;
  if (enable && domain == 1 && g_nenabled < 16) g_enabled[g_nenabled++] = cbid;
  return 0;
}
int cuptiGetResultString(int result, const char** text) {
  (void)result;
  *text = "fake CUPTI error";
  return 0;
}

// --- driver --------------------------------------------------------------
CUresult cuFuncGetParamInfo(void* f, size_t i, size_t* offset, size_t* size) {
  const fake_function* ff = (const fake_function*)f;
  if ((int)i >= ff->nparams) return 1;
  *offset = ff->offset[i];
  *size = ff->size[i];
  return 0;
}
CUresult cuMemGetAddressRange_v2(uint64_t* base, size_t* size, uint64_t p) {
  for (int i = 0; i < g_nallocs; ++i)
    if (p >= g_allocs[i].base && p < g_allocs[i].base + g_allocs[i].size) {
      *base = g_allocs[i].base;
      *size = g_allocs[i].size;
      return 0;
    }
  return 1;
}
// Host memory cannot be exported: the tool takes its copy transport.
CUresult cuIpcGetMemHandle(void* handle, uint64_t p) {
  (void)handle;
  (void)p;
  return 801;
}
CUresult cuMemcpyDtoH_v2(void* dst, uint64_t src, size_t n) {
  memcpy(dst, (const void*)(uintptr_t)src, n);
  return 0;
}
static void run_pending(void) {
  if (g_pending) g_pending->run(g_pending_args);
  g_pending = 0;
}
CUresult cuStreamSynchronize(void* stream) {
  (void)stream;
  ++g_syncs;
  run_pending();
  return 0;
}
CUresult cuStreamIsCapturing(void* stream, int* status) {
  (void)stream;
  *status = g_capturing;
  return 0;
}
CUresult cuGetErrorString(CUresult r, const char** text) {
  (void)r;
  *text = "fake driver error";
  return 0;
}

// --- for the fake application ----------------------------------------------
void* fake_malloc(size_t n) {
  void* p = calloc(1, n);
  g_allocs[g_nallocs].base = (uint64_t)(uintptr_t)p;
  g_allocs[g_nallocs].size = n;
  ++g_nallocs;
  return p;
}
void fake_set_capturing(int on) { g_capturing = on; }
int fake_syncs(void) { return g_syncs; }
void fake_device_synchronize(void) { run_pending(); }

static int enabled(uint32_t cbid) {
  for (int i = 0; i < g_nenabled; ++i)
    if (g_enabled[i] == cbid) return 1;
  return 0;
}

// Launches f with kernelParams `args` through cuLaunchKernel (cbid 307) or,
// with `ex`, cuLaunchKernelEx_ptsz (653), calling the subscribed callback at
// entry and exit. The kernel runs later (deferred), like on a device.
void fake_launch(const fake_function* f, void** args, int ex) {
  run_pending();
  for (int i = 0; i < f->nparams; ++i) memcpy(g_pending_args + f->offset[i], args[i], f->size[i]);
  LaunchKernelParams p = {(void*)f, {4, 1, 1}, {64, 1, 1}, 0, 0, args, 0};
  LaunchConfig config = {{4, 1, 1}, {64, 1, 1}, 0, 0, 0, 0};
  LaunchKernelExParams pex = {&config, (void*)f, args, 0};
  const uint32_t cbid = ex ? 653 : 307;
  CUresult result = 0;
  uint64_t correlation = 0;
  CallbackData d = {0, ex ? "cuLaunchKernelEx_ptsz" : "cuLaunchKernel",
                    ex ? (const void*)&pex : (const void*)&p, &result, f->name, (void*)0x9, 1,
                    &correlation, 1};
  if (g_callback && enabled(cbid)) g_callback(0, 1, cbid, &d);
  g_pending = f;  // enqueued
  d.callbackSite = 1;
  if (g_callback && enabled(cbid)) g_callback(0, 1, cbid, &d);
}
