// hip_check.hpp — HIP_CHECK for the hipcc-built test applications: print
// the failing call and HIP's error string, exit 1.
#ifndef HIP_CHECK_HPP
#define HIP_CHECK_HPP
#include <hip/hip_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define HIP_CHECK(call)                                                                     \
  do {                                                                                      \
    hipError_t hip_check_status = (call);                                                   \
    if (hip_check_status != hipSuccess) {                                                   \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,                  \
              hipGetErrorString(hip_check_status));                                         \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)
#endif
