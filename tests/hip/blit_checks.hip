// blit_checks: device-side fills and copies, which the real HIP runtime
// performs with its own blit kernels (on ditto's CPU runtime: run natively,
// crates/hsa-cpu/src/code_objects/blit_kernels.rs). Each check prints
// `<name>: ok` or the first wrong byte and exits 1.
#include <string.h>

#include <vector>

#include "hip_check.hpp"

static const size_t kBytes = 8192;

static std::vector<unsigned char> pattern(unsigned seed) {
  std::vector<unsigned char> v(kBytes);
  for (size_t i = 0; i < kBytes; ++i) v[i] = static_cast<unsigned char>((i * 7 + seed) & 0xff);
  return v;
}

static void expect(const char* name, const std::vector<unsigned char>& got, const std::vector<unsigned char>& want) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) {
      printf("%s: byte %zu is %u, expected %u\n", name, i, got[i], want[i]);
      exit(1);
    }
  }
  printf("%s: ok\n", name);
}

int main() {
  unsigned char *a = nullptr, *b = nullptr;
  HIP_CHECK(hipMalloc(&a, kBytes));
  HIP_CHECK(hipMalloc(&b, kBytes));
  std::vector<unsigned char> host_a = pattern(1), host_b = pattern(2), got(kBytes);

  // Fill of odd length at an odd offset.
  HIP_CHECK(hipMemcpy(a, host_a.data(), kBytes, hipMemcpyHostToDevice));
  HIP_CHECK(hipMemset(a + 3, 0x5a, 1001));
  HIP_CHECK(hipMemcpy(got.data(), a, kBytes, hipMemcpyDeviceToHost));
  std::vector<unsigned char> want = host_a;
  memset(want.data() + 3, 0x5a, 1001);
  expect("memset_unaligned", got, want);

  // 32-bit pattern fill.
  HIP_CHECK(hipMemcpy(a, host_a.data(), kBytes, hipMemcpyHostToDevice));
  HIP_CHECK(hipMemsetD32(reinterpret_cast<int*>(a) + 5, static_cast<int>(0xdeadbeef), 333));
  HIP_CHECK(hipMemcpy(got.data(), a, kBytes, hipMemcpyDeviceToHost));
  want = host_a;
  for (int i = 0; i < 333; ++i) {
    const unsigned v = 0xdeadbeefu;
    memcpy(want.data() + 20 + 4 * i, &v, 4);
  }
  expect("memset_d32", got, want);

  // Device-to-device copy, unaligned offsets and length.
  HIP_CHECK(hipMemcpy(a, host_a.data(), kBytes, hipMemcpyHostToDevice));
  HIP_CHECK(hipMemcpy(b, host_b.data(), kBytes, hipMemcpyHostToDevice));
  HIP_CHECK(hipMemcpy(b + 6, a + 1, 1003, hipMemcpyDeviceToDevice));
  HIP_CHECK(hipMemcpy(got.data(), b, kBytes, hipMemcpyDeviceToHost));
  want = host_b;
  memcpy(want.data() + 6, host_a.data() + 1, 1003);
  expect("copy_unaligned", got, want);

  // Device-to-device copy, 16-byte aligned.
  HIP_CHECK(hipMemcpy(b, host_b.data(), kBytes, hipMemcpyHostToDevice));
  HIP_CHECK(hipMemcpy(b + 32, a + 16, 4096, hipMemcpyDeviceToDevice));
  HIP_CHECK(hipMemcpy(got.data(), b, kBytes, hipMemcpyDeviceToHost));
  want = host_b;
  memcpy(want.data() + 32, host_a.data() + 16, 4096);
  expect("copy_aligned", got, want);

  // Device-to-device 2D copy: 37 bytes of 5 rows, pitches 64 and 48.
  HIP_CHECK(hipMemcpy(b, host_b.data(), kBytes, hipMemcpyHostToDevice));
  HIP_CHECK(hipMemcpy2D(b + 2, 48, a + 1, 64, 37, 5, hipMemcpyDeviceToDevice));
  HIP_CHECK(hipMemcpy(got.data(), b, kBytes, hipMemcpyDeviceToHost));
  want = host_b;
  for (int row = 0; row < 5; ++row) memcpy(want.data() + 2 + row * 48, host_a.data() + 1 + row * 64, 37);
  expect("copy_2d", got, want);

  // Device-to-device 2D copy, everything 16-byte aligned: 64 bytes of 3 rows,
  // pitches 128 and 96.
  HIP_CHECK(hipMemcpy(b, host_b.data(), kBytes, hipMemcpyHostToDevice));
  HIP_CHECK(hipMemcpy2D(b + 32, 96, a + 16, 128, 64, 3, hipMemcpyDeviceToDevice));
  HIP_CHECK(hipMemcpy(got.data(), b, kBytes, hipMemcpyDeviceToHost));
  want = host_b;
  for (int row = 0; row < 3; ++row) memcpy(want.data() + 32 + row * 96, host_a.data() + 16 + row * 128, 64);
  expect("copy_2d_aligned", got, want);

  // 2D fill: 37 bytes of 5 rows, pitch 64.
  HIP_CHECK(hipMemcpy(a, host_a.data(), kBytes, hipMemcpyHostToDevice));
  HIP_CHECK(hipMemset2D(a + 3, 64, 0x77, 37, 5));
  HIP_CHECK(hipMemcpy(got.data(), a, kBytes, hipMemcpyDeviceToHost));
  want = host_a;
  for (int row = 0; row < 5; ++row) memset(want.data() + 3 + row * 64, 0x77, 37);
  expect("memset_2d", got, want);

  // Stream memory operations: writes of 32 and 64 bits, then waits that are
  // already satisfied (a wait that never is would hang, as on a GPU).
  HIP_CHECK(hipMemcpy(a, host_a.data(), kBytes, hipMemcpyHostToDevice));
  HIP_CHECK(hipStreamWriteValue32(nullptr, a + 8, 0x01020304u, 0));
  HIP_CHECK(hipStreamWriteValue64(nullptr, a + 16, 0x1112131415161718ull, 0));
  HIP_CHECK(hipStreamWaitValue32(nullptr, a + 8, 0x01020304u, hipStreamWaitValueEq, 0xffffffffu));
  HIP_CHECK(hipStreamWaitValue64(nullptr, a + 16, 0x10ull, hipStreamWaitValueGte, 0xffffffffffffffffull));
  HIP_CHECK(hipStreamWaitValue32(nullptr, a + 8, 0x4u, hipStreamWaitValueAnd, 0xffffffffu));
  HIP_CHECK(hipDeviceSynchronize());
  HIP_CHECK(hipMemcpy(got.data(), a, kBytes, hipMemcpyDeviceToHost));
  want = host_a;
  const unsigned v32 = 0x01020304u;
  const unsigned long long v64 = 0x1112131415161718ull;
  memcpy(want.data() + 8, &v32, 4);
  memcpy(want.data() + 16, &v64, 8);
  expect("stream_write_wait", got, want);

  HIP_CHECK(hipFree(a));
  HIP_CHECK(hipFree(b));
  return 0;
}
