//! Why a dispatch was not captured: [`CaptureError`] names the dispatch
//! (and the argument, where one buffer failed) and what failed, in the
//! words the tool's Ack, the manifest's missing record and the
//! connection's report carry (the connection turns it into that text).
//! Owns the error types and their wording only; decides nothing.

use super::SourceError;
use super::attachment::AttachmentError;
use super::copy_files::{SharedCopyError, StagingError};
use super::cuda::CudaSourceError;
use super::limits::{self, LimitError};
use super::memory_budget;
use crate::store::{Refusal, StoreError};
use ditto_protocol::{Buffer, Dispatch, FrameError, Phase};

/// Why a dispatch was not captured; nothing of it is stored.
#[derive(Debug, thiserror::Error)]
pub(super) enum CaptureError {
    /// One buffer of the dispatch could not be read or verified.
    #[error("dispatch {index} of {kernel}, argument {arg}: {failure}")]
    Buffer {
        index: u64,
        kernel: String,
        arg: u32,
        failure: Box<BufferFailure>,
    },
    /// The dispatch as a whole was refused, or could not be stored.
    #[error("dispatch {index} of {kernel}: {failure}")]
    Dispatch {
        index: u64,
        kernel: String,
        failure: Box<DispatchFailure>,
    },
    /// The memory budget had no room for what capturing it holds.
    #[error(transparent)]
    NoMemory(Box<NoMemory>),
    /// The store refused a streamed buffer with an error not the
    /// capture's own (a length other than its tensor's).
    #[error("{0}")]
    Refused(Refusal),
}

/// The memory budget had no room for what capturing a dispatch holds.
#[derive(Debug, thiserror::Error)]
#[error(
    "dispatch {index} of {kernel}, {arguments}: cannot allocate {bytes} bytes ({}) for \
     {purpose}: {}; nothing stored",
    human(.bytes),
    why(.refusal)
)]
pub(super) struct NoMemory {
    pub(super) index: u64,
    pub(super) kernel: String,
    /// "argument 1", "arguments 0, 2, 3".
    pub(super) arguments: String,
    pub(super) bytes: u64,
    /// What the bytes are for: "its copies", "its inputs, which wait ...".
    pub(super) purpose: &'static str,
    pub(super) refusal: memory_budget::Refusal,
}

/// What failed of one buffer (after "dispatch D of K, argument A: ").
#[derive(Debug, thiserror::Error)]
pub(super) enum BufferFailure {
    /// The CUDA importer is not there (no driver).
    #[error(transparent)]
    NoCudaImporter(CudaSourceError),
    #[error("a copy (shared memory or staged) has no IPC handle to attach")]
    NoHandle,
    #[error("{opening} of pid {pid} (0x{base:x}, {size} bytes): {error}")]
    Attach {
        /// "cannot map the allocation", "cannot open the CUDA IPC handle".
        opening: &'static str,
        pid: u32,
        base: u64,
        size: u64,
        error: SourceError,
    },
    #[error(transparent)]
    Copy(AttachmentError),
    #[error(transparent)]
    Detach(SourceError),
    #[error(
        "fingerprint mismatch (tool read {tool:016x}, collector read {seen:016x}): {through}; \
         data discarded"
    )]
    Mismatch {
        tool: u64,
        seen: u64,
        /// Which copy differs from what the tool read.
        through: &'static str,
    },
    #[error("extent {extent} bytes is not a whole number of {dtype} elements")]
    NotWholeElements { extent: u64, dtype: &'static str },
    #[error("{extent} bytes at offset {offset} exceed the {size}-byte allocation at 0x{base:x}")]
    OutsideAllocation {
        extent: u64,
        offset: u64,
        size: u64,
        base: u64,
    },
    #[error(
        "cannot allocate {0} bytes for the copy: capture a smaller buffer (or free memory on the \
         collector's machine)"
    )]
    NoCopyMemory(u64),
    #[error("cannot read its shared-memory copy ({extent} bytes of pid {pid}): {error}")]
    SharedCopy {
        extent: u64,
        pid: u32,
        error: SharedCopyError,
    },
    #[error("no file descriptor came with its shared-memory copy")]
    NoSharedCopy,
    #[error(transparent)]
    Staged(StagingError),
    #[error("staged, but this connection has no staging file")]
    NoStagingFile,
    /// A large input waits in a file beside the snapshot until the outputs
    /// come; the file system has no room for it.
    #[error(
        "cannot hold {bytes} bytes ({}) of its inputs until its outputs come: {free} bytes \
         are free on the file system of {dir}; capture less (--arg-sizes, --dispatch) or \
         write the snapshot where there is room",
        crate::units::human_bytes(*.bytes)
    )]
    NoRoomToSpill {
        bytes: u64,
        free: u64,
        dir: std::path::PathBuf,
    },
}

/// What failed of a whole dispatch (after "dispatch D of K: ").
#[derive(Debug, thiserror::Error)]
pub(super) enum DispatchFailure {
    /// The file descriptors that came with its message.
    #[error("{0}; nothing stored")]
    Fds(FrameError),
    #[error("refused: {0}; nothing stored")]
    Limits(LimitError),
    /// A panic while capturing (its message).
    #[error("internal error in the collector ({0}); nothing stored")]
    Panicked(String),
    #[error("argument {arg} ({phase:?}) is sent twice; nothing stored")]
    ArgumentTwice { arg: u32, phase: Phase },
    #[error("its inputs are sent twice; nothing stored")]
    InputsTwice,
    #[error(
        "the inputs of {dispatches} dispatch(es) ({waiting} bytes) already wait for their \
         outputs, at most {most}; nothing stored"
    )]
    TooManyWaiting {
        dispatches: usize,
        waiting: u64,
        most: usize,
    },
    #[error(
        "{expected} buffer(s) travel as shared-memory copies but {came} file descriptor(s) came \
         with the message; nothing stored"
    )]
    CopyCount { expected: usize, came: usize },
    #[error("cannot store the snapshot: {0}")]
    Store(StoreError),
}

fn human(bytes: &u64) -> String {
    crate::units::human_bytes(*bytes)
}

fn why(refusal: &memory_budget::Refusal) -> String {
    refusal.why()
}

/// The dispatch's kernel as messages name it ([`limits::short`]).
pub(super) fn kernel_of(d: &Dispatch) -> String {
    limits::short(&d.kernel.demangled)
}

impl CaptureError {
    /// Buffer `b` of dispatch `d` failed.
    pub(super) fn buffer(d: &Dispatch, b: &Buffer, failure: BufferFailure) -> CaptureError {
        CaptureError::Buffer {
            index: d.index,
            kernel: kernel_of(d),
            arg: b.arg_index,
            failure: Box::new(failure),
        }
    }

    /// Dispatch `d` as a whole failed.
    pub(super) fn dispatch(d: &Dispatch, failure: DispatchFailure) -> CaptureError {
        CaptureError::Dispatch {
            index: d.index,
            kernel: kernel_of(d),
            failure: Box::new(failure),
        }
    }
}
