// snapshot_storm [launches]: the second seed's pattern. Each iteration
// allocates a FRESH buffer (often at the address of the one just freed),
// launches stamp() to fill it with the iteration number, and frees it.
// A collector that kept CUDA IPC mappings open would be served a stale
// mapping for a reused address; ditto's snapshots must each hold their
// own iteration's value. Prints the last value it read back.
#include <vector>
#include "check.cuh"

__global__ void stamp(float* out, int n, float value) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value + 0.001f * static_cast<float>(i % 1000);
}

int main(int argc, char** argv) {
  const int launches = argc > 1 ? atoi(argv[1]) : 300;
  const int n = 1 << 16;
  std::vector<float> back(n);
  for (int it = 0; it < launches; ++it) {
    float* buf = nullptr;
    CUDA_CHECK(cudaMalloc(&buf, n * sizeof(float)));
    stamp<<<(n + 255) / 256, 256>>>(buf, n, static_cast<float>(it));
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpy(back.data(), buf, n * sizeof(float), cudaMemcpyDeviceToHost));
    if (back[0] != static_cast<float>(it)) {
      fprintf(stderr, "iteration %d read back %g\n", it, back[0]);
      return 1;
    }
    CUDA_CHECK(cudaFree(buf));
  }
  printf("snapshot_storm: %d launches, last value %g\n", launches, back[0]);
  return 0;
}
