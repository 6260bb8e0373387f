// One rank of a two-GPU job, as HIP programmers write it: the rank (from
// the launcher, OMPI_COMM_WORLD_RANK) picks its own device, and launches
// `scale` several times, each time on freshly allocated buffers. Built with
// -DPLANT_ON_RANK_1, rank 1's kernel gets element 7 wrong by one.
#include <hip/hip_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(call)                                                         \
  do {                                                                      \
    hipError_t e_ = (call);                                                 \
    if (e_ != hipSuccess) {                                                 \
      printf("rank: %s failed: %s\n", #call, hipGetErrorString(e_));        \
      return 1;                                                             \
    }                                                                       \
  } while (0)

__global__ void scale(const float* in, float* out, float factor, int n, int planted) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * factor + (i == 7 ? static_cast<float>(planted) : 0.0f);
}

int main(int argc, char** argv) {
  const char* rank_text = std::getenv("OMPI_COMM_WORLD_RANK");
  const int rank = rank_text ? std::atoi(rank_text) : 0;
  const int launches = argc > 1 ? std::atoi(argv[1]) : 3;
  int devices = 0;
  CHECK(hipGetDeviceCount(&devices));
  if (rank >= devices) {
    printf("rank %d: only %d devices\n", rank, devices);
    return 1;
  }
  CHECK(hipSetDevice(rank));
  int planted = 0;
#ifdef PLANT_ON_RANK_1
  planted = rank == 1;
#endif
  const int n = 1024 + 64 * rank;
  std::vector<float> host(n);
  int owner = -1;
  for (int launch = 0; launch < launches; ++launch) {
    for (int i = 0; i < n; ++i) host[i] = static_cast<float>((i + launch) % 97);
    float *in, *out;
    CHECK(hipMalloc(&in, n * sizeof(float)));
    CHECK(hipMalloc(&out, n * sizeof(float)));
    CHECK(hipMemcpy(in, host.data(), n * sizeof(float), hipMemcpyHostToDevice));
    scale<<<(n + 255) / 256, 256>>>(in, out, 2.0f, n, planted);
    CHECK(hipMemcpy(host.data(), out, n * sizeof(float), hipMemcpyDeviceToHost));
    hipPointerAttribute_t attributes;
    CHECK(hipPointerGetAttributes(&attributes, out));
    owner = attributes.device;
    CHECK(hipFree(in));
    CHECK(hipFree(out));
  }
  printf("rank %d: %d launches on device %d, buffers owned by device %d\n", rank, launches, rank, owner);
  return 0;
}
