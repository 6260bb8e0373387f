// kernel_checks: kernels that pin how include/ditto_hip_cpu.hpp runs a
// kernel (barriers, ids, partial groups, kernarg layout, atomics, dynamic
// shared memory, per-work-item floating-point state). Built as a code object
// only (no host program); crates/test-apps/tests/ runs its entries directly.
#include <fenv.h>

#include "ditto_hip_cpu.hpp"

// After the barrier each work-item reads its neighbour's slot: correct only
// if every work-item of the group wrote before any read.
__global__ void barrier_rotate(int* out) {
  __shared__ int slots[1024];
  const unsigned tid = threadIdx.x;
  slots[tid] = static_cast<int>(tid + 1000 * blockIdx.x);
  __syncthreads();
  out[blockIdx.x * blockDim.x + tid] = slots[(tid + 1) % blockDim.x];
}
DITTO_KERNEL(barrier_rotate)

// `rounds` rotations through shared memory, two barriers each: work-item t
// ends with (t + rounds) % blockDim.x.
__global__ void barrier_rounds(int* out, int rounds) {
  __shared__ int slots[1024];
  const unsigned tid = threadIdx.x;
  slots[tid] = static_cast<int>(tid);
  for (int r = 0; r < rounds; ++r) {
    __syncthreads();
    const int next = slots[(tid + 1) % blockDim.x];
    __syncthreads();
    slots[tid] = next;
  }
  out[blockIdx.x * blockDim.x + tid] = slots[tid];
}
DITTO_KERNEL(barrier_rounds)

// Every work-item records its ids at its global linear index and counts
// itself; out has 8 words per work-item.
__global__ void record_ids(unsigned* out, unsigned* executed, unsigned grid_x, unsigned grid_y) {
  const unsigned x = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned y = blockIdx.y * blockDim.y + threadIdx.y;
  const unsigned z = blockIdx.z * blockDim.z + threadIdx.z;
  unsigned* slot = out + 8 * (x + grid_x * (y + grid_y * z));
  slot[0] = threadIdx.x | threadIdx.y << 10 | threadIdx.z << 20;
  slot[1] = blockIdx.x | blockIdx.y << 10 | blockIdx.z << 20;
  slot[2] = blockDim.x | blockDim.y << 10 | blockDim.z << 20;
  slot[3] = gridDim.x | gridDim.y << 10 | gridDim.z << 20;
  atomicAdd(&slot[4], 1u);
  atomicAdd(executed, 1u);
}
DITTO_KERNEL(record_ids)

// Parameters of mixed sizes: natural alignment gives offsets 0, 8, 16, 20, 24
// and a 32-byte kernarg segment.
__global__ void mixed_args(char c, double d, int i, short s, long long* out) {
  out[0] = c;
  out[1] = static_cast<long long>(d * 4.0);
  out[2] = i;
  out[3] = s;
}
DITTO_KERNEL(mixed_args)

struct Atomics {
  int add_int;
  unsigned add_unsigned;
  unsigned long long add_u64;
  float add_float;
  double add_double;
  int max_int;
  int min_int;
  int cas_flag;
  int cas_winners;
  unsigned exch_seen;
  unsigned max_unsigned;
};

__global__ void atomics(Atomics* a) {
  const int gid = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  atomicAdd(&a->add_int, 1);
  atomicAdd(&a->add_unsigned, 2u);
  atomicAdd(&a->add_u64, 3ull);
  atomicAdd(&a->add_float, 0.25f);
  atomicAdd(&a->add_double, 0.5);
  atomicMax(&a->max_int, gid);
  atomicMin(&a->min_int, -gid);
  atomicMax(&a->max_unsigned, static_cast<unsigned>(gid) * 3u);
  if (atomicCAS(&a->cas_flag, 0, gid + 1) == 0) atomicAdd(&a->cas_winners, 1);
  atomicExch(&a->exch_seen, 7u);
}
DITTO_KERNEL(atomics)

// Dynamic shared memory (the packet's group_segment_size): reversed in the group.
__global__ void dynamic_shared_reverse(int* out) {
  HIP_DYNAMIC_SHARED(int, buffer);
  const unsigned tid = threadIdx.x;
  buffer[tid] = static_cast<int>(tid + 100 * blockIdx.x);
  __syncthreads();
  out[blockIdx.x * blockDim.x + tid] = buffer[blockDim.x - 1 - tid];
}
DITTO_KERNEL(dynamic_shared_reverse)

// Work-item 0 switches to downward rounding, then every work-item divides 1 by
// 3 after a barrier: only work-item 0 may see the rounded-down quotient
// (to nearest, 1/3 rounds up to 0x3eaaaaab; downward gives 0x3eaaaaaa).
__global__ void rounding_per_work_item(float* out, int change) {
  if (change && threadIdx.x == 0) fesetround(FE_DOWNWARD);
  __syncthreads();
  volatile float one = 1.0f, three = 3.0f;
  out[blockIdx.x * blockDim.x + threadIdx.x] = one / three;
}
DITTO_KERNEL(rounding_per_work_item)

// A template kernel, as the apps' scale_values.
template <typename T>
__global__ void scale_values(T* input, T* output, T factor, int N) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) output[i] = input[i] * factor;
}
DITTO_KERNEL(scale_values<double>)

// Each round every work-item writes its group's id into its __shared__ slot,
// waits at a barrier, then checks every slot of the group: a slot holding
// another group's id means groups running at the same time share the
// memory. violations[blockIdx.x] counts what the group saw.
__global__ void shared_identity(int* violations, int rounds) {
  __shared__ unsigned owner[256];
  const unsigned tid = threadIdx.x;
  for (int r = 0; r < rounds; ++r) {
    owner[tid] = blockIdx.x * 1000u + static_cast<unsigned>(r);
    __syncthreads();
    for (unsigned i = 0; i < blockDim.x; ++i) {
      if (owner[i] != blockIdx.x * 1000u + static_cast<unsigned>(r)) atomicAdd(&violations[blockIdx.x], 1);
    }
    __syncthreads();
  }
}
DITTO_KERNEL(shared_identity)

// The same check on dynamic shared memory (blockDim.x unsigneds).
__global__ void dynamic_shared_identity(int* violations, int rounds) {
  HIP_DYNAMIC_SHARED(unsigned, owner);
  const unsigned tid = threadIdx.x;
  for (int r = 0; r < rounds; ++r) {
    owner[tid] = blockIdx.x * 1000u + static_cast<unsigned>(r);
    __syncthreads();
    for (unsigned i = 0; i < blockDim.x; ++i) {
      if (owner[i] != blockIdx.x * 1000u + static_cast<unsigned>(r)) atomicAdd(&violations[blockIdx.x], 1);
    }
    __syncthreads();
  }
}
DITTO_KERNEL(dynamic_shared_identity)

// Faulting kernels (crates/hsa-cpu/tests/runtime/faults.rs compiles this
// file): a read of whatever `p` points at (an unmapped page: a GPU's memory
// access fault), and a trap (ud2: a GPU's illegal instruction) before a
// store that never happens.
__global__ void read_from(const float* p, float* out) { out[threadIdx.x] = p[threadIdx.x]; }
DITTO_KERNEL(read_from)

__global__ void trap_now(int* never_written) {
  __builtin_trap();
  *never_written = 1;
}
DITTO_KERNEL(trap_now)
