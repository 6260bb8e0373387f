// ABI probe: prints what ROCm's real headers say about every item that
// abi_conformance.rs lists (it writes abi_probe_items.inc from crates/hsa's
// own definitions and compares this program's output with Rust's values).
// Compiled as C++ because hsa_api_trace.h is C++ (needs -DAMD_INTERNAL_BUILD).
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <hsa/hsa_api_trace.h>
#include <hsa/hsa_ven_amd_loader.h>

#include <cstddef>
#include <cstdio>

#define SIZE(T) std::printf("size %s %zu\n", #T, sizeof(T));
#define OFF(T, F) std::printf("offset %s.%s %zu\n", #T, #F, offsetof(T, F));
#define CONST(N) std::printf("const %s %lld\n", #N, static_cast<long long>(N));

int main() {
#include "abi_probe_items.inc"
  return 0;
}
