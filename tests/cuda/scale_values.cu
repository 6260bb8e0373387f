// scale_values <float|double> [N] [factor]: output[i] = input[i] * factor
// with input[i] = i, factor 2 and N = 1024 by default (the CUDA twin of
// tests/apps/scale_values.cpp). Both pointers are non-const, so both
// buffers are captured. With SCALE_VALUES_POOL=1 the buffers come from the
// stream-ordered pool (cudaMallocAsync), which legacy CUDA IPC cannot
// export: ditto copies them instead.
#include <string.h>
#include <vector>
#include "check.cuh"

template <typename T>
__global__ void scale_values(T* input, T* output, T factor, int N) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) output[i] = input[i] * factor;
}

template <typename T>
static int run(const char* type_name, int n, double factor) {
  std::vector<T> input(n), output(n, static_cast<T>(-1));
  for (int i = 0; i < n; ++i) input[i] = static_cast<T>(i);
  T* d_input = nullptr;
  T* d_output = nullptr;
  const bool pool = getenv("SCALE_VALUES_POOL") && strcmp(getenv("SCALE_VALUES_POOL"), "1") == 0;
  if (pool) {
    CUDA_CHECK(cudaMallocAsync(&d_input, n * sizeof(T), 0));
    CUDA_CHECK(cudaMallocAsync(&d_output, n * sizeof(T), 0));
  } else {
    CUDA_CHECK(cudaMalloc(&d_input, n * sizeof(T)));
    CUDA_CHECK(cudaMalloc(&d_output, n * sizeof(T)));
  }
  CUDA_CHECK(cudaMemcpy(d_input, input.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  const int block = 256;
  scale_values<T><<<(n + block - 1) / block, block>>>(d_input, d_output, static_cast<T>(factor), n);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(output.data(), d_output, n * sizeof(T), cudaMemcpyDeviceToHost));
  printf("scale_values<%s>: N = %d, output[1] = %g, output[%d] = %g\n", type_name, n,
         static_cast<double>(output[1]), n - 1, static_cast<double>(output[n - 1]));
  if (pool) {
    CUDA_CHECK(cudaFreeAsync(d_input, 0));
    CUDA_CHECK(cudaFreeAsync(d_output, 0));
    CUDA_CHECK(cudaDeviceSynchronize());
  } else {
    CUDA_CHECK(cudaFree(d_input));
    CUDA_CHECK(cudaFree(d_output));
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4 || (strcmp(argv[1], "float") != 0 && strcmp(argv[1], "double") != 0)) {
    fprintf(stderr, "usage: %s <float|double> [N] [factor]\n", argv[0]);
    return 2;
  }
  const int n = argc >= 3 ? atoi(argv[2]) : 1024;
  const double factor = argc == 4 ? atof(argv[3]) : 2.0;
  if (n < 1) {
    fprintf(stderr, "%s: N must be a positive integer, got '%s'\n", argv[0], argv[2]);
    return 2;
  }
  return strcmp(argv[1], "float") == 0 ? run<float>("float", n, factor)
                                       : run<double>("double", n, factor);
}
