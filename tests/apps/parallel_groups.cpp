// parallel_groups: how the CPU runtime runs the groups of a dispatch. Prints
// on how many OS threads 64 groups ran, and what kernels that synchronise
// within a group saw: groups seeing another group's __shared__ or dynamic
// shared memory, and wrong results of a barrier-heavy rotation. Run with
// DITTO_HSA_CPU_THREADS=1 and =4 (crates/test-apps/tests/apps_on_cpu_runtime.rs).
#include "hiplite.hpp"

#ifdef DITTO_DEVICE_PASS
#include <sys/syscall.h>
#include <unistd.h>
#endif

// Work-item 0 of each group records the OS thread running the group, then
// every work-item waits 2 ms in total so groups overlap in time.
__global__ void group_threads(unsigned long long* tids) {
#ifdef DITTO_DEVICE_PASS
  if (threadIdx.x == 0) tids[blockIdx.x] = static_cast<unsigned long long>(syscall(SYS_gettid));
  if (threadIdx.x == 0) usleep(2000);
#else
  (void)tids;
#endif
}
DITTO_KERNEL(group_threads)

// See kernel_checks.cpp: violations[g] counts slots of group g's shared
// memory that held another group's value.
__global__ void shared_identity(int* violations, int rounds) {
  __shared__ unsigned owner[256];
  for (int r = 0; r < rounds; ++r) {
    owner[threadIdx.x] = blockIdx.x * 1000u + static_cast<unsigned>(r);
    __syncthreads();
    for (unsigned i = 0; i < blockDim.x; ++i) {
      if (owner[i] != blockIdx.x * 1000u + static_cast<unsigned>(r)) atomicAdd(&violations[blockIdx.x], 1);
    }
    __syncthreads();
  }
}
DITTO_KERNEL(shared_identity)

__global__ void dynamic_shared_identity(int* violations, int rounds) {
  HIP_DYNAMIC_SHARED(unsigned, owner);
  for (int r = 0; r < rounds; ++r) {
    owner[threadIdx.x] = blockIdx.x * 1000u + static_cast<unsigned>(r);
    __syncthreads();
    for (unsigned i = 0; i < blockDim.x; ++i) {
      if (owner[i] != blockIdx.x * 1000u + static_cast<unsigned>(r)) atomicAdd(&violations[blockIdx.x], 1);
    }
    __syncthreads();
  }
}
DITTO_KERNEL(dynamic_shared_identity)

// `rounds` rotations through shared memory, two barriers each: work-item t
// of every group ends with (t + rounds) % blockDim.x.
__global__ void barrier_rounds(int* out, int rounds) {
  __shared__ int slots[256];
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

#ifndef DITTO_DEVICE_PASS
#include <stdio.h>

#include <set>
#include <vector>

template <typename T>
static std::vector<T> run_and_read(T* device, size_t n) {
  std::vector<T> host(n);
  HIP_CHECK(hipMemcpy(host.data(), device, n * sizeof(T), hipMemcpyDeviceToHost));
  return host;
}

template <typename T>
static T* zeroed(size_t n) {
  T* device = nullptr;
  HIP_CHECK(hipMalloc(&device, n * sizeof(T)));
  HIP_CHECK(hipMemset(device, 0, n * sizeof(T)));
  return device;
}

int main() {
  const int groups = 64, block = 64, rounds = 50;

  unsigned long long* tids = zeroed<unsigned long long>(groups);
  hipLaunchKernelGGL(group_threads, dim3(groups), dim3(block), 0, 0, tids);
  HIP_CHECK(hipGetLastError());

  int* shared_violations = zeroed<int>(groups);
  hipLaunchKernelGGL(shared_identity, dim3(groups), dim3(block), 0, 0, shared_violations, rounds);
  HIP_CHECK(hipGetLastError());

  int* dynamic_violations = zeroed<int>(groups);
  hipLaunchKernelGGL(dynamic_shared_identity, dim3(groups), dim3(block), block * sizeof(unsigned), 0,
                     dynamic_violations, rounds);
  HIP_CHECK(hipGetLastError());

  int* rotated = zeroed<int>(groups * block);
  hipLaunchKernelGGL(barrier_rounds, dim3(groups), dim3(block), 0, 0, rotated, rounds);
  HIP_CHECK(hipGetLastError());
  HIP_CHECK(hipDeviceSynchronize());

  std::set<unsigned long long> threads;
  int missing = 0;
  for (unsigned long long tid : run_and_read(tids, groups)) {
    if (tid == 0) ++missing;
    threads.insert(tid);
  }
  long shared_total = 0, dynamic_total = 0;
  for (int v : run_and_read(shared_violations, groups)) shared_total += v;
  for (int v : run_and_read(dynamic_violations, groups)) dynamic_total += v;
  int wrong = 0;
  std::vector<int> out = run_and_read(rotated, groups * block);
  for (int i = 0; i < groups * block; ++i) {
    if (out[i] != (i % block + rounds) % block) ++wrong;
  }
  printf("groups = %d, missing = %d, threads = %zu\n", groups, missing, threads.size());
  printf("shared violations = %ld, dynamic shared violations = %ld, barrier rounds wrong = %d\n", shared_total,
         dynamic_total, wrong);
  HIP_CHECK(hipFree(tids));
  HIP_CHECK(hipFree(shared_violations));
  HIP_CHECK(hipFree(dynamic_violations));
  HIP_CHECK(hipFree(rotated));
  return 0;
}
#endif
