// fake_ranks.c — one rank of a "CUDA program" over fake_cuda.c, run once
// per rank (OMPI_COMM_WORLD_RANK): it picks its device, by
// cudaSetDevice(rank) (fake_set_device) unless FAKE_RANK_BY_VISIBLE_DEVICES
// is set (then its CUDA_VISIBLE_DEVICES shows it one device, ordinal 0),
// and launches scale(in, out, 2, n) `launches` times (argv[1], default 200),
// each time on freshly allocated buffers of the device, checking the result.
// Built with -DPLANT_ON_RANK_1, rank 1's kernel gets out[0] one too high.
// Prints "rank R: N launches on physical device P (ordinal O)".
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_cuda.h"

#define N 16384
static int g_rank;

static void* ptr_at(unsigned char* a, size_t off) {
  void* p;
  memcpy(&p, a + off, 8);
  return p;
}
static void run_scale(unsigned char* a) {
  const float* in = ptr_at(a, 0);
  float* out = ptr_at(a, 8);
  float f;
  int n;
  memcpy(&f, a + 16, 4);
  memcpy(&n, a + 20, 4);
  for (int i = 0; i < n; ++i) out[i] = in[i] * f;
#ifdef PLANT_ON_RANK_1
  if (g_rank == 1) out[0] += 1.0f;
#endif
}

int main(int argc, char** argv) {
  if (fake_inject() != 0) return 3;
  const char* r = getenv("OMPI_COMM_WORLD_RANK");
  g_rank = r ? atoi(r) : 0;
  const int launches = argc > 1 ? atoi(argv[1]) : 200;
  if (!getenv("FAKE_RANK_BY_VISIBLE_DEVICES") && fake_set_device(g_rank) != 0) {
    fprintf(stderr, "fake_ranks: rank %d has no device %d\n", g_rank, g_rank);
    return 4;
  }
  fake_function scale = {"_Z5scalePKfPffi", 4, {0, 8, 16, 20}, {8, 8, 4, 4}, run_scale};
  for (int k = 0; k < launches; ++k) {
    float* in = fake_malloc(N * sizeof(float));
    float* out = fake_malloc(N * sizeof(float));
    if (!in || !out) {
      fprintf(stderr, "fake_ranks: out of fake device memory\n");
      return 5;
    }
    for (int i = 0; i < N; ++i) in[i] = (float)((i + k + g_rank) % 13);
    float factor = 2.0f;
    int n = N;
    void* args[] = {&in, &out, &factor, &n};
    fake_launch(&scale, args, 0);
    fake_device_synchronize();
    for (int i = 1; i < N; ++i)
      if (out[i] != in[i] * 2.0f) {
        fprintf(stderr, "fake_ranks: launch %d computed out[%d] = %f\n", k, i, out[i]);
        return 6;
      }
    fake_free(in);
    fake_free(out);
  }
  printf("rank %d: %d launches on physical device %d (ordinal %d)\n", g_rank, launches,
         fake_current_physical(), fake_current_ordinal());
  return 0;
}
