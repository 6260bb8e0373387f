// wave_ops.hip — cross-lane operations of a 64-lane wavefront, with what
// the hardware gives for each lane computed on the host from the ISA's
// rules (ds_bpermute_b32: a lane reads the value of the lane it names,
// modulo 64, and 0 when that lane is inactive; a ballot has one bit per
// active lane) and HIP's lane arithmetic for `width`. Blocks of 96
// work-items: one full wavefront and one of 32 lanes. Prints the number of
// mismatches and a few values; exits 0 when there are none.
#include <hip/hip_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#define HIP_CHECK(call)                                                             \
  do {                                                                              \
    hipError_t status_ = (call);                                                    \
    if (status_ != hipSuccess) {                                                    \
      std::fprintf(stderr, "%s: %s\n", #call, hipGetErrorString(status_));          \
      std::exit(2);                                                                 \
    }                                                                               \
  } while (0)

constexpr int kBlock = 96;
constexpr int kBlocks = 2;
constexpr int kOps = 12;

__global__ void wave_ops(long long* out) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  const int lane = __lane_id();
  const int v = threadIdx.x * 10 + blockIdx.x;
  long long* o = out + static_cast<long long>(t) * kOps;
  o[0] = lane;
  o[1] = static_cast<long long>(__ballot(lane % 3 == 0));
  o[2] = __shfl(v, 5);
  o[3] = __shfl(v, 3, 16);
  o[4] = __shfl_up(v, 1);
  o[5] = __shfl_down(v, 2, 8);
  o[6] = __shfl_xor(v, 1);
  o[7] = __any(lane == 40) * 10 + __all(lane < 64);
  // Divergence: only the lanes below 10 take part, so lane 20 is inactive.
  o[8] = -1;
  if (lane < 10) o[8] = __shfl(v, 20);
  // Only the odd lanes take part.
  o[9] = -1;
  if (lane % 2 == 1) o[9] = static_cast<long long>(__ballot(1));  // __activemask() from HIP 6.2
  o[10] = warpSize;
  o[11] = __shfl(static_cast<double>(v) + 0.5, 63) * 2.0;
}

int main() {
  const int n = kBlock * kBlocks;
  long long* d_out = nullptr;
  HIP_CHECK(hipMalloc(&d_out, n * kOps * sizeof(long long)));
  wave_ops<<<kBlocks, kBlock>>>(d_out);
  HIP_CHECK(hipGetLastError());
  std::vector<long long> out(n * kOps);
  HIP_CHECK(hipMemcpy(out.data(), d_out, out.size() * sizeof(long long), hipMemcpyDeviceToHost));

  int checks = 0;
  int mismatches = 0;
  for (int t = 0; t < n; ++t) {
    const int block = t / kBlock;
    const int local = t % kBlock;
    const int lane = local % 64;
    const int first = local - lane;                     // first work-item of the wavefront
    const int lanes = kBlock - first < 64 ? kBlock - first : 64;  // active lanes
    auto value_of = [&](int source_lane) -> long long {  // ds_bpermute: 0 from an inactive lane
      source_lane &= 63;
      return source_lane < lanes ? (first + source_lane) * 10 + block : 0;
    };
    unsigned long long thirds = 0, odd = 0;
    for (int l = 0; l < lanes; ++l) {
      if (l % 3 == 0) thirds |= 1ull << l;
      if (l % 2 == 1) odd |= 1ull << l;
    }
    auto segment = [&](int width) { return lane & ~(width - 1); };
    long long expected[kOps];
    expected[0] = lane;
    expected[1] = static_cast<long long>(thirds);
    expected[2] = value_of(5);
    expected[3] = value_of((3 & 15) + segment(16));
    expected[4] = lane - 1 < segment(64) ? value_of(lane) : value_of(lane - 1);
    expected[5] = (lane & 7) + 2 >= 8 ? value_of(lane) : value_of(lane + 2);
    expected[6] = (lane ^ 1) >= ((lane + 64) & ~63) ? value_of(lane) : value_of(lane ^ 1);
    expected[7] = (lanes > 40 ? 10 : 0) + 1;
    expected[8] = lane < 10 ? 0 : -1;  // lane 20 is not active in that branch
    expected[9] = lane % 2 == 1 ? static_cast<long long>(odd) : -1;
    expected[10] = 64;
    expected[11] = static_cast<long long>((static_cast<double>(value_of(63)) + (63 < lanes ? 0.5 : 0.0)) * 2.0);
    for (int op = 0; op < kOps; ++op) {
      ++checks;
      if (out[t * kOps + op] != expected[op]) {
        if (mismatches < 10) {
          std::printf("mismatch: work-item %d op %d: %lld, expected %lld\n", t, op, out[t * kOps + op], expected[op]);
        }
        ++mismatches;
      }
    }
  }
  std::printf("wave_ops: %d mismatches in %d checks; ballot of wavefront 1: %llx; lane 70 reads %lld\n", mismatches,
              checks, static_cast<unsigned long long>(out[64 * kOps + 1]), out[70 * kOps + 2]);
  HIP_CHECK(hipFree(d_out));
  return mismatches == 0 ? 0 : 1;
}
