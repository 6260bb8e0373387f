//! The copies the tool made of a dispatch's buffers, read without mapping
//! anything: a shared-memory copy is the memfd that came with its message,
//! read with pread and closed ([`read_copy`]); staged buffers lie in the
//! connection's staging file ([`StagingFile`]), read with pread, whose
//! header tells the tool how many dispatches are finished. Owns the
//! checks that a copy holds what was announced; never reads outside it.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;

/// Why a staging file is refused, or cannot be read or told of progress.
#[derive(Debug, thiserror::Error)]
pub(super) enum StagingError {
    #[error("a second staging file on one connection; ignored")]
    Second,
    #[error(
        "a staging file announced with {0} file descriptors instead of 1; its staged buffers \
         cannot be read"
    )]
    FdCount(usize),
    #[error("cannot stat the staging file: {0}")]
    Stat(io::Error),
    #[error("the staging file holds {len} bytes, fewer than the {size} announced")]
    Short { len: u64, size: u64 },
    #[error("cannot record progress in the staging file: {0}")]
    Progress(io::Error),
    #[error("{len} bytes at {at} lie outside the staged part of the {size}-byte staging file")]
    Outside { len: usize, at: u64, size: u64 },
    #[error("cannot read the staging file: {0}")]
    Read(io::Error),
}

/// Why a shared-memory copy cannot be read.
#[derive(Debug, thiserror::Error)]
pub(super) enum SharedCopyError {
    #[error("cannot stat it: {0}")]
    Stat(io::Error),
    #[error("the file holds {0} bytes, fewer than the extent")]
    Short(u64),
    #[error("cannot read it: {0}")]
    Read(io::Error),
}

/// The tool's staging file of one connection ([`Transport::Staged`]
/// buffers lie in it), kept open until the connection ends.
pub(super) struct StagingFile {
    file: File,
    size: u64,
}

impl StagingFile {
    /// The file that came with a `Staging { size }` message: exactly one
    /// fd, holding at least `size` bytes, and the first such message.
    pub(super) fn from_message(
        size: u64,
        mut fds: Vec<OwnedFd>,
        already: bool,
    ) -> Result<StagingFile, StagingError> {
        if already {
            return Err(StagingError::Second);
        }
        if fds.len() != 1 {
            return Err(StagingError::FdCount(fds.len()));
        }
        let file = File::from(fds.pop().expect("one fd"));
        let len = file.metadata().map_err(StagingError::Stat)?.len();
        if len < size {
            return Err(StagingError::Short { len, size });
        }
        Ok(StagingFile { file, size })
    }

    /// Tells the tool that `finished` Dispatch frames of the connection are
    /// finished (the file's header, [`ditto_protocol::STAGING_HEADER_BYTES`]).
    pub(super) fn record_progress(&self, finished: u64) -> Result<(), StagingError> {
        self.file
            .write_all_at(&finished.to_le_bytes(), 0)
            .map_err(StagingError::Progress)
    }

    /// Reads `dst.len()` bytes at `at`, which must lie after the header,
    /// inside the file.
    pub(super) fn read(&self, at: u64, dst: &mut [u8]) -> Result<(), StagingError> {
        if at < ditto_protocol::STAGING_HEADER_BYTES
            || at
                .checked_add(dst.len() as u64)
                .is_none_or(|end| end > self.size)
        {
            return Err(StagingError::Outside {
                len: dst.len(),
                at,
                size: self.size,
            });
        }
        self.file.read_exact_at(dst, at).map_err(StagingError::Read)
    }
}

/// Where the copies the tool made of a dispatch's buffers lie: the fds
/// that came with its message (one per shared-memory buffer, in buffer
/// order) and the connection's staging file (staged buffers).
pub(super) struct CopyFiles<'a> {
    pub(super) copies: Vec<OwnedFd>,
    pub(super) staging: Option<&'a StagingFile>,
}

/// Reads `dst.len()` bytes from byte 0 of a shared-memory copy with pread
/// (nothing is mapped), then closes it.
pub(super) fn read_copy(fd: OwnedFd, dst: &mut [u8]) -> Result<(), SharedCopyError> {
    let file = File::from(fd);
    let size = file.metadata().map_err(SharedCopyError::Stat)?.len();
    if size < dst.len() as u64 {
        return Err(SharedCopyError::Short(size));
    }
    file.read_exact_at(dst, 0).map_err(SharedCopyError::Read)
}
