// include/ditto_hip_host/hip/hip_fp16.h — half precision in the host build:
// HIP's own g++ form of __half and __half2 (storage with conversions), and
// the arithmetic intrinsics of the device pass, computed in float and
// rounded to half as the GPU's half instructions round (to nearest even).
#ifndef DITTO_HIP_HOST_HIP_FP16_H
#define DITTO_HIP_HOST_HIP_FP16_H
#include "ditto_hip_platform.h"
#include_next <hip/hip_fp16.h>

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
#endif
