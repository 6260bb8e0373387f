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
//! run's connections are copied at the same time). Owns the order of
//! those steps (the attachment guard is `attachment`'s, the copies' files
//! `copy_files`'s, the errors' words `capture_error`'s); never returns (or
//! stores) bytes whose fingerprint differs from the tool's, and never
//! leaves a mapping or an fd behind on any path: every fd of a dispatch is
//! closed when [`capture_dispatch`] returns, before the ack. Nothing is
//! read into memory before the bytes it takes are reserved in the
//! collector's memory budget ([`super::memory_budget`]): a dispatch waits
//! there for room, or is refused; the inputs of a dispatch keep their
//! reservation while they wait for its outputs.

use super::attachment::{Attachment, AttachmentError, AttachmentLog, PARALLEL_CHUNK, STREAM_CHUNK};
use super::capture_error::{BufferFailure, CaptureError, DispatchFailure, NoMemory, kernel_of};
use super::copy_files::{CopyFiles, StagingFile, read_copy};
use super::memory_budget::Reservation;
use super::{BufferSource, Shared};
use crate::store::{
    CapturedBuffer, Refusal, SnapshotWriter, StoreError, TensorOut, TensorSource, TensorToStore,
    zeroed_buffer,
};
use ditto_protocol::{Buffer, Dispatch, Transport, fingerprint};
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::Mutex;

/// The connection a dispatch came on, as capturing it needs it: where it is
/// stored and who sent it.
pub(super) struct Origin<'a> {
    pub(super) writer: &'a Mutex<SnapshotWriter>,
    /// The collector's number for the connection (its log lines name it).
    pub(super) connection: u64,
    pub(super) rank: u32,
    pub(super) pid: u32,
}

pub(super) struct Stored {
    /// 1 when the dispatch was written, 0 for inputs kept until its After part.
    pub(super) dispatches: u64,
    pub(super) arrays: u64,
    pub(super) bytes: u64,
}

/// IPC extents of at least this many bytes are streamed from the
/// attachment into the tensor file ([`stream_buffer`]); smaller ones are
/// copied into memory and go out with the rest of the file in one write
/// (no system call more for the many small dispatches).
pub(super) const STREAM_FROM_BYTES: u64 = 1 << 20;

/// Refuses an extent that is not whole elements or lies outside its
/// allocation (before anything is attached).
fn check_extent(d: &Dispatch, b: &Buffer) -> Result<(), CaptureError> {
    let size = b.dtype.size() as u64;
    if !b.extent.is_multiple_of(size) {
        return Err(CaptureError::buffer(
            d,
            b,
            BufferFailure::NotWholeElements {
                extent: b.extent,
                dtype: b.dtype.name(),
            },
        ));
    }
    if b.offset
        .checked_add(b.extent)
        .is_none_or(|end| end > b.alloc_size)
    {
        return Err(CaptureError::buffer(
            d,
            b,
            BufferFailure::OutsideAllocation {
                extent: b.extent,
                offset: b.offset,
                size: b.alloc_size,
                base: b.alloc_base,
            },
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
    f: impl FnOnce(&Attachment) -> Result<T, AttachmentError>,
) -> Result<T, CaptureError> {
    let failed = |failure| CaptureError::buffer(d, b, failure);
    let cuda;
    let (source, handle, owner_node, opening): (
        &dyn BufferSource,
        &[u8],
        Option<u32>,
        &'static str,
    ) = match &b.transport {
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
                .map_err(|e| failed(BufferFailure::NoCudaImporter(e)))?;
            (&cuda, handle, None, "cannot open the CUDA IPC handle")
        }
        Transport::SharedMemory | Transport::Staged { .. } => {
            return Err(failed(BufferFailure::NoHandle));
        }
    };
    let log = AttachmentLog::new(shared.started, || {
        format!(
            "connection {} (pid {}, rank {}), dispatch {}, argument {}",
            origin.connection, origin.pid, origin.rank, d.index, b.arg_index
        )
    });
    let attachment =
        Attachment::attach(source, &shared.live, handle, b.alloc_size, owner_node, log).map_err(
            |error| {
                failed(BufferFailure::Attach {
                    opening,
                    pid: b.owner_pid,
                    base: b.alloc_base,
                    size: b.alloc_size,
                    error,
                })
            },
        )?;
    let result = f(&attachment).map_err(|e| failed(BufferFailure::Copy(e)))?;
    attachment
        .detach()
        .map_err(|e| failed(BufferFailure::Detach(e)))?;
    Ok(result)
}

/// The error for bytes whose fingerprint is not the tool's.
fn mismatch(d: &Dispatch, b: &Buffer, seen: u64) -> CaptureError {
    let through = match b.transport {
        Transport::Ipc { .. } | Transport::CudaIpc { .. } => {
            "the mapping does not show what the application holds"
        }
        Transport::SharedMemory => "the shared-memory copy differs from what the tool read",
        Transport::Staged { .. } => "the staged copy differs from what the tool read",
    };
    CaptureError::buffer(
        d,
        b,
        BufferFailure::Mismatch {
            tool: b.fingerprint,
            seen,
            through,
        },
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
) -> Result<Vec<u8>, CaptureError> {
    let failed = |failure| CaptureError::buffer(d, b, failure);
    check_extent(d, b)?;
    // The extent comes from the tool: an allocation failure must be an error
    // ack, not an abort of the collector (and of every other connection).
    let mut data = match usize::try_from(b.extent).ok().and_then(zeroed_buffer) {
        Some(data) => data,
        None => return Err(failed(BufferFailure::NoCopyMemory(b.extent))),
    };
    match (&b.transport, copy) {
        (Transport::Ipc { .. } | Transport::CudaIpc { .. }, _) => {
            with_attachment(shared, origin, d, b, |attachment| {
                Ok(attachment.copy(b.offset, &mut data)?)
            })?
        }
        (Transport::SharedMemory, Some(fd)) => read_copy(fd, &mut data).map_err(|error| {
            failed(BufferFailure::SharedCopy {
                extent: b.extent,
                pid: b.owner_pid,
                error,
            })
        })?,
        (Transport::SharedMemory, None) => return Err(failed(BufferFailure::NoSharedCopy)),
        (Transport::Staged { at }, _) => match staging {
            Some(file) => file
                .read(*at, &mut data)
                .map_err(|e| failed(BufferFailure::Staged(e)))?,
            None => return Err(failed(BufferFailure::NoStagingFile)),
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
) -> Result<(), CaptureError> {
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

/// Most dispatches whose inputs may wait in memory for their outputs, per
/// connection: the tool sends a dispatch's outputs right after its inputs,
/// so more is a broken or hostile peer. Their bytes count in the
/// collector's memory budget, like every other copy.
pub(super) const MAX_WAITING_INPUTS: usize = 16;

/// The inputs of a dispatch, waiting for its outputs, and their bytes'
/// reservation in the memory budget (given back when they go).
pub(super) struct WaitingInputs {
    buffers: Vec<Waiting>,
    /// A replay capture's launch, stored with the dispatch.
    launch: Option<ditto_protocol::Launch>,
    _memory: Reservation,
}

/// One buffer of an inputs part: in memory, or (a large one read through
/// IPC, such as a replay capture's whole allocations) spilled into an
/// unnamed file beside the snapshot as it is read, so that inputs never sit
/// in the collector's memory whole: they go from there into the tensor
/// file when the outputs come.
enum Waiting {
    InMemory(CapturedBuffer),
    Spilled { buffer: Buffer, file: std::fs::File },
}

impl Waiting {
    /// Bytes it holds in memory.
    fn held(&self) -> u64 {
        match self {
            Waiting::InMemory(c) => c.data.len() as u64,
            Waiting::Spilled { .. } => 0,
        }
    }
}

/// A file written through [`TensorOut`] (the default methods: plain writes).
struct SpillOut<'a>(std::io::BufWriter<&'a std::fs::File>);

impl std::io::Write for SpillOut<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.write(bytes)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl TensorOut for SpillOut<'_> {}

/// Reads `b` (a large IPC buffer of an inputs part) into an unnamed file
/// in `dir`, its fingerprint checked, as [`stream_buffer`] reads one into
/// a tensor file.
fn spill(
    shared: &Shared,
    origin: &Origin,
    d: &Dispatch,
    b: &Buffer,
    dir: &std::path::Path,
) -> Result<std::fs::File, CaptureError> {
    use std::io::{Seek, Write};
    let stored = |error: std::io::Error| {
        CaptureError::dispatch(
            d,
            DispatchFailure::Store(StoreError::Io {
                path: dir.to_path_buf(),
                error,
            }),
        )
    };
    if let Ok(fs) = rustix::fs::statvfs(dir) {
        let free = fs.f_bavail.saturating_mul(fs.f_frsize);
        if b.extent > free {
            return Err(CaptureError::buffer(
                d,
                b,
                BufferFailure::NoRoomToSpill {
                    bytes: b.extent,
                    free,
                    dir: dir.to_path_buf(),
                },
            ));
        }
    }
    let mut file = tempfile::tempfile_in(dir).map_err(stored)?;
    {
        let mut out = SpillOut(std::io::BufWriter::with_capacity(STREAM_CHUNK, &file));
        stream_buffer(shared, origin, d, b, &mut out)?;
        out.flush().map_err(stored)?;
    }
    file.rewind().map_err(stored)?;
    Ok(file)
}

/// Copies a spilled buffer's file into a tensor file.
fn unspill(file: &std::fs::File, out: &mut dyn TensorOut) -> Result<(), Refusal> {
    use std::io::Read;
    let mut reader = std::io::BufReader::with_capacity(STREAM_CHUNK, file);
    let mut chunk = vec![0u8; STREAM_CHUNK];
    loop {
        let n = reader.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        out.put(&chunk[..n])?;
    }
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
) -> Result<Reservation, CaptureError> {
    let held: Vec<(&Buffer, u64)> = d
        .buffers
        .iter()
        .map(|b| {
            // An inputs part's large IPC buffers are spilled to a file:
            // only the chunk they go through is held.
            let bytes = if inputs_part && !streamed(b) {
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
            CaptureError::NoMemory(Box::new(NoMemory {
                index: d.index,
                kernel: kernel_of(d),
                arguments: arguments(&buffers),
                bytes,
                purpose,
                refusal,
            }))
        })
}

/// Every (argument, phase) of a dispatch at most once: two tensors of one
/// name make a safetensors file no reader accepts.
fn check_arguments_once(d: &Dispatch) -> Result<(), CaptureError> {
    let mut seen = std::collections::HashSet::new();
    for b in &d.buffers {
        if !seen.insert((b.arg_index, b.phase)) {
            return Err(CaptureError::dispatch(
                d,
                DispatchFailure::ArgumentTwice {
                    arg: b.arg_index,
                    phase: b.phase,
                },
            ));
        }
    }
    Ok(())
}

/// Whether the inputs part `d` may wait for its outputs (its bytes are the
/// memory budget's to bound).
fn check_inputs_room(
    d: &Dispatch,
    inputs: &HashMap<u64, WaitingInputs>,
) -> Result<(), CaptureError> {
    if inputs.contains_key(&d.index) {
        return Err(CaptureError::dispatch(d, DispatchFailure::InputsTwice));
    }
    let waiting: u64 = inputs
        .values()
        .flat_map(|w| &w.buffers)
        .map(Waiting::held)
        .sum();
    if inputs.len() >= MAX_WAITING_INPUTS {
        return Err(CaptureError::dispatch(
            d,
            DispatchFailure::TooManyWaiting {
                dispatches: inputs.len(),
                waiting,
                most: MAX_WAITING_INPUTS,
            },
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
) -> Result<Stored, CaptureError> {
    let CopyFiles { copies, staging } = files;
    check_arguments_once(d)?;
    let expected = d
        .buffers
        .iter()
        .filter(|b| matches!(b.transport, Transport::SharedMemory))
        .count();
    if copies.len() != expected {
        return Err(CaptureError::dispatch(
            d,
            DispatchFailure::CopyCount {
                expected,
                came: copies.len(),
            },
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
            .fold(0u64, |n, c| n.saturating_add(c.held())),
        _ => 0,
    };
    let memory = reserve_memory(shared, d, inputs_part, before_bytes)?;
    // Per buffer: its bytes, or None for one streamed into the file.
    let mut data: Vec<Option<Vec<u8>>> = Vec::with_capacity(d.buffers.len());
    // An inputs part's buffers, each in memory or spilled into a file.
    let mut waiting: Vec<Waiting> = Vec::new();
    let spill_dir = match inputs_part && d.buffers.iter().any(streamed) {
        true => Some(
            origin
                .writer
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .dir()
                .to_path_buf(),
        ),
        false => None,
    };
    for b in &d.buffers {
        let copy = match b.transport {
            Transport::SharedMemory => copies.next(),
            Transport::Ipc { .. } | Transport::CudaIpc { .. } | Transport::Staged { .. } => None,
        };
        match (inputs_part, &spill_dir, streamed(b)) {
            (true, Some(dir), true) => waiting.push(Waiting::Spilled {
                buffer: b.clone(),
                file: spill(shared, origin, d, b, dir)?,
            }),
            (true, _, _) => waiting.push(Waiting::InMemory(CapturedBuffer {
                buffer: b.clone(),
                data: capture_buffer(shared, origin, d, b, copy, staging)?,
            })),
            (false, _, true) => data.push(None),
            (false, _, false) => {
                data.push(Some(capture_buffer(shared, origin, d, b, copy, staging)?))
            }
        }
    }
    let bytes: u64 = d
        .buffers
        .iter()
        .fold(0u64, |n, b| n.saturating_add(b.extent));
    let arrays = d.buffers.len() as u64;
    if inputs_part {
        inputs.insert(
            d.index,
            WaitingInputs {
                buffers: waiting,
                launch: d.launch.clone(),
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
    let (before, mut launch) = inputs
        .remove(&d.index)
        .map(|w| (w.buffers, w.launch))
        .unwrap_or_default();
    // A code object named only with the outputs completes the launch.
    if let (Some(l), Some(late)) = (launch.as_mut(), d.launch.as_ref())
        && l.code_object.is_none()
        && late.code_object.is_some()
    {
        l.code_object = late.code_object.clone();
        l.code_object_missing = None;
    }
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
    let mut unspills: Vec<_> = before
        .iter()
        .filter_map(|w| match w {
            Waiting::Spilled { file, .. } => {
                Some(move |out: &mut dyn TensorOut| unspill(file, out))
            }
            Waiting::InMemory(_) => None,
        })
        .collect();
    let mut unspills = unspills.iter_mut();
    let mut tensors: Vec<TensorToStore> = Vec::with_capacity(before.len() + d.buffers.len());
    for w in &before {
        tensors.push(match w {
            Waiting::InMemory(c) => c.to_store(),
            Waiting::Spilled { buffer, .. } => TensorToStore {
                buffer,
                source: TensorSource::Streamed(unspills.next().expect("one per spilled buffer")),
            },
        });
    }
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
    // The record carries the launch that came with the inputs.
    let with_launch;
    let stored = match launch {
        Some(launch) => {
            with_launch = Dispatch {
                launch: Some(launch),
                ..d.clone()
            };
            &with_launch
        }
        None => d,
    };
    SnapshotWriter::add_dispatch_shared(
        origin.writer,
        origin.rank,
        origin.pid,
        stored,
        &mut tensors,
    )
    .map_err(|e| match e {
        // A streamed buffer's own error, given back typed.
        StoreError::Refused(refusal) => match refusal.downcast::<CaptureError>() {
            Ok(e) => *e,
            Err(other) => CaptureError::Refused(other),
        },
        e => CaptureError::dispatch(d, DispatchFailure::Store(e)),
    })?;
    drop(memory);
    Ok(Stored {
        dispatches: 1,
        arrays,
        bytes,
    })
}
