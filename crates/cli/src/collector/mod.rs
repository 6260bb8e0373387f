//! The collector: a Unix-socket server that receives captured dispatches
//! from tool libraries, reads their buffers through IPC handles (or from
//! the shared-memory copies passed with a message) and hands the bytes to
//! the snapshot store.
//!
//! Owns the listener (private 0700 directory or a given path, peer uid
//! checked), one thread per connection, the protocol state machine
//! (Hello → Welcome/Reject; Dispatch → Ack; Goodbye) and the rule that makes
//! a snapshot trustworthy: for every buffer attach → copy → DETACH (an RAII
//! guard detaches on every path) BEFORE the ack, then the fingerprint check.
//! It never keeps a mapping past a dispatch, never acks before detaching,
//! never stores data whose fingerprint differs, and never blocks forever: a
//! started message must complete within the frame timeout, a Hello must
//! come within the Hello deadline, and shutdown is noticed within
//! [`POLL_INTERVAL`]. What it holds is bounded: at most
//! [`CollectorConfig::max_connections`] connections (one more is rejected
//! with the reason), the bytes held for captures by one memory budget over
//! all of them (`memory_budget`), and the strings of messages (`limits`).
//!
//! This file is the module map, the buffer-source contract
//! ([`BufferSource`], [`Mapping`], [`SourceError`]) and the state the
//! listener and every connection share (`Shared`):
//! - `listener`: the socket, the accept loop and the collector's lifecycle;
//!   `config`: its settings; `report`: what it tells of each connection;
//! - `admission`: the peer's uid and the run name, checked;
//! - `connection`: the protocol state machine of one connection, over
//!   `frame_reader` (patient reads of its frames) and `miss_accounting`
//!   (what it captured, missed and lost, counted as the manifest does);
//! - `capture`: one dispatch's buffers read, verified and stored, through
//!   `attachment` (attach/copy/detach of one IPC allocation) and
//!   `copy_files` (the shared-memory and staged copies); `capture_error`:
//!   why a dispatch was not captured; `code_objects`: the code objects a
//!   replay capture sends, checked and stored; `host_builds`: the
//!   process's host build on ditto's CPU runtime, stored with them;
//! - the two buffer sources, each loading its runtime when its first
//!   buffer arrives: `hsa` (the HSA IPC importer) over `hsa_runtime`, and
//!   `cuda` (the CUDA IPC importer) over `cuda_driver` and `cuda_copy`;
//! - `memory_budget` and `limits`: the bounds on what it holds.

use crate::store::SnapshotWriter;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

mod admission;
mod attachment;
mod capture;
mod capture_error;
mod code_objects;
mod config;
mod connection;
mod copy_files;
mod cuda;
mod cuda_copy;
mod cuda_driver;
mod frame_reader;
mod host_builds;
pub mod hsa;
pub mod hsa_runtime;
pub mod limits;
mod listener;
pub mod memory_budget;
mod miss_accounting;
mod report;

pub use admission::{BadRunName, OtherUser, check_peer, check_run_name, peer_uid};
pub use config::{
    CollectorConfig, ConnectionObserver, DEFAULT_FRAME_TIMEOUT, DEFAULT_HELLO_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS, DEFAULT_MEMORY_WAIT, POLL_INTERVAL, SnapshotLayout, SocketPlace,
};
pub use cuda::{CudaSourceError, DeviceNotSeen};
pub use cuda_copy::CopyError;
pub use cuda_driver::DriverError;
pub use hsa::HsaSourceError;
pub use listener::{Collector, CollectorError, Uncommitted};
pub use report::{ConnectionEnd, ConnectionReport, LiveConnection};

/// An attached (mapped) allocation in the collector's address space.
#[derive(Debug, PartialEq, Eq)]
pub struct Mapping {
    pub address: usize,
    /// Bytes mapped (the allocation's size).
    pub len: u64,
    /// The GPU it was attached on, as its source numbers GPUs (the HSA
    /// NODE of the agent; the collector's CUDA device ordinal), where the
    /// source says: the CUDA importer copies and detaches there, and the
    /// debug log names it ([`BufferSource::gpu_name`]).
    pub gpu: Option<u32>,
}

/// Where buffer bytes come from: IPC attach, copy, detach. The HSA runtime
/// ([`hsa::HsaBufferSource`]) or the CUDA driver (`cuda`) in production, a
/// fake in tests.
pub trait BufferSource: Send + Sync {
    /// Maps the whole allocation named by `handle` (`alloc_size` bytes), on
    /// the GPU whose HSA NODE is `owner_node` (the GPU that owns the
    /// allocation, as the tool reported it) where the source has several.
    fn attach(
        &self,
        handle: &[u8],
        alloc_size: u64,
        owner_node: Option<u32>,
    ) -> Result<Mapping, SourceError>;
    /// Copies `dst.len()` bytes at `offset` of a live mapping.
    fn copy(&self, mapping: &Mapping, offset: u64, dst: &mut [u8]) -> Result<(), SourceError>;
    /// `len` bytes at `offset` of a live mapping, read in place, where the
    /// runtime maps IPC memory into the collector's host memory (a large
    /// buffer is then written into its tensor file without a copy); `None`
    /// where it must be copied out with [`Self::copy`] (the default), or
    /// the range lies outside the mapping. The bytes do not change while
    /// the mapping lives: the application holds the dispatch until the ack.
    fn host_bytes<'m>(&self, mapping: &'m Mapping, offset: u64, len: u64) -> Option<&'m [u8]> {
        let _ = (mapping, offset, len);
        None
    }
    /// Whether [`Self::copy`] of a long run straight into a tensor file's
    /// mapping is the fastest way to store it (the source copies in
    /// parallel, through its own staging: the CUDA importer); otherwise a
    /// long run is copied a chunk at a time and written from the chunk.
    fn copies_long_runs(&self) -> bool {
        false
    }
    /// Unmaps; the mapping is gone whatever the result.
    fn detach(&self, mapping: Mapping) -> Result<(), SourceError>;
    /// [`Mapping::gpu`] in words, for the debug log.
    fn gpu_name(&self, gpu: u32) -> String {
        format!("the GPU of node {gpu}")
    }
}

/// Why a [`BufferSource`] could not attach, copy or detach: the HSA
/// runtime's error, the CUDA driver's, or another source's (a test's fake)
/// in its own words.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error(transparent)]
    Hsa(#[from] HsaSourceError),
    #[error(transparent)]
    Cuda(#[from] CudaSourceError),
    #[error("{0}")]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

impl SourceError {
    /// Another source's error: `SourceError::other("no such IPC handle")`.
    pub fn other(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> SourceError {
        SourceError::Other(error.into())
    }
}

/// What the listener and every connection share: the settings, the
/// buffer source, the memory budget, the snapshot writers, the open
/// connections and the reports of the ended ones.
struct Shared {
    /// When the collector started: its log lines give instants from here.
    started: Instant,
    live_connections: Mutex<HashMap<u64, LiveConnection>>,
    next_connection: AtomicU64,
    source: Arc<dyn BufferSource>,
    config: CollectorConfig,
    /// What the connections hold in memory for captures.
    memory: Arc<memory_budget::MemoryBudget>,
    live: AtomicUsize,
    shutdown: AtomicBool,
    active: AtomicUsize,
    accept_passes: AtomicU64,
    snapshots: Mutex<HashMap<PathBuf, Arc<Mutex<SnapshotWriter>>>>,
    reports: Mutex<Vec<ConnectionReport>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Shared {
    /// Keeps the report of a connection that ended (or was refused), after
    /// telling the observer of connection ends, if there is one.
    fn record_report(&self, report: ConnectionReport) {
        if let Some(observer) = &self.config.on_connection_end {
            observer(&report);
        }
        self.reports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(report);
    }
}
