// ipc_share: a HIP program that shares device memory between two processes
// with hipIpcGetMemHandle / hipIpcOpenMemHandle. The parent fills a buffer
// with input[i] = i, exports it, and runs itself as a child with the handle
// (hex) on the command line; the child opens the handle, scales the buffer
// by 3 in place with a kernel, and closes it. The parent then reads the
// buffer back and prints how many values are not 3 * i.
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>

#include <string>
#include <vector>

#include "hip_check.hpp"

extern char** environ;

__global__ void scale_in_place(float* data, float factor, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= factor;
}

static const int kN = 4096;

static int child(const char* hex) {
  hipIpcMemHandle_t handle;
  if (strlen(hex) != 2 * sizeof handle) {
    fprintf(stderr, "ipc_share: bad handle text\n");
    return 2;
  }
  for (size_t i = 0; i < sizeof handle; ++i) {
    unsigned byte = 0;
    sscanf(hex + 2 * i, "%2x", &byte);
    reinterpret_cast<unsigned char*>(&handle)[i] = static_cast<unsigned char>(byte);
  }
  void* mapped = nullptr;
  HIP_CHECK(hipIpcOpenMemHandle(&mapped, handle, hipIpcMemLazyEnablePeerAccess));
  float* data = static_cast<float*>(mapped);
  hipLaunchKernelGGL(scale_in_place, dim3(kN / 256), dim3(256), 0, 0, data, 3.0f, kN);
  HIP_CHECK(hipGetLastError());
  HIP_CHECK(hipDeviceSynchronize());
  HIP_CHECK(hipIpcCloseMemHandle(mapped));
  printf("ipc_share child: scaled %d values in the parent's buffer\n", kN);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "child") == 0) return child(argv[2]);
  std::vector<float> host(kN);
  for (int i = 0; i < kN; ++i) host[i] = static_cast<float>(i);
  float* data = nullptr;
  HIP_CHECK(hipMalloc(&data, kN * sizeof(float)));
  HIP_CHECK(hipMemcpy(data, host.data(), kN * sizeof(float), hipMemcpyHostToDevice));
  hipIpcMemHandle_t handle;
  HIP_CHECK(hipIpcGetMemHandle(&handle, data));
  std::string hex;
  for (size_t i = 0; i < sizeof handle; ++i) {
    char two[3];
    snprintf(two, sizeof two, "%02x", reinterpret_cast<unsigned char*>(&handle)[i]);
    hex += two;
  }
  char self[] = "/proc/self/exe";
  char mode[] = "child";
  char* child_argv[] = {self, mode, &hex[0], nullptr};
  fflush(stdout);
  pid_t pid = 0;
  if (posix_spawn(&pid, self, nullptr, nullptr, child_argv, environ) != 0) {
    fprintf(stderr, "ipc_share: cannot start the child\n");
    return 1;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "ipc_share: the child failed (status %d)\n", status);
    return 1;
  }
  HIP_CHECK(hipMemcpy(host.data(), data, kN * sizeof(float), hipMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < kN; ++i) wrong += host[i] != 3.0f * static_cast<float>(i);
  printf("ipc_share: n = %d, data[1] = %g, data[%d] = %g, wrong = %d\n", kN, host[1], kN - 1, host[kN - 1], wrong);
  HIP_CHECK(hipFree(data));
  return wrong == 0 ? 0 : 1;
}
