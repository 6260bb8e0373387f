// many_queues: many application threads dispatching at once on shared
// queues. Q queues (created as CLR creates its streams' queues) are shared
// by T threads; every thread submits N dispatches of
// fill_tag(unsigned* out, unsigned tag, int n) to each queue, all threads
// at the same time, each dispatch into its OWN hipMalloc of n = 64 words:
// out[i] = tag | i with tag = (thread << 24) | (queue << 16) | (iteration << 8),
// so every output says which dispatch wrote it. Defaults: T = 8, Q = 4,
// N = 50 (1600 dispatches), queues of 4096 slots.
//
//   many_queues [--threads T] [--queues Q] [--per-queue N] [--queue-size S]
//
// Several threads write into one queue as CLR's do: slot reserved with
// hsa_queue_add_write_index_screlease, body written, header stored last
// with release, doorbell rung with the slot's index; no completion signal
// on kernel packets. Each thread then waits for its work with one
// barrier-AND per queue carrying its own completion signal. A small
// --queue-size (the runtime's minimum is 4) keeps many packets waiting for
// room. Prints the totals and the number of wrong words (nothing that
// changes from run to run); exits 0 when every word is right.
#include "fill_tag.hpp"

#ifndef DITTO_DEVICE_PASS
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <thread>
#include <vector>

namespace {

using fill_tag_app::FillTagArgs;
using fill_tag_app::kElements;

struct Config {
  int threads = 8;
  int queues = 4;
  int per_queue = 50;
  unsigned queue_size = 4096;
};

void queue_error(hsa_status_t status, hsa_queue_t* queue, void*) {
  fprintf(stderr, "many_queues: queue %p reported an error (0x%x); exiting\n", static_cast<void*>(queue),
          static_cast<unsigned>(status));
  fflush(stderr);
  _exit(1);
}

void check(hsa_status_t status, const char* what) {
  if (status != HSA_STATUS_SUCCESS) {
    fprintf(stderr, "many_queues: %s failed (0x%x)\n", what, static_cast<unsigned>(status));
    exit(1);
  }
}

unsigned tag_of(int thread, int queue, int iteration) {
  return (static_cast<unsigned>(thread) << 24) | (static_cast<unsigned>(queue) << 16) |
         (static_cast<unsigned>(iteration) << 8);
}

int parse_count(const char* flag, const char* text, int low, int high) {
  char* end = nullptr;
  const long value = strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < low || value > high) {
    fprintf(stderr, "many_queues: %s wants a number from %d to %d, got \"%s\"\n", flag, low, high, text);
    exit(2);
  }
  return static_cast<int>(value);
}

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 >= argc) {
      fprintf(stderr, "usage: many_queues [--threads T] [--queues Q] [--per-queue N] [--queue-size S]\n");
      exit(2);
    }
    if (strcmp(argv[i], "--threads") == 0) {
      c.threads = parse_count("--threads", argv[i + 1], 1, 255);
    } else if (strcmp(argv[i], "--queues") == 0) {
      c.queues = parse_count("--queues", argv[i + 1], 1, 255);
    } else if (strcmp(argv[i], "--per-queue") == 0) {
      c.per_queue = parse_count("--per-queue", argv[i + 1], 1, 255);
    } else if (strcmp(argv[i], "--queue-size") == 0) {
      c.queue_size = static_cast<unsigned>(parse_count("--queue-size", argv[i + 1], 1, 1 << 20));
    } else {
      fprintf(stderr, "many_queues: unknown option %s\n", argv[i]);
      exit(2);
    }
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  const Config config = parse(argc, argv);
  hiplite::Runtime& rt = hiplite::runtime();
  const hiplite::Kernel kernel = fill_tag_app::set_up("many_queues");
  if (kernel.kernarg_segment_size < sizeof(FillTagArgs)) {
    fprintf(stderr, "many_queues: fill_tag's kernarg segment is %u bytes, expected at least %zu\n",
            kernel.kernarg_segment_size, sizeof(FillTagArgs));
    return 1;
  }

  std::vector<hsa_queue_t*> queues(config.queues, nullptr);
  for (hsa_queue_t*& q : queues)
    check(hsa_queue_create(rt.gpu, config.queue_size, HSA_QUEUE_TYPE_MULTI, queue_error, nullptr, UINT32_MAX,
                           UINT32_MAX, &q),
          "hsa_queue_create");

  const int per_thread = config.queues * config.per_queue;
  // outputs[t][q * per_queue + it]: one allocation per dispatch.
  std::vector<std::vector<unsigned int*>> outputs(config.threads);
  for (auto& list : outputs) {
    list.resize(per_thread);
    for (unsigned int*& out : list) HIP_CHECK(hipMalloc(&out, kElements * sizeof(unsigned int)));
  }

  std::atomic<int> ready{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < config.threads; ++t) {
    workers.emplace_back([&, t] {
      std::vector<void*> kernargs;
      hsa_signal_t signal;
      check(hsa_signal_create(1, 0, nullptr, &signal), "hsa_signal_create");
      // Start together, so that the queues see every thread at once.
      ready.fetch_add(1);
      while (ready.load() < config.threads) sched_yield();
      for (int it = 0; it < config.per_queue; ++it) {
        for (int q = 0; q < config.queues; ++q) {
          void* kernarg = nullptr;
          check(hsa_amd_memory_pool_allocate(rt.kernarg_pool, kernel.kernarg_segment_size, 0, &kernarg),
                "hsa_amd_memory_pool_allocate(kernarg pool)");
          memset(kernarg, 0, kernel.kernarg_segment_size);
          const FillTagArgs args{outputs[t][q * config.per_queue + it], tag_of(t, q, it), kElements};
          memcpy(kernarg, &args, sizeof args);
          kernargs.push_back(kernarg);
          fill_tag_app::dispatch(queues[q], kernel, kernarg);
        }
      }
      for (hsa_queue_t* q : queues) fill_tag_app::drain(q, signal);
      for (void* kernarg : kernargs) check(hsa_amd_memory_pool_free(kernarg), "hsa_amd_memory_pool_free(kernarg)");
      hsa_signal_destroy(signal);
    });
  }
  for (std::thread& w : workers) w.join();

  long wrong = 0;
  std::vector<unsigned int> host(kElements);
  for (int t = 0; t < config.threads; ++t) {
    for (int q = 0; q < config.queues; ++q) {
      for (int it = 0; it < config.per_queue; ++it) {
        unsigned int* out = outputs[t][q * config.per_queue + it];
        HIP_CHECK(hipMemcpy(host.data(), out, kElements * sizeof(unsigned int), hipMemcpyDeviceToHost));
        for (int i = 0; i < kElements; ++i) wrong += host[i] != (tag_of(t, q, it) | static_cast<unsigned>(i));
        HIP_CHECK(hipFree(out));
      }
    }
  }
  for (hsa_queue_t* q : queues) check(hsa_queue_destroy(q), "hsa_queue_destroy");

  printf("many_queues: threads = %d, queues = %d, per_queue = %d, dispatches = %d, wrong = %ld\n", config.threads,
         config.queues, config.per_queue, config.threads * per_thread, wrong);
  return wrong == 0 ? 0 : 1;
}
#endif
