//! The HSA backend: how the tool gets into an HSA application and what it
//! does there:
//! - `registration`  — `HSA_AMD_TOOL_PRIORITY`, `OnLoad`, `OnUnload`: the
//!   order of start-up and the table checks;
//! - `wraps`         — the API-table entries ditto replaces, one declaration
//!   list behind one funnel;
//! - `queues`        — queue lifecycle: intercept queues created, their
//!   contexts freed when the application destroys them;
//! - `packet`        — the intercept queue's packet callback (its
//!   `rewrite`: the held-barrier rewrite of a target dispatch); never waits;
//! - `code_objects`  — the code-object tracker: readers, loaded code
//!   objects, kernel symbols and their metadata → the kernel table;
//! - `device_copy`   — the tool's reads of GPU memory: through the
//!   runtime's copy engine into a host bounce buffer, never a CPU load;
//! - `worker`        — the held-queue worker: wait, describe, send, release;
//! - `never_loaded`  — a process whose HSA runtime never started the tool
//!   says so to the collector at exit;
//! - `tool`          — the one state object (`TOOL`); its children give the
//!   runtime services the worker and the capture core need (the held-signal
//!   pool, the IPC export cache, pointer info, buffer access).
//!
//! Every runtime call goes through the ORIGINAL table entries saved at
//! OnLoad, never through the live table, so the tool never re-enters its
//! own wraps and needs no per-thread reentrancy flag.

pub mod code_objects;
pub mod device_copy;
pub mod never_loaded;
pub mod packet;
pub mod queues;
pub mod registration;
pub mod tool;
pub mod worker;
pub mod wraps;

pub use tool::HsaTool;
