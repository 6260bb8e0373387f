//! ditto's CPU implementation of the HSA runtime (`libhsa-runtime64.so.1`).
//!
//! Module map, in folders along ROCr's seams (each module owns its state,
//! the API table is the only way in from outside; each folder's `mod.rs`
//! lists its modules):
//! - `api/`         the ONE declaration list of implemented functions and
//!   the served tables (`mod.rs`), `entry_guard` (no panic crosses the C
//!   boundary), `slots` (stubs, slots, calls through a slot),
//!   `unimplemented_exports` (the exported trampolines of every other
//!   function); every export calls through the served tables
//!
//! Kernel execution is the engine's (crates/gpu-engine), which the model
//! GPU under real ROCr shares: `cpu`, `host_kernels`, `blit_kernels`,
//! `dispatch`, `group_workers`, `kernel_faults` and `device_access` are
//! its modules, reached here under the paths below.
//! - `runtime`      hsa_init / hsa_shut_down reference count, tool life cycle
//! - `agents`       the topology: CPU agent, GPU-type agents (gfx90a), ISA,
//!   pools, SDMA engines, the system timestamp
//! - `agent_info`   what the info queries answer about them (system, agent,
//!   ISA and pool info, iterations, status strings)
//! - `tools/`       what tools are served and how they are loaded:
//!   `served_abi` (which ROCm release's ABI, DITTO_HSA_CPU_ABI, default
//!   7.2), `api_tables` (the served API tables, laid out as that release's
//!   from crates/hsa's measured layouts), `loading` (HSA_TOOLS_LIB and
//!   HSA_AMD_TOOL_PRIORITY discovery, OnLoad/OnUnload), `trace`
//!   (DITTO_HSA_CPU_TRACE: packets and signal calls, for tests)
//! - `memory/`      `pool_memfd` (one pool memfd: data, metadata and
//!   shadow, serials, stale flags), `allocations` (pool allocations, 2 MiB
//!   fragment blocks, pointer info, locking, copies), `device_access` (who
//!   may touch GPU memory: protection keys, large BAR, the engines'
//!   access), `visibility` (what an AGENT-scope release leaves unseen),
//!   `copy_engines` (the SDMA engines, hsa_amd_memory_async_copy),
//!   `virtual_memory` (hsa_amd_vmem_*), `ipc` (IPC handles of pool
//!   allocations across processes)
//! - `code_objects/` `executables` (readers, executables, symbols, the
//!   registry of live kernels), `amdgpu` (real AMDGPU code objects),
//!   `cpu` (the CPU code object's C ABI, include/ditto_hsa_cpu.h, and a
//!   dlopen'ed one), `host_kernels` (host builds of HIP applications),
//!   `blit_kernels` (CLR's blit kernels, run natively), `loader_extension`
//!   (the AMD loader extension: what was loaded where)
//! - `execution/`   `dispatch` (running one kernel-dispatch packet on the
//!   host), `group_workers` (the work-group threads shared by all queues,
//!   DITTO_HSA_CPU_THREADS), `kernel_faults` (the fault signal handlers: a
//!   kernel's SIGSEGV/SIGBUS/SIGILL/SIGFPE as a GPU's exception, every
//!   other fault to the action installed before)
//! - `system_events` hsa_amd_register_system_event_handler, and a GPU
//!   memory fault's report: to those handlers, or ROCr's message and abort
//! - `signals_and_queues/` `signals` (signal table, values, blocking waits),
//!   `async_events` (the runtime's async-events thread), `aql_rings` (one
//!   ring of AQL packets), `packet_processor` (each hardware queue's
//!   thread), `queues` (the registry, sizes, index operations),
//!   `intercept_queues` (proxy ring, interceptor chain, overflow),
//!   `profiling` (dispatch timestamps: hsa_amd_profiling_*)
//!
//! Modules use each other in one direction only (tests/module_graph.rs
//! fails on a circle): `api` over everything it routes to;
//! `loader_extension` over `executables` over `amdgpu` over
//! `host_kernels`; the packet processor (`packet_processor`) over the registry of
//! live kernels (`executables`) and kernel execution (`dispatch`), and
//! over `kernel_faults` and `system_events` (it reports kernel faults);
//! `intercept_queues` over `queues` and `async_events`; `ipc` over
//! `allocations` over `pool_memfd`. In `api/`, `mod.rs` over its three
//! modules; none of them uses `api` itself. `agent_info` over `agents`
//! (and `device_access`, for what the CPU may reach). A lower
//! module that needs something of a higher one is handed it (a parameter,
//! a trait object), never imports it. `trace`, `agents`, `loading`,
//! `group_workers`, `kernel_faults`, `blit_kernels`, `served_abi`, `api_tables`,
//! `device_access` and `cpu` use no other module but `api_tables` (which
//! reads `served_abi`) and `device_access` (which `agents` reads).
//!
//! Unsafe code: a function whose soundness rests on what its caller passes
//! (pointers it reads or writes, callbacks it calls with their data) is an
//! `unsafe fn` with a `# Safety` section; every unsafe block has its
//! `// SAFETY:` line (the lints below hold both).
//!
//! Handles: signals, executables, symbols and readers are ids looked up in
//! tables (stale ids are never reused); queues are `hsa_queue_t*` validated
//! against a registry; KERNEL_OBJECT is the address of a runtime-owned
//! descriptor validated against the registry of live kernels.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod agent_info;
pub mod agents;
pub mod api;
pub mod code_objects;
pub mod execution;
pub mod memory;
pub mod runtime;
pub mod signals_and_queues;
pub mod system_events;
pub mod tools;

pub use api::*;
