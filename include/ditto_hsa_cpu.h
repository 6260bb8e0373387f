/* ditto's CPU HSA runtime: the code-object format and how kernels execute.
 *
 * The CPU runtime (crates/hsa-cpu, built as libhsa-runtime64.so.1) runs AQL
 * kernel-dispatch packets on the host. A code object for it is an ELF shared
 * object for the host machine (x86-64), built from the kernel's source with
 * include/ditto_hip_cpu.hpp, which maps the HIP kernel language onto C++.
 *
 * Loading (as ROCr does it, from memory):
 *   hsa_code_object_reader_create_from_memory(bytes, size)  the runtime copies
 *       the bytes into a memfd (the caller may free its buffer at once);
 *   hsa_executable_load_agent_code_object   dlopen()s that memfd and calls
 *       ditto_cpu_code_object_kernels() below;
 *   hsa_executable_freeze; then each kernel is a symbol named
 *       "<mangled name>.kd" with KERNEL_OBJECT, KERNARG_SEGMENT_SIZE,
 *       KERNARG_SEGMENT_ALIGNMENT, GROUP_SEGMENT_SIZE and PRIVATE_SEGMENT_SIZE.
 *
 * Only x86-64 ELF shared objects that export ditto_cpu_code_object_kernels
 * and `uint32_t ditto_cpu_code_object_abi` equal to this header's
 * DITTO_CPU_CODE_OBJECT_ABI load (a code object of another ABI, or without
 * the word, is refused with a message on stderr naming the ABI it has and
 * the one the runtime runs: rebuild it with the current headers).
 *
 * Real AMDGPU code objects (ELF EM_AMDGPU, as hipcc and the real HIP
 * runtime's blit kernels come) load too: each kernel of the code object's
 * NT_AMDGPU_METADATA note becomes a symbol "<name>.kd" whose KERNEL_OBJECT
 * is a copy of its 64-byte kernel descriptor. Their machine code never
 * runs: CLR's blit kernels (__amd_rocclr_copyBuffer, ...) are implemented
 * natively by the runtime (crates/hsa-cpu/src/code_objects/blit_kernels.rs),
 * and every other kernel runs from a HOST BUILD of the same HIP source, a
 * code object of this format found by the kernel's mangled name in the
 * files named by DITTO_HIP_HOST_KERNELS (colon-separated), then in
 * <executable>.host.so
 * (include/ditto_hip_host/hip/hip_runtime.h says how to make one). A kernel
 * without either fails its dispatch with HSA_STATUS_ERROR_INVALID_CODE_OBJECT
 * and a message on stderr naming it and where the runtime looked; so does
 * a host build whose argument bytes differ from the code object's.
 *
 * Anything else makes hsa_executable_load_agent_code_object return
 * HSA_STATUS_ERROR_INVALID_CODE_OBJECT. The runtime dlopen()s the memfd
 * through a descriptor of its own ("/proc/self/fd/N", RTLD_NOW|RTLD_LOCAL)
 * and dlclose()s it when the executable is destroyed and no dispatch of it
 * is running.
 *
 * KERNEL_OBJECT is the address of a 64-byte descriptor owned by the runtime
 * (as on a GPU it is the address of the kernel descriptor; its first three
 * uint32_t are the group, private and kernarg segment sizes, as in AMD's
 * kernel descriptor). The packet processor accepts only addresses of
 * descriptors of live executables; any other value fails the dispatch with
 * HSA_STATUS_ERROR_INVALID_CODE_OBJECT reported to the queue's error
 * callback, never a jump to an arbitrary address.
 *
 * Executing (ABI 2): the queue's packet processor (one host thread per
 * queue) takes packets in order, honouring the barrier bit. For a dispatch
 * it numbers the work-groups linearly (x fastest: id = gx + gridDim.x *
 * (gy + gridDim.y * gz), gridDim = ceil(grid / work-group) per dimension)
 * and calls the kernel's entry once per CHUNK of consecutive groups
 * [first_group, first_group + group_count). Chunks run in parallel:
 *   - a dispatch of one group, or any dispatch when the runtime has one
 *     thread, is one chunk run inline on the processor thread (no hand-off);
 *   - otherwise the grid is split into chunks that the processor thread and
 *     the runtime's worker threads claim one at a time until none is left;
 *     the processor thread then waits for the chunks still running. Worker
 *     threads are shared by all queues (chunks of different dispatches may
 *     interleave) and never wait for anything but the next chunk, so a
 *     dispatch never waits on a thread that is itself waiting.
 * Threads that run groups: DITTO_HSA_CPU_THREADS=<n> (1 to 1024), read once
 * when the runtime first needs it; default: the machine's available
 * parallelism. n is the processor thread plus n - 1 worker threads; n = 1
 * runs every group in turn on the processor thread (ABI 1's behaviour).
 * An invalid value is reported on stderr and the default is used.
 *
 * GPU agents: DITTO_HSA_CPU_GPUS=<n> (1 to 8, default 1), read once: n
 * GPU-type agents, each with its own pools (memory of one is owned by it
 * in pointer info and IPC attachments) and queues; code objects load per
 * agent. The GPUs share the threads that run groups.
 *
 * An entry call runs its groups in turn on the calling thread; the
 * work-items of a group run as cooperative fibers on that thread, switching
 * at __syncthreads(), so barriers behave as on a GPU. A thread runs one
 * group at a time, so memory private to a thread is private to the group
 * running on it: ditto_hip_cpu.hpp makes __shared__ variables thread-local,
 * and an entry call allocates the group_segment_size bytes of dynamic group
 * memory once and gives them to each of its groups in turn. An entry must
 * therefore be safe to call from several threads at once with disjoint
 * ranges (ditto_hip_cpu.hpp's entries are). Groups of one dispatch may run
 * in any order and concurrently; a kernel that waits for ANOTHER group
 * (spinning on a flag a later group sets) may hang, as it may on a GPU
 * that does not run all groups at once.
 *
 * Cooperative launches: HSA_AMD_AGENT_INFO_COOPERATIVE_QUEUES is true, and
 * a dispatch on a queue created with HSA_QUEUE_TYPE_COOPERATIVE (where HIP
 * sends hipLaunchCooperativeKernel) runs every group at once: each group
 * is one chunk on a thread of its own, started for the dispatch, and the
 * dispatch's grid_barrier is set. A grid-wide sync is then a barrier of
 * the work-group, grid_barrier called by its first work-item, and a
 * barrier of the work-group again (how ROCm 5.2's device library does it
 * with the GPU's global wave sync). As on a GPU, every group must reach
 * every grid barrier: a group that returns early leaves the others
 * waiting. Other dispatches on a cooperative queue (CLR's copies and
 * fills) run as on any queue. CLR's __amd_rocclr_gwsInit, which HIP
 * dispatches before a cooperative kernel, does nothing here.
 *
 * When every chunk has returned, the processor records the kernel's start
 * (before the first chunk) and end (after the last) (CLOCK_MONOTONIC ns,
 * the HSA system timestamp; read them with hsa_amd_profiling_get_dispatch_
 * time on the packet's completion signal), sets the packet header back to
 * INVALID, advances the read index, and only then decrements the completion
 * signal by 1 (if it is not 0).
 *
 * Errors: a dispatch that fails (unknown KERNEL_OBJECT, or an entry call
 * that returns non-zero for any chunk: HSA_STATUS_ERROR_EXCEPTION; a grid
 * of more than 2^64 - 1 groups: HSA_STATUS_ERROR_INVALID_ARGUMENT) is
 * reported ONCE to the queue's error callback on the processor thread,
 * after every chunk has returned (the other chunks still run), and the
 * packet then completes as above and the queue goes on. This differs from a GPU, where the queue
 * would stop; it keeps waiters (and the ditto tool) from hanging.
 *
 * Barrier-AND and barrier-OR packets wait on their non-zero dependency
 * signals (value 0 = satisfied; a handle naming no live signal counts as
 * satisfied) without spinning. Packets run one at a time, in order, so the
 * barrier bit always holds.
 *
 * Fault injection (for ditto's own tests, never for real use):
 * DITTO_HSA_CPU_FAULT=stale-ipc-attach, read once per process, makes
 * hsa_amd_ipc_memory_attach serve a stale mapping of an EARLIER export,
 * as a never-closed IPC import served for a new buffer would. The process
 * remembers the export of its most recent successful attach (its memory
 * stays reachable even after the exporter freed it or exited). An attach of
 * a different handle with the same length is checked as usual (a freed or
 * exited export still fails), then returns a fresh mapping of the
 * remembered export instead of the requested one; the requested export
 * becomes the remembered one. The first attach of a process, a repeated
 * attach of the same handle and an attach of another length are correct.
 * So exports A, B, C of one length attached in that order yield the bytes
 * of A, A and B. Detach unmaps a stale mapping like any other.
 */
#ifndef DITTO_HSA_CPU_H
#define DITTO_HSA_CPU_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of this interface; a code object exports it as
 * `uint32_t ditto_cpu_code_object_abi`. History:
 *   1  the entry ran the whole grid on one thread.
 *   2  the entry runs the range of groups [first_group, first_group +
 *      group_count) it is handed; the runtime calls it from several
 *      threads at once with disjoint ranges. */
#define DITTO_CPU_CODE_OBJECT_ABI 2

/* What the runtime hands a kernel entry for one dispatch packet. */
typedef struct ditto_cpu_dispatch_s {
  uint32_t grid_size[3];      /* work-items per dimension, as in the packet */
  uint16_t workgroup_size[3]; /* work-items per group per dimension */
  uint16_t dimensions;        /* 1, 2 or 3 (packet setup field) */
  uint32_t group_segment_size;
  uint32_t private_segment_size;
  const void* kernarg;        /* kernarg bytes: parameters in declaration
                                 order at natural alignment */
  uint64_t first_group;       /* linear id of the first group to run */
  uint64_t group_count;       /* how many groups to run from first_group;
                                 first_group + group_count never exceeds the
                                 grid's group count (an entry refuses a range
                                 past it) */
  /* A cooperative launch (see "Cooperative launches"): blocks the calling
   * thread until every group of the grid has called it as often; NULL for
   * every other dispatch. An entry built before these two fields existed
   * never reads them. */
  void (*grid_barrier)(void* grid_barrier_context);
  void* grid_barrier_context;
} ditto_cpu_dispatch_t;       /* 72 bytes; kernarg at 32, first_group at 40,
                                 grid_barrier at 56 */

/* Runs the groups [first_group, first_group + group_count) of a dispatch,
 * in turn, on the calling thread; called concurrently from several threads
 * with disjoint ranges of one dispatch. Returns 0, or non-zero when a group
 * could not run (the processor reports HSA_STATUS_ERROR_EXCEPTION). */
typedef int (*ditto_cpu_kernel_entry_t)(const ditto_cpu_dispatch_t* dispatch);

/* One kernel of a code object. */
typedef struct ditto_cpu_kernel_s {
  const char* name;                  /* mangled C++ name, without ".kd" */
  uint32_t kernarg_segment_size;     /* bytes of the packed parameters */
  uint32_t kernarg_segment_alignment;
  uint32_t group_segment_size;       /* static __shared__ bytes, 0 if unknown */
  uint32_t reserved;
  ditto_cpu_kernel_entry_t entry;
} ditto_cpu_kernel_t;

/* Exported by every CPU code object: its kernels, valid while it is loaded. */
const ditto_cpu_kernel_t* ditto_cpu_code_object_kernels(uint32_t* count);

/* One device variable (`__device__`, `__constant__`) of a host build: the
 * storage the kernels of the host build read and write. */
typedef struct ditto_cpu_variable_s {
  const char* name; /* the symbol name of the variable in hipcc's code object */
  void* address;
  uint64_t size;
} ditto_cpu_variable_t;

/* Optionally exported by a host build: its device variables. The runtime
 * gives a variable symbol of an AMDGPU code object this storage, so that
 * hipMemcpyToSymbol, hipGetSymbolAddress and the kernels meet in it. */
const ditto_cpu_variable_t* ditto_cpu_code_object_variables(uint32_t* count);

#ifdef __cplusplus
}
#endif

#endif /* DITTO_HSA_CPU_H */
