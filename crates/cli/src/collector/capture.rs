//! Reading one dispatch's buffers: attach → copy → DETACH → verify the
//! fingerprint, then store. IPC buffers are mapped through the runtime
//! (CUDA IPC buffers through the CUDA importer, `cuda`);
//! shared-memory buffers (the copy transport) are read from the memfd that
//! came with the message, with pread, and the fd is closed; staged buffers
//! are read with pread from the connection's staging file. An IPC buffer
//! of at least [`STREAM_FROM_BYTES`] is not copied into the collector's
//! memory: it is written from the attachment into its tensor file while
//! the file is written (attach → write → DETACH → verify; a mismatch
//! leaves no file), [`stream_buffer`], without the run's writer lock
//! ([`SnapshotWriter::add_dispatch_shared`]: the large buffers of the
//! run's connections are copied at the same time). Owns the RAII
//! attachment guard and the live attachment count; never returns (or
//! stores) bytes whose fingerprint differs from the tool's, and never
//! leaves a mapping or an fd behind on any path: every fd of a dispatch is
//! closed when [`capture_dispatch`] returns, before the ack. Nothing is
//! read into memory before the bytes it takes are reserved in the
//! collector's memory budget ([`super::memory_budget`]): a dispatch waits
//! there for room, or is refused; the inputs of a dispatch keep their
//! reservation while they wait for its outputs.

use super::memory_budget::Reservation;
use super::{BufferSource, Mapping, Shared, limits};
use crate::store::{
    CapturedBuffer, Filled, Refusal, SnapshotWriter, StoreError, TensorOut, TensorSource,
    TensorToStore, zeroed_buffer,
};
use ditto_protocol::{
    Buffer, Dispatch, Transport, fingerprint, fingerprint_of_windows, fingerprint_windows,
};
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// The connection a dispatch came on, as capturing it needs it: where it is
/// stored and who sent it.
pub(super) struct Origin<'a> {
    pub(super) writer: &'a Mutex<SnapshotWriter>,
    /// The collector's number for the connection (its log lines name it).
    pub(super) connection: u64,
    pub(super) rank: u32,
    pub(super) pid: u32,
}

/// What the debug log says of one attachment: "attach at T µs: ..." when
/// it is mapped and "detach at T µs: ..." when it is unmapped, T counted
/// from the collector's start (a monotonic clock), so the attachments of
/// different connections can be set side by side.
struct AttachmentLog {
    started: Instant,
    /// "connection 3 (pid 1234), dispatch 0, argument 1"
    what: String,
}

impl AttachmentLog {
    /// `None` unless the log shows debug lines (nothing is formatted then).
    fn new(started: Instant, origin: &Origin, d: &Dispatch, b: &Buffer) -> Option<AttachmentLog> {
        crate::log::enabled(crate::log::Level::Debug).then(|| AttachmentLog {
            started,
            what: format!(
                "connection {} (pid {}, rank {}), dispatch {}, argument {}",
                origin.connection, origin.pid, origin.rank, d.index, b.arg_index
            ),
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
struct Attachment<'a> {
    source: &'a dyn BufferSource,
    live: &'a AtomicUsize,
    mapping: Option<Mapping>,
    log: Option<AttachmentLog>,
}

impl<'a> Attachment<'a> {
    fn attach(
        source: &'a dyn BufferSource,
        live: &'a AtomicUsize,
        handle: &[u8],
        size: u64,
        owner_node: Option<u32>,
        log: Option<AttachmentLog>,
    ) -> Result<Self, String> {
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

    fn copy(&self, offset: u64, dst: &mut [u8]) -> Result<(), String> {
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
    fn write_extent(
        &self,
        offset: u64,
        extent: u64,
        expected: u64,
        out: &mut dyn TensorOut,
    ) -> Result<u64, String> {
        let mapping = self.mapping.as_ref().expect("attached until detach");
        let cannot_write = |e: std::io::Error| format!("cannot write it into the snapshot: {e}");
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
                Ok(Filled::Refused(reason)) => return Err(reason.to_string()),
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
        let mut chunk = zeroed_buffer(chunk_len)
            .ok_or_else(|| format!("cannot allocate {chunk_len} bytes to copy it through"))?;
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

    fn detach(mut self) -> Result<(), String> {
        self.release()
    }

    fn release(&mut self) -> Result<(), String> {
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

/// Where the copies the tool made of a dispatch's buffers lie: the fds
/// that came with its message (one per shared-memory buffer, in buffer
/// order) and the connection's staging file (staged buffers).
pub(super) struct CopyFiles<'a> {
    pub(super) copies: Vec<OwnedFd>,
    pub(super) staging: Option<&'a StagingFile>,
}

pub(super) struct Stored {
    /// 1 when the dispatch was written, 0 for inputs kept until its After part.
    pub(super) dispatches: u64,
    pub(super) arrays: u64,
    pub(super) bytes: u64,
}

/// The dispatch's kernel as messages name it ([`limits::short`]).
pub(super) fn kernel_of(d: &Dispatch) -> String {
    limits::short(&d.kernel.demangled)
}

fn describe_buffer(d: &Dispatch, b: &Buffer) -> String {
    format!(
        "dispatch {} of {}, argument {}",
        d.index,
        kernel_of(d),
        b.arg_index
    )
}

/// IPC extents of at least this many bytes are streamed from the
/// attachment into the tensor file ([`stream_buffer`]); smaller ones are
/// copied into memory and go out with the rest of the file in one write
/// (no system call more for the many small dispatches).
pub(super) const STREAM_FROM_BYTES: u64 = 1 << 20;

/// Bytes per copy where a mapping is not host memory.
const STREAM_CHUNK: usize = 8 << 20;

/// Bytes per copy from a source that copies long runs in parallel
/// ([`BufferSource::copies_long_runs`]) into a file that cannot be filled
/// in place.
const PARALLEL_CHUNK: usize = 64 << 20;

/// Refuses an extent that is not whole elements or lies outside its
/// allocation (before anything is attached).
fn check_extent(d: &Dispatch, b: &Buffer) -> Result<(), String> {
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
    Ok(())
}

/// Attaches an IPC buffer's allocation (through the runtime, or the CUDA
/// importer), runs `f` on the attachment, then detaches: explicitly when
/// `f` succeeded (its error is the result), by the guard otherwise.
fn with_attachment<T>(
    shared: &Shared,
    origin: &Origin,
    d: &Dispatch,
    b: &Buffer,
    f: impl FnOnce(&Attachment) -> Result<T, String>,
) -> Result<T, String> {
    let what = || describe_buffer(d, b);
    let cuda;
    let (source, handle, owner_node, opening): (&dyn BufferSource, &[u8], Option<u32>, &str) =
        match &b.transport {
            Transport::Ipc { handle, owner_node } => (
                &*shared.source,
                handle,
                *owner_node,
                "cannot map the allocation",
            ),
            Transport::CudaIpc {
                handle,
                device_uuid,
            } => {
                cuda = super::cuda::cuda_source(device_uuid.as_ref())
                    .map_err(|e| format!("{}: {e}", what()))?;
                (&cuda, handle, None, "cannot open the CUDA IPC handle")
            }
            Transport::SharedMemory | Transport::Staged { .. } => {
                return Err(format!(
                    "{}: a copy (shared memory or staged) has no IPC handle to attach",
                    what()
                ));
            }
        };
    let log = AttachmentLog::new(shared.started, origin, d, b);
    let attachment =
        Attachment::attach(source, &shared.live, handle, b.alloc_size, owner_node, log).map_err(
            |e| {
                format!(
                    "{}: {opening} of pid {} (0x{:x}, {} bytes): {e}",
                    what(),
                    b.owner_pid,
                    b.alloc_base,
                    b.alloc_size
                )
            },
        )?;
    let result = f(&attachment).map_err(|e| format!("{}: {e}", what()))?;
    attachment
        .detach()
        .map_err(|e| format!("{}: {e}", what()))?;
    Ok(result)
}

/// The error for bytes whose fingerprint is not the tool's.
fn mismatch(d: &Dispatch, b: &Buffer, seen: u64) -> String {
    let through = match b.transport {
        Transport::Ipc { .. } | Transport::CudaIpc { .. } => {
            "the mapping does not show what the application holds"
        }
        Transport::SharedMemory => "the shared-memory copy differs from what the tool read",
        Transport::Staged { .. } => "the staged copy differs from what the tool read",
    };
    format!(
        "{}: fingerprint mismatch (tool read {:016x}, collector read {seen:016x}): {through}; \
         data discarded",
        describe_buffer(d, b),
        b.fingerprint
    )
}

/// attach → copy → detach → verify for one buffer; for a shared-memory
/// buffer, read its `copy` (closed on return) → verify.
fn capture_buffer(
    shared: &Shared,
    origin: &Origin,
    d: &Dispatch,
    b: &Buffer,
    copy: Option<OwnedFd>,
    staging: Option<&StagingFile>,
) -> Result<Vec<u8>, String> {
    let what = || describe_buffer(d, b);
    check_extent(d, b)?;
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
        (Transport::Ipc { .. } | Transport::CudaIpc { .. }, _) => {
            with_attachment(shared, origin, d, b, |attachment| {
                attachment.copy(b.offset, &mut data)
            })?
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
        return Err(mismatch(d, b, seen));
    }
    Ok(data)
}

/// attach → write the extent into the tensor file being written (`out`)
/// → DETACH → verify, for one IPC buffer of at least [`STREAM_FROM_BYTES`]:
/// the store's streamed source. Its error (a mismatch included) makes the
/// store drop the file: nothing is stored.
fn stream_buffer(
    shared: &Shared,
    origin: &Origin,
    d: &Dispatch,
    b: &Buffer,
    out: &mut dyn TensorOut,
) -> Result<(), String> {
    let seen = with_attachment(shared, origin, d, b, |attachment| {
        attachment.write_extent(b.offset, b.extent, b.fingerprint, out)
    })?;
    if seen != b.fingerprint {
        return Err(mismatch(d, b, seen));
    }
    Ok(())
}

/// Whether a buffer of a dispatch stored now goes from its attachment
/// straight into the tensor file.
fn streamed(b: &Buffer) -> bool {
    matches!(
        b.transport,
        Transport::Ipc { .. } | Transport::CudaIpc { .. }
    ) && b.extent >= STREAM_FROM_BYTES
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

/// Most dispatches whose inputs may wait in memory for their outputs, per
/// connection: the tool sends a dispatch's outputs right after its inputs,
/// so more is a broken or hostile peer. Their bytes count in the
/// collector's memory budget, like every other copy.
pub(super) const MAX_WAITING_INPUTS: usize = 16;

/// The inputs of a dispatch, waiting in memory for its outputs, and their
/// bytes' reservation in the memory budget (given back when they go).
pub(super) struct WaitingInputs {
    buffers: Vec<CapturedBuffer>,
    _memory: Reservation,
}

/// Files up to this size whose bytes are all in memory are joined into one
/// buffer and written at once (the store's rule): that copy counts too.
const JOINED_WRITE_BYTES: u64 = 1 << 20;

/// Bytes of a stored dispatch's buffer held in memory while it is written:
/// all of it when copied in, else the chunk a streamed one goes through.
fn held_while_storing(shared: &Shared, b: &Buffer) -> u64 {
    if !streamed(b) {
        return b.extent;
    }
    let parallel = match b.transport {
        Transport::CudaIpc { .. } => true,
        _ => shared.source.copies_long_runs(),
    };
    let chunk = if parallel {
        PARALLEL_CHUNK
    } else {
        STREAM_CHUNK
    };
    b.extent.min(chunk as u64)
}

/// "argument 1", "arguments 0, 2, 3".
fn arguments(buffers: &[&Buffer]) -> String {
    const LISTED: usize = 8;
    let mut list: Vec<String> = buffers
        .iter()
        .take(LISTED)
        .map(|b| b.arg_index.to_string())
        .collect();
    if buffers.len() > LISTED {
        list.push(format!("… ({} in all)", buffers.len()));
    }
    match buffers.len() {
        1 => format!("argument {}", list[0]),
        _ => format!("arguments {}", list.join(", ")),
    }
}

/// Reserves in the collector's memory budget what capturing `d` holds in
/// memory beyond `before` (its inputs, already held): every buffer of an
/// inputs part; for a dispatch stored now, its buffers copied into memory,
/// the chunk its streamed ones go through, and a small file's joined copy.
/// Waits for room at most [`super::CollectorConfig::memory_wait`].
fn reserve_memory(
    shared: &Shared,
    d: &Dispatch,
    inputs_part: bool,
    before: u64,
) -> Result<Reservation, String> {
    let held: Vec<(&Buffer, u64)> = d
        .buffers
        .iter()
        .map(|b| {
            let bytes = if inputs_part {
                b.extent
            } else {
                held_while_storing(shared, b)
            };
            (b, bytes)
        })
        .filter(|&(_, bytes)| bytes > 0)
        .collect();
    let mut bytes = held.iter().fold(0u64, |n, &(_, b)| n.saturating_add(b));
    if !inputs_part && !d.buffers.iter().any(streamed) {
        let file = bytes.saturating_add(before);
        if file <= JOINED_WRITE_BYTES {
            bytes = bytes.saturating_add(file);
        }
    }
    shared
        .memory
        .reserve(bytes, shared.config.memory_wait, &shared.shutdown)
        .map_err(|refusal| {
            let buffers: Vec<&Buffer> = held.iter().map(|&(b, _)| b).collect();
            let purpose = if inputs_part {
                "its inputs, which wait in memory until its outputs come"
            } else {
                "its copies"
            };
            format!(
                "dispatch {} of {}, {}: cannot allocate {bytes} bytes ({}) for {purpose}: {}; \
                 nothing stored",
                d.index,
                kernel_of(d),
                arguments(&buffers),
                crate::units::human_bytes(bytes),
                refusal.why()
            )
        })
}

/// Every (argument, phase) of a dispatch at most once: two tensors of one
/// name make a safetensors file no reader accepts.
fn check_arguments_once(d: &Dispatch) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    for b in &d.buffers {
        if !seen.insert((b.arg_index, b.phase)) {
            return Err(format!(
                "dispatch {} of {}: argument {} ({:?}) is sent twice; nothing stored",
                d.index,
                kernel_of(d),
                b.arg_index,
                b.phase
            ));
        }
    }
    Ok(())
}

/// Whether the inputs part `d` may wait for its outputs (its bytes are the
/// memory budget's to bound).
fn check_inputs_room(d: &Dispatch, inputs: &HashMap<u64, WaitingInputs>) -> Result<(), String> {
    if inputs.contains_key(&d.index) {
        return Err(format!(
            "dispatch {} of {}: its inputs are sent twice; nothing stored",
            d.index,
            kernel_of(d)
        ));
    }
    let waiting: u64 = inputs
        .values()
        .flat_map(|w| &w.buffers)
        .map(|c| c.data.len() as u64)
        .sum();
    if inputs.len() >= MAX_WAITING_INPUTS {
        return Err(format!(
            "dispatch {} of {}: the inputs of {} dispatch(es) ({waiting} bytes) already wait for \
             their outputs, at most {MAX_WAITING_INPUTS}; nothing stored",
            d.index,
            kernel_of(d),
            inputs.len()
        ));
    }
    Ok(())
}

/// Captures every buffer of a dispatch, then stores it. Nothing is stored
/// unless every buffer was read and verified.
///
/// A message whose buffers are all [`Phase::Before`] is the inputs part of
/// a dispatch (sent before the kernel ran): its copies wait in `inputs`
/// under the dispatch index and are stored with the After part, in one
/// file. Inputs whose After part never comes are not stored.
///
/// What it holds in memory is reserved in the collector's memory budget
/// first ([`reserve_memory`]): it waits there for room, or is refused.
///
/// `files.copies`: the fds that came with the message, one per shared-memory
/// buffer in buffer order; another count is an error. All are closed when
/// this returns, whatever the outcome.
pub(super) fn capture_dispatch(
    shared: &Shared,
    origin: &Origin,
    d: &Dispatch,
    files: CopyFiles<'_>,
    inputs: &mut HashMap<u64, WaitingInputs>,
) -> Result<Stored, String> {
    let CopyFiles { copies, staging } = files;
    check_arguments_once(d)?;
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
            kernel_of(d),
            copies.len()
        ));
    }
    let mut copies = copies.into_iter();
    // The inputs part waits in memory for its After part; a dispatch
    // stored now streams its large IPC buffers.
    let inputs_part = d.is_inputs_part();
    // Checked before anything is read into memory.
    if inputs_part {
        check_inputs_room(d, inputs)?;
    }
    for b in &d.buffers {
        check_extent(d, b)?;
    }
    let before_bytes = match inputs.get(&d.index) {
        Some(w) if !inputs_part => w
            .buffers
            .iter()
            .fold(0u64, |n, c| n.saturating_add(c.data.len() as u64)),
        _ => 0,
    };
    let memory = reserve_memory(shared, d, inputs_part, before_bytes)?;
    // Per buffer: its bytes, or None for one streamed into the file.
    let mut data: Vec<Option<Vec<u8>>> = Vec::with_capacity(d.buffers.len());
    for b in &d.buffers {
        let copy = match b.transport {
            Transport::SharedMemory => copies.next(),
            Transport::Ipc { .. } | Transport::CudaIpc { .. } | Transport::Staged { .. } => None,
        };
        if !inputs_part && streamed(b) {
            data.push(None);
        } else {
            data.push(Some(capture_buffer(shared, origin, d, b, copy, staging)?));
        }
    }
    let bytes: u64 = d
        .buffers
        .iter()
        .fold(0u64, |n, b| n.saturating_add(b.extent));
    let arrays = d.buffers.len() as u64;
    if inputs_part {
        let captured = d
            .buffers
            .iter()
            .zip(data)
            .map(|(b, data)| CapturedBuffer {
                buffer: b.clone(),
                data: data.expect("an inputs part is captured into memory"),
            })
            .collect();
        inputs.insert(
            d.index,
            WaitingInputs {
                buffers: captured,
                _memory: memory,
            },
        );
        return Ok(Stored {
            dispatches: 0,
            arrays,
            bytes,
        });
    }
    // Its inputs, and their reservation, go when this returns.
    let before = inputs
        .remove(&d.index)
        .map(|w| w.buffers)
        .unwrap_or_default();
    let mut fills: Vec<_> = d
        .buffers
        .iter()
        .zip(&data)
        .filter(|(_, data)| data.is_none())
        .map(|(b, _)| {
            move |out: &mut dyn TensorOut| {
                stream_buffer(shared, origin, d, b, out).map_err(Refusal::from)
            }
        })
        .collect();
    let mut fills = fills.iter_mut();
    let mut tensors: Vec<TensorToStore> = before.iter().map(CapturedBuffer::to_store).collect();
    for (b, data) in d.buffers.iter().zip(&data) {
        let source = match data {
            Some(bytes) => TensorSource::Bytes(bytes),
            None => TensorSource::Streamed(fills.next().expect("one per streamed buffer")),
        };
        tensors.push(TensorToStore { buffer: b, source });
    }
    // The run's writer is locked only to reserve the file and to record
    // the dispatch: the large buffers of other connections of this run are
    // attached and written meanwhile.
    SnapshotWriter::add_dispatch_shared(origin.writer, origin.rank, origin.pid, d, &mut tensors)
        .map_err(|e| match e {
            StoreError::Refused(reason) => reason.to_string(),
            e => format!(
                "dispatch {} of {}: cannot store the snapshot: {e}",
                d.index,
                kernel_of(d)
            ),
        })?;
    drop(memory);
    Ok(Stored {
        dispatches: 1,
        arrays,
        bytes,
    })
}
