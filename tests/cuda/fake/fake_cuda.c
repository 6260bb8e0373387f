// fake_cuda.c — a stand-in for libcuda.so.1 AND libcupti.so, for CI
// machines without CUDA: the entry points ditto's tool loads at run time,
// over host memory. Kernels are host functions that run DEFERRED, when
// their stream is synchronised (or at fake_device_synchronize), as on a GPU:
// a snapshot taken without synchronising would see the old values.
// fake_launch drives the tool's CUPTI callback around each launch as the
// driver does (API_ENTER, then API_EXIT), with the real structure layouts.
//
// Several devices (the collector's side too): FAKE_CUDA_DEVICES=N physical
// devices (1 to 8, default 1), of which CUDA_VISIBLE_DEVICES shows some, in
// its order, as ordinals 0, 1, ...; each has a UUID of its physical index.
// fake_set_device picks the application's device, as cudaSetDevice does.
// With FAKE_CUDA_IPC=1, fake_malloc memory is exportable: a memfd that
// cuIpcGetMemHandle names (pid, fd), which another process opens through
// /proc/<pid>/fd. cuIpcOpenMemHandle in a context of another device than the
// owner's needs the lazy-peer flag, and fails as on GPUs without a peer path
// (CUDA_ERROR_PEER_ACCESS_UNSUPPORTED) under FAKE_CUDA_NO_PEER=1. Each open
// appends "open: owner device P, context of device C" to FAKE_CUDA_LOG.
// Streams belong to the context current when they were made; an
// asynchronous copy on a stream of another context fails.
// CUPTI's activity API: while concurrent-kernel records are enabled, each
// launch leaves a kernel record (kind 10, start, end, correlation id at the
// offsets every CUpti_ActivityKernel version shares) of FAKE_CUDA_KERNEL_NS
// nanoseconds (default 2500), handed over at cuptiActivityFlushAll. Each
// launch's callbacks carry a correlation id of their own, from 1.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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

#include "fake_cuda.h"

static callback_t g_callback;
static uint32_t g_enabled[16];
static int g_nenabled;
static int g_capturing;
static int g_syncs;
static struct { uint64_t base; size_t size; int device; int fd; } g_allocs[64];
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
static int g_modules_enabled;
int cuptiEnableCallback(uint32_t enable, void* subscriber, uint32_t domain, uint32_t cbid) {
  (void)subscriber;
  if (enable && domain == 1 && g_nenabled < 16) g_enabled[g_nenabled++] = cbid;
  // CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_LOADED
  if (domain == 3 && cbid == 6) g_modules_enabled = (int)enable;
  return 0;
}

// CUpti_ResourceData and CUpti_ModuleResourceData.
typedef struct { void* context; void* stream; void* descriptor; } ResourceData;
typedef struct { uint32_t moduleId; size_t cubinSize; const char* pCubin; } ModuleResourceData;
static const void* g_lazy_image;
static size_t g_lazy_size;

// Reports a module load of `image` to the subscriber, as CUPTI does.
void fake_module_loaded(const void* image, size_t size) {
  static uint32_t next_id = 1;
  ModuleResourceData m = {next_id++, size, (const char*)image};
  ResourceData d = {(void*)0x9, 0, &m};
  if (g_callback && g_modules_enabled) g_callback(0, 3, 6, &d);
}

// The next launch loads `image` between its entry and exit callbacks, as
// CUDA's lazy module loading does at a kernel's first launch.
void fake_module_lazy(const void* image, size_t size) {
  g_lazy_image = image;
  g_lazy_size = size;
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

// --- devices and contexts ----------------------------------------------------
enum { MAX_DEVICES = 8, INVALID_DEVICE = 101, INVALID_CONTEXT = 201, PEER_UNSUPPORTED = 217 };
static int g_nvisible = -1;
static int g_visible[MAX_DEVICES];  // ordinal -> physical device
static __thread int t_context = -1;  // physical device of the current context

static void init_devices(void) {
  if (g_nvisible >= 0) return;
  const char* n = getenv("FAKE_CUDA_DEVICES");
  int physical = n ? atoi(n) : 1;
  if (physical < 1 || physical > MAX_DEVICES) physical = 1;
  const char* visible = getenv("CUDA_VISIBLE_DEVICES");
  int count = 0;
  if (visible) {
    for (const char* c = visible; *c && count < MAX_DEVICES;) {
      char* end;
      long d = strtol(c, &end, 10);
      if (end == c || d < 0 || d >= physical) break;  // as CUDA: the list stops at a bad entry
      g_visible[count++] = (int)d;
      c = *end == ',' ? end + 1 : end;
    }
  } else {
    for (; count < physical; ++count) g_visible[count] = count;
  }
  g_nvisible = count;
}
static int ordinal_of(int physical) {
  init_devices();
  for (int i = 0; i < g_nvisible; ++i)
    if (g_visible[i] == physical) return i;
  return -1;
}
static int current_device(void) {
  init_devices();
  return t_context >= 0 ? t_context : (g_nvisible > 0 ? g_visible[0] : 0);
}

CUresult cuInit(unsigned flags) {
  (void)flags;
  init_devices();
  return 0;
}
CUresult cuDeviceGetCount(int* count) {
  init_devices();
  *count = g_nvisible;
  return 0;
}
CUresult cuDeviceGet(int* device, int ordinal) {
  init_devices();
  if (ordinal < 0 || ordinal >= g_nvisible) return INVALID_DEVICE;
  *device = ordinal;
  return 0;
}
// Only the first version: the tool and the collector both fall back to it.
CUresult cuDeviceGetUuid(unsigned char uuid[16], int device) {
  init_devices();
  if (device < 0 || device >= g_nvisible) return INVALID_DEVICE;
  memcpy(uuid, "fake-cuda-gpu-", 14);
  uuid[14] = '0' + g_visible[device];
  uuid[15] = 0;
  return 0;
}
CUresult cuDevicePrimaryCtxRetain(void** context, int device) {
  init_devices();
  if (device < 0 || device >= g_nvisible) return INVALID_DEVICE;
  *context = (void*)(uintptr_t)(0x1000 + g_visible[device]);
  return 0;
}
CUresult cuCtxSetCurrent(void* context) {
  t_context = context ? (int)((uintptr_t)context - 0x1000) : -1;
  return 0;
}
// CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL (9) only.
CUresult cuPointerGetAttribute(void* data, int attribute, uint64_t p) {
  if (attribute != 9) return 1;
  for (int i = 0; i < g_nallocs; ++i)
    if (p >= g_allocs[i].base && p < g_allocs[i].base + g_allocs[i].size) {
      int ordinal = ordinal_of(g_allocs[i].device);
      if (ordinal < 0) return INVALID_DEVICE;
      *(int*)data = ordinal;
      return 0;
    }
  return 1;
}

// --- IPC -----------------------------------------------------------------
typedef struct {
  char magic[8];
  int32_t pid, fd, device;
  uint64_t size;
  char unused[32];
} fake_ipc_handle;
_Static_assert(sizeof(fake_ipc_handle) == 64, "CUipcMemHandle has 64 bytes");

static struct { uint64_t base; size_t size; } g_opened[64];

// Memory fake_malloc made without FAKE_CUDA_IPC (host memory) cannot be
// exported: the tool takes its copy transport.
CUresult cuIpcGetMemHandle(void* handle, uint64_t p) {
  for (int i = 0; i < g_nallocs; ++i)
    if (g_allocs[i].base == p && g_allocs[i].fd >= 0) {
      fake_ipc_handle h = {"fakeipc", getpid(), g_allocs[i].fd, g_allocs[i].device, g_allocs[i].size, {0}};
      memcpy(handle, &h, sizeof h);
      return 0;
    }
  return 801;
}
static void log_line(const char* line) {
  const char* path = getenv("FAKE_CUDA_LOG");
  if (!path) return;
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (fd < 0) return;
  ssize_t written = write(fd, line, strlen(line));  // one write: lines never interleave
  (void)written;
  close(fd);
}
CUresult cuIpcOpenMemHandle_v2(uint64_t* dptr, fake_ipc_handle h, unsigned flags) {
  if (memcmp(h.magic, "fakeipc", 8) != 0) return 1;
  if (t_context < 0) return INVALID_CONTEXT;
  char line[128];
  snprintf(line, sizeof line, "open: owner device %d, context of device %d\n", h.device, t_context);
  log_line(line);
  if (t_context != h.device && (!(flags & 1) || getenv("FAKE_CUDA_NO_PEER"))) return PEER_UNSUPPORTED;
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", h.pid, h.fd);
  int fd = open(path, O_RDWR);
  if (fd < 0) return 1;
  void* p = mmap(0, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return 2;
  for (int i = 0; i < 64; ++i)
    if (!g_opened[i].base) {
      g_opened[i].base = (uint64_t)(uintptr_t)p;
      g_opened[i].size = h.size;
      *dptr = g_opened[i].base;
      return 0;
    }
  munmap(p, h.size);
  return 2;
}
CUresult cuIpcCloseMemHandle(uint64_t dptr) {
  for (int i = 0; i < 64; ++i)
    if (g_opened[i].base == dptr && dptr) {
      munmap((void*)(uintptr_t)dptr, g_opened[i].size);
      g_opened[i].base = 0;
      return 0;
    }
  return 1;
}

// --- copies and streams ------------------------------------------------------
CUresult cuMemcpyDtoH_v2(void* dst, uint64_t src, size_t n) {
  memcpy(dst, (const void*)(uintptr_t)src, n);
  return 0;
}
CUresult cuMemAllocHost_v2(void** p, size_t n) {
  *p = malloc(n);
  return *p ? 0 : 2;
}
typedef struct { int device; } fake_stream;
CUresult cuStreamCreate(void** stream, unsigned flags) {
  (void)flags;
  fake_stream* s = malloc(sizeof *s);
  s->device = current_device();
  *stream = s;
  return 0;
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, uint64_t src, size_t n, void* stream) {
  if (stream && ((fake_stream*)stream)->device != current_device()) return INVALID_CONTEXT;
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
// Does what the driver does at cuInit: dlopen CUDA_INJECTION64_PATH and call
// its InitializeInjection. 0 when it did (or none is named), else 3.
int fake_inject(void) {
  const char* path = getenv("CUDA_INJECTION64_PATH");
  if (!path) return 0;
  void* tool = dlopen(path, RTLD_NOW);
  int (*init)(void) = tool ? (int (*)(void))dlsym(tool, "InitializeInjection") : 0;
  if (!init || init() != 1) {
    fprintf(stderr, "fake driver: InitializeInjection missing or not 1\n");
    return 3;
  }
  return 0;
}
// cudaSetDevice: the calling thread's context becomes device `ordinal`'s.
int fake_set_device(int ordinal) {
  init_devices();
  if (ordinal < 0 || ordinal >= g_nvisible) return INVALID_DEVICE;
  t_context = g_visible[ordinal];
  return 0;
}
// The ordinal of the calling thread's device, and its physical index.
int fake_current_ordinal(void) { return ordinal_of(current_device()); }
int fake_current_physical(void) { return current_device(); }

// Zeroed "device memory" of the current device: a memfd (exportable) with
// FAKE_CUDA_IPC=1, else host memory. At most 64 live allocations.
void* fake_malloc(size_t n) {
  if (g_nallocs == 64) return 0;
  int fd = -1;
  void* p;
  const char* ipc = getenv("FAKE_CUDA_IPC");
  if (ipc && strcmp(ipc, "1") == 0) {
    fd = memfd_create("fake-cuda-device-memory", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)n) != 0) return 0;
    p = mmap(0, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return 0;
  } else {
    p = calloc(1, n);
  }
  g_allocs[g_nallocs].base = (uint64_t)(uintptr_t)p;
  g_allocs[g_nallocs].size = n;
  g_allocs[g_nallocs].device = current_device();
  g_allocs[g_nallocs].fd = fd;
  ++g_nallocs;
  return p;
}
void fake_free(void* p) {
  for (int i = 0; i < g_nallocs; ++i)
    if (g_allocs[i].base == (uint64_t)(uintptr_t)p) {
      if (g_allocs[i].fd >= 0) {
        munmap(p, g_allocs[i].size);
        close(g_allocs[i].fd);
      } else {
        free(p);
      }
      g_allocs[i] = g_allocs[--g_nallocs];
      return;
    }
}
void fake_set_capturing(int on) { g_capturing = on; }
int fake_syncs(void) { return g_syncs; }
void fake_device_synchronize(void) { run_pending(); }

// --- CUPTI activity records ------------------------------------------------
typedef void (*buffer_request_t)(uint8_t**, size_t*, size_t*);
typedef void (*buffer_complete_t)(void*, uint32_t, uint8_t*, size_t, size_t);
enum { RECORD_BYTES = 128, MAX_RECORDS = 64 };
static buffer_request_t g_request;
static buffer_complete_t g_complete;
static int g_kernel_records;
static uint8_t g_records[MAX_RECORDS][RECORD_BYTES];
static int g_nrecords;
static uint64_t g_clock_ns = 1000000;
static uint32_t g_correlation;

int cuptiActivityRegisterCallbacks(buffer_request_t request, buffer_complete_t complete) {
  g_request = request;
  g_complete = complete;
  return 0;
}
int cuptiActivityEnable(uint32_t kind) {
  if (kind == 10) g_kernel_records = 1;
  return 0;
}
int cuptiActivityDisable(uint32_t kind) {
  if (kind == 10) g_kernel_records = 0;
  return 0;
}
static void kernel_record(uint32_t correlation) {
  if (!g_kernel_records || g_nrecords == MAX_RECORDS) return;
  const char* ns = getenv("FAKE_CUDA_KERNEL_NS");
  uint64_t duration = ns ? strtoull(ns, 0, 10) : 2500;
  uint8_t* r = g_records[g_nrecords++];
  memset(r, 0, RECORD_BYTES);
  uint32_t kind = 10;
  uint64_t start = g_clock_ns, end = g_clock_ns + duration;
  g_clock_ns = end + 1000;
  memcpy(r, &kind, 4);
  memcpy(r + 16, &start, 8);
  memcpy(r + 24, &end, 8);
  memcpy(r + 92, &correlation, 4);
}
int cuptiActivityFlushAll(uint32_t flag) {
  (void)flag;
  if (!g_nrecords || !g_request || !g_complete) return 0;
  uint8_t* buffer = 0;
  size_t size = 0, max = 0;
  g_request(&buffer, &size, &max);
  size_t valid = (size_t)g_nrecords * RECORD_BYTES;
  if (!buffer || size < valid) return 1;
  memcpy(buffer, g_records, valid);
  g_nrecords = 0;
  g_complete(0, 0, buffer, size, valid);
  return 0;
}
int cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid, uint8_t** record) {
  uint8_t* next = *record ? *record + RECORD_BYTES : buffer;
  if (next + RECORD_BYTES > buffer + valid) return 12;  // CUPTI_ERROR_MAX_LIMIT_REACHED
  *record = next;
  return 0;
}

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
  const uint32_t id = ++g_correlation;
  CallbackData d = {0, ex ? "cuLaunchKernelEx_ptsz" : "cuLaunchKernel",
                    ex ? (const void*)&pex : (const void*)&p, &result, f->name, (void*)0x9, 1,
                    &correlation, id};
  if (g_callback && enabled(cbid)) g_callback(0, 1, cbid, &d);
  if (g_lazy_image) {
    fake_module_loaded(g_lazy_image, g_lazy_size);
    g_lazy_image = 0;
  }
  g_pending = f;  // enqueued
  if (!g_capturing) kernel_record(id);
  d.callbackSite = 1;
  if (g_callback && enabled(cbid)) g_callback(0, 1, cbid, &d);
}

// --- replay: the driver as `ditto replay` uses it ---------------------------
// A module is the image given to cuModuleLoadData; its functions are this
// fake's built-in kernels, found by name, run at cuLaunchKernel (at once)
// on the argument block given through `extra`. Reservations are anonymous
// mappings at the requested address when it is free (a hint, as the driver
// takes it), made readable and writable by cuMemMap.
static void builtin_reduce_sum(unsigned char* a) {
  const float* in;
  float* out;
  int n;
  memcpy(&in, a, 8);
  memcpy(&out, a + 8, 8);
  memcpy(&n, a + 16, 4);
  float s = 0;
  for (int i = 0; i < n; ++i) s += in[i];
  *out = s;
}
static const fake_function g_builtins[] = {
    {"_Z10reduce_sumPKfPfi", 3, {0, 8, 16}, {8, 8, 4}, builtin_reduce_sum},
};
CUresult cuMemGetAllocationGranularity(size_t* granularity, const void* prop, int option) {
  (void)prop;
  (void)option;
  *granularity = 2 << 20;
  return 0;
}
CUresult cuMemAddressReserve(uint64_t* ptr, size_t size, size_t align, uint64_t addr,
                             unsigned long long flags) {
  (void)align;
  (void)flags;
  void* p = mmap((void*)(uintptr_t)addr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) return 2;
  *ptr = (uint64_t)(uintptr_t)p;
  return 0;
}
CUresult cuMemCreate(uint64_t* handle, size_t size, const void* prop, unsigned long long flags) {
  (void)prop;
  (void)flags;
  *handle = size;
  return 0;
}
CUresult cuMemMap(uint64_t ptr, size_t size, size_t offset, uint64_t handle, unsigned long long flags) {
  (void)offset;
  (void)handle;
  (void)flags;
  return mprotect((void*)(uintptr_t)ptr, size, PROT_READ | PROT_WRITE) == 0 ? 0 : 1;
}
CUresult cuMemSetAccess(uint64_t ptr, size_t size, const void* desc, size_t count) {
  (void)ptr;
  (void)size;
  (void)desc;
  return count == 1 ? 0 : 1;
}
CUresult cuMemAlloc_v2(uint64_t* p, size_t n) {
  void* m = malloc(n);
  *p = (uint64_t)(uintptr_t)m;
  return m ? 0 : 2;
}
CUresult cuMemcpyHtoD_v2(uint64_t dst, const void* src, size_t n) {
  memcpy((void*)(uintptr_t)dst, src, n);
  return 0;
}
CUresult cuMemcpyDtoD_v2(uint64_t dst, uint64_t src, size_t n) {
  memcpy((void*)(uintptr_t)dst, (const void*)(uintptr_t)src, n);
  return 0;
}
CUresult cuModuleLoadData(void** module, const void* image) {
  *module = (void*)image;
  return 0;
}
CUresult cuModuleGetFunction(void** f, void* module, const char* name) {
  (void)module;
  for (size_t i = 0; i < sizeof g_builtins / sizeof g_builtins[0]; ++i)
    if (strcmp(g_builtins[i].name, name) == 0) {
      *f = (void*)&g_builtins[i];
      return 0;
    }
  return 500;  // CUDA_ERROR_NOT_FOUND
}
CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void* stream, void** params, void** extra) {
  (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared, (void)stream, (void)params;
  unsigned char* block = 0;
  for (int i = 0; extra && extra[i]; i += 2)
    if (extra[i] == (void*)1) block = extra[i + 1];
  if (!block) return 1;
  ((const fake_function*)f)->run(block);
  return 0;
}
CUresult cuEventCreate(void** event, unsigned flags) {
  (void)flags;
  *event = (void*)0x1;
  return 0;
}
CUresult cuEventRecord(void* event, void* stream) {
  (void)event;
  (void)stream;
  return 0;
}
CUresult cuEventQuery(void* event) {
  (void)event;
  return 0;
}
CUresult cuEventElapsedTime(float* ms, void* start, void* stop) {
  (void)start;
  (void)stop;
  *ms = 0.002f;
  return 0;
}
