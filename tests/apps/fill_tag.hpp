// fill_tag.hpp: the kernel of the applications that write packets into
// their own queues (many_queues, queue_churn), and the host side they
// share: setting it up, its argument block, one dispatch of it, and a wait
// for a queue.
//
// fill_tag(unsigned* out, unsigned tag, int n): out[i] = tag | i, so every
// output word says which dispatch wrote it.
#pragma once
#include "hiplite.hpp"

__global__ void fill_tag(unsigned int* out, unsigned int tag, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tag | static_cast<unsigned int>(i);
}
DITTO_KERNEL(fill_tag)

#ifndef DITTO_DEVICE_PASS
#include <stdio.h>
#include <stdlib.h>

namespace fill_tag_app {

// Words per output buffer, and work-items per dispatch.
constexpr int kElements = 64;

// fill_tag's kernarg segment: natural alignment, declaration order.
struct FillTagArgs {
  unsigned int* out;
  unsigned int tag;
  int n;
};

// fill_tag as loaded by the runtime; `app` names the application in the
// message printed before it exits when the kernel cannot be set up.
inline hiplite::Kernel set_up(const char* app) {
  hiplite::Runtime& rt = hiplite::runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  const hiplite::Kernel* found = nullptr;
  if (hiplite::ensure_initialized(rt) || hiplite::ensure_executable(rt) ||
      hiplite::find_kernel(rt, reinterpret_cast<const void*>(fill_tag), &found)) {
    fprintf(stderr, "%s: cannot set up the kernel: %s\n", app, rt.detail.c_str());
    exit(1);
  }
  return *found;
}

// One dispatch of fill_tag over kElements work-items into `q`, with no
// completion signal.
inline void dispatch(hsa_queue_t* q, const hiplite::Kernel& kernel, void* kernarg) {
  hsa_kernel_dispatch_packet_t p{};
  p.workgroup_size_x = kElements;
  p.workgroup_size_y = 1;
  p.workgroup_size_z = 1;
  p.grid_size_x = kElements;
  p.grid_size_y = 1;
  p.grid_size_z = 1;
  p.private_segment_size = kernel.private_segment_size;
  p.group_segment_size = kernel.group_segment_size;
  p.kernel_object = kernel.kernel_object;
  p.kernarg_address = kernarg;
  p.completion_signal.handle = 0;
  hiplite::submit_to(q, &p, hiplite::header_for(HSA_PACKET_TYPE_KERNEL_DISPATCH),
                     static_cast<uint16_t>(1 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS));
}

// Waits until everything the calling thread put in `q` before has
// completed: a barrier-AND completing `signal`.
inline void drain(hsa_queue_t* q, hsa_signal_t signal) {
  hsa_signal_store_relaxed(signal, 1);
  hsa_barrier_and_packet_t b{};
  b.completion_signal = signal;
  hiplite::submit_to(q, &b, hiplite::header_for(HSA_PACKET_TYPE_BARRIER_AND), 0);
  while (hsa_signal_wait_scacquire(signal, HSA_SIGNAL_CONDITION_LT, 1, UINT64_MAX, HSA_WAIT_STATE_BLOCKED) >= 1) {
  }
}

}  // namespace fill_tag_app
#endif
