// fake_app.c — a "CUDA application" over fake_cuda.c: it does what the
// driver does at cuInit (dlopen CUDA_INJECTION64_PATH, call its
// InitializeInjection), then launches reduce_sum (cuLaunchKernel), the
// non-target tiny() 10 times, scale_values<float> (cuLaunchKernelEx_ptsz),
// and reduce_sum once more into a stream being captured into a graph.
// Prints what it computed and how many stream synchronisations the tool
// made during the non-target launches.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_cuda.h"

#define N 4096
static void* ptr_at(unsigned char* a, size_t off) { void* p; memcpy(&p, a + off, 8); return p; }
static void run_reduce_sum(unsigned char* a) {
  const float* in = ptr_at(a, 0);
  float* out = ptr_at(a, 8);
  int n;
  memcpy(&n, a + 16, 4);
  float s = 0;
  for (int i = 0; i < n; ++i) s += in[i];
  *out = s;
}
static void run_tiny(unsigned char* a) { ++*(int*)ptr_at(a, 0); }
static void run_scale(unsigned char* a) {
  float* in = ptr_at(a, 0);
  float* out = ptr_at(a, 8);
  float f;
  int n;
  memcpy(&f, a + 16, 4);
  memcpy(&n, a + 20, 4);
  for (int i = 0; i < n; ++i) out[i] = in[i] * f;
}

static void run_nothing(unsigned char* a) { (void)a; }

// `fake_app long-names`: what a PyTorch program launches, 40 kernels of
// long template names (mangled, as CUPTI gives them), each a few times.
#define LONG_NAMES 40
static int launch_long_names(void) {
  static char names[LONG_NAMES][400];
  static fake_function f[LONG_NAMES];
  for (int i = 0; i < LONG_NAMES; ++i) {
    if (i < 24)
      snprintf(names[i], sizeof names[i],
               "_ZN2at6native29vectorized_elementwise_kernelILi%dENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_",
               i + 1);
    else if (i < 34)
      snprintf(names[i], sizeof names[i],
               "_ZN2at6native13reduce_kernelILi512ELi%dENS0_8ReduceOpIfNS0_7MeanOpsIffffEEjfLi4EEEEEvT1_",
               i);
    else
      snprintf(names[i], sizeof names[i],
               "_ZN2at6native18elementwise_kernelILi128ELi%dEZNS0_22gpu_kernel_impl_nocastINS0_13BinaryFunctorIfffNS0_15binary_internal10MulFunctorIfEEEEEEvRNS_18TensorIteratorBaseERKT_EUliE_EEviT1_",
               i);
    f[i].name = names[i];
    f[i].nparams = 0;
    f[i].run = run_nothing;
  }
  for (int round = 0; round < 3; ++round)
    for (int i = 0; i < LONG_NAMES; ++i) fake_launch(&f[i], 0, 0);
  fake_device_synchronize();
  printf("fake_app: %d long-named kernels launched 3 times each\n", LONG_NAMES);
  return 0;
}

// `fake_app elementwise VALUE [LAST]`: what `torch.full` launches, PyTorch's
// at::native::vectorized_elementwise_kernel<4, FillFunctor<float>,
// std::array<char*, 1>>(int n, FillFunctor<float> f, std::array<char*, 1>
// data), filling 1024 floats with VALUE (with LAST, the last element with
// LAST instead), then a reduce_kernel of PyTorch's over them.
static void run_fill(unsigned char* a) {
  int n;
  float value;
  memcpy(&n, a, 4);
  memcpy(&value, a + 4, 4);
  float* out = ptr_at(a, 8);
  for (int i = 0; i < n; ++i) out[i] = value;
}
static float g_last;
static int g_has_last;
static void run_fill_last(unsigned char* a) {
  run_fill(a);
  int n;
  memcpy(&n, a, 4);
  if (g_has_last) ((float*)ptr_at(a, 8))[n - 1] = g_last;
}
static int launch_elementwise(int argc, char** argv) {
  fake_function fill = {
      "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_",
      3, {0, 4, 8}, {4, 4, 8}, run_fill_last};
  fake_function reduce = {
      "_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIfNS0_7MeanOpsIffffEEjfLi4EEEEEvT1_", 0,
      {0}, {0}, run_nothing};
  float value = argc > 2 ? strtof(argv[2], 0) : 1.0f;
  g_has_last = argc > 3;
  g_last = g_has_last ? strtof(argv[3], 0) : 0.0f;
  int n = 1024;
  float* data = fake_malloc(n * sizeof(float));
  void* args[] = {&n, &value, &data};
  fake_launch(&fill, args, 0);
  fake_launch(&reduce, 0, 0);
  fake_device_synchronize();
  printf("fake_app: filled %d floats with %g, last %g\n", n, value, data[n - 1]);
  return 0;
}

// `fake_app triton [segment] [last]`: a Triton kernel as Triton 3 compiles
// it, scale_add_kernel(x, y, out, n) with the two scratch pointers Triton
// appends (global and profile scratch, null here): out = 2 * x + y. With
// `segment`, x, y and out lie in one allocation, as PyTorch's caching
// allocator places small tensors; with `last`, the last element forgets y.
static int g_last_wrong;
static void run_scale_add(unsigned char* a) {
  const float* x = ptr_at(a, 0);
  const float* y = ptr_at(a, 8);
  float* out = ptr_at(a, 16);
  int n;
  memcpy(&n, a + 24, 4);
  for (int i = 0; i < n; ++i) out[i] = 2.0f * x[i] + y[i];
  if (g_last_wrong) out[n - 1] = 2.0f * x[n - 1];
}
static int launch_triton(int argc, char** argv) {
  int segment = 0;
  for (int i = 2; i < argc; ++i) {
    if (strcmp(argv[i], "segment") == 0) segment = 1;
    if (strcmp(argv[i], "last") == 0) g_last_wrong = 1;
  }
  fake_function k = {"scale_add_kernel", 6, {0, 8, 16, 24, 32, 40}, {8, 8, 8, 4, 8, 8}, run_scale_add};
  int n = 256;
  float *x, *y, *out;
  if (segment) {
    x = fake_malloc(4 * n * sizeof(float));
    y = x + n;
    out = x + 2 * n;
  } else {
    x = fake_malloc(n * sizeof(float));
    y = fake_malloc(n * sizeof(float));
    out = fake_malloc(n * sizeof(float));
  }
  for (int i = 0; i < n; ++i) x[i] = (float)i, y[i] = 1.0f, out[i] = 0.0f;
  void* scratch = 0;
  void* args[] = {&x, &y, &out, &n, &scratch, &scratch};
  fake_launch(&k, args, 0);
  fake_device_synchronize();
  printf("fake_app: triton out[255] = %.1f\n", out[255]);
  return 0;
}

// The "device code" of `fake_app replay lazy|eager`: this program's own
// ELF, whose symbol table names the kernel as a cubin's does.
void _Z10reduce_sumPKfPfi(void) {}

// `fake_app replay lazy|eager`: reduce_sum launched once, its module (this
// executable's bytes) reported loaded during the launch (lazy) or before
// it (eager).
static int launch_for_replay(const char* mode) {
  static unsigned char image[1 << 24];
  FILE* self = fopen("/proc/self/exe", "rb");
  if (!self) return 4;
  size_t size = fread(image, 1, sizeof image, self);
  fclose(self);
  // e_machine EM_CUDA (190): the image reads as a cubin.
  image[18] = 190;
  image[19] = 0;
  if (strcmp(mode, "lazy") == 0)
    fake_module_lazy(image, size);
  else
    fake_module_loaded(image, size);
  fake_function reduce = {"_Z10reduce_sumPKfPfi", 3, {0, 8, 16}, {8, 8, 4}, run_reduce_sum};
  float* in = fake_malloc(N * sizeof(float));
  float* out = fake_malloc(sizeof(float));
  for (int i = 0; i < N; ++i) in[i] = (float)(i % 7) * 0.5f;
  *out = -1.0f;
  int n = N;
  void* args[] = {&in, &out, &n};
  fake_launch(&reduce, args, 0);
  fake_device_synchronize();
  printf("fake_app: sum = %.1f (module %s, %zu bytes)\n", *out, mode, size);
  return 0;
}

int main(int argc, char** argv) {
  if (fake_inject() != 0) return 3;
  if (argc > 1 && strcmp(argv[1], "long-names") == 0) return launch_long_names();
  if (argc > 2 && strcmp(argv[1], "replay") == 0) return launch_for_replay(argv[2]);
  if (argc > 1 && strcmp(argv[1], "elementwise") == 0) return launch_elementwise(argc, argv);
  if (argc > 1 && strcmp(argv[1], "triton") == 0) return launch_triton(argc, argv);
  fake_function reduce = {"_Z10reduce_sumPKfPfi", 3, {0, 8, 16}, {8, 8, 4}, run_reduce_sum};
  fake_function tiny = {"_Z4tinyPi", 1, {0}, {8}, run_tiny};
  fake_function scale = {"_Z12scale_valuesIfEvPT_S1_S0_i", 4, {0, 8, 16, 20}, {8, 8, 4, 4}, run_scale};
  float* in = fake_malloc(N * sizeof(float));
  float* out = fake_malloc(sizeof(float));
  int* counter = fake_malloc(sizeof(int));
  float* scaled = fake_malloc(N * sizeof(float));
  for (int i = 0; i < N; ++i) in[i] = (float)(i % 7) * 0.5f;
  int n = N;
  void* reduce_args[] = {&in, &out, &n};
  fake_launch(&reduce, reduce_args, 0);
  fake_device_synchronize();
  const int before = fake_syncs();
  void* tiny_args[] = {&counter};
  for (int i = 0; i < 10; ++i) fake_launch(&tiny, tiny_args, 0);
  fake_device_synchronize();
  const int non_target_syncs = fake_syncs() - before;
  float factor = 3.0f;
  void* scale_args[] = {&in, &scaled, &factor, &n};
  fake_launch(&scale, scale_args, 1);
  fake_device_synchronize();
  fake_set_capturing(1);
  *out = -1.0f;
  fake_launch(&reduce, reduce_args, 0);
  fake_set_capturing(0);
  fake_device_synchronize();
  printf("fake_app: sum = %.1f, tiny ran %d times, scaled[5] = %.1f, tool syncs during non-target launches: %d\n",
         *out, *counter, scaled[5], non_target_syncs);
  return 0;
}
