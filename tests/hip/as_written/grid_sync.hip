// A grid-wide sync, as HIP programmers write it: a cooperative launch
// (hipLaunchCooperativeKernel) of one group per compute unit, whose groups
// exchange partial sums through global memory between grid.sync() calls.
// Round r: every group adds its slice plus r, syncs, then reads ALL the
// partials (written by other groups before the sync) into its total.
// Also: the device reports cooperative launch support; grid.is_valid() is
// false in an ordinary launch; a grid too large to be resident is refused
// by HIP with hipErrorCooperativeLaunchTooLarge.
#include <hip/hip_runtime.h>
#include <hip/hip_cooperative_groups.h>

#include <cstdio>
#include <vector>

namespace cg = cooperative_groups;

#define CHECK(call)                                                        \
  do {                                                                     \
    hipError_t e_ = (call);                                                \
    if (e_ != hipSuccess) {                                                \
      printf("%s failed: %s\n", #call, hipGetErrorString(e_));             \
      return 1;                                                            \
    }                                                                      \
  } while (0)

constexpr int kThreads = 64;
constexpr int kRounds = 3;

__global__ void exchange(const int* in, int* partial, long long* totals, int per_group) {
  cg::grid_group grid = cg::this_grid();
  __shared__ int sums[kThreads];
  long long total = 0;
  for (int round = 0; round < kRounds; ++round) {
    int mine = 0;
    for (int i = threadIdx.x; i < per_group; i += blockDim.x) mine += in[blockIdx.x * per_group + i] + round;
    sums[threadIdx.x] = mine;
    __syncthreads();
    if (threadIdx.x == 0) {
      int s = 0;
      for (int t = 0; t < kThreads; ++t) s += sums[t];
      partial[blockIdx.x] = s;
    }
    grid.sync();
    if (threadIdx.x == 0)
      for (unsigned g = 0; g < gridDim.x; ++g) total += partial[g];
    grid.sync();  // nobody overwrites a partial another group still reads
  }
  if (threadIdx.x == 0) totals[blockIdx.x] = total;
}

__global__ void validity(int* out) { out[blockIdx.x] = cg::this_grid().is_valid() ? 1 : 0; }

int main() {
  int coop = 0, cus = 0;
  CHECK(hipDeviceGetAttribute(&coop, hipDeviceAttributeCooperativeLaunch, 0));
  CHECK(hipDeviceGetAttribute(&cus, hipDeviceAttributeMultiprocessorCount, 0));
  if (!coop) {
    printf("no cooperative launch\n");
    return 1;
  }
  const int groups = cus, per_group = 1000;
  std::vector<int> in(groups * per_group);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int>(i % 7);
  int *d_in, *d_partial;
  long long* d_totals;
  CHECK(hipMalloc(&d_in, in.size() * sizeof(int)));
  CHECK(hipMalloc(&d_partial, groups * sizeof(int)));
  CHECK(hipMalloc(&d_totals, groups * sizeof(long long)));
  CHECK(hipMemcpy(d_in, in.data(), in.size() * sizeof(int), hipMemcpyHostToDevice));
  int per = per_group;
  void* args[] = {&d_in, &d_partial, &d_totals, &per};
  CHECK(hipLaunchCooperativeKernel(reinterpret_cast<void*>(exchange), dim3(groups), dim3(kThreads), args, 0, 0));
  CHECK(hipDeviceSynchronize());
  std::vector<long long> totals(groups);
  CHECK(hipMemcpy(totals.data(), d_totals, groups * sizeof(long long), hipMemcpyDeviceToHost));
  long long expected = 0, sum = 0;
  for (int v : in) sum += v;
  for (int r = 0; r < kRounds; ++r) expected += sum + static_cast<long long>(r) * groups * per_group;
  int wrong = 0;
  for (int g = 0; g < groups; ++g) wrong += totals[g] != expected;
  printf("cooperative: %d groups, %d with the wrong total\n", groups, wrong);

  int* d_valid;
  CHECK(hipMalloc(&d_valid, 2 * sizeof(int)));
  validity<<<2, 1>>>(d_valid);
  int valid[2];
  CHECK(hipMemcpy(valid, d_valid, sizeof valid, hipMemcpyDeviceToHost));
  void* vargs[] = {&d_valid};
  CHECK(hipLaunchCooperativeKernel(reinterpret_cast<void*>(validity), dim3(2), dim3(1), vargs, 0, 0));
  int coop_valid[2];
  CHECK(hipMemcpy(coop_valid, d_valid, sizeof coop_valid, hipMemcpyDeviceToHost));
  printf("is_valid: ordinary launch %d %d, cooperative launch %d %d\n", valid[0], valid[1], coop_valid[0],
         coop_valid[1]);

  hipError_t too_large = hipLaunchCooperativeKernel(reinterpret_cast<void*>(exchange), dim3(groups * 4096),
                                                    dim3(kThreads), args, 0, 0);
  printf("a grid of %d groups: %s\n", groups * 4096, hipGetErrorName(too_large));
  (void)hipGetLastError();
  return wrong == 0 ? 0 : 1;
}
