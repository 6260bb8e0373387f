// fake_cuda.h — what the fake applications call in fake_cuda.c: a kernel
// as a host function with its parameter layout, launching it, and the
// fake driver's memory, devices and injection.
#ifndef DITTO_FAKE_CUDA_H
#define DITTO_FAKE_CUDA_H
#include <stddef.h>

typedef struct fake_function {
  const char* name;
  int nparams;
  size_t offset[8], size[8];
  void (*run)(unsigned char* args);  // args packed at the offsets
} fake_function;
int fake_inject(void);
int fake_set_device(int ordinal);
int fake_current_ordinal(void);
int fake_current_physical(void);
void* fake_malloc(size_t n);
void fake_free(void* p);
void fake_launch(const fake_function* f, void** args, int ex);
void fake_set_capturing(int on);
int fake_syncs(void);
void fake_device_synchronize(void);
void fake_module_loaded(const void* image, size_t size);
void fake_module_lazy(const void* image, size_t size);
#endif
