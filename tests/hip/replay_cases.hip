// replay_cases: three kernels a replay must reproduce from memory taken
// before the kernel ran, each dispatched once on 1024 floats:
// - scale_in_place(data, factor, n): data[i] *= factor, reading and
//   writing the same buffer (a capture after the kernel would replay it
//   on its own output);
// - gather_rows(rows, out, width, n_rows): out[r*width+c] = rows[r][c]
//   + r, where `rows` is a table of device pointers stored in device
//   memory, each row its own allocation that no argument reaches;
// - apply_coefficients(in, out, n): out[i] = c[0] + c[1]*in[i] +
//   c[2]*in[i]^2 + c[3]*in[i]^3 with c a __constant__ array set by
//   hipMemcpyToSymbol.
// Prints a checksum of each result.
#include <vector>

#include "hip_check.hpp"

__constant__ float coefficients[4];

__global__ void scale_in_place(float* data, float factor, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = data[i] * factor + 1.0f;
}

__global__ void gather_rows(const float* const* rows, float* out, int width, int n_rows) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < width * n_rows) {
    const int r = i / width;
    out[i] = rows[r][i % width] + static_cast<float>(r);
  }
}

__global__ void apply_coefficients(const float* in, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    const float x = in[i];
    out[i] = coefficients[0] + x * (coefficients[1] + x * (coefficients[2] + x * coefficients[3]));
  }
}

static double checksum(const std::vector<float>& v) {
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * static_cast<double>(i % 7 + 1);
  return s;
}

int main() {
  const int n = 1024, block = 256, width = 128, n_rows = n / width;
  std::vector<float> host(n);
  for (int i = 0; i < n; ++i) host[i] = 0.25f * static_cast<float>(i % 97) - 3.0f;

  float* data = nullptr;
  HIP_CHECK(hipMalloc(&data, n * sizeof(float)));
  HIP_CHECK(hipMemcpy(data, host.data(), n * sizeof(float), hipMemcpyHostToDevice));
  hipLaunchKernelGGL(scale_in_place, dim3(n / block), dim3(block), 0, 0, data, 1.5f, n);
  HIP_CHECK(hipGetLastError());

  std::vector<float*> row_ptrs(n_rows);
  for (int r = 0; r < n_rows; ++r) {
    HIP_CHECK(hipMalloc(&row_ptrs[r], width * sizeof(float)));
    HIP_CHECK(hipMemcpy(row_ptrs[r], host.data() + r * width, width * sizeof(float),
                        hipMemcpyHostToDevice));
  }
  float** table = nullptr;
  float* gathered = nullptr;
  HIP_CHECK(hipMalloc(&table, n_rows * sizeof(float*)));
  HIP_CHECK(hipMemcpy(table, row_ptrs.data(), n_rows * sizeof(float*), hipMemcpyHostToDevice));
  HIP_CHECK(hipMalloc(&gathered, n * sizeof(float)));
  hipLaunchKernelGGL(gather_rows, dim3(n / block), dim3(block), 0, 0, table, gathered, width,
                     n_rows);
  HIP_CHECK(hipGetLastError());

  const float c[4] = {0.5f, -1.25f, 0.125f, 0.0625f};
  HIP_CHECK(hipMemcpyToSymbol(HIP_SYMBOL(coefficients), c, sizeof(c)));
  float* polynomial = nullptr;
  HIP_CHECK(hipMalloc(&polynomial, n * sizeof(float)));
  hipLaunchKernelGGL(apply_coefficients, dim3(n / block), dim3(block), 0, 0, data, polynomial, n);
  HIP_CHECK(hipGetLastError());
  HIP_CHECK(hipDeviceSynchronize());

  std::vector<float> out(n);
  HIP_CHECK(hipMemcpy(out.data(), data, n * sizeof(float), hipMemcpyDeviceToHost));
  printf("scale_in_place: %.3f\n", checksum(out));
  HIP_CHECK(hipMemcpy(out.data(), gathered, n * sizeof(float), hipMemcpyDeviceToHost));
  printf("gather_rows: %.3f\n", checksum(out));
  HIP_CHECK(hipMemcpy(out.data(), polynomial, n * sizeof(float), hipMemcpyDeviceToHost));
  printf("apply_coefficients: %.3f\n", checksum(out));

  for (float* row : row_ptrs) HIP_CHECK(hipFree(row));
  HIP_CHECK(hipFree(table));
  HIP_CHECK(hipFree(gathered));
  HIP_CHECK(hipFree(polynomial));
  HIP_CHECK(hipFree(data));
  return 0;
}
