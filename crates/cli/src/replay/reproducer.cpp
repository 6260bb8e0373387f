// A standalone reproducer written by `ditto replay --emit`: one captured
// dispatch, run again with the HIP module API (or, for a CUDA dispatch, the
// CUDA driver API: replay.cu includes this file), its outputs checked
// against the outputs the application produced, with ditto's tolerances.
//
// Build:  hipcc -O2 replay.cpp -o replay          (a HIP dispatch)
//         nvcc -O2 replay.cu -o replay -lcuda     (a CUDA dispatch)
//         or: cmake -B build && cmake --build build
// Run:    ./replay [ITERATIONS]                   (from this directory)
//
// Files beside it: replay.txt (what to run and check), the code object
// (kernel.co or kernel.cubin), kernarg.bin (the kernel's own argument
// bytes), memory<N>.bin (memory before the kernel), reference-arg<N>.bin
// (the application's outputs). Memory is allocated anew and pointer
// arguments are rewritten to it; pointers stored inside memory are not.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

// The few runtime calls the reproducer makes, for each API.
#if defined(DITTO_REPLAY_CUDA)
#include <cuda.h>
typedef CUresult Status;
typedef CUmodule Module;
typedef CUfunction Function;
typedef CUevent Event;
static const Status OK = CUDA_SUCCESS;
static const char* const CODE_OBJECT = "kernel.cubin";
static const char* const TIMER = "CUDA events";
static const char* status_text(Status s) {
  const char* t = nullptr;
  cuGetErrorString(s, &t);
  return t ? t : "unknown error";
}
static Status start_runtime() {
  CUdevice device;
  CUcontext context;
  Status s = cuInit(0);
  if (s == OK) s = cuDeviceGet(&device, 0);
  if (s == OK) s = cuDevicePrimaryCtxRetain(&context, device);
  if (s == OK) s = cuCtxSetCurrent(context);
  return s;
}
static Status device_alloc(void** p, size_t n) {
  CUdeviceptr d = 0;
  Status s = cuMemAlloc(&d, n);
  *p = reinterpret_cast<void*>(d);
  return s;
}
static Status copy_to_device(void* d, const void* h, size_t n) { return cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(d), h, n); }
static Status copy_to_host(void* h, const void* d, size_t n) { return cuMemcpyDtoH(h, reinterpret_cast<CUdeviceptr>(d), n); }
static Status copy_on_device(void* d, const void* s, size_t n) {
  return cuMemcpyDtoD(reinterpret_cast<CUdeviceptr>(d), reinterpret_cast<CUdeviceptr>(s), n);
}
static Status module_load(Module* m, const char* file) { return cuModuleLoad(m, file); }
static Status get_function(Function* f, Module m, const char* name) { return cuModuleGetFunction(f, m, name); }
static Status get_global(void** p, size_t* n, Module m, const char* name) {
  CUdeviceptr d = 0;
  Status s = cuModuleGetGlobal(&d, n, m, name);
  *p = reinterpret_cast<void*>(d);
  return s;
}
static Status static_shared(int* bytes, Function f) { return cuFuncGetAttribute(bytes, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f); }
static Status event_create(Event* e) { return cuEventCreate(e, 0); }
static Status event_record(Event e) { return cuEventRecord(e, nullptr); }
static Status event_wait(Event e) { return cuEventSynchronize(e); }
static Status event_ms(float* ms, Event a, Event b) { return cuEventElapsedTime(ms, a, b); }
static Status launch(Function f, const unsigned* g, const unsigned* b, unsigned shared, void* args, size_t* size) {
  void* config[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, args, CU_LAUNCH_PARAM_BUFFER_SIZE, size, CU_LAUNCH_PARAM_END};
  return cuLaunchKernel(f, g[0], g[1], g[2], b[0], b[1], b[2], shared, nullptr, nullptr, config);
}
#else
#include <hip/hip_runtime.h>
typedef hipError_t Status;
typedef hipModule_t Module;
typedef hipFunction_t Function;
typedef hipEvent_t Event;
static const Status OK = hipSuccess;
static const char* const CODE_OBJECT = "kernel.co";
static const char* const TIMER = "HIP events";
static const char* status_text(Status s) { return hipGetErrorString(s); }
static Status start_runtime() { return hipSetDevice(0); }
static Status device_alloc(void** p, size_t n) { return hipMalloc(p, n); }
static Status copy_to_device(void* d, const void* h, size_t n) { return hipMemcpy(d, h, n, hipMemcpyHostToDevice); }
static Status copy_to_host(void* h, const void* d, size_t n) { return hipMemcpy(h, d, n, hipMemcpyDeviceToHost); }
static Status copy_on_device(void* d, const void* s, size_t n) { return hipMemcpy(d, s, n, hipMemcpyDeviceToDevice); }
static Status module_load(Module* m, const char* file) { return hipModuleLoad(m, file); }
static Status get_function(Function* f, Module m, const char* name) { return hipModuleGetFunction(f, m, name); }
static Status get_global(void** p, size_t* n, Module m, const char* name) {
  hipDeviceptr_t d;
  Status s = hipModuleGetGlobal(&d, n, m, name);
  *p = reinterpret_cast<void*>(d);
  return s;
}
static Status static_shared(int* bytes, Function f) { return hipFuncGetAttribute(bytes, HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f); }
static Status event_create(Event* e) { return hipEventCreate(e); }
static Status event_record(Event e) { return hipEventRecord(e, nullptr); }
static Status event_wait(Event e) { return hipEventSynchronize(e); }
static Status event_ms(float* ms, Event a, Event b) { return hipEventElapsedTime(ms, a, b); }
static Status launch(Function f, const unsigned* g, const unsigned* b, unsigned shared, void* args, size_t* size) {
  void* config[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, args, HIP_LAUNCH_PARAM_BUFFER_SIZE, size, HIP_LAUNCH_PARAM_END};
  return hipModuleLaunchKernel(f, g[0], g[1], g[2], b[0], b[1], b[2], shared, nullptr, nullptr, config);
}
#endif

#define CHECK(call)                                                                      \
  do {                                                                                   \
    Status status_ = (call);                                                             \
    if (status_ != OK) {                                                                 \
      fprintf(stderr, "replay: %s failed: %s\n", #call, status_text(status_));           \
      exit(2);                                                                           \
    }                                                                                    \
  } while (0)

struct Image {
  uint64_t base = 0, size = 0;
  std::string file, variable;
  void* device = nullptr;
  void* pristine = nullptr;
};

struct Output {
  unsigned arg = 0;
  uint64_t address = 0, extent = 0;
  std::string dtype, file;
  double atol = 0, rtol = 0;
};

static std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    fprintf(stderr, "replay: cannot read %s (run from the reproducer's directory)\n", path.c_str());
    exit(2);
  }
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

static float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  if (exponent == 0) return (sign ? -1.0f : 1.0f) * std::ldexp(static_cast<float>(mantissa), -24);
  if (exponent == 31) return mantissa ? NAN : (sign ? -INFINITY : INFINITY);
  const uint32_t bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static double element(const std::string& dtype, const char* p, bool* exact) {
  *exact = false;
  if (dtype == "f32") { float v; memcpy(&v, p, 4); return v; }
  if (dtype == "f64") { double v; memcpy(&v, p, 8); return v; }
  if (dtype == "f16") { uint16_t v; memcpy(&v, p, 2); return half_to_float(v); }
  if (dtype == "bf16") {
    uint16_t v; memcpy(&v, p, 2);
    uint32_t bits = static_cast<uint32_t>(v) << 16; float f; memcpy(&f, &bits, 4); return f;
  }
  *exact = true;
  return 0;
}

static size_t dtype_size(const std::string& dtype) {
  if (dtype == "f64" || dtype == "i64" || dtype == "u64") return 8;
  if (dtype == "f32" || dtype == "i32" || dtype == "u32") return 4;
  if (dtype == "f16" || dtype == "bf16" || dtype == "i16" || dtype == "u16") return 2;
  return 1;
}

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::max(1, atoi(argv[1])) : 10;
  std::string kernel, kernel_name;
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  unsigned group = 0;
  // CUDA's grid counts blocks and its shared memory is the dynamic part;
  // HSA's grid counts work-items and its group segment includes the static.
  bool cuda_launch = false, every_word = false;
  size_t kernarg_size = 0;
  std::vector<size_t> pointers;
  std::vector<Image> images;
  std::vector<Output> outputs;
  std::ifstream manifest("replay.txt");
  if (!manifest) {
    fprintf(stderr, "replay: no replay.txt here (run from the reproducer's directory)\n");
    return 2;
  }
  for (std::string line; std::getline(manifest, line);) {
    std::istringstream in(line);
    std::string key;
    in >> key;
    if (key == "kernel") in >> kernel;
    else if (key == "name") std::getline(in >> std::ws, kernel_name);
    else if (key == "grid") in >> grid[0] >> grid[1] >> grid[2];
    else if (key == "block") in >> block[0] >> block[1] >> block[2];
    else if (key == "group") in >> group;
    else if (key == "cuda-launch") cuda_launch = true;
    else if (key == "relocate-every-word") every_word = true;
    else if (key == "kernarg") in >> kernarg_size;
    else if (key == "pointer") { size_t o; in >> o; pointers.push_back(o); }
    else if (key == "image" || key == "variable") {
      Image im;
      if (key == "variable") in >> im.variable;
      in >> std::hex >> im.base >> std::dec >> im.size >> im.file;
      images.push_back(im);
    } else if (key == "output") {
      Output o;
      in >> o.arg >> std::hex >> o.address >> std::dec >> o.extent >> o.dtype >> o.atol >> o.rtol >> o.file;
      outputs.push_back(o);
    }
  }

  CHECK(start_runtime());
  Module module;
  CHECK(module_load(&module, CODE_OBJECT));
  Function function;
  CHECK(get_function(&function, module, kernel.c_str()));

  for (Image& im : images) {
    std::vector<char> bytes = read_file(im.file);
    if (!im.variable.empty()) {
      void* at = nullptr;
      size_t size = 0;
      if (get_global(&at, &size, module, im.variable.c_str()) != OK) {
        fprintf(stderr, "replay: the code object has no variable %s: not restored\n", im.variable.c_str());
        continue;
      }
      im.device = at;
      im.size = std::min<uint64_t>(im.size, size);
    } else {
      CHECK(device_alloc(&im.device, im.size));
    }
    CHECK(copy_to_device(im.device, bytes.data(), im.size));
    CHECK(device_alloc(&im.pristine, im.size));
    CHECK(copy_on_device(im.pristine, im.device, im.size));
  }
  auto relocate = [&](uint64_t address) -> uint64_t {
    for (const Image& im : images)
      if (im.variable.empty() && address >= im.base && address < im.base + im.size)
        return reinterpret_cast<uint64_t>(im.device) + (address - im.base);
    return address;
  };
  std::vector<char> kernarg = read_file("kernarg.bin");
  kernarg.resize(std::max(kernarg.size(), kernarg_size));
  if (every_word)  // no layout known: each 8-byte word pointing into an image
    for (size_t offset = 0; offset + 8 <= kernarg.size(); offset += 8) pointers.push_back(offset);
  for (size_t offset : pointers) {
    uint64_t p;
    memcpy(&p, kernarg.data() + offset, 8);
    p = relocate(p);
    memcpy(kernarg.data() + offset, &p, 8);
  }
  int static_group = 0;
  if (cuda_launch || static_shared(&static_group, function) != OK) static_group = 0;
  const unsigned dynamic_group = group > static_cast<unsigned>(static_group) ? group - static_group : 0;
  unsigned blocks[3];
  for (int d = 0; d < 3; ++d) blocks[d] = cuda_launch ? grid[d] : (grid[d] + block[d] - 1) / block[d];

  Event start, stop;
  CHECK(event_create(&start));
  CHECK(event_create(&stop));
  std::vector<float> times;
  std::vector<std::vector<char>> results(outputs.size());
  for (int i = 0; i < iterations; ++i) {
    if (i > 0)
      for (Image& im : images)
        if (im.device) CHECK(copy_on_device(im.device, im.pristine, im.size));
    CHECK(event_record(start));
    CHECK(launch(function, blocks, block, dynamic_group, kernarg.data(), &kernarg_size));
    CHECK(event_record(stop));
    CHECK(event_wait(stop));
    float ms = 0;
    CHECK(event_ms(&ms, start, stop));
    times.push_back(ms);
    if (i == 0)
      for (size_t k = 0; k < outputs.size(); ++k) {
        results[k].resize(outputs[k].extent);
        CHECK(copy_to_host(results[k].data(), reinterpret_cast<void*>(relocate(outputs[k].address)),
                           outputs[k].extent));
      }
  }

  size_t differing = 0;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Output& o = outputs[k];
    std::vector<char> reference = read_file(o.file);
    const size_t size = dtype_size(o.dtype), n = o.extent / size;
    size_t mismatched = 0, first = n;
    for (size_t e = 0; e < n; ++e) {
      bool exact;
      const double a = element(o.dtype, results[k].data() + e * size, &exact);
      const double b = element(o.dtype, reference.data() + e * size, &exact);
      const bool same = exact ? memcmp(results[k].data() + e * size, reference.data() + e * size, size) == 0
                              : (std::isnan(a) && std::isnan(b)) ? false : std::fabs(a - b) <= o.atol + o.rtol * std::fabs(b);
      if (!same) {
        if (first == n) first = e;
        ++mismatched;
      }
    }
    if (mismatched) {
      ++differing;
      bool exact;
      printf("arg %u (%s[%zu]): %zu of %zu elements differ; first at index %zu: %g, reference %g\n", o.arg,
             o.dtype.c_str(), n, mismatched, n, first, element(o.dtype, results[k].data() + first * size, &exact),
             element(o.dtype, reference.data() + first * size, &exact));
    }
  }
  std::sort(times.begin(), times.end());
  if (differing)
    printf("FAIL %s: %zu of %zu arrays differ\n", kernel_name.c_str(), differing, outputs.size());
  else
    printf("PASS %s: %zu array%s compared, all within tolerance\n", kernel_name.c_str(), outputs.size(),
           outputs.size() == 1 ? "" : "s");
  printf("time: median %.1f us over %d dispatch%s (min %.1f, max %.1f), from %s\n",
         1000.0 * times[times.size() / 2], iterations, iterations == 1 ? "" : "es", 1000.0 * times.front(),
         1000.0 * times.back(), TIMER);
  return differing ? 1 : 0;
}
