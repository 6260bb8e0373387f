// include/ditto_hip_host/hip/ditto_device_functions.h — HIP's device
// built-ins beyond the kernel language (ditto_hip_cpu.hpp), for the host
// build: the integer and bit intrinsics, min/max, and the fast-math forms of
// the float functions, each with the result the GPU's instruction gives
// (for the fast-math forms: the correctly rounded result, which is within
// the GPU's documented error bounds).
#ifndef DITTO_HIP_HOST_DEVICE_FUNCTIONS_H
#define DITTO_HIP_HOST_DEVICE_FUNCTIONS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cmath>

// ─────────────────────────── integer and bit operations ───────────────────
static inline int __popc(unsigned int x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
// 1 + the index of the least significant set bit, 0 for 0.
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffs(unsigned int x) { return __builtin_ffs(static_cast<int>(x)); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline int __ffsll(unsigned long long x) { return __builtin_ffsll(static_cast<long long>(x)); }
// Leading zeros; 32 (64) for 0.
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
static inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x)); }
static inline unsigned int __brev(unsigned int x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  return __builtin_bswap32(x);
}
static inline unsigned long long __brevll(unsigned long long x) {
  return (static_cast<unsigned long long>(__brev(static_cast<unsigned>(x))) << 32) | __brev(static_cast<unsigned>(x >> 32));
}
// Bit-field extract and insert (v_bfe_u32, v_bfi): `width` bits from `offset`.
static inline unsigned int __bitextract_u32(unsigned int src, unsigned int offset, unsigned int width) {
  offset &= 31;
  width &= 31;
  if (width == 0) return 0;
  return (src >> offset) & ((width == 32 ? 0u : (1u << width)) - 1u);
}
static inline uint64_t __bitextract_u64(uint64_t src, unsigned int offset, unsigned int width) {
  offset &= 63;
  width &= 63;
  if (width == 0) return 0;
  return (src >> offset) & ((uint64_t{1} << width) - 1u);
}
static inline unsigned int __bitinsert_u32(unsigned int src0, unsigned int src1, unsigned int offset, unsigned int width) {
  offset &= 31;
  width &= 31;
  const unsigned int mask = ((1u << width) - 1u) << offset;
  return (src0 & ~mask) | ((src1 << offset) & mask);
}
static inline uint64_t __bitinsert_u64(uint64_t src0, uint64_t src1, unsigned int offset, unsigned int width) {
  offset &= 63;
  width &= 63;
  const uint64_t mask = ((uint64_t{1} << width) - 1u) << offset;
  return (src0 & ~mask) | ((src1 << offset) & mask);
}
static inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
  const uint64_t bytes = (static_cast<uint64_t>(y) << 32) | x;
  unsigned int result = 0;
  for (int i = 0; i < 4; ++i) {
    const unsigned int selector = (s >> (4 * i)) & 7u;
    result |= static_cast<unsigned int>((bytes >> (8 * selector)) & 0xffu) << (8 * i);
  }
  return result;
}
static inline unsigned int __funnelshift_l(unsigned int lo, unsigned int hi, unsigned int shift) {
  const uint64_t v = (static_cast<uint64_t>(hi) << 32) | lo;
  return static_cast<unsigned int>((v << (shift & 31)) >> 32);
}
static inline unsigned int __funnelshift_r(unsigned int lo, unsigned int hi, unsigned int shift) {
  const uint64_t v = (static_cast<uint64_t>(hi) << 32) | lo;
  return static_cast<unsigned int>(v >> (shift & 31));
}
static inline int __mul24(int x, int y) {
  return static_cast<int>(static_cast<int64_t>((x << 8) >> 8) * ((y << 8) >> 8));
}
static inline unsigned int __umul24(unsigned int x, unsigned int y) { return (x & 0xffffffu) * (y & 0xffffffu); }
static inline int __mulhi(int x, int y) { return static_cast<int>((static_cast<int64_t>(x) * y) >> 32); }
static inline unsigned int __umulhi(unsigned int x, unsigned int y) {
  return static_cast<unsigned int>((static_cast<uint64_t>(x) * y) >> 32);
}
static inline long long __mul64hi(long long x, long long y) {
  return static_cast<long long>((static_cast<__int128>(x) * y) >> 64);
}
static inline unsigned long long __umul64hi(unsigned long long x, unsigned long long y) {
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(x) * y) >> 64);
}
static inline int __hadd(int x, int y) { return static_cast<int>((static_cast<int64_t>(x) + y) >> 1); }
static inline int __rhadd(int x, int y) { return static_cast<int>((static_cast<int64_t>(x) + y + 1) >> 1); }
static inline unsigned int __uhadd(unsigned int x, unsigned int y) {
  return static_cast<unsigned int>((static_cast<uint64_t>(x) + y) >> 1);
}
static inline unsigned int __urhadd(unsigned int x, unsigned int y) {
  return static_cast<unsigned int>((static_cast<uint64_t>(x) + y + 1) >> 1);
}
static inline unsigned int __sad(int x, int y, unsigned int z) {
  return z + static_cast<unsigned int>(x > y ? static_cast<int64_t>(x) - y : static_cast<int64_t>(y) - x);
}
static inline unsigned int __usad(unsigned int x, unsigned int y, unsigned int z) { return z + (x > y ? x - y : y - x); }

// ─────────────────────────── min and max ──────────────────────────────────
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
static inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }
static inline unsigned int umin(unsigned int a, unsigned int b) { return a < b ? a : b; }
static inline unsigned int umax(unsigned int a, unsigned int b) { return a > b ? a : b; }
static inline long long llmin(long long a, long long b) { return a < b ? a : b; }
static inline long long llmax(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long ullmin(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static inline unsigned long long ullmax(unsigned long long a, unsigned long long b) { return a > b ? a : b; }

// ─────────────────────────── float functions ──────────────────────────────
static inline float ditto_fast_rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double ditto_fast_rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float ditto_fast_rcbrtf(float x) { return 1.0f / cbrtf(x); }
static inline float ditto_fast__expf(float x) { return expf(x); }
static inline float ditto_fast__exp10f(float x) { return powf(10.0f, x); }
static inline float ditto_fast__logf(float x) { return logf(x); }
static inline float ditto_fast__log2f(float x) { return log2f(x); }
static inline float ditto_fast__log10f(float x) { return log10f(x); }
static inline float ditto_fast__sinf(float x) { return sinf(x); }
static inline float ditto_fast__cosf(float x) { return cosf(x); }
static inline float ditto_fast__tanf(float x) { return tanf(x); }
static inline void ditto_fast__sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
static inline float ditto_fast__powf(float x, float y) { return powf(x, y); }
static inline float __fdividef(float x, float y) { return x / y; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : (x != x ? 0.0f : x)); }
static inline float __fadd_rn(float x, float y) { return x + y; }
static inline float __fsub_rn(float x, float y) { return x - y; }
static inline float __fmul_rn(float x, float y) { return x * y; }
static inline float __fdiv_rn(float x, float y) { return x / y; }
static inline float __fmaf_rn(float x, float y, float z) { return fmaf(x, y, z); }
static inline double __dadd_rn(double x, double y) { return x + y; }
static inline double __dmul_rn(double x, double y) { return x * y; }
static inline double __fma_rn(double x, double y, double z) { return fma(x, y, z); }
static inline int __float2int_rn(float x) { return static_cast<int>(nearbyintf(x)); }
static inline int __float2int_rz(float x) { return static_cast<int>(x); }
static inline int __float2int_rd(float x) { return static_cast<int>(floorf(x)); }
static inline int __float2int_ru(float x) { return static_cast<int>(ceilf(x)); }
static inline unsigned int __float2uint_rn(float x) { return static_cast<unsigned int>(nearbyintf(x)); }
static inline float __int2float_rn(int x) { return static_cast<float>(x); }
static inline float __uint2float_rn(unsigned int x) { return static_cast<float>(x); }
static inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
static inline unsigned int __float_as_uint(float x) { unsigned int i; memcpy(&i, &x, 4); return i; }
static inline float __int_as_float(int i) { float x; memcpy(&x, &i, 4); return x; }
static inline float __uint_as_float(unsigned int i) { float x; memcpy(&x, &i, 4); return x; }
static inline long long __double_as_longlong(double x) { long long i; memcpy(&i, &x, 8); return i; }
static inline double __longlong_as_double(long long i) { double x; memcpy(&x, &i, 8); return x; }
static inline float ditto_fast_fdividef(float x, float y) { return x / y; }
static inline float ditto_fast_exp10f(float x) { return powf(10.0f, x); }
static inline float ditto_fast_sinpif(float x) { return sinf(static_cast<float>(M_PI) * x); }
static inline float ditto_fast_cospif(float x) { return cosf(static_cast<float>(M_PI) * x); }

// glibc declares some of these names itself (and newer glibc more: C23's
// sinpi, cospi, rsqrt): the host build's forms get names of their own and
// the HIP spellings are macros for them.
#define __expf ditto_fast__expf
#define __exp10f ditto_fast__exp10f
#define __logf ditto_fast__logf
#define __log2f ditto_fast__log2f
#define __log10f ditto_fast__log10f
#define __sinf ditto_fast__sinf
#define __cosf ditto_fast__cosf
#define __tanf ditto_fast__tanf
#define __sincosf ditto_fast__sincosf
#define __powf ditto_fast__powf
#define exp10f ditto_fast_exp10f
#define fdividef ditto_fast_fdividef
#define cospif ditto_fast_cospif
#define sinpif ditto_fast_sinpif
#define rcbrtf ditto_fast_rcbrtf
#define rsqrt ditto_fast_rsqrt
#define rsqrtf ditto_fast_rsqrtf

// Textures and surfaces sample GPU image memory, which the CPU runtime does
// not model: a kernel that reads or writes one fails the host build, naming
// the call, instead of running with something else.
#define DITTO_NO_IMAGES                                                                                   \
  __attribute__((error("textures and surfaces (tex*, surf*) are not modelled by ditto's CPU runtime: this " \
                       "kernel cannot run there; read the data through a plain pointer, or run on a GPU")))
template <typename T = void, typename... A>
T tex1D(A...) DITTO_NO_IMAGES;
template <typename T = void, typename... A>
T tex1Dfetch(A...) DITTO_NO_IMAGES;
template <typename T = void, typename... A>
T tex2D(A...) DITTO_NO_IMAGES;
template <typename T = void, typename... A>
T tex3D(A...) DITTO_NO_IMAGES;
template <typename T = void, typename... A>
T tex1DLayered(A...) DITTO_NO_IMAGES;
template <typename T = void, typename... A>
T tex2DLayered(A...) DITTO_NO_IMAGES;
template <typename T = void, typename... A>
T texCubemap(A...) DITTO_NO_IMAGES;
template <typename T = void, typename... A>
T tex2Dgather(A...) DITTO_NO_IMAGES;
template <typename T = void, typename... A>
T tex2DLod(A...) DITTO_NO_IMAGES;
template <typename... A>
void surf1Dwrite(A...) DITTO_NO_IMAGES;
template <typename... A>
void surf2Dwrite(A...) DITTO_NO_IMAGES;
template <typename... A>
void surf1Dread(A...) DITTO_NO_IMAGES;
template <typename... A>
void surf2Dread(A...) DITTO_NO_IMAGES;
#undef DITTO_NO_IMAGES

// Read-only cache loads are plain loads on the CPU.
template <typename T>
static inline T __ldg(const T* p) { return *p; }

// Clock counters: the host's cycle and nanosecond clocks.
static inline long long clock64() { return static_cast<long long>(__builtin_ia32_rdtsc()); }
static inline unsigned long long wall_clock64() { return __builtin_ia32_rdtsc(); }

#endif  // DITTO_HIP_HOST_DEVICE_FUNCTIONS_H
