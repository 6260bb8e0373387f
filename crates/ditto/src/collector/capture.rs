//! Reading one dispatch's buffers: attach → copy → DETACH → verify the
//! fingerprint, then store. IPC buffers are mapped through the runtime
//! (CUDA IPC buffers through the CUDA importer, `cuda`);
//! shared-memory buffers (the copy transport) are read from the memfd that
//! came with the message, with pread, and the fd is closed; staged buffers
//! are read with pread from the connection's staging file. Owns the RAII
//! attachment guard and the live attachment count; never returns (or
//! stores) bytes whose fingerprint differs from the tool's, and never
//! leaves a mapping or an fd behind on any path: every fd of a dispatch is
//! closed when [`capture_dispatch`] returns, before the ack.

use super::{BufferSource, Mapping, Shared};
use crate::store::{CapturedBuffer, SnapshotWriter, zeroed_buffer};
use ditto_protocol::{Buffer, Dispatch, Phase, Transport, fingerprint};
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// An attachment that is detached exactly once: explicitly through
/// [`Attachment::detach`] (to see its error) or on drop (every other path).
struct Attachment<'a> {
    source: &'a dyn BufferSource,
    live: &'a AtomicUsize,
    mapping: Option<Mapping>,
}

impl<'a> Attachment<'a> {
    fn attach(
        source: &'a dyn BufferSource,
        live: &'a AtomicUsize,
        handle: &[u8],
        size: u64,
    ) -> Result<Self, String> {
        let mapping = source.attach(handle, size)?;
        live.fetch_add(1, Ordering::SeqCst);
        Ok(Attachment {
            source,
            live,
            mapping: Some(mapping),
        })
    }

    fn copy(&self, offset: u64, dst: &mut [u8]) -> Result<(), String> {
        let mapping = self.mapping.as_ref().expect("attached until detach");
        self.source.copy(mapping, offset, dst)
    }

    fn detach(mut self) -> Result<(), String> {
        self.release()
    }

    fn release(&mut self) -> Result<(), String> {
        match self.mapping.take() {
            Some(m) => {
                let r = self.source.detach(m);
                self.live.fetch_sub(1, Ordering::SeqCst);
                r
            }
            None => Ok(()),
        }
    }
}

impl Drop for Attachment<'_> {
    fn drop(&mut self) {
        let _ = self.release();
    }
}

/// The tool's staging file of one connection ([`Transport::Staged`]
/// buffers lie in it), kept open until the connection ends.
pub(super) struct StagingFile {
    file: std::fs::File,
    size: u64,
}

impl StagingFile {
    /// The file that came with a `Staging { size }` message: exactly one
    /// fd, holding at least `size` bytes, and the first such message.
    pub(super) fn from_message(
        size: u64,
        mut fds: Vec<OwnedFd>,
        already: bool,
    ) -> Result<StagingFile, String> {
        if already {
            return Err("a second staging file on one connection; ignored".into());
        }
        if fds.len() != 1 {
            return Err(format!(
                "a staging file announced with {} file descriptors instead of 1; \
                 its staged buffers cannot be read",
                fds.len()
            ));
        }
        let file = std::fs::File::from(fds.pop().expect("one fd"));
        let len = file
            .metadata()
            .map_err(|e| format!("cannot stat the staging file: {e}"))?
            .len();
        if len < size {
            return Err(format!(
                "the staging file holds {len} bytes, fewer than the {size} announced"
            ));
        }
        Ok(StagingFile { file, size })
    }

    /// Tells the tool that `finished` Dispatch frames of the connection are
    /// finished (the file's header, [`ditto_protocol::STAGING_HEADER_BYTES`]).
    pub(super) fn record_progress(&self, finished: u64) -> Result<(), String> {
        self.file
            .write_all_at(&finished.to_le_bytes(), 0)
            .map_err(|e| format!("cannot record progress in the staging file: {e}"))
    }

    /// Reads `dst.len()` bytes at `at`, which must lie after the header,
    /// inside the file.
    fn read(&self, at: u64, dst: &mut [u8]) -> Result<(), String> {
        if at < ditto_protocol::STAGING_HEADER_BYTES
            || at
                .checked_add(dst.len() as u64)
                .is_none_or(|end| end > self.size)
        {
            return Err(format!(
                "{} bytes at {at} lie outside the staged part of the {}-byte staging file",
                dst.len(),
                self.size
            ));
        }
        self.file
            .read_exact_at(dst, at)
            .map_err(|e| format!("cannot read the staging file: {e}"))
    }
}

pub(super) struct Stored {
    /// 1 when the dispatch was written, 0 for inputs kept until its After part.
    pub(super) dispatches: u64,
    pub(super) arrays: u64,
    pub(super) bytes: u64,
}

fn describe_buffer(d: &Dispatch, b: &Buffer) -> String {
    format!(
        "dispatch {} of {}, argument {}",
        d.index, d.kernel.demangled, b.arg_index
    )
}

/// attach → copy → detach → verify for one buffer; for a shared-memory
/// buffer, read its `copy` (closed on return) → verify.
fn capture_buffer(
    shared: &Shared,
    d: &Dispatch,
    b: &Buffer,
    copy: Option<OwnedFd>,
    staging: Option<&StagingFile>,
) -> Result<Vec<u8>, String> {
    let what = || describe_buffer(d, b);
    let size = b.dtype.size() as u64;
    if !b.extent.is_multiple_of(size) {
        return Err(format!(
            "{}: extent {} bytes is not a whole number of {} elements",
            what(),
            b.extent,
            b.dtype.name()
        ));
    }
    if b.offset
        .checked_add(b.extent)
        .is_none_or(|end| end > b.alloc_size)
    {
        return Err(format!(
            "{}: {} bytes at offset {} exceed the {}-byte allocation at 0x{:x}",
            what(),
            b.extent,
            b.offset,
            b.alloc_size,
            b.alloc_base
        ));
    }
    // The extent comes from the tool: an allocation failure must be an error
    // ack, not an abort of the collector (and of every other connection).
    let mut data = match usize::try_from(b.extent).ok().and_then(zeroed_buffer) {
        Some(data) => data,
        None => {
            return Err(format!(
                "{}: cannot allocate {} bytes for the copy: capture a smaller buffer \
                 (or free memory on the collector's machine)",
                what(),
                b.extent
            ));
        }
    };
    match (&b.transport, copy) {
        (Transport::Ipc { handle }, _) => {
            let attachment =
                Attachment::attach(&*shared.source, &shared.live, handle, b.alloc_size).map_err(
                    |e| {
                        format!(
                            "{}: cannot map the allocation of pid {} (0x{:x}, {} bytes): {e}",
                            what(),
                            b.owner_pid,
                            b.alloc_base,
                            b.alloc_size
                        )
                    },
                )?;
            attachment
                .copy(b.offset, &mut data)
                .map_err(|e| format!("{}: {e}", what()))?;
            attachment
                .detach()
                .map_err(|e| format!("{}: {e}", what()))?;
        }
        (Transport::CudaIpc { handle }, _) => {
            let cuda = super::cuda::cuda_source().map_err(|e| format!("{}: {e}", what()))?;
            let attachment = Attachment::attach(&cuda, &shared.live, handle, b.alloc_size)
                .map_err(|e| {
                    format!(
                        "{}: cannot open the CUDA IPC handle of pid {} (0x{:x}, {} bytes): {e}",
                        what(),
                        b.owner_pid,
                        b.alloc_base,
                        b.alloc_size
                    )
                })?;
            attachment
                .copy(b.offset, &mut data)
                .map_err(|e| format!("{}: {e}", what()))?;
            attachment
                .detach()
                .map_err(|e| format!("{}: {e}", what()))?;
        }
        (Transport::SharedMemory, Some(fd)) => read_copy(fd, &mut data).map_err(|e| {
            format!(
                "{}: cannot read its shared-memory copy ({} bytes of pid {}): {e}",
                what(),
                b.extent,
                b.owner_pid
            )
        })?,
        (Transport::SharedMemory, None) => {
            return Err(format!(
                "{}: no file descriptor came with its shared-memory copy",
                what()
            ));
        }
        (Transport::Staged { at }, _) => match staging {
            Some(file) => file
                .read(*at, &mut data)
                .map_err(|e| format!("{}: {e}", what()))?,
            None => {
                return Err(format!(
                    "{}: staged, but this connection has no staging file",
                    what()
                ));
            }
        },
    }
    let seen = fingerprint(&data);
    if seen != b.fingerprint {
        let through = match b.transport {
            Transport::Ipc { .. } | Transport::CudaIpc { .. } => {
                "the mapping does not show what the application holds"
            }
            Transport::SharedMemory => "the shared-memory copy differs from what the tool read",
            Transport::Staged { .. } => "the staged copy differs from what the tool read",
        };
        return Err(format!(
            "{}: fingerprint mismatch (tool read {:016x}, collector read {seen:016x}): {through}; \
             data discarded",
            what(),
            b.fingerprint
        ));
    }
    Ok(data)
}

/// Reads `dst.len()` bytes from byte 0 of a shared-memory copy with pread
/// (nothing is mapped), then closes it.
fn read_copy(fd: OwnedFd, dst: &mut [u8]) -> Result<(), String> {
    let file = std::fs::File::from(fd);
    let size = file
        .metadata()
        .map_err(|e| format!("cannot stat it: {e}"))?
        .len();
    if size < dst.len() as u64 {
        return Err(format!(
            "the file holds {size} bytes, fewer than the extent"
        ));
    }
    file.read_exact_at(dst, 0)
        .map_err(|e| format!("cannot read it: {e}"))
}

/// Captures every buffer of a dispatch, then stores it. Nothing is stored
/// unless every buffer was read and verified.
///
/// A message whose buffers are all [`Phase::Before`] is the inputs part of
/// a dispatch (sent before the kernel ran): its copies wait in `inputs`
/// under the dispatch index and are stored with the After part, in one
/// file. Inputs whose After part never comes are not stored.
///
/// `copies`: the fds that came with the message, one per shared-memory
/// buffer in buffer order; another count is an error. All are closed when
/// this returns, whatever the outcome.
pub(super) fn capture_dispatch(
    shared: &Shared,
    writer: &Mutex<SnapshotWriter>,
    rank: u32,
    pid: u32,
    d: &Dispatch,
    copies: Vec<OwnedFd>,
    staging: Option<&StagingFile>,
    inputs: &mut HashMap<u64, Vec<CapturedBuffer>>,
) -> Result<Stored, String> {
    let expected = d
        .buffers
        .iter()
        .filter(|b| matches!(b.transport, Transport::SharedMemory))
        .count();
    if copies.len() != expected {
        return Err(format!(
            "dispatch {} of {}: {expected} buffer(s) travel as shared-memory copies but {} file \
             descriptor(s) came with the message; nothing stored",
            d.index,
            d.kernel.demangled,
            copies.len()
        ));
    }
    let mut copies = copies.into_iter();
    let mut captured = Vec::with_capacity(d.buffers.len());
    for b in &d.buffers {
        let copy = match b.transport {
            Transport::SharedMemory => copies.next(),
            Transport::Ipc { .. } | Transport::CudaIpc { .. } | Transport::Staged { .. } => None,
        };
        let data = capture_buffer(shared, d, b, copy, staging)?;
        captured.push(CapturedBuffer {
            buffer: b.clone(),
            data,
        });
    }
    let bytes = captured.iter().map(|c| c.data.len() as u64).sum();
    let arrays = captured.len() as u64;
    if !d.buffers.is_empty() && d.buffers.iter().all(|b| b.phase == Phase::Before) {
        inputs.insert(d.index, captured);
        return Ok(Stored {
            dispatches: 0,
            arrays,
            bytes,
        });
    }
    if let Some(mut before) = inputs.remove(&d.index) {
        before.append(&mut captured);
        captured = before;
    }
    writer
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .add_dispatch(rank, pid, d, &captured)
        .map_err(|e| {
            format!(
                "dispatch {} of {}: cannot store the snapshot: {e}",
                d.index, d.kernel.demangled
            )
        })?;
    Ok(Stored {
        dispatches: 1,
        arrays,
        bytes,
    })
}
