//! Code objects: what the runtime loads and what it learns from it.
//! - `executables`      code-object readers, executables, symbols, kernel
//!   descriptors, the registry of live kernels the packet processor looks
//!   KERNEL_OBJECT up in
//! - `amdgpu`           real AMDGPU code objects (hipcc's, CLR's): kernels,
//!   descriptors, how each kernel runs
//! - `cpu`              the ditto CPU code object's C ABI
//!   (include/ditto_hsa_cpu.h), its ABI check, a dlopen'ed code object and
//!   its kernel list
//! - `host_kernels`     host builds of HIP applications, found by kernel name
//! - `blit_kernels`     CLR's blit kernels, run natively
//! - `loader_extension` the AMD loader extension: what was loaded where
//!
//! `loader_extension` over `executables` over `amdgpu` over `host_kernels`
//! over `cpu`; `blit_kernels` and `cpu` use no other module of the crate.

pub mod executables;
pub mod loader_extension;
/// The engine's (crates/gpu-engine), shared with the model GPU.
pub use gpu_engine::{amdgpu, blit_kernels, cpu, host_kernels};
