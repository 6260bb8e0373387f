// queue_churn: creates and destroys queues one after another, as HIP and
// PyTorch do with their streams. Each of C cycles creates a queue,
// dispatches fill_tag(unsigned* out, unsigned tag, int n) on it into one
// reused buffer (out[i] = (cycle << 8) | i), waits for it with a barrier,
// checks the words and destroys the queue. After the first W cycles (the
// warm-up: caches of the runtime and the tool filled) and after the last,
// it prints the bytes malloc holds in use (mallinfo2's uordblks):
//
//   queue_churn [CYCLES [WARMUP]]      (default 1000 and 100)
//   -> "warm <bytes>\nend <bytes>\nwrong 0\n"
//
// Exits 0 when every word was right.
#include "fill_tag.hpp"

#ifndef DITTO_DEVICE_PASS
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace {

using fill_tag_app::FillTagArgs;
using fill_tag_app::kElements;

void check(hsa_status_t status, const char* what) {
  if (status != HSA_STATUS_SUCCESS) {
    fprintf(stderr, "queue_churn: %s failed (0x%x)\n", what, static_cast<unsigned>(status));
    exit(1);
  }
}

int count_arg(int argc, char** argv, int at, int fallback) {
  if (argc <= at) return fallback;
  char* end = nullptr;
  const long value = strtol(argv[at], &end, 10);
  if (end == argv[at] || *end != '\0' || value < 1 || value > 1000000) {
    fprintf(stderr, "queue_churn: argument %d wants a number from 1 to 1000000, got \"%s\"\n", at, argv[at]);
    exit(2);
  }
  return static_cast<int>(value);
}

}  // namespace

int main(int argc, char** argv) {
  const int cycles = count_arg(argc, argv, 1, 1000);
  const int warmup = count_arg(argc, argv, 2, 100);
  if (warmup >= cycles) {
    fprintf(stderr, "queue_churn: the warm-up (%d) must be shorter than the run (%d cycles)\n", warmup, cycles);
    return 2;
  }
  hiplite::Runtime& rt = hiplite::runtime();
  const hiplite::Kernel kernel = fill_tag_app::set_up("queue_churn");
  unsigned int* out = nullptr;
  HIP_CHECK(hipMalloc(&out, kElements * sizeof(unsigned int)));
  void* kernarg = nullptr;
  check(hsa_amd_memory_pool_allocate(rt.kernarg_pool, kernel.kernarg_segment_size, 0, &kernarg),
        "hsa_amd_memory_pool_allocate(kernarg pool)");
  hsa_signal_t signal;
  check(hsa_signal_create(1, 0, nullptr, &signal), "hsa_signal_create");
  long wrong = 0;
  for (int cycle = 0; cycle < cycles; ++cycle) {
    hsa_queue_t* q = nullptr;
    check(hsa_queue_create(rt.gpu, 64, HSA_QUEUE_TYPE_MULTI, nullptr, nullptr, UINT32_MAX, UINT32_MAX, &q),
          "hsa_queue_create");
    const unsigned tag = static_cast<unsigned>(cycle) << 8;
    memset(kernarg, 0, kernel.kernarg_segment_size);
    const FillTagArgs args{out, tag, kElements};
    memcpy(kernarg, &args, sizeof args);
    fill_tag_app::dispatch(q, kernel, kernarg);
    fill_tag_app::drain(q, signal);
    unsigned int seen[kElements];  // device memory: read through a copy, as on a GPU
    HIP_CHECK(hipMemcpy(seen, out, sizeof seen, hipMemcpyDeviceToHost));
    for (int i = 0; i < kElements; ++i) wrong += seen[i] != (tag | static_cast<unsigned>(i));
    check(hsa_queue_destroy(q), "hsa_queue_destroy");
    if (cycle + 1 == warmup) printf("warm %zu\n", mallinfo2().uordblks);
  }
  printf("end %zu\nwrong %ld\n", mallinfo2().uordblks, wrong);
  return wrong == 0 ? 0 : 1;
}
#endif
