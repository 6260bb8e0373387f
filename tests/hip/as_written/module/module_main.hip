// Loads offsets.co from beside itself and launches its kernel with
// hipModuleLaunchKernel; then sets a __device__ variable through the
// address hipGetSymbolAddress gives and adds it with a kernel of its own.
#include <hip/hip_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

#define CHECK(call)                                            \
  do {                                                         \
    hipError_t e_ = (call);                                    \
    if (e_ != hipSuccess) {                                    \
      printf("%s failed: %s\n", #call, hipGetErrorString(e_)); \
      return 1;                                                \
    }                                                          \
  } while (0)

__device__ int bias;

__global__ void add_bias(int* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += bias;
}

int main(int, char** argv) {
  std::string dir = argv[0];
  dir = dir.substr(0, dir.rfind('/') + 1);
  hipModule_t module;
  CHECK(hipModuleLoad(&module, (dir + "offsets.co").c_str()));
  hipFunction_t offset_by;
  CHECK(hipModuleGetFunction(&offset_by, module, "offset_by"));
  int n = 1000, offset = 100;
  int* d;
  CHECK(hipMalloc(&d, n * sizeof(int)));
  void* params[] = {&d, &offset, &n};
  CHECK(hipModuleLaunchKernel(offset_by, (n + 63) / 64, 1, 1, 64, 1, 1, 0, nullptr, params, nullptr));

  int* bias_address = nullptr;
  size_t bias_size = 0;
  CHECK(hipGetSymbolAddress(reinterpret_cast<void**>(&bias_address), HIP_SYMBOL(bias)));
  CHECK(hipGetSymbolSize(&bias_size, HIP_SYMBOL(bias)));
  const int seven = 7;
  CHECK(hipMemcpy(bias_address, &seven, sizeof seven, hipMemcpyHostToDevice));
  add_bias<<<(n + 63) / 64, 64>>>(d, n);

  std::vector<int> h(n);
  CHECK(hipMemcpy(h.data(), d, n * sizeof(int), hipMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += h[i] != i + offset + seven;
  printf("module: %d values, %d wrong; bias of %zu bytes set at its symbol address\n", n, wrong, bias_size);
  CHECK(hipModuleUnload(module));
  return wrong == 0 ? 0 : 1;
}
