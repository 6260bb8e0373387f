// check.cuh — CUDA_CHECK for the CUDA test programs: print the failing call
// and exit 1 (the programs' results are judged by ditto, not by themselves).
#ifndef DITTO_CUDA_CHECK_CUH
#define DITTO_CUDA_CHECK_CUH
#include <stdio.h>
#include <stdlib.h>
#define CUDA_CHECK(call)                                                          \
  do {                                                                            \
    cudaError_t err_ = (call);                                                    \
    if (err_ != cudaSuccess) {                                                    \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,        \
              cudaGetErrorString(err_));                                          \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)
#endif
