// launch_storm [launches]: many back-to-back launches of a tiny kernel,
// synchronised once at the end; prints the loop's wall time:
//   launch_storm: launches=<N> ms=<t>
// Run with and without ditto (a --kernel naming another kernel) to see what
// the launch callback costs a launch-heavy application.
#include <chrono>
#include "check.cuh"

__global__ void tiny(int* counter) {
  if (threadIdx.x == 0 && blockIdx.x == 0) atomicAdd(counter, 1);
}

int main(int argc, char** argv) {
  const int launches = argc > 1 ? atoi(argv[1]) : 100000;
  int* counter = nullptr;
  CUDA_CHECK(cudaMalloc(&counter, sizeof(int)));
  CUDA_CHECK(cudaMemset(counter, 0, sizeof(int)));
  tiny<<<1, 32>>>(counter);  // warm-up
  CUDA_CHECK(cudaDeviceSynchronize());
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < launches; ++i) tiny<<<1, 32>>>(counter);
  CUDA_CHECK(cudaDeviceSynchronize());
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  int count = 0;
  CUDA_CHECK(cudaMemcpy(&count, counter, sizeof(int), cudaMemcpyDeviceToHost));
  if (count != launches + 1) {
    fprintf(stderr, "launch_storm: counted %d launches, expected %d\n", count, launches + 1);
    return 1;
  }
  printf("launch_storm: launches=%d ms=%.3f\n", launches, ms);
  return 0;
}
