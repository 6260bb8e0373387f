//! Memory: where every byte an agent reaches comes from, who may touch it,
//! what each agent sees of it, and how it is copied and shared.
//! - `pool_memfd`     one pool memfd: its layout (data, metadata, shadow),
//!   the mapping, allocation serials and stale flags, one allocation's
//!   place in it
//! - `allocations`    pool allocations in pool memfds, ROCr-style 2 MiB
//!   fragment blocks, locked (pinned) host ranges, pointer info, copies
//! - `device_access`  the rule of who may touch a GPU pool's memory
//!   (protection keys, large BAR, DITTO_HSA_CPU_LARGE_BAR, the engines'
//!   access)
//! - `visibility`     what an AGENT-scope release leaves unseen: shadows of
//!   the bytes before, until a SYSTEM-scope release
//! - `copy_engines`   the SDMA engines (`hsa_amd_memory_async_copy`); what
//!   they read follows `visibility`
//! - `virtual_memory` `hsa_amd_vmem_*`: reservations, handles, mappings,
//!   access, shareable fds
//! - `ipc`            IPC handles of pool allocations, attach/detach across
//!   processes
//!
//! `device_access` uses no other module; `pool_memfd` is over it and
//! `allocations` over both; `visibility`, `virtual_memory` and `ipc` over
//! `allocations` and `pool_memfd`;
//! `copy_engines` over `allocations` and `ipc`.

pub mod allocations;
/// The engine's (crates/gpu-engine), shared with the model GPU.
pub use gpu_engine::device_access;
pub mod copy_engines;
pub mod ipc;
pub mod pool_memfd;
pub mod virtual_memory;
pub mod visibility;
