// spawns_children <fork-exec|fork>: processes the application starts.
// The parent dispatches scale_values<float> (N = 1024, input[i] = i,
// factor 2) and prints a few outputs, then:
//   fork-exec  (mode 1) forks and execs itself as `spawns_children child`,
//              which dispatches scale_values<float> too (N = 512, factor 3)
//              and prints its outputs; the parent waits for it.
//   fork       (mode 2) forks a child that does not exec, uses no HIP call,
//              prints one line and leaves with exit(0) (atexit handlers
//              run); the parent waits for it, then dispatches once more
//              (factor 3) and prints that too.
// Every line is flushed before a fork, so no line is printed twice.
#include "hiplite.hpp"

template <typename T>
__global__ void scale_values(T* input, T* output, T factor, int N) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) output[i] = input[i] * factor;
}
DITTO_KERNEL(scale_values<float>)

#ifndef DITTO_DEVICE_PASS
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

// One dispatch of scale_values<float> on input[i] = i; prints `who` and
// the first and last outputs.
static void scale(const char* who, int n, float factor) {
  std::vector<float> input(n), output(n, -1.0f);
  for (int i = 0; i < n; ++i) input[i] = static_cast<float>(i);
  float *d_input = nullptr, *d_output = nullptr;
  HIP_CHECK(hipMalloc(&d_input, n * sizeof(float)));
  HIP_CHECK(hipMalloc(&d_output, n * sizeof(float)));
  HIP_CHECK(hipMemcpy(d_input, input.data(), n * sizeof(float), hipMemcpyHostToDevice));
  const int block = 256;
  hipLaunchKernelGGL(scale_values<float>, dim3((n + block - 1) / block), dim3(block), 0, 0, d_input, d_output,
                     factor, n);
  HIP_CHECK(hipGetLastError());
  HIP_CHECK(hipDeviceSynchronize());
  HIP_CHECK(hipMemcpy(output.data(), d_output, n * sizeof(float), hipMemcpyDeviceToHost));
  printf("%s: N = %d, factor %g, output[1] = %g, output[%d] = %g\n", who, n, factor, output[1], n - 1,
         output[n - 1]);
  fflush(stdout);
  HIP_CHECK(hipFree(d_input));
  HIP_CHECK(hipFree(d_output));
}

// Waits for `child`; returns its exit code (or 1 if it did not exit normally).
static int wait_for(pid_t child) {
  int status = 0;
  if (waitpid(child, &status, 0) != child) {
    perror("spawns_children: waitpid");
    return 1;
  }
  if (!WIFEXITED(status)) {
    fprintf(stderr, "spawns_children: child did not exit normally (status 0x%x)\n", status);
    return 1;
  }
  return WEXITSTATUS(status);
}

static pid_t fork_or_die() {
  fflush(stdout);
  fflush(stderr);
  const pid_t child = fork();
  if (child < 0) {
    perror("spawns_children: fork");
    exit(1);
  }
  return child;
}

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "child") == 0) {
    scale("exec'd child", 512, 3.0f);
    return 0;
  }
  const bool exec_mode = argc == 2 && strcmp(argv[1], "fork-exec") == 0;
  const bool fork_mode = argc == 2 && strcmp(argv[1], "fork") == 0;
  if (!exec_mode && !fork_mode) {
    fprintf(stderr, "usage: spawns_children <fork-exec|fork>\n");
    return 2;
  }
  scale("parent", 1024, 2.0f);
  const pid_t child = fork_or_die();
  if (child == 0) {
    if (exec_mode) {
      char self[] = "/proc/self/exe";
      char mode[] = "child";
      char* const child_argv[] = {argv[0], mode, nullptr};
      execv(self, child_argv);
      perror("spawns_children: execv");
      _exit(127);
    }
    printf("forked child: leaving with exit(0), no HIP call\n");
    exit(0);
  }
  const int code = wait_for(child);
  printf("parent: child exited with %d\n", code);
  if (code != 0) return 1;
  if (fork_mode) scale("parent after fork", 1024, 3.0f);
  return 0;
}
#endif
