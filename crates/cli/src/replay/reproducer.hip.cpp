// A standalone reproducer written by `ditto replay --emit`: one captured
// dispatch, run again with the HIP module API, its outputs checked against
// the outputs the application produced, with ditto's tolerances.
//
// Build:  hipcc -O2 replay.cpp -o replay      (or: cmake -B build && cmake --build build)
// Run:    ./replay [ITERATIONS]               (from this directory)
//
// Files beside it: replay.txt (what to run and check), kernel.co (the
// code object), kernarg.bin (the kernel's own argument bytes),
// memory<N>.bin (memory before the kernel), reference-arg<N>.bin (the
// application's outputs). Memory is allocated anew and pointer arguments
// are rewritten to it; pointers stored inside memory are not.
#include <hip/hip_runtime.h>

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

#define CHECK(call)                                                                      \
  do {                                                                                   \
    hipError_t status_ = (call);                                                         \
    if (status_ != hipSuccess) {                                                         \
      fprintf(stderr, "replay: %s failed: %s\n", #call, hipGetErrorString(status_));     \
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

  hipModule_t module;
  CHECK(hipModuleLoad(&module, "kernel.co"));
  hipFunction_t function;
  CHECK(hipModuleGetFunction(&function, module, kernel.c_str()));

  for (Image& im : images) {
    std::vector<char> bytes = read_file(im.file);
    if (!im.variable.empty()) {
      hipDeviceptr_t at;
      size_t size = 0;
      if (hipModuleGetGlobal(&at, &size, module, im.variable.c_str()) != hipSuccess) {
        fprintf(stderr, "replay: the code object has no variable %s: not restored\n", im.variable.c_str());
        continue;
      }
      im.device = reinterpret_cast<void*>(at);
      im.size = std::min<uint64_t>(im.size, size);
    } else {
      CHECK(hipMalloc(&im.device, im.size));
    }
    CHECK(hipMemcpy(im.device, bytes.data(), im.size, hipMemcpyHostToDevice));
    CHECK(hipMalloc(&im.pristine, im.size));
    CHECK(hipMemcpy(im.pristine, im.device, im.size, hipMemcpyDeviceToDevice));
  }
  auto relocate = [&](uint64_t address) -> uint64_t {
    for (const Image& im : images)
      if (im.variable.empty() && address >= im.base && address < im.base + im.size)
        return reinterpret_cast<uint64_t>(im.device) + (address - im.base);
    return address;
  };
  std::vector<char> kernarg = read_file("kernarg.bin");
  kernarg.resize(std::max(kernarg.size(), kernarg_size));
  for (size_t offset : pointers) {
    uint64_t p;
    memcpy(&p, kernarg.data() + offset, 8);
    p = relocate(p);
    memcpy(kernarg.data() + offset, &p, 8);
  }
  int static_group = 0;
  if (hipFuncGetAttribute(&static_group, HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function) != hipSuccess)
    static_group = 0;
  const unsigned dynamic_group = group > static_cast<unsigned>(static_group) ? group - static_group : 0;

  hipEvent_t start, stop;
  CHECK(hipEventCreate(&start));
  CHECK(hipEventCreate(&stop));
  std::vector<float> times;
  std::vector<std::vector<char>> results(outputs.size());
  for (int i = 0; i < iterations; ++i) {
    if (i > 0)
      for (Image& im : images)
        if (im.device) CHECK(hipMemcpy(im.device, im.pristine, im.size, hipMemcpyDeviceToDevice));
    void* config[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, kernarg.data(), HIP_LAUNCH_PARAM_BUFFER_SIZE,
                      &kernarg_size, HIP_LAUNCH_PARAM_END};
    CHECK(hipEventRecord(start, nullptr));
    CHECK(hipModuleLaunchKernel(function, (grid[0] + block[0] - 1) / block[0], (grid[1] + block[1] - 1) / block[1],
                                (grid[2] + block[2] - 1) / block[2], block[0], block[1], block[2], dynamic_group,
                                nullptr, nullptr, config));
    CHECK(hipEventRecord(stop, nullptr));
    CHECK(hipEventSynchronize(stop));
    float ms = 0;
    CHECK(hipEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
    if (i == 0)
      for (size_t k = 0; k < outputs.size(); ++k) {
        results[k].resize(outputs[k].extent);
        CHECK(hipMemcpy(results[k].data(), reinterpret_cast<void*>(relocate(outputs[k].address)), outputs[k].extent,
                        hipMemcpyDeviceToHost));
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
  printf("time: median %.1f us over %d dispatch%s (min %.1f, max %.1f), from HIP events\n",
         1000.0 * times[times.size() / 2], iterations, iterations == 1 ? "" : "es", 1000.0 * times.front(),
         1000.0 * times.back());
  return differing ? 1 : 0;
}
