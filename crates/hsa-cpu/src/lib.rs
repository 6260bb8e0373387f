//! ditto's CPU implementation of the HSA runtime (`libhsa-runtime64.so.1`).
//!
//! Module map (ROCr's seams; each module owns its state, the API table is
//! the only way in from outside):
//! - `api`          the ONE declaration list of implemented functions,
//!   exported ROCR_1 trampolines calling through the served tables
//! - `abi`          which ROCm release's ABI is served (DITTO_HSA_CPU_ABI,
//!   default 7.2) and how that release loads tools
//! - `tables`       the served API tables, laid out as that release's (by
//!   name, from crates/hsa's measured layouts)
//! - `runtime`      hsa_init / hsa_shut_down reference count, tool life cycle
//! - `tools`        HSA_TOOLS_LIB and HSA_AMD_TOOL_PRIORITY discovery, OnLoad/OnUnload
//! - `agents`       CPU agent, GPU-type agent (gfx90a), ISA, pools, system info
//! - `device_memory` who may touch GPU memory: the protection key of GPU
//!   pools, large BAR (DITTO_HSA_CPU_LARGE_BAR), the engines' access
//! - `memory`       pool allocations in shared memfds, 2 MiB fragment blocks,
//!   pointer info, locking, copies
//! - `copy_engine`  the SDMA engines (hsa_amd_memory_async_copy): what
//!   they read follows `visibility`
//! - `visibility`   what an AGENT-scope release leaves unseen: shadows of
//!   the bytes before, until a SYSTEM-scope release
//! - `vmem`         virtual memory (hsa_amd_vmem_*): reservations, handles,
//!   mappings, access, shareable fds
//! - `ipc`          IPC handles of pool allocations, attach/detach across processes
//! - `signals`      signal table, values, blocking waits, dispatch timestamps
//! - `queues`       AQL rings, index operations, one packet processor per queue
//! - `intercept`    intercept queues (proxy ring, interceptor chain, overflow,
//!   the runtime's async thread)
//! - `executables`  code-object readers, executables, symbols, kernel descriptors,
//!   the registry of live kernels
//! - `amdgpu`       real AMDGPU code objects (hipcc's, CLR's): kernels, descriptors,
//!   how each kernel runs
//! - `blit`         CLR's blit kernels, run natively
//! - `host_kernels` host builds of HIP applications, found by kernel name
//! - `loader`       the AMD loader extension: what was loaded where
//! - `dispatch`     how a live kernel runs; running one kernel-dispatch packet
//!   on the host
//! - `cpu_code_object` the CPU code object's C ABI (include/ditto_hsa_cpu.h),
//!   its ABI check, a dlopen'ed code object and its kernel list
//! - `pool`         group workers shared by all queues (DITTO_HSA_CPU_THREADS)
//! - `trace`        DITTO_HSA_CPU_TRACE: packets and signal calls, for tests
//!
//! Modules use each other in one direction only (tests/module_graph.rs
//! fails on a circle): `api` over everything it routes to; `loader` over
//! `executables` over `amdgpu` over `host_kernels`; the packet processor
//! (`queues`) over the registry of live kernels (`executables`) and kernel
//! execution (`dispatch`); `intercept` over `queues`; `ipc` over `memory`.
//! A lower module that needs something of a higher one is handed it (a
//! parameter, a trait object), never imports it. `trace`, `agents`,
//! `tools`, `pool`, `blit`, `abi`, `tables`, `device_memory` and `cpu_code_object` use no
//! other module but `tables` (which reads `abi`) and `device_memory` (which
//! `agents` reads).
//!
//! Handles: signals, executables, symbols and readers are ids looked up in
//! tables (stale ids are never reused); queues are `hsa_queue_t*` validated
//! against a registry; KERNEL_OBJECT is the address of a runtime-owned
//! descriptor validated against the registry of live kernels.

pub mod abi;
pub mod agents;
pub mod amdgpu;
pub mod api;
pub mod blit;
pub mod copy_engine;
pub mod cpu_code_object;
pub mod device_memory;
pub mod dispatch;
pub mod executables;
pub mod host_kernels;
pub mod intercept;
pub mod ipc;
pub mod loader;
pub mod memory;
pub mod pool;
pub mod queues;
pub mod runtime;
pub mod signals;
pub mod tables;
pub mod tools;
pub mod trace;
pub mod visibility;
pub mod vmem;

pub use api::*;
