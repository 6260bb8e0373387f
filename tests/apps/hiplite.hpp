// hiplite.hpp — a small HIP-like host layer over HSA, header-only, for the
// test applications in tests/apps/.
//
// It owns the application's side of the HSA runtime: initialisation, the
// GPU agent and its pools, one queue, the embedded code object, kernel
// launches and synchronisation. It uses HSA the way HIP's runtime (CLR)
// does, so that ditto's tool sees the same calls and packets it would see
// under a real HIP application (CLR 5.2's use of its queues):
//   - hipMalloc/hipFree        hsa_amd_memory_pool_allocate/free on the GPU
//                              agent's coarse-grained global pool;
//   - hipMemcpy                hsa_memory_copy, after waiting for earlier
//                              dispatches (hipMemcpy is synchronous in HIP);
//   - kernels                  code object read from memory → executable →
//                              load → freeze → symbol "<mangled>.kd" →
//                              KERNEL_OBJECT / KERNARG_SEGMENT_SIZE;
//   - hipLaunchKernelGGL       a kernel-dispatch packet WITHOUT completion
//                              signal, kernarg taken in order from one block
//                              of the kernarg pool allocated at the first
//                              launch and reused from its start after each
//                              synchronisation (CLR's managed kernarg
//                              buffer: no allocation per launch), header
//                              stored last with release semantics, doorbell
//                              rung with hsa_signal_store_screlease;
//   - hipDeviceSynchronize     a barrier-AND packet (barrier bit) carrying a
//                              completion signal set to 1, waited on with
//                              hsa_signal_wait_scacquire(LT 1).
// With HIPLITE_KERNEL_SIGNALS=1 it does what CLR does when a kernel is
// profiled (hipExtLaunchKernel with events, rocprof): the queue has
// profiling on, each dispatch carries a completion signal of its own, and
// hipliteLastKernelTime reads the kernel's start and end from that signal
// (hsa_amd_profiling_get_dispatch_time).
// At exit it waits for outstanding work, destroys what it created and calls
// hsa_shut_down (tools flush there).
//
// It never runs kernels itself and never touches a kernel's buffers except
// through the HIP calls the application makes.
//
// The application is single-source (see include/ditto_hip_cpu.hpp): in the
// device pass (-DDITTO_DEVICE_PASS) this header only provides the kernel
// language; in the host pass it also needs -DDITTO_CODE_OBJECT_PATH="\"…\""
// naming the code object built by the device pass, which it embeds with
// .incbin, and the executable must be linked with -rdynamic (kernel names
// are found with dladdr, as HIP finds them through its registered stubs).
#ifndef DITTO_HIPLITE_HPP
#define DITTO_HIPLITE_HPP

#include "ditto_hip_cpu.hpp"

#ifndef DITTO_DEVICE_PASS

#include <dlfcn.h>
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#ifndef DITTO_CODE_OBJECT_PATH
#error "hiplite.hpp (host pass): define DITTO_CODE_OBJECT_PATH as the quoted path of the code object built with -DDITTO_DEVICE_PASS"
#endif

// The application's code object, embedded at build time.
__asm__(
    ".pushsection .rodata.ditto_embedded_code_object,\"a\",@progbits\n"
    ".p2align 6\n"
    ".globl ditto_embedded_code_object\n"
    ".hidden ditto_embedded_code_object\n"
    "ditto_embedded_code_object:\n"
    ".incbin \"" DITTO_CODE_OBJECT_PATH "\"\n"
    ".globl ditto_embedded_code_object_end\n"
    ".hidden ditto_embedded_code_object_end\n"
    "ditto_embedded_code_object_end:\n"
    ".popsection\n");
extern "C" const unsigned char ditto_embedded_code_object[] __attribute__((visibility("hidden")));
extern "C" const unsigned char ditto_embedded_code_object_end[] __attribute__((visibility("hidden")));

// ───────────────────────────── HIP API subset ─────────────────────────────
typedef enum hipError_t {
  hipSuccess = 0,
  hipErrorInvalidValue = 1,
  hipErrorOutOfMemory = 2,
  hipErrorNotInitialized = 3,
  hipErrorInvalidDeviceFunction = 98,
  hipErrorNoDevice = 100,
  hipErrorInvalidImage = 200,
  hipErrorNotFound = 500,
  hipErrorLaunchFailure = 719,
  hipErrorUnknown = 999,
} hipError_t;

typedef enum hipMemcpyKind {
  hipMemcpyHostToHost = 0,
  hipMemcpyHostToDevice = 1,
  hipMemcpyDeviceToHost = 2,
  hipMemcpyDeviceToDevice = 3,
  hipMemcpyDefault = 4,
} hipMemcpyKind;

typedef struct ihipStream_t* hipStream_t;  // only the null stream exists

namespace hiplite {

// Seconds on the monotonic clock, for applications that time themselves.
inline double now_seconds() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// A kernel of the loaded executable.
struct Kernel {
  std::string symbol;  // "<mangled>.kd"
  uint64_t kernel_object = 0;
  uint32_t kernarg_segment_size = 0;
  uint32_t group_segment_size = 0;
  uint32_t private_segment_size = 0;
};

struct Runtime {
  std::mutex mutex;
  bool initialized = false;
  hipError_t init_error = hipSuccess;
  hipError_t last_error = hipSuccess;
  std::string detail;  // what the last failure was, for HIP_CHECK

  hsa_agent_t gpu{};
  hsa_agent_t cpu{};
  bool have_gpu = false;
  bool have_cpu = false;
  hsa_amd_memory_pool_t coarse_pool{};
  hsa_amd_memory_pool_t kernarg_pool{};
  hsa_amd_memory_pool_t fine_pool{};
  bool have_coarse = false, have_kernarg = false, have_fine = false;
  hsa_queue_t* queue = nullptr;
  hsa_signal_t sync_signal{};
  pid_t owner = 0;  // the process that initialised HSA (not a child forked from it)

  bool executable_loaded = false;
  hsa_code_object_reader_t reader{};
  hsa_executable_t executable{};
  std::map<const void*, Kernel> kernels;  // by host function address

  // HIPLITE_KERNEL_SCOPE=agent: kernels acquire and release at AGENT scope,
  // as HIP's CLR does by default (AMD_OPT_FLUSH=1); the barrier of a
  // synchronisation still releases at SYSTEM scope. Default: SYSTEM.
  bool agent_scope_kernels = false;
  // HIPLITE_KERNEL_SIGNALS=1: each dispatch's completion signal (one,
  // reused: a launch first waits for the previous dispatch's).
  bool kernel_signals = false;
  hsa_signal_t kernel_signal{};
  bool kernel_launched = false;
  bool work_pending = false;  // dispatches since the last synchronisation
  void* kernarg_block = nullptr;  // kKernargBlockBytes from the kernarg pool
  size_t kernarg_used = 0;        // bytes of it taken since the last synchronisation
};

// The kernarg block's size, and the alignment of each launch's arguments in it.
constexpr size_t kKernargBlockBytes = 1 << 20;
constexpr size_t kKernargAlignment = 64;

inline Runtime& runtime() {
  static Runtime instance;
  return instance;
}

inline const char* status_text(hsa_status_t status) {
  const char* text = nullptr;
  if (hsa_status_string(status, &text) != HSA_STATUS_SUCCESS || text == nullptr) return "unknown HSA status";
  return text;
}

// Records a failure (caller holds the mutex) and returns `error`.
inline hipError_t fail(Runtime& rt, hipError_t error, const std::string& what) {
  rt.last_error = error;
  rt.detail = what;
  return error;
}

inline hipError_t fail_hsa(Runtime& rt, hipError_t error, const char* call, hsa_status_t status) {
  char buffer[64];
  snprintf(buffer, sizeof buffer, " (0x%x)", static_cast<unsigned>(status));
  return fail(rt, error, std::string(call) + " failed: " + status_text(status) + buffer);
}

inline void queue_error(hsa_status_t status, hsa_queue_t* queue, void*) {
  // A queue in error runs no further packets: waiting would hang. As CLR,
  // stop the process (from the runtime's thread, so no atexit handlers).
  fprintf(stderr, "hiplite: the HSA queue %p reported an error: %s (0x%x); exiting\n", static_cast<void*>(queue),
          status_text(status), static_cast<unsigned>(status));
  fflush(stderr);
  _exit(1);
}

inline hsa_status_t find_agent(hsa_agent_t agent, void* data) {
  Runtime& rt = *static_cast<Runtime*>(data);
  hsa_device_type_t type;
  if (hsa_agent_get_info(agent, HSA_AGENT_INFO_DEVICE, &type) != HSA_STATUS_SUCCESS) return HSA_STATUS_SUCCESS;
  if (type == HSA_DEVICE_TYPE_GPU && !rt.have_gpu) {
    rt.gpu = agent;
    rt.have_gpu = true;
  } else if (type == HSA_DEVICE_TYPE_CPU && !rt.have_cpu) {
    rt.cpu = agent;
    rt.have_cpu = true;
  }
  return HSA_STATUS_SUCCESS;
}

struct PoolSearch {
  Runtime* rt;
  bool gpu_agent;
};

inline hsa_status_t find_pool(hsa_amd_memory_pool_t pool, void* data) {
  PoolSearch& search = *static_cast<PoolSearch*>(data);
  Runtime& rt = *search.rt;
  hsa_amd_segment_t segment;
  uint32_t flags = 0;
  bool alloc_allowed = false;
  if (hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &segment) != HSA_STATUS_SUCCESS ||
      segment != HSA_AMD_SEGMENT_GLOBAL)
    return HSA_STATUS_SUCCESS;
  if (hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags) != HSA_STATUS_SUCCESS)
    return HSA_STATUS_SUCCESS;
  if (hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED, &alloc_allowed) !=
          HSA_STATUS_SUCCESS ||
      !alloc_allowed)
    return HSA_STATUS_SUCCESS;
  if (search.gpu_agent) {
    if ((flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED) && !rt.have_coarse) {
      rt.coarse_pool = pool;
      rt.have_coarse = true;
    }
  } else {
    if ((flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT) && !rt.have_kernarg) {
      rt.kernarg_pool = pool;
      rt.have_kernarg = true;
    }
    if ((flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED) && !rt.have_fine) {
      rt.fine_pool = pool;
      rt.have_fine = true;
    }
  }
  return HSA_STATUS_SUCCESS;
}

inline void shutdown_at_exit();

// hsa_init, agents, pools, queue, synchronisation signal (caller holds the mutex).
// ROCm 10's queue-creation descriptor (hsa_amd_queue_create, in no header
// up to 7.2.4): the layout of rocm-systems' develop hsa_ext_amd.h
// (crates/hsa/src/queue_create.rs pins the same offsets).
struct QueueCreateDesc {
  uint16_t version;
  uint16_t flags;
  uint8_t engine_type;
  uint8_t reserved_header[3];
  uint32_t queue_size_bytes;
  uint32_t priority;
  void (*callback)(hsa_status_t, hsa_queue_t*, void*);
  void* callback_data;
  hsa_queue_t* queue;
  const uint32_t* cu_mask;
  uint32_t type;
  uint32_t private_segment_size;
  uint32_t cu_mask_count;
  uint32_t compute_reserved[3];
  uint32_t traffic_class;
  uint8_t reserved[20];
};
static_assert(sizeof(QueueCreateDesc) == 96, "hsa_amd_queue_create_desc_t is 96 bytes");
static_assert(offsetof(QueueCreateDesc, queue) == 32 && offsetof(QueueCreateDesc, type) == 48 &&
                  offsetof(QueueCreateDesc, traffic_class) == 72,
              "hsa_amd_queue_create_desc_t layout");

// The application's compute queue of 4096 packets, created as HIP of the
// runtime's release creates it: through hsa_amd_queue_create, one compute
// descriptor, where the runtime has it (ROCm 10), else hsa_queue_create
// (the CPU runtime serving an earlier ABI exports the symbol but answers
// with an error, as an entry that release does not have).
inline hsa_status_t create_compute_queue(Runtime& rt) {
  using BatchCreate = hsa_status_t (*)(hsa_agent_t, QueueCreateDesc*, uint32_t);
  auto batch = reinterpret_cast<BatchCreate>(dlsym(RTLD_DEFAULT, "hsa_amd_queue_create"));
  if (batch) {
    QueueCreateDesc d;
    memset(&d, 0, sizeof d);
    d.version = 1;
    d.queue_size_bytes = 4096 * 64;
    d.priority = 1;  // HSA_AMD_QUEUE_PRIORITY_NORMAL
    d.callback = queue_error;
    d.type = HSA_QUEUE_TYPE_MULTI;
    d.private_segment_size = UINT32_MAX;
    if (batch(rt.gpu, &d, 1) == HSA_STATUS_SUCCESS && d.queue) {
      rt.queue = d.queue;
      return HSA_STATUS_SUCCESS;
    }
  }
  return hsa_queue_create(rt.gpu, 4096, HSA_QUEUE_TYPE_MULTI, queue_error, nullptr, UINT32_MAX, UINT32_MAX,
                          &rt.queue);
}

inline hipError_t ensure_initialized(Runtime& rt) {
  if (rt.initialized) return hipSuccess;
  if (rt.init_error != hipSuccess) return fail(rt, rt.init_error, rt.detail);
  auto init_failed = [&rt](hipError_t error) {
    rt.init_error = error;
    return error;
  };
  const char* scope = getenv("HIPLITE_KERNEL_SCOPE");
  rt.agent_scope_kernels = scope != nullptr && strcmp(scope, "agent") == 0;
  hsa_status_t status = hsa_init();
  if (status != HSA_STATUS_SUCCESS) return init_failed(fail_hsa(rt, hipErrorNotInitialized, "hsa_init", status));
  status = hsa_iterate_agents(find_agent, &rt);
  if (status != HSA_STATUS_SUCCESS)
    return init_failed(fail_hsa(rt, hipErrorNoDevice, "hsa_iterate_agents", status));
  if (!rt.have_gpu)
    return init_failed(fail(rt, hipErrorNoDevice, "no GPU agent: is LD_LIBRARY_PATH pointing at an HSA runtime "
                                                   "with a GPU agent (ditto's CPU runtime has one)?"));
  if (!rt.have_cpu) return init_failed(fail(rt, hipErrorNoDevice, "no CPU agent (needed for the kernarg pool)"));
  PoolSearch gpu_search{&rt, true};
  status = hsa_amd_agent_iterate_memory_pools(rt.gpu, find_pool, &gpu_search);
  if (status != HSA_STATUS_SUCCESS)
    return init_failed(fail_hsa(rt, hipErrorNoDevice, "hsa_amd_agent_iterate_memory_pools(GPU)", status));
  PoolSearch cpu_search{&rt, false};
  status = hsa_amd_agent_iterate_memory_pools(rt.cpu, find_pool, &cpu_search);
  if (status != HSA_STATUS_SUCCESS)
    return init_failed(fail_hsa(rt, hipErrorNoDevice, "hsa_amd_agent_iterate_memory_pools(CPU)", status));
  if (!rt.have_coarse) return init_failed(fail(rt, hipErrorNoDevice, "the GPU agent has no coarse-grained global pool"));
  if (!rt.have_kernarg) {
    if (!rt.have_fine)
      return init_failed(fail(rt, hipErrorNoDevice, "the CPU agent has neither a kernarg nor a fine-grained pool"));
    rt.kernarg_pool = rt.fine_pool;
    rt.have_kernarg = true;
  }
  status = create_compute_queue(rt);
  if (status != HSA_STATUS_SUCCESS)
    return init_failed(fail_hsa(rt, hipErrorOutOfMemory, "hsa_queue_create", status));
  status = hsa_signal_create(1, 0, nullptr, &rt.sync_signal);
  if (status != HSA_STATUS_SUCCESS)
    return init_failed(fail_hsa(rt, hipErrorOutOfMemory, "hsa_signal_create", status));
  const char* kernel_signals = getenv("HIPLITE_KERNEL_SIGNALS");
  rt.kernel_signals = kernel_signals != nullptr && strcmp(kernel_signals, "1") == 0;
  if (rt.kernel_signals) {
    status = hsa_signal_create(0, 0, nullptr, &rt.kernel_signal);
    if (status != HSA_STATUS_SUCCESS)
      return init_failed(fail_hsa(rt, hipErrorOutOfMemory, "hsa_signal_create(kernel signal)", status));
    status = hsa_amd_profiling_set_profiler_enabled(rt.queue, 1);
    if (status != HSA_STATUS_SUCCESS)
      return init_failed(fail_hsa(rt, hipErrorNotInitialized, "hsa_amd_profiling_set_profiler_enabled", status));
  }
  rt.initialized = true;
  rt.owner = getpid();
  atexit(shutdown_at_exit);
  return hipSuccess;
}

// Reserves one packet slot and returns it (the caller fills the body, then
// publishes the header with publish_packet).
inline void* reserve_packet(Runtime& rt, uint64_t* index) {
  hsa_queue_t* q = rt.queue;
  *index = hsa_queue_add_write_index_screlease(q, 1);
  while (*index - hsa_queue_load_read_index_scacquire(q) >= q->size) sched_yield();
  return static_cast<char*>(q->base_address) + (*index & (q->size - 1)) * 64;
}

// Stores the packet's first 32 bits (header + setup/reserved) last, with
// release, then rings the doorbell as CLR does.
inline void publish_packet(Runtime& rt, void* packet, uint64_t index, uint16_t header, uint16_t rest) {
  __atomic_store_n(static_cast<uint32_t*>(packet), static_cast<uint32_t>(header) | (static_cast<uint32_t>(rest) << 16),
                   __ATOMIC_RELEASE);
  hsa_signal_store_screlease(rt.queue->doorbell_signal, static_cast<hsa_signal_value_t>(index));
}

constexpr uint16_t header_for(hsa_packet_type_t type) {
  return static_cast<uint16_t>((type << HSA_PACKET_HEADER_TYPE) | (1 << HSA_PACKET_HEADER_BARRIER) |
                               (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) |
                               (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE));
}

// Writes one packet into the next slot of `q` as several threads of an
// application may at once (as CLR does): slot reserved with
// add_write_index, body written, header stored last with release, doorbell
// rung with the slot's index. Waits while the ring is full.
inline void submit_to(hsa_queue_t* q, const void* body, uint16_t header, uint16_t rest) {
  const uint64_t index = hsa_queue_add_write_index_screlease(q, 1);
  while (index - hsa_queue_load_read_index_scacquire(q) >= q->size) sched_yield();
  void* slot = static_cast<char*>(q->base_address) + (index & (q->size - 1)) * 64;
  memcpy(static_cast<char*>(slot) + 4, static_cast<const char*>(body) + 4, 60);
  __atomic_store_n(static_cast<uint32_t*>(slot), static_cast<uint32_t>(header) | (static_cast<uint32_t>(rest) << 16),
                   __ATOMIC_RELEASE);
  hsa_signal_store_screlease(q->doorbell_signal, static_cast<hsa_signal_value_t>(index));
}

// Barrier-AND packet with a completion signal, then wait for it (caller holds the mutex).
inline hipError_t synchronize(Runtime& rt) {
  if (!rt.initialized) return hipSuccess;
  hsa_signal_store_relaxed(rt.sync_signal, 1);
  uint64_t index;
  auto* packet = static_cast<hsa_barrier_and_packet_t*>(reserve_packet(rt, &index));
  packet->reserved1 = 0;
  for (hsa_signal_t& dep : packet->dep_signal) dep.handle = 0;
  packet->reserved2 = 0;
  packet->completion_signal = rt.sync_signal;
  publish_packet(rt, packet, index, header_for(HSA_PACKET_TYPE_BARRIER_AND), 0);
  while (hsa_signal_wait_scacquire(rt.sync_signal, HSA_SIGNAL_CONDITION_LT, 1, UINT64_MAX, HSA_WAIT_STATE_BLOCKED) >=
         1) {
  }
  rt.work_pending = false;
  rt.kernarg_used = 0;  // every dispatch that read its arguments has ended
  return hipSuccess;
}

inline void shutdown_at_exit() {
  Runtime& rt = runtime();
  // A child forked without exec inherits this handler but not the runtime's
  // threads (on ROCr the runtime is not usable there): it tears nothing
  // down, and takes no lock another thread may have held at the fork.
  if (rt.owner != getpid()) return;
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (!rt.initialized) return;
  if (rt.work_pending) synchronize(rt);
  if (rt.executable_loaded) {
    hsa_executable_destroy(rt.executable);
    hsa_code_object_reader_destroy(rt.reader);
    rt.executable_loaded = false;
  }
  if (rt.kernarg_block != nullptr) {
    hsa_amd_memory_pool_free(rt.kernarg_block);
    rt.kernarg_block = nullptr;
  }
  hsa_signal_destroy(rt.sync_signal);
  if (rt.kernel_signals) {
    hsa_signal_wait_scacquire(rt.kernel_signal, HSA_SIGNAL_CONDITION_LT, 1, UINT64_MAX, HSA_WAIT_STATE_BLOCKED);
    hsa_signal_destroy(rt.kernel_signal);
  }
  hsa_queue_destroy(rt.queue);
  rt.initialized = false;
  hsa_status_t status = hsa_shut_down();
  if (status != HSA_STATUS_SUCCESS) fprintf(stderr, "hiplite: hsa_shut_down failed: %s\n", status_text(status));
}

// Loads the embedded code object on first use, as CLR does (caller holds the mutex).
inline hipError_t ensure_executable(Runtime& rt) {
  if (rt.executable_loaded) return hipSuccess;
  const size_t size = static_cast<size_t>(ditto_embedded_code_object_end - ditto_embedded_code_object);
  hsa_status_t status = hsa_code_object_reader_create_from_memory(ditto_embedded_code_object, size, &rt.reader);
  if (status != HSA_STATUS_SUCCESS)
    return fail_hsa(rt, hipErrorInvalidImage, "hsa_code_object_reader_create_from_memory", status);
  status = hsa_executable_create_alt(HSA_PROFILE_FULL, HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT, nullptr,
                                     &rt.executable);
  if (status != HSA_STATUS_SUCCESS) {
    hsa_code_object_reader_destroy(rt.reader);
    return fail_hsa(rt, hipErrorInvalidImage, "hsa_executable_create_alt", status);
  }
  status = hsa_executable_load_agent_code_object(rt.executable, rt.gpu, rt.reader, nullptr, nullptr);
  if (status == HSA_STATUS_SUCCESS) status = hsa_executable_freeze(rt.executable, nullptr);
  if (status != HSA_STATUS_SUCCESS) {
    hsa_executable_destroy(rt.executable);
    hsa_code_object_reader_destroy(rt.reader);
    return fail_hsa(rt, hipErrorInvalidImage, "loading the embedded code object " DITTO_CODE_OBJECT_PATH, status);
  }
  rt.executable_loaded = true;
  return hipSuccess;
}

// Finds (once) the kernel of a host function: its mangled name through
// dladdr, then the "<mangled>.kd" symbol of the executable (caller holds the mutex).
inline hipError_t find_kernel(Runtime& rt, const void* function, const Kernel** out) {
  auto found = rt.kernels.find(function);
  if (found != rt.kernels.end()) {
    *out = &found->second;
    return hipSuccess;
  }
  Dl_info info;
  if (dladdr(function, &info) == 0 || info.dli_sname == nullptr || info.dli_saddr != function) {
    char buffer[160];
    snprintf(buffer, sizeof buffer,
             "the kernel function at %p has no dynamic symbol: link the host executable with -rdynamic", function);
    return fail(rt, hipErrorInvalidDeviceFunction, buffer);
  }
  Kernel kernel;
  kernel.symbol = std::string(info.dli_sname) + ".kd";
  hsa_executable_symbol_t symbol;
  hsa_status_t status = hsa_executable_get_symbol_by_name(rt.executable, kernel.symbol.c_str(), &rt.gpu, &symbol);
  if (status != HSA_STATUS_SUCCESS)
    return fail_hsa(rt, hipErrorInvalidDeviceFunction,
                    ("hsa_executable_get_symbol_by_name(\"" + kernel.symbol + "\") — is the kernel registered "
                     "with DITTO_KERNEL? —")
                        .c_str(),
                    status);
  status = hsa_executable_symbol_get_info(symbol, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT, &kernel.kernel_object);
  if (status != HSA_STATUS_SUCCESS)
    return fail_hsa(rt, hipErrorInvalidDeviceFunction, "hsa_executable_symbol_get_info(KERNEL_OBJECT)", status);
  status = hsa_executable_symbol_get_info(symbol, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE,
                                          &kernel.kernarg_segment_size);
  if (status != HSA_STATUS_SUCCESS)
    return fail_hsa(rt, hipErrorInvalidDeviceFunction, "hsa_executable_symbol_get_info(KERNARG_SEGMENT_SIZE)",
                    status);
  // CLR reads these from the code object's metadata; they are optional here.
  if (hsa_executable_symbol_get_info(symbol, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE,
                                     &kernel.group_segment_size) != HSA_STATUS_SUCCESS)
    kernel.group_segment_size = 0;
  if (hsa_executable_symbol_get_info(symbol, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE,
                                     &kernel.private_segment_size) != HSA_STATUS_SUCCESS)
    kernel.private_segment_size = 0;
  *out = &rt.kernels.emplace(function, kernel).first->second;
  return hipSuccess;
}

// Writes one kernel-dispatch packet (no completion signal).
inline hipError_t launch(const void* function, dim3 grid, dim3 block, uint32_t shared_bytes, hipStream_t stream,
                         const unsigned char* args, size_t args_size) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (hipError_t e = ensure_initialized(rt)) return e;
  if (stream != nullptr) return fail(rt, hipErrorInvalidValue, "hiplite has only the null stream");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0 ||
      static_cast<uint64_t>(block.x) * block.y * block.z > 1024)
    return fail(rt, hipErrorInvalidValue, "invalid launch geometry (empty grid or more than 1024 threads per block)");
  const uint64_t gx = static_cast<uint64_t>(grid.x) * block.x, gy = static_cast<uint64_t>(grid.y) * block.y,
                 gz = static_cast<uint64_t>(grid.z) * block.z;
  if (gx > UINT32_MAX || gy > UINT32_MAX || gz > UINT32_MAX)
    return fail(rt, hipErrorInvalidValue, "grid too large: more than 2^32-1 work-items in one dimension");
  if (hipError_t e = ensure_executable(rt)) return e;
  const Kernel* kernel = nullptr;
  if (hipError_t e = find_kernel(rt, function, &kernel)) return e;
  if (args_size > kernel->kernarg_segment_size) {
    char buffer[256];
    snprintf(buffer, sizeof buffer, "%s: the arguments take %zu bytes but the kernel's kernarg segment is %u",
             kernel->symbol.c_str(), args_size, kernel->kernarg_segment_size);
    return fail(rt, hipErrorInvalidValue, buffer);
  }

  const size_t kernarg_size = kernel->kernarg_segment_size < 16 ? 16 : kernel->kernarg_segment_size;
  if (kernarg_size > kKernargBlockBytes) {
    char buffer[256];
    snprintf(buffer, sizeof buffer, "%s: a kernarg segment of %zu bytes exceeds hiplite's kernarg block (%zu bytes)",
             kernel->symbol.c_str(), kernarg_size, kKernargBlockBytes);
    return fail(rt, hipErrorInvalidValue, buffer);
  }
  if (rt.kernarg_block == nullptr) {
    hsa_status_t status = hsa_amd_memory_pool_allocate(rt.kernarg_pool, kKernargBlockBytes, 0, &rt.kernarg_block);
    if (status != HSA_STATUS_SUCCESS) {
      rt.kernarg_block = nullptr;
      return fail_hsa(rt, hipErrorOutOfMemory, "hsa_amd_memory_pool_allocate(kernarg pool)", status);
    }
  }
  size_t at = (rt.kernarg_used + kKernargAlignment - 1) & ~(kKernargAlignment - 1);
  if (at + kernarg_size > kKernargBlockBytes) {
    // The block is full: wait for the dispatches reading it, then start over.
    if (hipError_t e = synchronize(rt)) return e;
    at = 0;
  }
  void* kernarg = static_cast<unsigned char*>(rt.kernarg_block) + at;
  rt.kernarg_used = at + kernarg_size;
  memset(kernarg, 0, kernarg_size);
  if (args_size > 0) memcpy(kernarg, args, args_size);

  uint64_t index;
  auto* packet = static_cast<hsa_kernel_dispatch_packet_t*>(reserve_packet(rt, &index));
  const uint16_t dimensions = gz > 1 ? 3 : gy > 1 ? 2 : 1;
  packet->workgroup_size_x = static_cast<uint16_t>(block.x);
  packet->workgroup_size_y = static_cast<uint16_t>(block.y);
  packet->workgroup_size_z = static_cast<uint16_t>(block.z);
  packet->reserved0 = 0;
  packet->grid_size_x = static_cast<uint32_t>(gx);
  packet->grid_size_y = static_cast<uint32_t>(gy);
  packet->grid_size_z = static_cast<uint32_t>(gz);
  packet->private_segment_size = kernel->private_segment_size;
  packet->group_segment_size = kernel->group_segment_size + shared_bytes;
  packet->kernel_object = kernel->kernel_object;
  packet->kernarg_address = kernarg;
  packet->reserved2 = 0;
  packet->completion_signal.handle = 0;  // as CLR: completion is observed through a later barrier
  if (rt.kernel_signals) {
    while (hsa_signal_wait_scacquire(rt.kernel_signal, HSA_SIGNAL_CONDITION_LT, 1, UINT64_MAX,
                                     HSA_WAIT_STATE_BLOCKED) >= 1) {
    }
    hsa_signal_store_relaxed(rt.kernel_signal, 1);
    packet->completion_signal = rt.kernel_signal;
    rt.kernel_launched = true;
  }
  const uint16_t agent_scope = static_cast<uint16_t>(
      (HSA_PACKET_TYPE_KERNEL_DISPATCH << HSA_PACKET_HEADER_TYPE) | (1 << HSA_PACKET_HEADER_BARRIER) |
      (HSA_FENCE_SCOPE_AGENT << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) |
      (HSA_FENCE_SCOPE_AGENT << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE));
  publish_packet(rt, packet, index,
                 rt.agent_scope_kernels ? agent_scope : header_for(HSA_PACKET_TYPE_KERNEL_DISPATCH),
                 static_cast<uint16_t>(dimensions << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS));
  rt.work_pending = true;
  return hipSuccess;
}

}  // namespace hiplite

inline const char* hipGetErrorString(hipError_t error) {
  switch (error) {
    case hipSuccess: return "hipSuccess";
    case hipErrorInvalidValue: return "hipErrorInvalidValue";
    case hipErrorOutOfMemory: return "hipErrorOutOfMemory";
    case hipErrorNotInitialized: return "hipErrorNotInitialized";
    case hipErrorInvalidDeviceFunction: return "hipErrorInvalidDeviceFunction";
    case hipErrorNoDevice: return "hipErrorNoDevice";
    case hipErrorInvalidImage: return "hipErrorInvalidImage";
    case hipErrorNotFound: return "hipErrorNotFound";
    case hipErrorLaunchFailure: return "hipErrorLaunchFailure";
    case hipErrorUnknown: return "hipErrorUnknown";
  }
  return "unknown hipError_t";
}

// What the last failing call was about (HSA call and status), or "".
inline const char* hipliteErrorDetail() { return hiplite::runtime().detail.c_str(); }

// With HIPLITE_KERNEL_SIGNALS=1: waits for the last dispatch and gives its
// start and end as the runtime recorded them on its completion signal, in
// ticks of HSA_SYSTEM_INFO_TIMESTAMP.
inline hipError_t hipliteLastKernelTime(uint64_t* start, uint64_t* end) {
  hiplite::Runtime& rt = hiplite::runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (!rt.kernel_signals || !rt.kernel_launched)
    return hiplite::fail(rt, hipErrorInvalidValue, "no kernel launched with HIPLITE_KERNEL_SIGNALS=1");
  while (hsa_signal_wait_scacquire(rt.kernel_signal, HSA_SIGNAL_CONDITION_LT, 1, UINT64_MAX,
                                   HSA_WAIT_STATE_BLOCKED) >= 1) {
  }
  hsa_amd_profiling_dispatch_time_t time{};
  hsa_status_t status = hsa_amd_profiling_get_dispatch_time(rt.gpu, rt.kernel_signal, &time);
  if (status != HSA_STATUS_SUCCESS)
    return hiplite::fail_hsa(rt, hipErrorUnknown, "hsa_amd_profiling_get_dispatch_time", status);
  *start = time.start;
  *end = time.end;
  return hipSuccess;
}

inline hipError_t hipGetLastError() {
  hiplite::Runtime& rt = hiplite::runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  hipError_t error = rt.last_error;
  rt.last_error = hipSuccess;
  return error;
}

inline hipError_t hipPeekAtLastError() {
  hiplite::Runtime& rt = hiplite::runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  return rt.last_error;
}

inline hipError_t hipInit(unsigned int) {
  hiplite::Runtime& rt = hiplite::runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  return hiplite::ensure_initialized(rt);
}

inline hipError_t hipGetDeviceCount(int* count) {
  if (count == nullptr) return hipErrorInvalidValue;
  hiplite::Runtime& rt = hiplite::runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (hipError_t e = hiplite::ensure_initialized(rt)) return e;
  *count = 1;
  return hipSuccess;
}

inline hipError_t hipMalloc(void** ptr, size_t size) {
  hiplite::Runtime& rt = hiplite::runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (ptr == nullptr) return hiplite::fail(rt, hipErrorInvalidValue, "hipMalloc: null result pointer");
  *ptr = nullptr;
  if (hipError_t e = hiplite::ensure_initialized(rt)) return e;
  if (size == 0) return hipSuccess;
  hsa_status_t status = hsa_amd_memory_pool_allocate(rt.coarse_pool, size, 0, ptr);
  if (status != HSA_STATUS_SUCCESS)
    return hiplite::fail_hsa(rt, hipErrorOutOfMemory, "hsa_amd_memory_pool_allocate(coarse pool)", status);
  return hipSuccess;
}

template <typename T>
inline hipError_t hipMalloc(T** ptr, size_t size) {
  return hipMalloc(reinterpret_cast<void**>(ptr), size);
}

inline hipError_t hipHostMalloc(void** ptr, size_t size, unsigned int = 0) {
  hiplite::Runtime& rt = hiplite::runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (ptr == nullptr) return hiplite::fail(rt, hipErrorInvalidValue, "hipHostMalloc: null result pointer");
  *ptr = nullptr;
  if (hipError_t e = hiplite::ensure_initialized(rt)) return e;
  if (!rt.have_fine) return hiplite::fail(rt, hipErrorOutOfMemory, "hipHostMalloc: no fine-grained pool");
  if (size == 0) return hipSuccess;
  hsa_status_t status = hsa_amd_memory_pool_allocate(rt.fine_pool, size, 0, ptr);
  if (status != HSA_STATUS_SUCCESS)
    return hiplite::fail_hsa(rt, hipErrorOutOfMemory, "hsa_amd_memory_pool_allocate(fine-grained pool)", status);
  return hipSuccess;
}

// hipFree and hipHostFree wait for outstanding work first, as HIP does.
inline hipError_t hipFree(void* ptr) {
  hiplite::Runtime& rt = hiplite::runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (ptr == nullptr) return hipSuccess;
  if (hipError_t e = hiplite::ensure_initialized(rt)) return e;
  if (rt.work_pending) {
    if (hipError_t e = hiplite::synchronize(rt)) return e;
  }
  hsa_status_t status = hsa_amd_memory_pool_free(ptr);
  if (status != HSA_STATUS_SUCCESS)
    return hiplite::fail_hsa(rt, hipErrorInvalidValue, "hsa_amd_memory_pool_free", status);
  return hipSuccess;
}

inline hipError_t hipHostFree(void* ptr) { return hipFree(ptr); }

// Synchronous copy: waits for earlier dispatches, then hsa_memory_copy.
inline hipError_t hipMemcpy(void* dst, const void* src, size_t size, hipMemcpyKind kind) {
  hiplite::Runtime& rt = hiplite::runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (size == 0) return hipSuccess;
  if (dst == nullptr || src == nullptr) return hiplite::fail(rt, hipErrorInvalidValue, "hipMemcpy: null pointer");
  if (kind == hipMemcpyHostToHost) {
    memcpy(dst, src, size);
    return hipSuccess;
  }
  if (hipError_t e = hiplite::ensure_initialized(rt)) return e;
  if (rt.work_pending) {
    if (hipError_t e = hiplite::synchronize(rt)) return e;
  }
  hsa_status_t status = hsa_memory_copy(dst, src, size);
  if (status != HSA_STATUS_SUCCESS) return hiplite::fail_hsa(rt, hipErrorInvalidValue, "hsa_memory_copy", status);
  return hipSuccess;
}

inline hipError_t hipMemset(void* dst, int value, size_t size) {
  if (size == 0) return hipSuccess;
  std::vector<unsigned char> bytes(size, static_cast<unsigned char>(value));
  return hipMemcpy(dst, bytes.data(), size, hipMemcpyHostToDevice);
}

inline hipError_t hipDeviceSynchronize() {
  hiplite::Runtime& rt = hiplite::runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (hipError_t e = hiplite::ensure_initialized(rt)) return e;
  return hiplite::synchronize(rt);
}

// hipLaunchKernelGGL(kernel, grid, block, shared bytes, stream, args...):
// converts each argument to the kernel's parameter type (as HIP does), packs
// them at natural alignment in declaration order, and dispatches. Errors are
// reported through hipGetLastError(), as in HIP.
template <typename... Params, typename... Args>
inline void hipLaunchKernelGGL(void (*kernel)(Params...), dim3 grid, dim3 block, uint32_t shared_bytes,
                               hipStream_t stream, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "hipLaunchKernelGGL: wrong number of kernel arguments");
  using Layout = ::ditto::detail::KernargLayout<std::decay_t<Params>...>;
  std::tuple<std::decay_t<Params>...> values(static_cast<std::decay_t<Params>>(std::forward<Args>(args))...);
  constexpr size_t size = Layout::size();
  unsigned char bytes[size == 0 ? 1 : size] = {};
  constexpr auto offsets = Layout::offsets();
  size_t i = 0;
  std::apply(
      [&](const auto&... value) {
        ((memcpy(bytes + offsets.at[i], &value, sizeof(value)), ++i), ...);
      },
      values);
  hipError_t error =
      hiplite::launch(reinterpret_cast<const void*>(kernel), grid, block, shared_bytes, stream, bytes, size);
  (void)error;  // kept in the runtime's last_error
}

// Runs a HIP call; on failure prints the call, the error and what failed, and exits 1.
#define HIP_CHECK(call)                                                                                      \
  do {                                                                                                       \
    hipError_t hip_check_error_ = (call);                                                                    \
    if (hip_check_error_ != hipSuccess) {                                                                    \
      fprintf(stderr, "%s:%d: %s failed: %s (%d): %s\n", __FILE__, __LINE__, #call,                          \
              hipGetErrorString(hip_check_error_), static_cast<int>(hip_check_error_), hipliteErrorDetail()); \
      exit(1);                                                                                               \
    }                                                                                                        \
  } while (0)

#endif  // DITTO_DEVICE_PASS

#endif  // DITTO_HIPLITE_HPP
