// warp_reduce.hip — a block sum written the way HIP programmers write one:
// `<<<>>>` launches, dynamic shared memory (`extern __shared__`), a
// warp-shuffle reduction, a `__constant__` table filled with
// hipMemcpyToSymbol, events for timing and printf from a kernel.
//
// One source, three builds (tests/hipcc.rs, through `ditto hipcc`):
//   default          the optimized kernel: shuffles within each wavefront,
//                    then one wavefront sums the per-wavefront partials;
//   -DBASELINE       the reference: a shared-memory tree reduction;
//   -DTAIL_BUG       the optimized kernel missing the last element.
// Every build names its kernel `block_sum`, so `ditto validate` compares
// them. Output: one line with the total and whether it is right; the exit
// status says so too, unless `--report-only` is given (for `ditto
// validate`, which compares the captured buffers of programs that exit 0).
#include <hip/hip_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define HIP_CHECK(call)                                                                   \
  do {                                                                                    \
    hipError_t status_ = (call);                                                          \
    if (status_ != hipSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                  \
                   hipGetErrorString(status_));                                           \
      std::exit(2);                                                                       \
    }                                                                                     \
  } while (0)

// Weights of the elements by index modulo 4, set by the host.
__constant__ float weights[4];

constexpr int kBlock = 256;

__global__ void block_sum(const float* input, float* partial_sums, int count) {
  extern __shared__ float scratch[];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
#ifdef TAIL_BUG
  const int end = count - 1;
#else
  const int end = count;
#endif
  float value = i < end ? input[i] * weights[i % 4] : 0.0f;
#ifdef BASELINE
  scratch[threadIdx.x] = value;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) scratch[threadIdx.x] += scratch[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial_sums[blockIdx.x] = scratch[0];
#else
  for (int offset = warpSize / 2; offset > 0; offset /= 2) value += __shfl_down(value, offset);
  const int lane = threadIdx.x % warpSize;
  const int wave = threadIdx.x / warpSize;
  if (lane == 0) scratch[wave] = value;
  __syncthreads();
  if (wave == 0) {
    value = lane < static_cast<int>(blockDim.x / warpSize) ? scratch[lane] : 0.0f;
    for (int offset = warpSize / 2; offset > 0; offset /= 2) value += __shfl_xor(value, offset);
    if (lane == 0) partial_sums[blockIdx.x] = value;
  }
#endif
  if (blockIdx.x == 0 && threadIdx.x == 0) printf("block_sum: %d elements, wavefront of %d\n", count, warpSize);
}

int main(int argc, char** argv) {
  const int count = argc > 1 ? std::atoi(argv[1]) : 100000;
  const bool report_only = argc > 2 && std::string(argv[2]) == "--report-only";
  const int blocks = (count + kBlock - 1) / kBlock;
  std::vector<float> input(count);
  for (int i = 0; i < count; ++i) input[i] = static_cast<float>((i * 7) % 13) - 6.0f;
  const float host_weights[4] = {1.0f, 0.5f, 2.0f, -1.0f};
  HIP_CHECK(hipMemcpyToSymbol(HIP_SYMBOL(weights), host_weights, sizeof(host_weights)));

  float* d_input = nullptr;
  float* d_partial = nullptr;
  HIP_CHECK(hipMalloc(&d_input, count * sizeof(float)));
  HIP_CHECK(hipMalloc(&d_partial, blocks * sizeof(float)));
  HIP_CHECK(hipMemcpy(d_input, input.data(), count * sizeof(float), hipMemcpyHostToDevice));

  hipEvent_t start, stop;
  HIP_CHECK(hipEventCreate(&start));
  HIP_CHECK(hipEventCreate(&stop));
  HIP_CHECK(hipEventRecord(start, 0));
#ifdef BASELINE
  const size_t shared_bytes = kBlock * sizeof(float);
#else
  const size_t shared_bytes = (kBlock / 64) * sizeof(float);
#endif
  block_sum<<<dim3(blocks), dim3(kBlock), shared_bytes, 0>>>(d_input, d_partial, count);
  HIP_CHECK(hipGetLastError());
  HIP_CHECK(hipEventRecord(stop, 0));
  HIP_CHECK(hipEventSynchronize(stop));
  float ms = 0.0f;
  HIP_CHECK(hipEventElapsedTime(&ms, start, stop));

  std::vector<float> partial(blocks);
  HIP_CHECK(hipMemcpy(partial.data(), d_partial, blocks * sizeof(float), hipMemcpyDeviceToHost));
  double total = 0.0;
  for (float p : partial) total += p;
  double expected = 0.0;
  for (int i = 0; i < count; ++i) expected += input[i] * host_weights[i % 4];
  const bool right = std::fabs(total - expected) < 1e-3 * (1.0 + std::fabs(expected));
  std::printf("total %.1f expected %.1f %s (%s)\n", total, expected, right ? "PASS" : "FAIL",
              ms > 0.0f ? "timed" : "untimed");
  HIP_CHECK(hipFree(d_input));
  HIP_CHECK(hipFree(d_partial));
  return right || report_only ? 0 : 1;
}
