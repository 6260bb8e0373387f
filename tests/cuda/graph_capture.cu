// graph_capture: launches graph_scale into a stream being captured into a
// CUDA graph, then runs the graph. ditto must not synchronise the
// capturing stream (that would invalidate the capture): the launch is not
// captured, ditto says so once, and the program's result is unchanged.
// Prints `graph_capture: out[3] = 6` on success.
#include "check.cuh"

__global__ void graph_scale(const float* in, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2.0f * in[i];
}

__global__ void iota(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = static_cast<float>(i);
}

int main() {
  const int n = 1024;
  float *in = nullptr, *out = nullptr;
  CUDA_CHECK(cudaMalloc(&in, n * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&out, n * sizeof(float)));
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  iota<<<(n + 255) / 256, 256, 0, s>>>(in, n);
  CUDA_CHECK(cudaStreamSynchronize(s));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  graph_scale<<<(n + 255) / 256, 256, 0, s>>>(in, out, n);
  CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphLaunch(exec, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  float v = -1.0f;
  CUDA_CHECK(cudaMemcpy(&v, out + 3, sizeof(float), cudaMemcpyDeviceToHost));
  printf("graph_capture: out[3] = %g\n", v);
  return v == 6.0f ? 0 : 1;
}
