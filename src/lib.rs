//! ditto's tool library (`libditto.so`): preloaded into an unmodified HSA
//! application (or injected into a CUDA one), it holds each dispatch of a
//! target kernel until the collector has copied its output buffers, and
//! lets everything else pass untouched. Design: docs/src/design.md;
//! C surface: include/ditto_tool.h.
//!
//! Module map, one responsibility each; the folders are the map's three
//! parts:
//! - `capture/`  — the backend-neutral core both backends share:
//!   - `kernel_table`, `allocation_map`, `address_hash` — what the
//!     application loaded and allocated;
//!   - `access`     — the buffer-access trait each backend implements;
//!   - `describe`   — a dispatch's facts → one snapshot message;
//!   - `accounting` — captured and missed dispatches;
//!   - `process`    — the Hello (this process, its command line);
//!   - `client`, `staging`, `shared_memory` — the collector connection and
//!     its transports.
//! - `hsa/`      — the HSA backend: `registration` (OnLoad/OnUnload),
//!   `wraps` (the table wraps, one declaration list), `queues` (queue
//!   lifecycle), `packet` (the packet callback and its held-barrier
//!   rewrite), `code_objects` (the code-object tracker), `worker` (the
//!   held-queue worker), `tool` (its state; under it the runtime services:
//!   held signals, the IPC export cache, pointer info, buffer access).
//! - `cuda/`     — the CUDA backend: `injection` (InitializeInjection and the
//!   CUPTI callback entry), `cupti`, `driver`, `launch` (callback layouts),
//!   `hold` (a target launch held in its call), `access` (buffers through
//!   the driver); the driver's ABI and loading it are `cuda_abi`'s
//!   (`crates/cuda`), which the collector shares.
//! - `lifecycle` — the process's one lifecycle (start-up, capture, failure,
//!   shutdown, fork), shared by both backends.
//! - `guard`     — every catch_unwind: no panic crosses into the application.
//! - `options`   — DITTO_* variables, read once.
//! - `log`       — `ditto: ` lines on stderr, filtered by DITTO_LOG (the
//!   level is `ditto_types::LogLevel`, shared with the CLI).

pub mod capture;
pub mod cuda;
pub mod guard;
pub mod hsa;
pub mod lifecycle;
pub mod log;
pub mod options;
