//! The backend-neutral capture core: everything the HSA and CUDA backends
//! share. A backend knows how to hold a dispatch and how to reach its
//! buffers ([`access::BufferAccess`]); from here on it is the same capture:
//! - `kernel_table`   — kernels the application loaded: names, layout,
//!   target flag, dispatch counts;
//! - `allocation_map` — live allocations, pointer → containing allocation;
//! - `address_hash`   — the hasher of maps keyed by runtime addresses;
//! - `access`         — the buffer-access trait each backend implements;
//! - `describe`       — a dispatch's facts → one snapshot message;
//! - `accounting`     — which matched dispatches were captured or missed;
//! - `process`        — the Hello: this process as the collector sees it;
//! - `kernel_code`    — what a replay capture keeps of a target kernel
//!   (its code object, its executable's module variables);
//! - `replay`         — what a replay capture adds to a dispatch (memory
//!   before the kernel, module variables, the launch);
//! - `client`         — the Unix-socket connection to the collector;
//! - `staging`        — the connection's staging file for small buffers;
//! - `shared_memory`  — the copy transport (sealed memfds).

pub mod access;
pub mod accounting;
pub mod address_hash;
pub mod allocation_map;
pub mod client;
pub mod describe;
pub mod kernel_code;
pub mod kernel_table;
pub mod process;
pub mod replay;
pub mod shared_memory;
pub mod staging;

pub use access::{BufferAccess, StagedCopy};
pub use describe::{ArgumentChoice, DispatchFacts, Snapshot, describe};
