// tiles.hip — cooperative groups as HIP programmers use them: the block
// (this_thread_block, its sync), static tiles (tiled_partition<16>) that
// reduce with shfl_down, and a tile whose size is given at run time
// (tiled_partition(block, 32)) that reduces through shared memory with its
// sync. Prints the three sums and whether they are right.
// HIP 5.2's cooperative-groups header needs hip_runtime.h first.
#include <hip/hip_runtime.h>
#include <hip/hip_cooperative_groups.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace cg = cooperative_groups;

#define HIP_CHECK(call)                                                    \
  do {                                                                     \
    hipError_t status_ = (call);                                           \
    if (status_ != hipSuccess) {                                           \
      std::fprintf(stderr, "%s: %s\n", #call, hipGetErrorString(status_)); \
      std::exit(2);                                                        \
    }                                                                      \
  } while (0)

constexpr unsigned kBlock = 128;

__device__ int tile_sum_shared(cg::thread_group tile, int* scratch, int value) {
  const unsigned rank = tile.thread_rank();
  for (unsigned half = tile.size() / 2; half > 0; half /= 2) {
    scratch[rank] = value;
    tile.sync();
    if (rank < half) value += scratch[rank + half];
    tile.sync();
  }
  return value;
}

__global__ void sums(const int* input, int* block_sums, int* tile16_sums, int* tile32_sums) {
  __shared__ int scratch[kBlock];
  cg::thread_block block = cg::this_thread_block();
  const unsigned t = block.thread_rank();
  const int value = input[blockIdx.x * kBlock + t];

  scratch[t] = value;
  block.sync();
  if (t == 0) {
    int total = 0;
    for (unsigned i = 0; i < block.size(); ++i) total += scratch[i];
    block_sums[blockIdx.x] = total;
  }
  block.sync();

  cg::thread_block_tile<16> tile16 = cg::tiled_partition<16>(block);
  int v = value;
  for (unsigned offset = tile16.size() / 2; offset > 0; offset /= 2) v += tile16.shfl_down(v, offset);
  if (tile16.thread_rank() == 0) tile16_sums[blockIdx.x * (kBlock / 16) + t / 16] = v;

  cg::thread_group tile32 = cg::tiled_partition(block, 32);
  const int s = tile_sum_shared(tile32, scratch + (t / 32) * 32, value);
  if (tile32.thread_rank() == 0) tile32_sums[blockIdx.x * (kBlock / 32) + t / 32] = s;
}

int main() {
  const unsigned blocks = 4;
  const unsigned n = blocks * kBlock;
  std::vector<int> input(n);
  for (unsigned i = 0; i < n; ++i) input[i] = static_cast<int>((i * 37) % 101) - 50;
  int *d_in, *d_block, *d_t16, *d_t32;
  HIP_CHECK(hipMalloc(&d_in, n * sizeof(int)));
  HIP_CHECK(hipMalloc(&d_block, blocks * sizeof(int)));
  HIP_CHECK(hipMalloc(&d_t16, n / 16 * sizeof(int)));
  HIP_CHECK(hipMalloc(&d_t32, n / 32 * sizeof(int)));
  HIP_CHECK(hipMemcpy(d_in, input.data(), n * sizeof(int), hipMemcpyHostToDevice));
  sums<<<blocks, kBlock>>>(d_in, d_block, d_t16, d_t32);
  HIP_CHECK(hipGetLastError());
  std::vector<int> block_sums(blocks), t16(n / 16), t32(n / 32);
  HIP_CHECK(hipMemcpy(block_sums.data(), d_block, blocks * sizeof(int), hipMemcpyDeviceToHost));
  HIP_CHECK(hipMemcpy(t16.data(), d_t16, t16.size() * sizeof(int), hipMemcpyDeviceToHost));
  HIP_CHECK(hipMemcpy(t32.data(), d_t32, t32.size() * sizeof(int), hipMemcpyDeviceToHost));
  int wrong = 0;
  long long total_block = 0, total16 = 0, total32 = 0;
  for (unsigned b = 0; b < blocks; ++b) {
    int expect = 0;
    for (unsigned i = 0; i < kBlock; ++i) expect += input[b * kBlock + i];
    wrong += block_sums[b] != expect;
    total_block += block_sums[b];
  }
  for (unsigned k = 0; k < n / 16; ++k) {
    int expect = 0;
    for (unsigned i = 0; i < 16; ++i) expect += input[k * 16 + i];
    wrong += t16[k] != expect;
    total16 += t16[k];
  }
  for (unsigned k = 0; k < n / 32; ++k) {
    int expect = 0;
    for (unsigned i = 0; i < 32; ++i) expect += input[k * 32 + i];
    wrong += t32[k] != expect;
    total32 += t32[k];
  }
  std::printf("tiles: block %lld, 16-tiles %lld, 32-tiles %lld, %d wrong\n", total_block, total16, total32, wrong);
  return wrong == 0 ? 0 : 1;
}
