// ranks: one rank of a program that mpirun starts once per GPU. The rank
// comes from OMPI_COMM_WORLD_RANK, the device is rank % device count (by
// cudaSetDevice), so two ranks land on two GPUs of a two-GPU host and
// share the one GPU of a one-GPU host. Prints the device's UUID in
// nvidia-smi's form, which the collector's log names for each buffer.
//
//   ranks launches N
//     N launches of scale(in, out, 2, n), each on freshly allocated
//     256 KiB buffers, each result read back and checked. Built with
//     -DPLANT_ON_RANK_1, rank 1's kernel writes out[0] one too high (the
//     others compute what the reference computes).
//     Prints "ranks: rank R device D GPU-...: N launches".
//   ranks capture MIB DIR COUNT
//     A warm-up capture of 64 MiB (the collector's copy lanes on this
//     device), then a barrier with COUNT ranks (files in DIR), then
//     fill_plain and fill_target over MIB, each launch timed with the
//     device synchronised after it. Under ditto with --kernel fill_target,
//     target - plain is the capture's cost as this rank sees it.
//     Prints "ranks: rank R device D GPU-...: capture bytes=B plain_ms=P target_ms=T".
//     fill_target's values depend on the position (2 + i % 1048573).
#include <chrono>
#include <string>
#include <thread>
#include <vector>
#include <dirent.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include "check.cuh"

#define PERIOD 1048573L

// The rank, for the planted error (set once with cudaMemcpyToSymbol).
__device__ int g_rank;

__global__ void scale(const float* in, float* out, float factor, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = in[i] * factor;
#ifdef PLANT_ON_RANK_1
  if (g_rank == 1 && i == 0) v += 1.0f;
#endif
  out[i] = v;
}

__global__ void fill_plain(float* out, long n, float value) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
    out[i] = value;
}
__global__ void fill_target(float* out, long n, float value) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
    out[i] = value + (float)(i % PERIOD);
}

static double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The device's UUID as nvidia-smi writes it (GPU-xxxxxxxx-xxxx-...).
static std::string uuid_of(int device) {
  cudaDeviceProp p;
  CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  const unsigned char* u = reinterpret_cast<const unsigned char*>(p.uuid.bytes);
  char s[64];
  snprintf(s, sizeof s, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
           u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  return s;
}

static int launches(int rank, int n_launches) {
  const int n = 1 << 16;
  std::vector<float> host_in(n), back(n);
  for (int k = 0; k < n_launches; ++k) {
    for (int i = 0; i < n; ++i) host_in[i] = (float)((i + k + rank) % 13);
    float *in = nullptr, *out = nullptr;
    CUDA_CHECK(cudaMalloc(&in, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&out, n * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(in, host_in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    scale<<<(n + 255) / 256, 256>>>(in, out, 2.0f, n);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpy(back.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 1; i < n; ++i)
      if (back[i] != host_in[i] * 2.0f) {
        fprintf(stderr, "ranks: rank %d launch %d computed out[%d] = %g\n", rank, k, i, back[i]);
        return 1;
      }
    CUDA_CHECK(cudaFree(in));
    CUDA_CHECK(cudaFree(out));
  }
  return 0;
}

// Waits until COUNT ranks have put their file into DIR (60 s at most).
static bool barrier(const char* dir, int rank, int count) {
  const std::string mine = std::string(dir) + "/ready-" + std::to_string(rank);
  const int fd = open(mine.c_str(), O_WRONLY | O_CREAT, 0600);
  if (fd < 0) return false;
  close(fd);
  for (int tries = 0; tries < 60000; ++tries) {
    int ready = 0;
    if (DIR* d = opendir(dir)) {
      while (dirent* e = readdir(d)) ready += strncmp(e->d_name, "ready-", 6) == 0;
      closedir(d);
    }
    if (ready >= count) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

static int capture(int rank, long mib, const char* dir, int count, double* plain, double* target) {
  const long n = mib * (1L << 20) / (long)sizeof(float);
  const long warm_n = 64L * (1 << 20) / (long)sizeof(float);
  float *buf = nullptr, *warm = nullptr;
  CUDA_CHECK(cudaMalloc(&buf, n * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&warm, warm_n * sizeof(float)));
  fill_plain<<<1024, 256>>>(buf, n, 0.0f);
  fill_target<<<1024, 256>>>(warm, warm_n, 3.0f);
  CUDA_CHECK(cudaDeviceSynchronize());
  if (!barrier(dir, rank, count)) {
    fprintf(stderr, "ranks: rank %d waited 60 s for %d ranks in %s\n", rank, count, dir);
    return 1;
  }
  auto t0 = std::chrono::steady_clock::now();
  fill_plain<<<1024, 256>>>(buf, n, 1.0f);
  CUDA_CHECK(cudaDeviceSynchronize());
  *plain = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  fill_target<<<1024, 256>>>(buf, n, 2.0f);
  CUDA_CHECK(cudaDeviceSynchronize());
  *target = ms_since(t0);
  float last = 0;
  CUDA_CHECK(cudaMemcpy(&last, buf + n - 1, sizeof(float), cudaMemcpyDeviceToHost));
  if (last != 2.0f + (float)((n - 1) % PERIOD)) {
    fprintf(stderr, "ranks: rank %d read back %g at the end\n", rank, last);
    return 1;
  }
  CUDA_CHECK(cudaFree(buf));
  CUDA_CHECK(cudaFree(warm));
  return 0;
}

int main(int argc, char** argv) {
  const char* r = getenv("OMPI_COMM_WORLD_RANK");
  const int rank = r ? atoi(r) : 0;
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  const int device = rank % count;
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaMemcpyToSymbol(g_rank, &rank, sizeof rank));
  const std::string uuid = uuid_of(device);
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "launches" && argc == 3) {
    const int n = atoi(argv[2]);
    if (launches(rank, n) != 0) return 1;
    printf("ranks: rank %d device %d %s: %d launches\n", rank, device, uuid.c_str(), n);
    return 0;
  }
  if (mode == "capture" && argc == 5) {
    const long mib = atol(argv[2]);
    double plain = 0, target = 0;
    if (capture(rank, mib, argv[3], atoi(argv[4]), &plain, &target) != 0) return 1;
    printf("ranks: rank %d device %d %s: capture bytes=%ld plain_ms=%.3f target_ms=%.3f\n", rank, device,
           uuid.c_str(), mib << 20, plain, target);
    return 0;
  }
  fprintf(stderr, "usage: ranks launches N | ranks capture MIB DIR COUNT\n");
  return 2;
}
