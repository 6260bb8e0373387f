// include/ditto_hip_host/ditto_hip_prelude.h — included before every source
// of a host build (g++ -include), as clang includes its HIP runtime wrapper
// (__clang_hip_runtime_wrapper.h) before every HIP source hipcc compiles:
// the standard headers that wrapper brings in (clang 15 for ROCm 5.2 and
// clang 21 for ROCm 6.4 alike), so that a source relying on them (a
// std::string or std::min without its own #include) compiles the same.
// It does not include hip_runtime.h: neither does clang's wrapper.
#ifndef DITTO_HIP_HOST_PRELUDE_H
#define DITTO_HIP_HOST_PRELUDE_H
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdlib>
#include <new>
#endif
