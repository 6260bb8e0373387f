// include/ditto_hip_host/hip/hip_fp16.h — half precision in the host build:
// HIP's own g++ form of __half and __half2 (storage with conversions), and
// the arithmetic intrinsics of the device pass, computed in float and
// rounded to half as the GPU's half instructions round (to nearest even).
#ifndef DITTO_HIP_HOST_HIP_FP16_H
#define DITTO_HIP_HOST_HIP_FP16_H
#include "ditto_hip_platform.h"
#include_next <hip/hip_fp16.h>
#include <hip/hip_vector_types.h>

#define DITTO_HALF_BINARY(name, op) \
  static inline __half name(__half a, __half b) { return __float2half(__half2float(a) op __half2float(b)); }
DITTO_HALF_BINARY(__hadd, +)
DITTO_HALF_BINARY(__hsub, -)
DITTO_HALF_BINARY(__hmul, *)
DITTO_HALF_BINARY(__hdiv, /)
#undef DITTO_HALF_BINARY
static inline __half __hneg(__half a) { return __float2half(-__half2float(a)); }
static inline __half __hfma(__half a, __half b, __half c) {
  return __float2half(__half2float(a) * __half2float(b) + __half2float(c));
}
#define DITTO_HALF_COMPARE(name, op) \
  static inline bool name(__half a, __half b) { return __half2float(a) op __half2float(b); }
DITTO_HALF_COMPARE(__heq, ==)
DITTO_HALF_COMPARE(__hne, !=)
DITTO_HALF_COMPARE(__hlt, <)
DITTO_HALF_COMPARE(__hle, <=)
DITTO_HALF_COMPARE(__hgt, >)
DITTO_HALF_COMPARE(__hge, >=)
#undef DITTO_HALF_COMPARE
static inline __half __int2half_rn(int i) { return __float2half(static_cast<float>(i)); }
static inline int __half2int_rz(__half h) { return static_cast<int>(__half2float(h)); }

// Operators on __half and __half2 round each result to half, as the device
// pass's half instructions do (g++'s form converts to float and would keep
// the intermediate results of a chain in float).
#define DITTO_HALF_OPERATORS(T, add, sub, mul, div, neg)                          \
  static inline T operator+(T a, T b) { return add(a, b); }                       \
  static inline T operator-(T a, T b) { return sub(a, b); }                       \
  static inline T operator*(T a, T b) { return mul(a, b); }                       \
  static inline T operator/(T a, T b) { return div(a, b); }                       \
  static inline T operator-(T a) { return neg(a); }                               \
  static inline T& operator+=(T& a, T b) { return a = a + b; }                    \
  static inline T& operator-=(T& a, T b) { return a = a - b; }                    \
  static inline T& operator*=(T& a, T b) { return a = a * b; }                    \
  static inline T& operator/=(T& a, T b) { return a = a / b; }
DITTO_HALF_OPERATORS(__half, __hadd, __hsub, __hmul, __hdiv, __hneg)

// __half2: two halves, each lane computed as __half is.
static inline __half2 make_half2(__half x, __half y) { return __half2{x, y}; }
static inline __half2 __halves2half2(__half x, __half y) { return __half2{x, y}; }
static inline __half2 __half2half2(__half x) { return __half2{x, x}; }
static inline __half __low2half(__half2 v) { return v.x; }
static inline __half __high2half(__half2 v) { return v.y; }
static inline __half2 __low2half2(__half2 v) { return __half2{v.x, v.x}; }
static inline __half2 __high2half2(__half2 v) { return __half2{v.y, v.y}; }
static inline __half2 __lowhigh2highlow(__half2 v) { return __half2{v.y, v.x}; }
static inline __half2 __lows2half2(__half2 a, __half2 b) { return __half2{a.x, b.x}; }
static inline __half2 __highs2half2(__half2 a, __half2 b) { return __half2{a.y, b.y}; }
static inline float2 __half22float2(__half2 v) { return make_float2(__half2float(v.x), __half2float(v.y)); }
static inline __half2 __float22half2_rn(float2 v) { return __half2{__float2half(v.x), __float2half(v.y)}; }
#define DITTO_HALF2_BINARY(name, op) \
  static inline __half2 name(__half2 a, __half2 b) { return __half2{op(a.x, b.x), op(a.y, b.y)}; }
DITTO_HALF2_BINARY(__hadd2, __hadd)
DITTO_HALF2_BINARY(__hsub2, __hsub)
DITTO_HALF2_BINARY(__hmul2, __hmul)
DITTO_HALF2_BINARY(__h2div, __hdiv)
#undef DITTO_HALF2_BINARY
static inline __half2 __hneg2(__half2 a) { return __half2{__hneg(a.x), __hneg(a.y)}; }
static inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) {
  return __half2{__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)};
}
DITTO_HALF_OPERATORS(__half2, __hadd2, __hsub2, __hmul2, __h2div, __hneg2)
#undef DITTO_HALF_OPERATORS
#endif
