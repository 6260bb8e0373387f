// Half precision as HIP programmers write it: __half2 arithmetic with
// operators and intrinsics, and a chain of __half additions that rounds
// at every step (2048 + 1 is 2048 in half, so 2048 + 1 + 1 stays 2048;
// computed in float it would be 2050).
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

#include <cstdio>
#include <vector>

__global__ void axpy_halves(const __half2* x, __half2* y, __half2 a, int n, float* chain) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    __half2 v = a * x[i] + y[i];
    v = __hfma2(__float2half2_rn(1.0f), v, __float2half2_rn(0.0f));
    y[i] = __lowhigh2highlow(__lowhigh2highlow(v));
  }
  if (i == 0) {
    const __half big = __float2half(2048.0f), one = __float2half(1.0f);
    __half sum = big + one + one;
    sum += one;
    chain[0] = __half2float(sum);
    chain[1] = __low2float(__halves2half2(one, big)) + __high2float(__hneg2(__half2half2(one)));
  }
}

int main() {
  const int n = 256;
  std::vector<__half2> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = __floats2half2_rn(i / 4.0f, -(i / 8.0f));
    y[i] = __floats2half2_rn(2.0f, 3.0f);
  }
  __half2 *d_x, *d_y;
  float* d_chain;
  (void)hipMalloc(&d_x, n * sizeof(__half2));
  (void)hipMalloc(&d_y, n * sizeof(__half2));
  (void)hipMalloc(&d_chain, 2 * sizeof(float));
  (void)hipMemcpy(d_x, x.data(), n * sizeof(__half2), hipMemcpyHostToDevice);
  (void)hipMemcpy(d_y, y.data(), n * sizeof(__half2), hipMemcpyHostToDevice);
  axpy_halves<<<n / 64, 64>>>(d_x, d_y, __floats2half2_rn(0.5f, 2.0f), n, d_chain);
  float chain[2];
  (void)hipMemcpy(y.data(), d_y, n * sizeof(__half2), hipMemcpyDeviceToHost);
  (void)hipMemcpy(chain, d_chain, sizeof chain, hipMemcpyDeviceToHost);
  int wrong = 0;
  for (int i = 0; i < n; ++i) {
    wrong += __low2float(y[i]) != 0.5f * (i / 4.0f) + 2.0f;
    wrong += __high2float(y[i]) != 2.0f * -(i / 8.0f) + 3.0f;
  }
  printf("halves: %d wrong of %d; 2048 + 1 + 1 + 1 in half = %g; 1 - 1 = %g\n", wrong, 2 * n, chain[0], chain[1]);
  return wrong == 0 ? 0 : 1;
}
