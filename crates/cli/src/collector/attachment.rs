//! One attached IPC allocation, detached exactly once: [`Attachment`] maps
//! it through a [`BufferSource`] (counted in the collector's live
//! attachments, told in the debug log), copies from it, writes a run of it
//! into a tensor file being written ([`Attachment::write_extent`]: read in
//! place where the source maps host memory, copied into the file's mapping
//! where the source copies long runs, else a chunk at a time), and unmaps
//! it: explicitly, to see the error, or on drop on every other path. Never
//! keeps a mapping past its owner's scope; knows nothing of dispatches or
//! snapshots (the capture does).

use super::{BufferSource, Mapping, SourceError};
use crate::store::{Filled, Refusal, TensorOut, zeroed_buffer};
use ditto_protocol::{fingerprint, fingerprint_of_windows, fingerprint_windows};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Bytes per copy where a mapping is not host memory.
pub(super) const STREAM_CHUNK: usize = 8 << 20;

/// Bytes per copy from a source that copies long runs in parallel
/// ([`BufferSource::copies_long_runs`]) into a file that cannot be filled
/// in place.
pub(super) const PARALLEL_CHUNK: usize = 64 << 20;

/// Why a run of an attachment was not copied or written.
#[derive(Debug, thiserror::Error)]
pub(super) enum AttachmentError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("cannot write it into the snapshot: {0}")]
    Write(std::io::Error),
    #[error("cannot allocate {0} bytes to copy it through")]
    NoChunk(usize),
    /// A fill of the file's mapping refused with an error not the source's.
    #[error("{0}")]
    Refused(Refusal),
}

/// What the debug log says of one attachment: "attach at T µs: ..." when
/// it is mapped and "detach at T µs: ..." when it is unmapped, T counted
/// from the collector's start (a monotonic clock), so the attachments of
/// different connections can be set side by side.
pub(super) struct AttachmentLog {
    started: Instant,
    /// "connection 3 (pid 1234), dispatch 0, argument 1"
    what: String,
}

impl AttachmentLog {
    /// `None` unless the log shows debug lines (nothing is formatted then):
    /// `what` says whose attachment it is.
    pub(super) fn new(started: Instant, what: impl FnOnce() -> String) -> Option<AttachmentLog> {
        crate::log::enabled(crate::log::Level::Debug).then(|| AttachmentLog {
            started,
            what: what(),
        })
    }

    fn say(&self, event: &str, detail: &str) {
        crate::log::debug(&format!(
            "{event} at {} µs: {}{detail}",
            self.started.elapsed().as_micros(),
            self.what
        ));
    }
}

/// An attachment that is detached exactly once: explicitly through
/// [`Attachment::detach`] (to see its error) or on drop (every other path).
pub(super) struct Attachment<'a> {
    source: &'a dyn BufferSource,
    live: &'a AtomicUsize,
    mapping: Option<Mapping>,
    log: Option<AttachmentLog>,
}

impl<'a> Attachment<'a> {
    pub(super) fn attach(
        source: &'a dyn BufferSource,
        live: &'a AtomicUsize,
        handle: &[u8],
        size: u64,
        owner_node: Option<u32>,
        log: Option<AttachmentLog>,
    ) -> Result<Self, SourceError> {
        let mapping = source.attach(handle, size, owner_node)?;
        live.fetch_add(1, Ordering::SeqCst);
        if let Some(log) = &log {
            let on = mapping
                .gpu
                .map_or(String::new(), |g| format!(", on {}", source.gpu_name(g)));
            log.say("attach", &format!(", {size} bytes mapped{on}"));
        }
        Ok(Attachment {
            source,
            live,
            mapping: Some(mapping),
            log,
        })
    }

    pub(super) fn copy(&self, offset: u64, dst: &mut [u8]) -> Result<(), SourceError> {
        let mapping = self.mapping.as_ref().expect("attached until detach");
        self.source.copy(mapping, offset, dst)
    }

    /// Writes `extent` bytes at `offset` of the mapping to `out` and
    /// returns the fingerprint of the bytes written. Host memory
    /// ([`BufferSource::host_bytes`]) is fingerprinted first and written in
    /// place, and only when it has the fingerprint `expected` (otherwise
    /// nothing is written); other memory is copied [`STREAM_CHUNK`] bytes
    /// at a time into a buffer and written from it, fingerprinting what
    /// is written.
    pub(super) fn write_extent(
        &self,
        offset: u64,
        extent: u64,
        expected: u64,
        out: &mut dyn TensorOut,
    ) -> Result<u64, AttachmentError> {
        let mapping = self.mapping.as_ref().expect("attached until detach");
        let cannot_write = AttachmentError::Write;
        if let Some(bytes) = self.source.host_bytes(mapping, offset, extent) {
            let seen = fingerprint(bytes);
            if seen == expected {
                out.put(bytes).map_err(cannot_write)?;
            }
            return Ok(seen);
        }
        let parallel = self.source.copies_long_runs();
        if parallel {
            let mut seen = 0;
            let mut copy = |dst: &mut [u8]| -> Result<(), Refusal> {
                self.copy(offset, dst)?;
                seen = fingerprint(dst);
                Ok(())
            };
            let started = Instant::now();
            match out.fill_run(extent as usize, &mut copy) {
                Ok(Filled::Done) => {
                    self.say_time(extent, started, "copied into the file's mapping");
                    return Ok(seen);
                }
                // The fill's own error: the source's, given back typed.
                Ok(Filled::Refused(reason)) => {
                    return Err(match reason.downcast::<SourceError>() {
                        Ok(e) => AttachmentError::Source(*e),
                        Err(other) => AttachmentError::Refused(other),
                    });
                }
                Ok(Filled::NotMapped) => {}
                Err(e) => return Err(cannot_write(e)),
            }
        }
        // A source that copies in parallel gets longer chunks.
        let most = if parallel {
            PARALLEL_CHUNK
        } else {
            STREAM_CHUNK
        };
        let chunk_len = extent.min(most as u64) as usize;
        let mut chunk = zeroed_buffer(chunk_len).ok_or(AttachmentError::NoChunk(chunk_len))?;
        let started = Instant::now();
        let mut copying = std::time::Duration::ZERO;
        let windows = fingerprint_windows(extent);
        let mut window_bytes: Vec<Vec<u8>> = windows
            .iter()
            .map(|&(_, len)| Vec::with_capacity(len as usize))
            .collect();
        let mut at = 0u64;
        while at < extent {
            let n = (extent - at).min(chunk_len as u64);
            let part = &mut chunk[..n as usize];
            let copy_started = Instant::now();
            self.copy(offset + at, part)?;
            copying += copy_started.elapsed();
            for (&(start, len), bytes) in windows.iter().zip(&mut window_bytes) {
                let (from, to) = (start.max(at), (start + len).min(at + n));
                if from < to {
                    bytes.extend_from_slice(&part[(from - at) as usize..(to - at) as usize]);
                }
            }
            out.write_all(part).map_err(cannot_write)?;
            at += n;
        }
        self.say_time(
            extent,
            started,
            &format!(
                "copied a chunk at a time ({} ms copying, the rest writing)",
                copying.as_millis()
            ),
        );
        Ok(fingerprint_of_windows(
            extent,
            window_bytes.iter().map(|b| &b[..]),
        ))
    }

    /// The debug line of a long run stored from a mapping that is not
    /// host memory: how long it took, and how.
    fn say_time(&self, extent: u64, started: Instant, how: &str) {
        if let Some(log) = &self.log {
            let ms = started.elapsed().as_secs_f64() * 1e3;
            log.say(
                "stored",
                &format!(
                    ": {extent} bytes in {ms:.1} ms ({:.2} GB/s), {how}",
                    extent as f64 / (ms * 1e6)
                ),
            );
        }
    }

    pub(super) fn detach(mut self) -> Result<(), SourceError> {
        self.release()
    }

    fn release(&mut self) -> Result<(), SourceError> {
        match self.mapping.take() {
            Some(m) => {
                let r = self.source.detach(m);
                self.live.fetch_sub(1, Ordering::SeqCst);
                if let Some(log) = &self.log {
                    log.say("detach", "");
                }
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
