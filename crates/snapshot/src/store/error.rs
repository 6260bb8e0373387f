//! Why a snapshot could not be written or read: [`StoreError`], one
//! variant per kind of failure, each naming the file it concerns. Owns the
//! error type only.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path}: not a ditto snapshot manifest: {reason}")]
    BadManifest { path: PathBuf, reason: String },
    #[error("{path}: {reason}")]
    BadTensorFile { path: PathBuf, reason: String },
    #[error(
        "{path} is not a place for a ditto snapshot: {what}; choose another directory or remove it"
    )]
    ForeignDirectory { path: PathBuf, what: String },
    #[error(
        "{} is being written by another ditto{}; wait for it to finish or choose another directory",
        path.display(),
        holder.map(|p| format!(" (pid {p})")).unwrap_or_default()
    )]
    Busy { path: PathBuf, holder: Option<u32> },
    /// A name of the snapshot is not a regular file of its directory (a
    /// link, a FIFO, a device, a directory): never followed or read.
    #[error("{path}: not read: {what}; a snapshot's files are regular files of its own directory")]
    NotRegularFile { path: PathBuf, what: String },
    /// The directory being written is no longer the one at its path.
    #[error(
        "{path} was moved or replaced while ditto wrote the snapshot into it ({what}): nothing \
         more was written there and this snapshot is not committed; what was captured stays in \
         the directory that was moved; make --out a directory in a place only you can change \
         (not under a directory another user may write in)"
    )]
    Displaced { path: PathBuf, what: String },
    /// A node's part of a run written by another collector process of
    /// the same run: never replaced ([`super::parts`]).
    #[error(
        "{path}: {what}; a collector never replaces another collector's part of a run: give \
         this collector another --node name, or write into another --out, or remove {path} if \
         that part is not wanted"
    )]
    PartOfAnotherCollector { path: PathBuf, what: String },
    #[error("{0}")]
    Invalid(String),
    /// A streamed tensor's source refused (its own error, or a length
    /// other than its tensor's): nothing was stored.
    #[error("{0}")]
    Refused(super::placement::Refusal),
}

pub(super) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        error: source,
    }
}
