//! ditto's tool library (`libditto.so`): preloaded into an unmodified HSA
//! application (or injected into a CUDA one), it holds each dispatch of a target kernel until the
//! collector has copied its output buffers, and lets everything else pass
//! untouched. Design: README.md ("How it works"); C surface:
//! include/ditto_tool.h.
//!
//! Module map, one responsibility each:
//! - `hsa::registration` — exported `HSA_AMD_TOOL_PRIORITY`, `OnLoad`,
//!   `OnUnload`; start-up state machine; writes the wraps into the table.
//! - `hsa::wraps`        — the replaced API-table entries (queue create,
//!   pool allocate/free, executable freeze); each calls the saved original.
//! - `hsa::packet`       — the intercept queue's packet callback: the
//!   held-barrier rewrite of target dispatches; never waits.
//! - `hsa::tool`         — the process's one state object (`TOOL`) and the
//!   runtime services the worker needs (signals, IPC export, reads).
//! - `worker`            — the worker thread: wait for completion, describe
//!   buffers, talk to the collector, release; fail-open switch.
//! - `client`            — the Unix-socket connection to the collector.
//! - `shared_memory`     — the copy transport: a buffer copied into a sealed
//!   memfd, for memory the runtime cannot export.
//! - `kernel_table`      — kernel_object → names, layout, target flag, counts.
//! - `allocation_map`    — live allocations, pointer → containing allocation.
//! - `options`           — DITTO_* variables, read once.
//! - `log`               — `ditto: ` lines on stderr, filtered by DITTO_LOG.
//! - `guard`             — catch_unwind at every extern "C" entry.
//!
//! - `cuda/`            — the CUDA backend: `InitializeInjection`, CUPTI
//!   launch callbacks, the launch held in its call while captured.
//!
//! Backend-neutral core: worker, client, kernel_table, allocation_map,
//! options, log, guard. Runtime-specific: `hsa/` and `cuda/`.

pub mod allocation_map;
pub mod client;
pub mod cuda;
pub mod guard;
pub mod hsa;
pub mod kernel_table;
pub mod log;
pub mod options;
pub mod shared_memory;
pub mod staging;
pub mod worker;
