//! ditto's GPU execution engine on the host: how a kernel-dispatch packet
//! runs when there is no GPU. One component with two faces: ditto's CPU
//! HSA runtime (`hsa-cpu`, which also owns queues, signals and memory as
//! ROCr does) and the model GPU (`hsa-model`, under real ROCr's model
//! mode). Neither copies it. Modules:
//! - `cpu`           the ditto CPU code object's C ABI
//!   (include/ditto_hsa_cpu.h), its ABI check, a dlopen'ed code object and
//!   its kernel list
//! - `amdgpu`        real AMDGPU code objects (hipcc's, CLR's): kernels,
//!   descriptors, how each kernel runs
//! - `host_kernels`  host builds of HIP applications, found by kernel name
//! - `blit_kernels`  CLR's blit kernels, run natively
//! - `dispatch`      how a live kernel runs; running one kernel-dispatch
//!   packet (chunks of work-groups, cooperative grids, blit kernels)
//! - `group_workers` the work-group threads shared by every queue
//!   (DITTO_HSA_CPU_THREADS); knows nothing about kernels
//! - `kernel_faults` the fault signal handlers: a kernel's SIGSEGV, SIGBUS,
//!   SIGILL or SIGFPE parks its thread and is handed to a reporter; every
//!   other fault goes to the action installed before
//! - `device_access` the rule of who may touch a GPU's memory (protection
//!   keys), as on a discrete GPU
//! - `limits`        the GPU the engine stands in for: compute units and
//!   resident wavefronts (the cooperative-launch bound)
//!
//! `dispatch` over `group_workers`, `kernel_faults`, `device_access`,
//! `blit_kernels` and `cpu`; `amdgpu` over `host_kernels`, `blit_kernels`
//! and `dispatch`'s `KernelRun`; `host_kernels` over `cpu`; none knows about
//! queues (a queue is an opaque id to `kernel_faults`).

pub mod amdgpu;
pub mod blit_kernels;
pub mod cpu;
pub mod device_access;
pub mod dispatch;
pub mod group_workers;
pub mod host_kernels;
pub mod kernel_faults;
pub mod limits;
