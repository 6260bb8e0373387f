// ditto_hip_cpu.hpp — the HIP kernel language on the CPU, for g++ (C++17).
//
// This header is the public description of how a HIP kernel runs on ditto's
// CPU HSA runtime (crates/hsa-cpu). Read it together with ditto_hsa_cpu.h,
// which fixes the code-object format (exported symbols, kernel table, entry
// signature). It owns: the kernel-language keywords and built-ins, the
// kernel registration (DITTO_KERNEL), the generated kernel entries, and the
// work-group scheduler (fibers). It never talks to the HSA runtime and
// never allocates device memory: it only runs the kernels it is handed.
//
// ───────────────────────────── Single-source model ─────────────────────────
// An application is ONE C++ file compiled twice:
//
//   device pass:  g++ -std=c++17 -O2 -fPIC -shared -DDITTO_DEVICE_PASS
//                     -fno-gnu-unique -Wl,-Bsymbolic app.cpp -o app.co
//                 → the CPU code object (an x86-64 ELF shared object).
//   host pass:    g++ -std=c++17 -O2 -rdynamic app.cpp -lhsa-runtime64
//                 → the host executable, with app.co embedded in it
//                   (tests/apps/hiplite.hpp does the embedding and launches).
//
// Kernels are compiled in both passes; they only ever RUN in the code object,
// called by the runtime. Host code sits under `#ifndef DITTO_DEVICE_PASS`.
// In the host pass the kernel functions exist only so that the host layer
// can take their address and find their mangled names (dladdr; hence
// -rdynamic), exactly as HIP finds a kernel by its host-side stub.
//
// Why -Bsymbolic and -fno-gnu-unique for the code object: the host
// executable exports functions with the SAME mangled names as the code
// object's kernels. Without -Bsymbolic the dynamic linker would bind the
// code object's references to the executable's copies; without
// -fno-gnu-unique, static locals of template kernels (e.g. their __shared__
// arrays) would become process-wide unique symbols shared between objects.
// Everything else in this header has internal linkage, so each object has
// its own scheduler state.
//
// ───────────────────────────── Registration ───────────────────────────────
//     template <typename T>
//     __global__ void scale_values(T* in, T* out, T factor, int n) { ... }
//     DITTO_KERNEL(scale_values<float>)
//     DITTO_KERNEL(scale_values<double>)
//
// In the device pass DITTO_KERNEL(fn) places one descriptor in the ELF
// section `ditto_kernels` (no static constructor: the descriptor is
// initialised data with relocations; the linker's __start_/__stop_ditto_kernels symbols
// delimit the table). The descriptor holds the kernel's address, its
// generated entry and its kernarg layout. In the host pass it expands to
// nothing. Every kernel must be registered in the pass that builds the code
// object; a kernel that is not registered does not exist for the runtime.
//
// ditto_cpu_code_object_kernels() (defined here, device pass only) builds
// the ditto_cpu_kernel_t table on first call; each `name` is the dynamic
// symbol of the kernel function found with dladdr(), i.e. the Itanium
// mangled name hipcc would give the kernel: `reduce_sum` is
// `_Z10reduce_sumPKfPfi`, `scale_values<float>` is
// `_Z12scale_valuesIfEvPT_S1_S0_i`. Kernels must therefore have external
// linkage and default visibility (__global__ sets it). extern "C" kernels
// get their plain name. The order of the table is unspecified (it follows
// the section, which the compiler may fill in any order); the runtime looks
// kernels up by name.
//
// ───────────────────────────── Kernel arguments ───────────────────────────
// Kernarg bytes are the parameters in declaration order, each at its natural
// alignment (alignof of the parameter type), with no hidden arguments — the
// same explicit-argument layout hipcc emits. kernarg_segment_size is the end
// of the last parameter (scale_values<double>: 0, 8, 16, 24 → 28 bytes);
// kernarg_segment_alignment is max(16, largest parameter alignment), the
// HSA minimum. Parameters must be trivially copyable (as on a GPU: they are
// copied bytes). Each work-item gets its own copy of the parameters.
//
// ───────────────────────────── Execution ──────────────────────────────────
// The runtime calls the entry once per chunk of a dispatch packet (code-object
// ABI 2, ditto_hsa_cpu.h): the range of linearly numbered groups
// [first_group, first_group + group_count), x fastest; chunks of one dispatch
// run concurrently on several threads. The entry:
//   1. copies each parameter out of the kernarg bytes;
//   2. walks the groups of its range in linear order (gridDim = ceil(grid /
//      group) per dimension); the last group of a dimension may be partial,
//      as on a GPU: it runs only the work-items inside the grid. blockDim
//      always reports the packet's work-group size (what HIP launches always
//      have, since a HIP grid is a whole number of groups). A range that
//      ends past the grid's last group runs nothing and returns
//      DITTO_CPU_ENTRY_BAD_RANGE;
//   3. runs the work-items of a group as cooperative fibers on the calling
//      thread, in threadIdx order (x fastest). A fiber runs until it
//      finishes or reaches __syncthreads(); when every unfinished work-item
//      of the group has reached the barrier, all of them continue. (As on
//      AMD hardware, work-items that have finished do not hold the barrier.)
//      When the work-group size is ONE work-item, each group runs as a
//      plain call: __syncthreads() is then a no-op, which is provably
//      equivalent (no other work-item can be waited for).
//   4. returns 0, or a non-zero DITTO_CPU_ENTRY_* code when the dispatch
//      could not run (the runtime then reports HSA_STATUS_ERROR_EXCEPTION).
//
// Fibers: each work-item has its own stack (DITTO_FIBER_STACK_BYTES, 64 KiB
// by default, define it before including this header to change it) with a
// PROT_NONE guard page below it, so an overflow faults instead of corrupting
// a neighbour. The stacks are mmap'd once (lazily committed by the kernel)
// and reused by every group of an entry call's range and by later entry
// calls (a per-code-object free list of stack sets; see StackSet). Switching is
// a dozen instructions (ditto_fiber_switch_v1 below: callee-saved registers
// rbx, rbp, r12–r15, the stack pointer, MXCSR and the x87 control word); no
// system call, unlike glibc's swapcontext.
//
// Memory model: __shared__ variables are `static thread_local`: one copy per
// OS thread, and an OS thread runs one group at a time, so each group sees
// its own shared memory, never that of a group running concurrently on
// another thread; it is not zeroed between groups (uninitialised on a GPU
// too). Dynamic shared memory is allocated once per entry call, so it is
// likewise one block per running group. All state of the scheduler is
// thread-local, so an entry may run on several threads at once. Atomics are
// real atomic read-modify-writes (relaxed, device scope as on a GPU: the
// groups of a dispatch really run concurrently). __threadfence() is a
// sequentially consistent fence.
//
// Cost: a switch takes tens of nanoseconds; a 65536-work-item reduction with
// nine barriers per work-item runs in tens of milliseconds on one core.
//
// Wavefronts of 64 lanes with their cross-lane operations (__shfl*,
// __ballot, __any, __all, __activemask, __lane_id, warpSize): see
// "Wavefronts" below. Not supported: exceptions leaving a kernel (the entry
// is noexcept: std::terminate). printf in a kernel is the host's printf.
// Dynamic shared memory: HIP_DYNAMIC_SHARED(type, name) gives the packet's
// group_segment_size bytes per group.
#ifndef DITTO_HIP_CPU_HPP
#define DITTO_HIP_CPU_HPP

#if !defined(__x86_64__)
#error "ditto_hip_cpu.hpp: the fiber switch is written for x86-64 only"
#endif

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>
#include <utility>

#include <stdio.h>
#include <stdlib.h>

#include "ditto_hsa_cpu.h"

#ifdef DITTO_DEVICE_PASS
#include <dlfcn.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <tuple>
#include <vector>
#endif

// ───────────────────────────── Keywords ───────────────────────────────────
// Kernels keep default visibility so dladdr() and the host layer find them.
#define __global__ __attribute__((visibility("default")))
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
// Empty: libstdc++ spells its own attribute `__attribute__((__noinline__))`.
#define __noinline__
#define __launch_bounds__(...)
// Per work-group memory: one copy per OS thread, which runs one group at a time.
#define __shared__ static thread_local
#define __constant__ const
// `hipLaunchKernelGGL(HIP_KERNEL_NAME(k<a, b>), ...)` as in HIP.
#define HIP_KERNEL_NAME(...) __VA_ARGS__

/* Non-zero results of a kernel entry. */
#define DITTO_CPU_ENTRY_OK 0
#define DITTO_CPU_ENTRY_NO_STACK 1        /* mmap of the fiber stacks failed */
#define DITTO_CPU_ENTRY_BAD_GEOMETRY 2    /* a work-group size of 0 */
#define DITTO_CPU_ENTRY_NO_KERNARG 3      /* kernarg NULL but the kernel has parameters */
#define DITTO_CPU_ENTRY_NO_GROUP_MEMORY 4 /* dynamic shared memory allocation failed */
#define DITTO_CPU_ENTRY_BAD_RANGE 5       /* first_group + group_count past the grid */

#ifndef DITTO_FIBER_STACK_BYTES
#define DITTO_FIBER_STACK_BYTES (64 * 1024)
#endif

// dim3, as in HIP (the HIP host build takes HIP's own from hip_runtime_api.h
// and defines DITTO_HIP_HAS_DIM3 first).
#ifndef DITTO_HIP_HAS_DIM3
struct dim3 {
  uint32_t x, y, z;
  constexpr dim3(uint32_t x_ = 1, uint32_t y_ = 1, uint32_t z_ = 1) : x(x_), y(y_), z(z_) {}
};
#endif

namespace ditto {
namespace detail {
namespace {  // internal linkage: every object (code object, host exe) has its own state

struct Index3 {
  uint32_t x, y, z;
};

}  // namespace
}  // namespace detail
}  // namespace ditto

// The ids the running work-item sees: variables, as HIP declares them, so
// that a parameter or local named `blockIdx` shadows them as it does under
// hipcc. The scheduler rewrites threadIdx before every switch to a fiber
// (fibers share the OS thread, so a plain per-thread value would be wrong)
// and the others per group; kernels only read them.
[[maybe_unused]] static thread_local ::ditto::detail::Index3 threadIdx = {0, 0, 0};
[[maybe_unused]] static thread_local ::ditto::detail::Index3 blockIdx = {0, 0, 0};
[[maybe_unused]] static thread_local ::ditto::detail::Index3 blockDim = {1, 1, 1};
[[maybe_unused]] static thread_local ::ditto::detail::Index3 gridDim = {1, 1, 1};

// ───────────────────────────── Fiber switch ───────────────────────────────
// void ditto_fiber_switch_v1(void** save_sp, void* load_sp)
//   Pushes the callee-saved state of the caller on its stack, stores the
//   stack pointer in *save_sp, loads load_sp and pops the state saved there,
//   returning into the other fiber. Frame, from the saved sp upwards:
//   [mxcsr:4][x87 cw:2][pad:2] r15 r14 r13 r12 rbx rbp <return address>.
// ditto_fiber_start_v1: first return address of a new fiber; r12 holds the
//   argument and r13 the function, which must never return.
// The symbols are hidden (never exported, never interposed) and sit in a
// COMDAT group so several translation units may include this header.
__asm__(
    ".pushsection .text.ditto_fiber_switch_v1,\"axG\",@progbits,ditto_fiber_switch_v1,comdat\n"
    ".globl ditto_fiber_switch_v1\n"
    ".hidden ditto_fiber_switch_v1\n"
    ".type ditto_fiber_switch_v1,@function\n"
    ".p2align 4\n"
    "ditto_fiber_switch_v1:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  subq $8, %rsp\n"
    "  stmxcsr (%rsp)\n"
    "  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n"
    "  fldcw 4(%rsp)\n"
    "  addq $8, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size ditto_fiber_switch_v1, .-ditto_fiber_switch_v1\n"
    ".globl ditto_fiber_start_v1\n"
    ".hidden ditto_fiber_start_v1\n"
    ".type ditto_fiber_start_v1,@function\n"
    "ditto_fiber_start_v1:\n"
    "  movq %r12, %rdi\n"
    "  callq *%r13\n"
    "  ud2\n"
    ".size ditto_fiber_start_v1, .-ditto_fiber_start_v1\n"
    ".popsection\n");

extern "C" void ditto_fiber_switch_v1(void** save_sp, void* load_sp) __attribute__((visibility("hidden")));
extern "C" void ditto_fiber_start_v1() __attribute__((visibility("hidden")));

namespace ditto {
namespace detail {
namespace {

struct Group;

// Where a suspended fiber waits (see run_grid).
enum class FiberWait : uint8_t {
  kNone,     // ready to run (or running)
  kBarrier,  // at __syncthreads()
  kWaveOp,   // at a cross-lane operation of its wavefront (wave_op below)
};

struct Fiber {
  void* sp;        // saved stack pointer while suspended
  char* stack_top; // 16-byte aligned top of this fiber's stack
  Index3 thread_idx;
  bool finished;
  FiberWait wait;
  uint32_t wave;   // linear work-item id / 64
  uint32_t lane;   // linear work-item id % 64
  Group* group;
  // The cross-lane operation this fiber waits at (valid while wait == kWaveOp):
  const void* wave_site;  // its call site: lanes at the same site exchange
  uint64_t wave_order;    // the site's line in the source: order of completion
  uint32_t wave_kind;     // WaveOpKind
  int32_t wave_source;    // shuffle: the lane read (0..63)
  uint64_t wave_value;    // this lane's operand bits
  uint64_t wave_result;   // filled in when the operation completes
  uint64_t wave_active;   // the lanes that took part, bit i = lane i
};

// The group being run on this OS thread, or null (host code, or a group of
// one work-item run without fibers).
struct Group {
  void* scheduler_sp;
  Fiber* running;
  void (*body)(void*);  // runs the kernel once for the current work-item
  void* body_ctx;
};
thread_local Group* t_group = nullptr;
[[maybe_unused]] thread_local void* t_dynamic_shared = nullptr;
// The running dispatch's grid barrier: set for a cooperative launch only
// (ditto_hsa_cpu.h, "Cooperative launches"), where each group has an OS
// thread of its own.
thread_local void (*t_grid_barrier)(void*) = nullptr;
thread_local void* t_grid_barrier_context = nullptr;

}  // namespace
}  // namespace detail
}  // namespace ditto

// ───────────────────────────── Built-ins ──────────────────────────────────

// Barrier of the work-group: suspends this work-item until every unfinished
// work-item of its group has reached a barrier.
static inline void __syncthreads() {
  ::ditto::detail::Group* g = ::ditto::detail::t_group;
  if (g != nullptr && g->running != nullptr) {
    ditto_fiber_switch_v1(&g->running->sp, g->scheduler_sp);
  }
}

// Grid barrier of a cooperative launch, called by ONE work-item of each
// group between two __syncthreads() (cooperative_groups::grid_group::sync):
// blocks this group's OS thread until every unfinished group of the grid
// is there. Outside a cooperative launch there is no grid to wait for: it
// says so and aborts the program, where a GPU would hang.
static inline bool ditto_grid_barrier_available() { return ::ditto::detail::t_grid_barrier != nullptr; }
static inline void ditto_grid_barrier() {
  if (::ditto::detail::t_grid_barrier == nullptr) {
    fprintf(stderr,
            "ditto: a grid-wide sync (cooperative_groups::grid_group::sync) in a kernel not launched with "
            "hipLaunchCooperativeKernel: no grid to wait for (a GPU would hang); aborting\n");
    abort();
  }
  ::ditto::detail::t_grid_barrier(::ditto::detail::t_grid_barrier_context);
}

// ───────────────────────────── Wavefronts ─────────────────────────────────
// A work-group's work-items form wavefronts of 64 by linear id (x fastest):
// lane = id % 64, as on CDNA GPUs (gfx90a, gfx942). Between cross-lane
// operations the lanes of a wavefront run one after another (fibers), which
// no correct program can tell apart from lockstep: lanes exchange data only
// through memory ordered by barriers, or through the operations below.
//
// A cross-lane operation (shuffle, ballot, tile sync) suspends the lane at
// the operation's CALL SITE. When every unfinished work-item of the group is
// suspended (at a barrier or at a cross-lane operation), the lanes of one
// wavefront waiting at the same call site complete it together: they are
// that operation's ACTIVE lanes, the EXEC mask of the hardware. Lanes of the
// wavefront that finished, wait at __syncthreads() or at another call site
// (the other side of a divergent branch) are inactive for it, as on the
// GPU, where divergent paths run one after the other with the other lanes
// masked off. Lanes reconverge: when lanes of a wavefront wait at several
// sites, the site that comes first in the source (the line where the
// built-in is called; then the code address) completes first, and the lanes waiting further on
// wait for the others to catch up. Source order stands in for program
// order: right for straight-line code and loops; wrong where a device
// function written ABOVE the kernel is called after a divergent branch of
// the kernel that also holds a cross-lane operation. Reading an inactive lane
// returns 0, as ds_bpermute_b32 does; a ballot sees inactive lanes as 0
// bits. Where the model differs from the
// hardware: (1) lanes are told apart by the call site of the operation, so
// a device function that is NOT inlined and is called from both sides of a
// divergent branch completes one operation for the lanes of both sides,
// where the GPU would run two; (2) lanes that wait at __syncthreads() while
// others of their wavefront run on are simply inactive, where the GPU's
// behaviour for a barrier in divergent code is undefined.
namespace ditto {
namespace detail {
namespace {

enum WaveOpKind : uint32_t { kWaveShuffle = 1, kWaveBallot = 2, kWaveSync = 3 };

struct WaveOutcome {
  uint64_t result;
  uint64_t active;
};

// One lane alone (a group of one work-item, or host code): lane 0 is the
// only active lane.
inline WaveOutcome wave_op_alone(uint32_t kind, uint64_t value, int32_t source) {
  switch (kind) {
    case kWaveShuffle:
      return {(source & 63) == 0 ? value : 0, 1};
    case kWaveBallot:
      return {value != 0 ? 1u : 0u, 1};
    default:
      return {0, 1};
  }
}

// Suspends the running lane at its caller's call site until the active lanes
// of its wavefront complete the operation (see above). Never inlined: its
// return address names the call site, and the built-ins that call it are
// always inlined into the kernel.
__attribute__((noinline)) WaveOutcome wave_op(uint32_t kind, uint64_t value, int32_t source, uint64_t order) {
  Group* g = t_group;
  if (g == nullptr || g->running == nullptr) return wave_op_alone(kind, value, source);
  Fiber* f = g->running;
  f->wave_site = __builtin_return_address(0);
  f->wave_order = order;
  f->wave_kind = kind;
  f->wave_source = source & 63;
  f->wave_value = value;
  f->wait = FiberWait::kWaveOp;
  ditto_fiber_switch_v1(&f->sp, g->scheduler_sp);
  return {f->wave_result, f->wave_active};
}

inline uint32_t lane_id() {
  Group* g = t_group;
  return g != nullptr && g->running != nullptr ? g->running->lane : 0;
}

template <typename T>
inline uint64_t to_lane_bits(T value) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                "a cross-lane operand is at most 8 bytes of plain data");
  uint64_t bits = 0;
  memcpy(&bits, &value, sizeof(T));
  return bits;
}
template <typename T>
inline T from_lane_bits(uint64_t bits) {
  T value;
  memcpy(&value, &bits, sizeof(T));
  return value;
}
// The place of a cross-lane operation in the source, from the built-ins'
// defaulted `__builtin_LINE()` argument (evaluated where the built-in is
// called).
constexpr uint64_t site_order(unsigned line) { return line; }
template <typename T>
__attribute__((always_inline)) inline T shuffle_from(T value, int source_lane, uint64_t order) {
  return from_lane_bits<T>(wave_op(kWaveShuffle, to_lane_bits(value), source_lane, order).result);
}

}  // namespace
}  // namespace detail
}  // namespace ditto

static constexpr int warpSize = 64;

static __attribute__((always_inline)) inline unsigned int __lane_id() { return ::ditto::detail::lane_id(); }

// Shuffles, with HIP's lane arithmetic (amd_warp_functions.h of HIP 6.x:
// the source lane is taken modulo `width` inside the lane's segment of
// `width` lanes; a lane whose source falls outside its segment reads itself).
template <typename T>
static __attribute__((always_inline)) inline T __shfl(T var, int src_lane, int width = warpSize, unsigned line_ = __builtin_LINE()) {
  const int self = static_cast<int>(__lane_id());
  return ::ditto::detail::shuffle_from(var, (src_lane & (width - 1)) + (self & ~(width - 1)), ::ditto::detail::site_order(line_));
}
template <typename T>
static __attribute__((always_inline)) inline T __shfl_up(T var, unsigned int lane_delta, int width = warpSize, unsigned line_ = __builtin_LINE()) {
  const int self = static_cast<int>(__lane_id());
  int index = self - static_cast<int>(lane_delta);
  index = index < (self & ~(width - 1)) ? self : index;
  return ::ditto::detail::shuffle_from(var, index, ::ditto::detail::site_order(line_));
}
template <typename T>
static __attribute__((always_inline)) inline T __shfl_down(T var, unsigned int lane_delta, int width = warpSize, unsigned line_ = __builtin_LINE()) {
  const int self = static_cast<int>(__lane_id());
  int index = self + static_cast<int>(lane_delta);
  index = static_cast<int>((self & (width - 1)) + lane_delta) >= width ? self : index;
  return ::ditto::detail::shuffle_from(var, index, ::ditto::detail::site_order(line_));
}
template <typename T>
static __attribute__((always_inline)) inline T __shfl_xor(T var, int lane_mask, int width = warpSize, unsigned line_ = __builtin_LINE()) {
  const int self = static_cast<int>(__lane_id());
  int index = self ^ lane_mask;
  index = index >= ((self + width) & ~(width - 1)) ? self : index;
  return ::ditto::detail::shuffle_from(var, index, ::ditto::detail::site_order(line_));
}
// The _sync forms (HIP 6.2 and later) with a mask of the lanes that take
// part; the mask is not checked against the active lanes.
template <typename T>
static __attribute__((always_inline)) inline T __shfl_sync(unsigned long long, T var, int src_lane, int width = warpSize,
    unsigned line_ = __builtin_LINE()) {
  return __shfl(var, src_lane, width, line_);
}
template <typename T>
static __attribute__((always_inline)) inline T __shfl_up_sync(unsigned long long, T var, unsigned int d, int width = warpSize,
    unsigned line_ = __builtin_LINE()) {
  return __shfl_up(var, d, width, line_);
}
template <typename T>
static __attribute__((always_inline)) inline T __shfl_down_sync(unsigned long long, T var, unsigned int d, int width = warpSize,
    unsigned line_ = __builtin_LINE()) {
  return __shfl_down(var, d, width, line_);
}
template <typename T>
static __attribute__((always_inline)) inline T __shfl_xor_sync(unsigned long long, T var, int m, int width = warpSize,
    unsigned line_ = __builtin_LINE()) {
  return __shfl_xor(var, m, width, line_);
}

// Votes: bit i of a ballot is lane i's predicate; inactive lanes give 0.
static __attribute__((always_inline)) inline unsigned long long __ballot(int predicate, unsigned line_ = __builtin_LINE()) {
  return ::ditto::detail::wave_op(::ditto::detail::kWaveBallot, predicate != 0, 0, ::ditto::detail::site_order(line_)).result;
}
static __attribute__((always_inline)) inline unsigned long long __activemask(unsigned line_ = __builtin_LINE()) {
  return ::ditto::detail::wave_op(::ditto::detail::kWaveBallot, 1, 0, ::ditto::detail::site_order(line_)).result;
}
static __attribute__((always_inline)) inline int __any(int predicate, unsigned line_ = __builtin_LINE()) {
  return ::ditto::detail::wave_op(::ditto::detail::kWaveBallot, predicate != 0, 0, ::ditto::detail::site_order(line_)).result != 0;
}
static __attribute__((always_inline)) inline int __all(int predicate, unsigned line_ = __builtin_LINE()) {
  const ::ditto::detail::WaveOutcome o =
      ::ditto::detail::wave_op(::ditto::detail::kWaveBallot, predicate != 0, 0, ::ditto::detail::site_order(line_));
  return o.result == o.active;
}
static __attribute__((always_inline)) inline unsigned long long __ballot_sync(unsigned long long, int predicate,
                                                                              unsigned line_ = __builtin_LINE()) {
  return __ballot(predicate, line_);
}
static __attribute__((always_inline)) inline int __any_sync(unsigned long long, int predicate, unsigned line_ = __builtin_LINE()) {
  return __any(predicate, line_);
}
static __attribute__((always_inline)) inline int __all_sync(unsigned long long, int predicate, unsigned line_ = __builtin_LINE()) {
  return __all(predicate, line_);
}
// A barrier of the active lanes of the wavefront (cooperative groups' tile
// sync, __syncwarp).
static __attribute__((always_inline)) inline void __syncwarp(unsigned long long = ~0ull, unsigned line_ = __builtin_LINE()) {
  (void)::ditto::detail::wave_op(::ditto::detail::kWaveSync, 0, 0, ::ditto::detail::site_order(line_));
}

static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// HIP_DYNAMIC_SHARED(float, buf): the group's dynamic shared memory
// (the packet's group_segment_size bytes, 16-byte aligned).
#define HIP_DYNAMIC_SHARED(type, var) type* var = static_cast<type*>(::ditto::detail::t_dynamic_shared)

// Atomics: relaxed read-modify-writes that return the old value, as in HIP.
namespace ditto {
namespace detail {
namespace {
template <typename T, typename Bits, typename Op>
inline T atomic_float_update(T* address, Op op) {
  static_assert(sizeof(T) == sizeof(Bits), "float atomics need a same-size integer");
  Bits* bits = reinterpret_cast<Bits*>(address);
  Bits expected = __atomic_load_n(bits, __ATOMIC_RELAXED);
  for (;;) {
    T old_value;
    memcpy(&old_value, &expected, sizeof(T));
    T new_value = op(old_value);
    Bits desired;
    memcpy(&desired, &new_value, sizeof(T));
    if (__atomic_compare_exchange_n(bits, &expected, desired, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
      return old_value;
    }
  }
}
template <typename T, typename Op>
inline T atomic_int_update(T* address, Op op) {
  T expected = __atomic_load_n(address, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(address, &expected, op(expected), true, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED)) {
  }
  return expected;
}
}  // namespace
}  // namespace detail
}  // namespace ditto

static inline float atomicAdd(float* a, float v) {
  return ::ditto::detail::atomic_float_update<float, uint32_t>(a, [v](float o) { return o + v; });
}
static inline double atomicAdd(double* a, double v) {
  return ::ditto::detail::atomic_float_update<double, uint64_t>(a, [v](double o) { return o + v; });
}
static inline float atomicExch(float* a, float v) {
  return ::ditto::detail::atomic_float_update<float, uint32_t>(a, [v](float) { return v; });
}

#define DITTO_INT_ATOMICS(T)                                                                       \
  static inline T atomicAdd(T* a, T v) { return __atomic_fetch_add(a, v, __ATOMIC_RELAXED); }      \
  static inline T atomicSub(T* a, T v) { return __atomic_fetch_sub(a, v, __ATOMIC_RELAXED); }      \
  static inline T atomicAnd(T* a, T v) { return __atomic_fetch_and(a, v, __ATOMIC_RELAXED); }      \
  static inline T atomicOr(T* a, T v) { return __atomic_fetch_or(a, v, __ATOMIC_RELAXED); }        \
  static inline T atomicXor(T* a, T v) { return __atomic_fetch_xor(a, v, __ATOMIC_RELAXED); }      \
  static inline T atomicExch(T* a, T v) { return __atomic_exchange_n(a, v, __ATOMIC_RELAXED); }    \
  static inline T atomicMax(T* a, T v) {                                                           \
    return ::ditto::detail::atomic_int_update(a, [v](T o) { return o < v ? v : o; });              \
  }                                                                                                \
  static inline T atomicMin(T* a, T v) {                                                           \
    return ::ditto::detail::atomic_int_update(a, [v](T o) { return v < o ? v : o; });              \
  }                                                                                                \
  static inline T atomicCAS(T* a, T compare, T v) {                                                \
    __atomic_compare_exchange_n(a, &compare, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);        \
    return compare; /* the old value, whether or not it matched */                                 \
  }
DITTO_INT_ATOMICS(int)
DITTO_INT_ATOMICS(unsigned int)
DITTO_INT_ATOMICS(long long)
DITTO_INT_ATOMICS(unsigned long long)
#undef DITTO_INT_ATOMICS

// ───────────────────────────── Kernel entries ─────────────────────────────
// Pure constexpr layout code: no state, so it may have external linkage
// (hiplite.hpp packs launch arguments with it).
namespace ditto {
namespace detail {

constexpr size_t align_up(size_t value, size_t alignment) { return (value + alignment - 1) / alignment * alignment; }

// Explicit-argument kernarg layout of a parameter list: declaration order,
// natural alignment (what hipcc emits, without hidden arguments).
template <typename... Params>
struct KernargLayout {
  static constexpr size_t count = sizeof...(Params);
  struct Offsets {
    size_t at[count == 0 ? 1 : count];
  };
  static constexpr Offsets offsets() {
    Offsets result{};
    const size_t sizes[] = {sizeof(Params)..., 0};
    const size_t aligns[] = {alignof(Params)..., 1};
    size_t end = 0;
    for (size_t i = 0; i < count; ++i) {
      end = align_up(end, aligns[i]);
      result.at[i] = end;
      end += sizes[i];
    }
    return result;
  }
  static constexpr size_t size() {
    const size_t sizes[] = {sizeof(Params)..., 0};
    return count == 0 ? 0 : offsets().at[count - 1] + sizes[count - 1];
  }
  static constexpr size_t alignment() {
    size_t result = 16;  // HSA: at least 16
    const size_t aligns[] = {alignof(Params)..., 1};
    for (size_t a : aligns) result = a > result ? a : result;
    return result;
  }
};

}  // namespace detail
}  // namespace ditto

#ifdef DITTO_DEVICE_PASS
namespace ditto {
namespace detail {
namespace {

// Fiber stacks for one running entry call: `capacity` slots of
// [guard page][stack], with the Fiber records. A set is mapped once and
// reused: an entry call takes one from this code object's free list (or maps
// a new one when none is large enough) and puts it back when it returns, so
// steady dispatching makes no system call for stacks and touches no fresh
// page. Sets live on the list, not in thread-local storage, so no thread
// exit and no unload order can leave a set behind; the code object's
// destructor (run by dlclose, when the runtime runs no dispatch of it)
// unmaps them all. Idle sets hold at most kRetainedSlots slots (each slot is
// two kernel memory areas, stack and guard); a set past that is unmapped
// when its call returns.
struct StackSet {
  char* base;
  size_t bytes;
  size_t slot;
  size_t capacity;
  Fiber* fibers;
  StackSet* next;
};

constexpr size_t kRetainedSlots = 8192;

pthread_mutex_t g_stack_sets_lock = PTHREAD_MUTEX_INITIALIZER;
StackSet* g_idle_stack_sets = nullptr;  // most recently returned first
size_t g_idle_slots = 0;

void unmap_stack_set(StackSet* set) {
  munmap(set->base, set->bytes);
  free(set->fibers);
  free(set);
}

StackSet* map_stack_set(size_t capacity) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  StackSet* set = static_cast<StackSet*>(malloc(sizeof(StackSet)));
  if (set == nullptr) return nullptr;
  set->slot = page + align_up(DITTO_FIBER_STACK_BYTES, page);
  set->bytes = set->slot * capacity;
  set->capacity = capacity;
  set->next = nullptr;
  set->fibers = static_cast<Fiber*>(calloc(capacity, sizeof(Fiber)));
  void* base = mmap(nullptr, set->bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (set->fibers == nullptr || base == MAP_FAILED) {
    free(set->fibers);
    free(set);
    return nullptr;
  }
  set->base = static_cast<char*>(base);
  for (size_t i = 0; i < capacity; ++i) {
    if (mprotect(set->base + i * set->slot + page, set->slot - page, PROT_READ | PROT_WRITE) != 0) {
      unmap_stack_set(set);
      return nullptr;
    }
  }
  return set;
}

// A set of at least `count` slots: the most recently returned idle one that
// is large enough, else a new one (null when mapping fails).
StackSet* take_stack_set(size_t count) {
  pthread_mutex_lock(&g_stack_sets_lock);
  StackSet** link = &g_idle_stack_sets;
  while (*link != nullptr && (*link)->capacity < count) link = &(*link)->next;
  StackSet* set = *link;
  if (set != nullptr) {
    *link = set->next;
    g_idle_slots -= set->capacity;
  }
  pthread_mutex_unlock(&g_stack_sets_lock);
  return set != nullptr ? set : map_stack_set(count);
}

void return_stack_set(StackSet* set) {
  pthread_mutex_lock(&g_stack_sets_lock);
  const bool keep = g_idle_slots + set->capacity <= kRetainedSlots;
  if (keep) {
    set->next = g_idle_stack_sets;
    g_idle_stack_sets = set;
    g_idle_slots += set->capacity;
  }
  pthread_mutex_unlock(&g_stack_sets_lock);
  if (!keep) unmap_stack_set(set);
}

__attribute__((destructor)) void unmap_idle_stack_sets() {
  pthread_mutex_lock(&g_stack_sets_lock);
  StackSet* set = g_idle_stack_sets;
  g_idle_stack_sets = nullptr;
  g_idle_slots = 0;
  pthread_mutex_unlock(&g_stack_sets_lock);
  while (set != nullptr) {
    StackSet* next = set->next;
    unmap_stack_set(set);
    set = next;
  }
}

// The stack set of one entry call, returned to the free list on scope exit.
class FiberStacks {
 public:
  FiberStacks() = default;
  FiberStacks(const FiberStacks&) = delete;
  FiberStacks& operator=(const FiberStacks&) = delete;
  ~FiberStacks() {
    if (set_ != nullptr) return_stack_set(set_);
  }

  bool allocate(size_t count) {
    set_ = take_stack_set(count);
    return set_ != nullptr;
  }
  char* top(size_t i) const { return set_->base + (i + 1) * set_->slot; }
  Fiber& fiber(size_t i) const { return set_->fibers[i]; }

 private:
  StackSet* set_ = nullptr;
};

// First code a fiber runs (called from ditto_fiber_start_v1). Never returns:
// after the work-item finishes it switches back to the scheduler for good.
void fiber_main(Fiber* fiber) noexcept {
  Group* group = fiber->group;
  group->body(group->body_ctx);
  fiber->finished = true;
  ditto_fiber_switch_v1(&fiber->sp, group->scheduler_sp);
  __builtin_unreachable();
}

// Lays out a fresh fiber's stack so that switching to it "returns" into
// ditto_fiber_start_v1 with r12 = fiber, r13 = fiber_main, inheriting the
// scheduler's floating-point control state.
void prepare_fiber(Fiber* fiber) {
  uintptr_t a = (reinterpret_cast<uintptr_t>(fiber->stack_top) & ~uintptr_t{15}) - 16;  // rsp after `ret`
  uint64_t* frame = reinterpret_cast<uint64_t*>(a - 64);
  uint32_t mxcsr;
  uint16_t fpucw;
  __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
  __asm__ volatile("fnstcw %0" : "=m"(fpucw));
  uint64_t control = static_cast<uint64_t>(mxcsr) | (static_cast<uint64_t>(fpucw) << 32);
  frame[0] = control;                                          // mxcsr, x87 cw
  frame[1] = 0;                                                // r15
  frame[2] = 0;                                                // r14
  frame[3] = reinterpret_cast<uint64_t>(&fiber_main);          // r13
  frame[4] = reinterpret_cast<uint64_t>(fiber);                // r12
  frame[5] = 0;                                                // rbx
  frame[6] = 0;                                                // rbp
  frame[7] = reinterpret_cast<uint64_t>(&ditto_fiber_start_v1); // return address
  fiber->sp = frame;
  fiber->finished = false;
  fiber->wait = FiberWait::kNone;
}

// Completes cross-lane operations fibers wait at (see "Wavefronts"): per
// wavefront (its fibers are consecutive, in linear id order), the lanes
// waiting at the call site that comes first in the code complete it
// together; lanes waiting at later sites wait on, for the lanes still
// behind them may reach the same site (divergent lanes reconverge). True
// when any completed (those lanes are ready again).
bool complete_wave_ops(const FiberStacks& stacks, size_t n) {
  bool any = false;
  size_t i = 0;
  while (i < n) {
    const uint32_t wave = stacks.fiber(i).wave;
    size_t end = i;
    const void* site = nullptr;
    uint64_t order = 0;
    for (; end < n && stacks.fiber(end).wave == wave; ++end) {
      const Fiber& f = stacks.fiber(end);
      if (f.finished || f.wait != FiberWait::kWaveOp) continue;
      const bool earlier = f.wave_order < order ||
                           (f.wave_order == order &&
                            reinterpret_cast<uintptr_t>(f.wave_site) < reinterpret_cast<uintptr_t>(site));
      if (site == nullptr || earlier) {
        site = f.wave_site;
        order = f.wave_order;
      }
    }
    const size_t begin = i;
    i = end;
    if (site == nullptr) continue;
    // The lanes of this wavefront waiting at that site, by lane.
    Fiber* lanes[64] = {};
    uint64_t active = 0;
    for (size_t j = begin; j < end; ++j) {
      Fiber& f = stacks.fiber(j);
      if (f.finished || f.wait != FiberWait::kWaveOp || f.wave_site != site) continue;
      lanes[f.lane] = &f;
      active |= uint64_t{1} << f.lane;
    }
    uint64_t ballot = 0;
    for (unsigned l = 0; l < 64; ++l) {
      if (lanes[l] != nullptr && lanes[l]->wave_value != 0) ballot |= uint64_t{1} << l;
    }
    for (unsigned l = 0; l < 64; ++l) {
      Fiber* f = lanes[l];
      if (f == nullptr) continue;
      switch (f->wave_kind) {
        case kWaveShuffle: {
          const Fiber* source = lanes[f->wave_source];
          f->wave_result = source != nullptr ? source->wave_value : 0;
          break;
        }
        case kWaveBallot:
          f->wave_result = ballot;
          break;
        default:
          f->wave_result = 0;
      }
      f->wave_active = active;
      f->wait = FiberWait::kNone;
    }
    any = true;
  }
  return any;
}

inline uint32_t dim_or_one(uint32_t value) { return value == 0 ? 1 : value; }

// Runs the groups [first_group, first_group + group_count) of a dispatch;
// `body(ctx)` runs the kernel for the work-item whose ids are in threadIdx
// and the other id variables.
int run_grid(const ditto_cpu_dispatch_t& dispatch, void (*body)(void*), void* ctx) noexcept {
  const unsigned dims = dispatch.dimensions == 0 ? 1 : dispatch.dimensions;
  uint32_t grid[3], group[3], groups[3];
  for (unsigned d = 0; d < 3; ++d) {
    grid[d] = d < dims ? dispatch.grid_size[d] : 1;
    group[d] = d < dims ? dispatch.workgroup_size[d] : 1;
    if (d >= dims) group[d] = dim_or_one(group[d]);
    if (group[d] == 0) return DITTO_CPU_ENTRY_BAD_GEOMETRY;
    groups[d] = static_cast<uint32_t>((static_cast<uint64_t>(grid[d]) + group[d] - 1) / group[d]);
  }
  uint64_t total_groups = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(groups[0]), static_cast<uint64_t>(groups[1]), &total_groups) ||
      __builtin_mul_overflow(total_groups, static_cast<uint64_t>(groups[2]), &total_groups)) {
    return DITTO_CPU_ENTRY_BAD_GEOMETRY;
  }
  if (dispatch.group_count > total_groups || dispatch.first_group > total_groups - dispatch.group_count) {
    return DITTO_CPU_ENTRY_BAD_RANGE;
  }
  if (dispatch.group_count == 0) return DITTO_CPU_ENTRY_OK;  // empty range (or empty grid)

  const size_t items_per_group = static_cast<size_t>(group[0]) * group[1] * group[2];
  FiberStacks stacks;
  if (items_per_group > 1 && !stacks.allocate(items_per_group)) return DITTO_CPU_ENTRY_NO_STACK;
  void* dynamic_shared = nullptr;
  if (dispatch.group_segment_size > 0) {
    dynamic_shared = aligned_alloc(16, align_up(dispatch.group_segment_size, 16));
    if (dynamic_shared == nullptr) return DITTO_CPU_ENTRY_NO_GROUP_MEMORY;
  }

  const Index3 saved_ids[4] = {::threadIdx, ::blockIdx, ::blockDim, ::gridDim};
  Group* saved_group = t_group;
  void* saved_shared = t_dynamic_shared;
  t_dynamic_shared = dynamic_shared;
  t_grid_barrier = dispatch.grid_barrier;
  t_grid_barrier_context = dispatch.grid_barrier_context;
  Group state{nullptr, nullptr, body, ctx};

  ::blockDim = {group[0], group[1], group[2]};
  ::gridDim = {groups[0], groups[1], groups[2]};
  const uint64_t end_group = dispatch.first_group + dispatch.group_count;
  for (uint64_t linear = dispatch.first_group; linear < end_group; ++linear) {
    const uint32_t gx = static_cast<uint32_t>(linear % groups[0]);
    const uint32_t gy = static_cast<uint32_t>(linear / groups[0] % groups[1]);
    const uint32_t gz = static_cast<uint32_t>(linear / groups[0] / groups[1]);
    ::blockIdx = {gx, gy, gz};
    // Work-items of this group inside the grid (the last group may be partial).
    const uint32_t nx = grid[0] - gx * group[0] < group[0] ? grid[0] - gx * group[0] : group[0];
    const uint32_t ny = grid[1] - gy * group[1] < group[1] ? grid[1] - gy * group[1] : group[1];
    const uint32_t nz = grid[2] - gz * group[2] < group[2] ? grid[2] - gz * group[2] : group[2];
    const size_t live = static_cast<size_t>(nx) * ny * nz;
    if (live == 1 && items_per_group == 1) {
      // One work-item: no barrier can wait for anyone, run it directly.
      t_group = nullptr;
      ::threadIdx = {0, 0, 0};
      body(ctx);
      continue;
    }
    size_t n = 0;
    for (uint32_t z = 0; z < nz; ++z)
      for (uint32_t y = 0; y < ny; ++y)
        for (uint32_t x = 0; x < nx; ++x) {
          Fiber& f = stacks.fiber(n);
          f.stack_top = stacks.top(n);
          f.thread_idx = {x, y, z};
          f.group = &state;
          const size_t linear = x + static_cast<size_t>(group[0]) * (y + static_cast<size_t>(group[1]) * z);
          f.wave = static_cast<uint32_t>(linear / 64);
          f.lane = static_cast<uint32_t>(linear % 64);
          prepare_fiber(&f);
          ++n;
        }
    t_group = &state;
    // Each pass resumes every ready fiber once; a fiber runs until it
    // finishes, reaches __syncthreads() or a cross-lane operation. After a
    // pass every unfinished fiber waits. Cross-lane operations complete
    // first (their lanes become ready); only when none is waiting does the
    // barrier release every fiber.
    size_t unfinished = n;
    while (unfinished > 0) {
      for (size_t i = 0; i < n; ++i) {
        Fiber& f = stacks.fiber(i);
        if (f.finished || f.wait != FiberWait::kNone) continue;
        state.running = &f;
        ::threadIdx = f.thread_idx;
        ditto_fiber_switch_v1(&state.scheduler_sp, f.sp);
        if (f.finished) {
          --unfinished;
        } else if (f.wait == FiberWait::kNone) {
          f.wait = FiberWait::kBarrier;
        }
      }
      if (complete_wave_ops(stacks, n)) continue;
      for (size_t i = 0; i < n; ++i) stacks.fiber(i).wait = FiberWait::kNone;
    }
    state.running = nullptr;
  }

  t_group = saved_group;
  ::threadIdx = saved_ids[0];
  ::blockIdx = saved_ids[1];
  ::blockDim = saved_ids[2];
  ::gridDim = saved_ids[3];
  t_dynamic_shared = saved_shared;
  t_grid_barrier = nullptr;
  t_grid_barrier_context = nullptr;
  free(dynamic_shared);
  return DITTO_CPU_ENTRY_OK;
}

// The generated part of a kernel: its entry, for a kernel `F` whose type is
// `void (*)(Params...)`.
template <typename Fn, Fn F>
struct KernelEntry;

template <typename... Params, void (*F)(Params...)>
struct KernelEntry<void (*)(Params...), F> {
  using Layout = KernargLayout<std::decay_t<Params>...>;
  using Args = std::tuple<std::decay_t<Params>...>;
  // HIP's own vector types (float4, uint2, ...) have user-provided copy
  // operations under g++, so trivially destructible and default-constructible
  // is what is asked: the bytes are copied as on a GPU.
  static_assert((std::is_trivially_destructible<std::decay_t<Params>>::value && ...),
                "kernel parameters must be plain data (they are copied from kernarg bytes)");
  static_assert(!(std::is_reference<Params>::value || ...), "kernel parameters cannot be references");

  template <size_t... I>
  static void unpack(const unsigned char* kernarg, Args& args, std::index_sequence<I...>) {
    constexpr auto offsets = Layout::offsets();
    (memcpy(&std::get<I>(args), kernarg + offsets.at[I], sizeof(std::get<I>(args))), ...);
  }

  static void run_work_item(void* ctx) {
    // Arguments are passed by value: each work-item has its own copy.
    std::apply(F, *static_cast<const Args*>(ctx));
  }

  static int entry(const ditto_cpu_dispatch_t* dispatch) noexcept {
    if (dispatch == nullptr) return DITTO_CPU_ENTRY_BAD_GEOMETRY;
    Args args{};
    if (Layout::count > 0) {
      if (dispatch->kernarg == nullptr) return DITTO_CPU_ENTRY_NO_KERNARG;
      unpack(static_cast<const unsigned char*>(dispatch->kernarg), args, std::index_sequence_for<Params...>{});
    }
    return run_grid(*dispatch, &run_work_item, &args);
  }

  static const void* function_address() { return reinterpret_cast<const void*>(F); }
};

// One descriptor in the `ditto_kernels` section.
struct KernelRecord {
  const void* (*function_address)();
  ditto_cpu_kernel_t kernel;  // `name` is filled by ditto_cpu_code_object_kernels()
};

}  // namespace
}  // namespace detail
}  // namespace ditto

#define DITTO_CONCAT_INNER(a, b) a##b
#define DITTO_CONCAT(a, b) DITTO_CONCAT_INNER(a, b)

// Registers a kernel (device pass). Use after the kernel's definition, at
// namespace scope: DITTO_KERNEL(reduce_sum), DITTO_KERNEL(scale_values<float>).
#define DITTO_KERNEL(...)                                                                               \
  __attribute__((section("ditto_kernels"), used, aligned(8))) static ::ditto::detail::KernelRecord    \
      DITTO_CONCAT(ditto_kernel_record_, __COUNTER__) = {                                               \
          &::ditto::detail::KernelEntry<decltype(&__VA_ARGS__), &__VA_ARGS__>::function_address,        \
          {nullptr,                                                                                     \
           static_cast<uint32_t>(                                                                       \
               ::ditto::detail::KernelEntry<decltype(&__VA_ARGS__), &__VA_ARGS__>::Layout::size()),     \
           static_cast<uint32_t>(                                                                       \
               ::ditto::detail::KernelEntry<decltype(&__VA_ARGS__), &__VA_ARGS__>::Layout::alignment()), \
           0, 0, &::ditto::detail::KernelEntry<decltype(&__VA_ARGS__), &__VA_ARGS__>::entry}};

// Registers the overload of a kernel whose type is `signature`, a function
// pointer type: DITTO_KERNEL_AS(void (*)(float*, int), scale). `ditto hipcc`
// writes this form from the code object's mangled names, so overloaded
// kernels are told apart.
#define DITTO_KERNEL_AS(signature, ...)                                                                  \
  __attribute__((section("ditto_kernels"), used, aligned(8))) static ::ditto::detail::KernelRecord    \
      DITTO_CONCAT(ditto_kernel_record_, __COUNTER__) = {                                               \
          &::ditto::detail::KernelEntry<signature, &__VA_ARGS__>::function_address,                     \
          {nullptr,                                                                                     \
           static_cast<uint32_t>(::ditto::detail::KernelEntry<signature, &__VA_ARGS__>::Layout::size()), \
           static_cast<uint32_t>(                                                                       \
               ::ditto::detail::KernelEntry<signature, &__VA_ARGS__>::Layout::alignment()),             \
           0, 0, &::ditto::detail::KernelEntry<signature, &__VA_ARGS__>::entry}};

// Registers a device variable under the symbol name it has in hipcc's code
// object: DITTO_VARIABLE("_ZN2ns5tableE", ns::table), at namespace scope.
// The variable may be a private static member (a class's constexpr member,
// which the device pass emits as an implicit __constant__): its address is
// taken in an explicit instantiation, where C++ checks no access, and read
// back through a friend of a tag type of this registration's own. Tags and
// the template have internal linkage, so the registrations of several
// sources in one host build never meet.
namespace {
template <typename Tag, auto Address>
struct ditto_variable_at {
  friend constexpr auto ditto_variable_address(Tag) { return Address; }
};
}  // namespace
#define DITTO_VARIABLE(symbol, ...) DITTO_VARIABLE_NUMBERED(__COUNTER__, symbol, __VA_ARGS__)
#define DITTO_VARIABLE_NUMBERED(n, symbol, ...) DITTO_VARIABLE_AT(n, symbol, __VA_ARGS__)
#define DITTO_VARIABLE_AT(n, symbol, ...)                                                            \
  namespace {                                                                                       \
  struct ditto_variable_tag_##n {                                                                   \
    friend constexpr auto ditto_variable_address(ditto_variable_tag_##n);                           \
  };                                                                                                \
  template struct ditto_variable_at<ditto_variable_tag_##n, &__VA_ARGS__>;                          \
  __attribute__((section("ditto_variables"), used, aligned(8))) ditto_cpu_variable_t                \
      ditto_variable_record_##n = {                                                                 \
          symbol,                                                                                   \
          const_cast<void*>(                                                                        \
              static_cast<const volatile void*>(ditto_variable_address(ditto_variable_tag_##n{}))), \
          sizeof(*ditto_variable_address(ditto_variable_tag_##n{}))};                               \
  }

extern "C" {
extern ditto_cpu_variable_t __start_ditto_variables[] __attribute__((visibility("hidden"), weak));
extern ditto_cpu_variable_t __stop_ditto_variables[] __attribute__((visibility("hidden"), weak));

// The device variables of the host build (DITTO_VARIABLE), in section order.
__attribute__((visibility("default"), weak)) const ditto_cpu_variable_t* ditto_cpu_code_object_variables(
    uint32_t* count) {
  const ditto_cpu_variable_t* first = __start_ditto_variables;
  const size_t n = first == nullptr ? 0 : static_cast<size_t>(__stop_ditto_variables - __start_ditto_variables);
  if (count != nullptr) *count = static_cast<uint32_t>(n);
  return n == 0 ? nullptr : first;
}
}

extern "C" {
extern ::ditto::detail::KernelRecord __start_ditto_kernels[] __attribute__((visibility("hidden"), weak));
extern ::ditto::detail::KernelRecord __stop_ditto_kernels[] __attribute__((visibility("hidden"), weak));

// The code-object ABI version (ditto_hsa_cpu.h). Weak: several translation
// units of one code object may include this header.
__attribute__((visibility("default"), weak)) uint32_t ditto_cpu_code_object_abi = DITTO_CPU_CODE_OBJECT_ABI;

// The kernel table, built on first call (thread-safe) and valid while the
// code object is loaded. Kernels whose symbol cannot be found (static or
// hidden functions) are left out, with a message on stderr.
__attribute__((visibility("default"), weak)) const ditto_cpu_kernel_t* ditto_cpu_code_object_kernels(uint32_t* count) {
  static const std::vector<ditto_cpu_kernel_t> table = [] {
    std::vector<ditto_cpu_kernel_t> kernels;
    for (::ditto::detail::KernelRecord* r = __start_ditto_kernels; r != nullptr && r < __stop_ditto_kernels; ++r) {
      const void* function = r->function_address();
      Dl_info info;
      if (dladdr(function, &info) == 0 || info.dli_sname == nullptr || info.dli_saddr != function) {
        fprintf(stderr,
                "ditto code object: the kernel at %p has no exported symbol (static or hidden?); "
                "it cannot be dispatched — give it external linkage and default visibility\n",
                function);
        continue;
      }
      ditto_cpu_kernel_t kernel = r->kernel;
      kernel.name = info.dli_sname;
      kernels.push_back(kernel);
    }
    return kernels;
  }();
  if (count != nullptr) *count = static_cast<uint32_t>(table.size());
  return table.empty() ? nullptr : table.data();
}
}

#else  // host pass: kernels are compiled but never run; registration is device-only

#define DITTO_KERNEL(...)
#define DITTO_KERNEL_AS(...)
#define DITTO_VARIABLE(...)

#endif  // DITTO_DEVICE_PASS

#endif  // DITTO_HIP_CPU_HPP
