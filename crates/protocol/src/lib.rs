//! The wire protocol between the tool library (inside the application) and
//! the collector (`ditto collect`, or the collector inside `ditto run` /
//! `ditto validate`).
//!
//! Owns the message types, their postcard encoding, length-prefixed framing
//! and the buffer fingerprint both sides compute. It never does I/O policy
//! (timeouts, retries): callers own their sockets. The vocabulary inside
//! the messages ([`DType`], [`KernelName`]) is `ditto-types`', re-exported
//! here.
//!
//! A connection carries one application process:
//! tool → `Hello`; collector → `Welcome` (or `Reject`);
//! then per captured dispatch: tool → `Dispatch`; collector → `Ack`
//! (with `--capture inputs`, first a `Dispatch` whose buffers are all
//! [`Phase::Before`], sent while the kernel waits to start, acked, then the
//! usual one with the [`Phase::After`] buffers; the collector stores both
//! as one dispatch);
//! finally tool → `Goodbye` with what the process dispatched and how many
//! of those dispatches matched.
//!
//! Accounting: every dispatch of the matched kernel that is not captured
//! is reported by a `Missed` (tool → collector, never acknowledged): not
//! selected by `--dispatch`, released uncaptured after a timeout, or not
//! capturable (an error). A `Missed` for a whole dispatch always follows
//! that dispatch's `Dispatch`, if one was sent; the collector then drops
//! what it stored for it (the tool released the dispatch without knowing
//! the copy was complete, so the stored bytes may not be the kernel's).

use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};

pub mod fd_passing;
pub mod index_runs;
pub mod peer;
pub mod selection;
pub use fd_passing::{MAX_FDS_PER_FRAME, read_frame_with_fds, write_frame_with_fds};
pub use index_runs::IndexRuns;
pub use peer::peer_credentials;
pub use selection::{CaptureSet, DispatchSelection};
// Moved to the leaf crate shared with `ditto-kernels`; re-exported so that
// users of the wire types keep one import.
pub use ditto_types::{ALL_DTYPES, DType, KernelName};

/// Bytes at the start of a staging file that belong to the collector's
/// progress counter ([`ToolMessage::Staging`]).
pub const STAGING_HEADER_BYTES: u64 = 64;

/// Bumped on any incompatible change of a message.
/// 2: `Hello.rank`, `Dispatch.duration_ns`, `Buffer.name`.
/// 3: `Buffer.phase` (inputs captured before the kernel runs).
/// 4: `Buffer.transport` (IPC handle or a shared-memory copy passed as an fd).
/// 5: `Transport::CudaIpc` (a CUDA application's device memory) and
///    `ToolMessage::Missed` (dispatches and buffers not captured, with why).
/// 6: `ToolMessage::Staging` and `Transport::Staged` (small buffers copied
///    by the tool into the connection's staging file; a dispatch whose
///    buffers are all staged is released at once and gets no Ack).
/// 7: `ToolMessage::NeverLoaded` (a process whose HSA runtime never
///    started the tool says so at exit).
/// 8: `Goodbye.matched` (how many dispatches matched, so the collector can
///    account for every one) and `MissReason::Lost`.
/// 10: `Transport::Ipc.owner_node` (the GPU that owns the allocation, so
///    the collector attaches on it).
/// 11: `Transport::CudaIpc.device_uuid` (the CUDA device that owns the
///    allocation, so the collector opens and copies it there).
pub const PROTOCOL_VERSION: u32 = 11;
/// Size of a CUDA device's UUID (`CUuuid`).
pub const CUDA_UUID_BYTES: usize = 16;
/// Size of a CUDA IPC memory handle (`CUipcMemHandle`).
pub const CUDA_IPC_HANDLE_BYTES: usize = 64;
/// Largest frame either side accepts (16 MiB); larger is a protocol error.
pub const MAX_FRAME_BYTES: u32 = 16 << 20;

/// Messages sent by the tool library.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum ToolMessage {
    Hello(Hello),
    Dispatch(Dispatch),
    Goodbye(Goodbye),
    /// Dispatches (or one buffer of a dispatch) not captured, and why.
    /// Added at the end: variant indices of older messages are unchanged.
    Missed(Missed),
    /// The connection's staging file (a memfd of `size` bytes) travels with
    /// this frame (SCM_RIGHTS), sent at most once, right after the Welcome.
    /// Buffers of later dispatches may lie in it ([`Transport::Staged`]),
    /// after its first [`STAGING_HEADER_BYTES`]; the collector reads them
    /// with pread and closes the file when the connection ends. No answer.
    ///
    /// The header is the collector's progress: after finishing each
    /// Dispatch frame of the connection (stored, or recorded as missing) it
    /// writes at byte 0 the number of Dispatch frames finished so far, as a
    /// little-endian u64. The tool reuses a region once the frame that
    /// described it is finished; dispatches whose buffers are all staged
    /// get no Ack ([`Dispatch::needs_ack`]), so nothing waits unread in
    /// the application's socket when it exits.
    Staging {
        size: u64,
    },
    /// Sent at exit, right after the Welcome, by a process in which an HSA
    /// runtime was loaded but never started the tool (no OnLoad): nothing
    /// of it can be captured, and the user needs to know why. The
    /// connection ends after it.
    NeverLoaded(NeverLoaded),
}

/// Why a process's HSA runtime did not start the tool, as far as the
/// process itself can tell.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct NeverLoaded {
    /// The runtime library's path, as loaded.
    pub runtime: String,
    /// What the process's environment says about tool loading.
    pub reason: String,
}

/// Messages sent by the collector.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum CollectorMessage {
    Welcome { version: u32 },
    Reject { reason: String },
    Ack(Ack),
}

/// First message of a connection: who is talking and what it captures.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Hello {
    pub version: u32,
    pub pid: u32,
    /// Label of this run (`DITTO_RUN_NAME`); names the snapshot directory.
    pub run: String,
    /// The kernel name the user asked for, as given.
    pub kernel_query: String,
    pub command_line: Vec<String>,
    pub working_directory: String,
    /// The process's rank as its launcher numbered it (OMPI_COMM_WORLD_RANK,
    /// PMI_RANK, SLURM_PROCID or torchrun's RANK, first one set); `None`: the collector
    /// numbers processes in connection order.
    pub rank: Option<u32>,
    /// The API whose launches this connection captures: what the collector
    /// speaks of to the user (a CUDA application hears nothing of HSA).
    pub api: Api,
}

/// The runtime interface a tool connection captures through.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    /// The HSA runtime's tool interface (HIP applications).
    #[default]
    Hsa,
    /// CUPTI's launch callbacks (CUDA applications).
    Cuda,
}

/// One captured dispatch of the target kernel, sent after it completed and
/// while it is still held: nothing after it in its queue has run.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Dispatch {
    /// Index among this process's dispatches of the matched kernel, from 0.
    pub index: u64,
    pub kernel: KernelName,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Kernel execution time in nanoseconds (end - start of the dispatch as
    /// the runtime's profiling reports it on the completion signal); `None`
    /// when the runtime reported no times.
    pub duration_ns: Option<u64>,
    pub buffers: Vec<Buffer>,
}

impl Dispatch {
    /// Whether this is the inputs part of a dispatch (`--capture inputs`:
    /// every buffer [`Phase::Before`]), whose After part is still to come.
    pub fn is_inputs_part(&self) -> bool {
        !self.buffers.is_empty() && self.buffers.iter().all(|b| b.phase == Phase::Before)
    }

    /// Whether the collector answers this dispatch with an Ack, which the
    /// tool awaits before releasing it: always, except when it has buffers
    /// and every one is staged ([`Transport::Staged`]): the tool released
    /// such a dispatch as soon as it had copied them.
    pub fn needs_ack(&self) -> bool {
        self.buffers.is_empty()
            || self
                .buffers
                .iter()
                .any(|b| !matches!(b.transport, Transport::Staged { .. }))
    }
}

/// Which snapshot of a dispatch a buffer belongs to.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Taken after all earlier work in the queue completed and before the
    /// kernel started (`--capture inputs`).
    Before,
    /// Taken after the kernel completed, before anything later ran.
    #[default]
    After,
}

/// How the collector gets a buffer's bytes.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum Transport {
    /// `hsa_amd_ipc_memory_t` bytes (or the backend's equivalent) of the
    /// whole containing allocation: the collector maps it and reads
    /// `extent` bytes at `offset`.
    /// `owner_node`: the GPU that owns the allocation, as the HSA agent
    /// attribute NODE numbers it (the kernel driver's topology node, the
    /// same in every process of the machine); the collector attaches the
    /// handle on its agent of that node. `None` when the tool could not
    /// tell: the collector's first GPU agent.
    Ipc {
        handle: Vec<u8>,
        owner_node: Option<u32>,
    },
    /// Memory the runtime cannot export (locked host memory, fine-grained
    /// system memory, a refused export): the tool copied the `extent` bytes
    /// into a sealed memfd, attached to the Dispatch frame (SCM_RIGHTS,
    /// [`fd_passing`]); the frame's fds are in the order of its
    /// shared-memory buffers. The file holds the extent from its byte 0.
    SharedMemory,
    /// CUDA device memory exported with `cuIpcGetMemHandle`: the
    /// [`CUDA_IPC_HANDLE_BYTES`] bytes of the whole containing allocation's
    /// handle. The collector opens it with `cuIpcOpenMemHandle`, copies
    /// `extent` bytes at `offset` to the host and closes it before the Ack.
    /// `device_uuid`: the UUID of the device that owns the allocation
    /// (`cuDeviceGetUuid`; ordinals differ between processes under
    /// CUDA_VISIBLE_DEVICES, UUIDs do not): the collector opens and copies
    /// the handle in that device's primary context. `None` when the tool
    /// could not tell: the collector's device 0.
    CudaIpc {
        handle: Vec<u8>,
        device_uuid: Option<[u8; CUDA_UUID_BYTES]>,
    },
    /// A small buffer the tool copied (after the dispatch completed, before
    /// releasing it) into the connection's staging file
    /// ([`ToolMessage::Staging`]): the `extent` bytes lie at `at` in that
    /// file. A dispatch whose buffers are all staged or shared-memory copies
    /// is released by the tool before the collector answers; the region is
    /// reused only after the dispatch's Ack.
    Staged { at: u64 },
}

/// One pointer argument of a captured dispatch: where it lies in its
/// containing allocation and how its bytes travel.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Buffer {
    /// Position of the argument in the kernel's parameter list.
    pub arg_index: u32,
    /// Before or after the kernel ran.
    pub phase: Phase,
    /// The parameter's name in the kernel's source, when known (demangled
    /// names carry only types, so usually `None`).
    pub name: Option<String>,
    pub dtype: DType,
    pub transport: Transport,
    pub owner_pid: u32,
    /// Base address and size of the containing allocation in the owner.
    pub alloc_base: u64,
    pub alloc_size: u64,
    /// Offset of the argument's pointer inside the allocation, and the
    /// number of bytes to read from there.
    pub offset: u64,
    pub extent: u64,
    /// [`fingerprint`] of the `extent` bytes at `offset`, read by the tool.
    pub fingerprint: u64,
}

/// Collector's answer to one `Dispatch` that [`Dispatch::needs_ack`]. Sent
/// only after every mapping of that dispatch has been detached.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Ack {
    pub index: u64,
    /// `Err` names what went wrong (attach failure, fingerprint mismatch).
    pub result: Result<(), String>,
}

/// Why a matched dispatch (or one of its buffers) was not captured.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum MissReason {
    /// Not chosen by `--dispatch` (`DITTO_DISPATCH`).
    Selection,
    /// The collector's Ack did not come within `DITTO_TIMEOUT_MS`; the tool
    /// released the dispatch uncaptured (and later ones of a stopped capture).
    Timeout,
    /// The tool or the collector could not capture it (detail says why).
    Error,
    /// Neither captured nor reported missing: the collector found it
    /// unaccounted when the connection ended (its report was lost on the
    /// way, or the process ended without saying Goodbye).
    Lost,
}

impl MissReason {
    pub fn name(self) -> &'static str {
        match self {
            MissReason::Selection => "selection",
            MissReason::Timeout => "timeout",
            MissReason::Error => "error",
            MissReason::Lost => "lost",
        }
    }
}

/// `count` consecutive dispatches from `index` not captured; or, with
/// `arg`, only that argument (in `phase`) of dispatch `index` (count 1),
/// the rest of which is captured.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Missed {
    pub index: u64,
    pub count: u64,
    pub arg: Option<u32>,
    pub phase: Phase,
    pub reason: MissReason,
    pub detail: String,
}

/// Last message of a connection: every kernel the process dispatched, with
/// counts, so a collector can say what ran when the target never did.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct Goodbye {
    pub dispatched: Vec<(KernelName, u64)>,
    /// Dispatches of the target kernel (indices `0..matched`): each was
    /// captured or reported by a `Missed`.
    pub matched: u64,
}

/// Fingerprint of a buffer's bytes: a multiply-rotate hash over the length
/// and up to 64 evenly spaced 64-byte windows. Cheap for gigabyte buffers,
/// yet any stale or foreign mapping differs from the right one with near
/// certainty. The Python package checks stored buffers with a port of it
/// (`fingerprint` in python/ditto/snapshot.py); both are pinned to the same
/// values by `fingerprint_of_fixed_inputs_is_pinned_for_the_python_port`
/// and python/tests/test_snapshot_files.py: change both or neither.
pub fn fingerprint(bytes: &[u8]) -> u64 {
    fingerprint_of_windows(
        bytes.len() as u64,
        fingerprint_windows(bytes.len() as u64)
            .into_iter()
            .map(|(start, len)| &bytes[start as usize..(start + len) as usize]),
    )
}

/// The byte ranges `(start, len)` of a `len`-byte buffer that its
/// [`fingerprint`] reads, in order: the whole buffer when small, else 64
/// windows of 64 bytes. Lets a tool that cannot read the buffer in place
/// (device memory) copy only these ranges to the host.
pub fn fingerprint_windows(len: u64) -> Vec<(u64, u64)> {
    const WINDOW: u64 = 64;
    const WINDOWS: u64 = 64;
    if len <= WINDOW * WINDOWS {
        return vec![(0, len)];
    }
    let last_start = len - WINDOW;
    (0..WINDOWS)
        .map(|i| (i * last_start / (WINDOWS - 1), WINDOW))
        .collect()
}

/// [`fingerprint`] of a `len`-byte buffer from the bytes of its
/// [`fingerprint_windows`], given in the same order.
///
/// Each window is read 32 bytes at a time into four independent lanes
/// (xor a little-endian word, multiply by the 64-bit FNV prime, rotate so
/// that high bits reach the low ones), its last bytes one at a time into
/// the first lane; the lanes are folded into one at the end. About a cycle
/// per 8 bytes (the byte-at-a-time FNV-1a it replaces took about four per
/// byte: 10 µs of the tool's 45 per captured 4 KiB dispatch).
pub fn fingerprint_of_windows<'a>(len: u64, windows: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mix = |h: u64, word: u64| (h ^ word).wrapping_mul(PRIME).rotate_left(29);
    let mut lanes: [u64; 4] = [
        0xcbf2_9ce4_8422_2325,
        0x9e37_79b9_7f4a_7c15,
        0xc2b2_ae3d_27d4_eb4f,
        0x1656_67b1_9e37_79f9,
    ];
    lanes[0] = mix(lanes[0], len);
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    for w in windows {
        let mut blocks = w.chunks_exact(32);
        for block in &mut blocks {
            for (i, lane) in lanes.iter_mut().enumerate() {
                *lane = mix(*lane, word(&block[i * 8..i * 8 + 8]));
            }
        }
        for &b in blocks.remainder() {
            lanes[0] = mix(lanes[0], b as u64);
        }
        // Where one window ends and the next begins.
        lanes[1] = mix(lanes[1], w.len() as u64);
    }
    lanes[1..].iter().fold(lanes[0], |h, &l| mix(h, l))
}

/// Errors of framing and decoding.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("connection closed")]
    Closed,
    #[error("frame of {0} bytes exceeds the {MAX_FRAME_BYTES}-byte limit")]
    TooLarge(u32),
    #[error(
        "a frame carries {0} file descriptors, more than the {MAX_FDS_PER_FRAME} allowed; all closed"
    )]
    TooManyFds(usize),
    /// Said in full here (not a `source`): an error chain prints it once.
    #[error("malformed message: {0}")]
    Decode(postcard::Error),
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl From<postcard::Error> for FrameError {
    fn from(e: postcard::Error) -> Self {
        FrameError::Decode(e)
    }
}

/// Writes one frame: a little-endian u32 length, then the postcard bytes.
pub fn write_frame<W: Write, T: Serialize>(w: &mut W, msg: &T) -> Result<(), FrameError> {
    let body = postcard::to_stdvec(msg)?;
    let len = u32::try_from(body.len()).map_err(|_| FrameError::TooLarge(u32::MAX))?;
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge(len));
    }
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&body);
    w.write_all(&frame)?;
    w.flush()?;
    Ok(())
}

/// Reads one frame written by [`write_frame`]. A clean end of stream before
/// the length is [`FrameError::Closed`]; a length over the limit is rejected
/// before anything is allocated.
pub fn read_frame<R: Read, T: serde::de::DeserializeOwned>(r: &mut R) -> Result<T, FrameError> {
    let body = read_frame_body(r)?;
    Ok(postcard::from_bytes(&body)?)
}

/// Decodes the body of a frame ([`read_frame_body`]).
pub fn decode_frame<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, FrameError> {
    Ok(postcard::from_bytes(body)?)
}

/// The protocol version a [`ToolMessage::Hello`] frame's body claims, read
/// from its first two fields alone (the message's variant and
/// [`Hello::version`], which every version keeps first), so that a tool
/// of another version, whose Hello may hold other fields, is told what is
/// wrong. `None` for another message or bytes that do not start so.
pub fn hello_version(body: &[u8]) -> Option<u32> {
    let ((variant, version), _) = postcard::take_from_bytes::<(u32, u32)>(body).ok()?;
    (variant == 0).then_some(version)
}

/// Reads the body of one frame written by [`write_frame`], as
/// [`read_frame`] does, without decoding it.
pub fn read_frame_body<R: Read>(r: &mut R) -> Result<Vec<u8>, FrameError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_le_bytes(len);
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge(len));
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body)?;
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hello_of_another_layout_still_tells_its_version() {
        let hello = Hello {
            version: 8,
            pid: 1,
            run: "ref".into(),
            kernel_query: "k".into(),
            command_line: vec![],
            working_directory: "/".into(),
            rank: None,
            api: Api::Cuda,
        };
        let body = postcard::to_stdvec(&ToolMessage::Hello(hello)).unwrap();
        assert_eq!(hello_version(&body), Some(8));
        // Version 8's Hello had no `api`: its bytes end before it.
        let older = &body[..body.len() - 1];
        assert!(decode_frame::<ToolMessage>(older).is_err());
        assert_eq!(hello_version(older), Some(8));
        let goodbye = postcard::to_stdvec(&ToolMessage::Goodbye(Goodbye::default())).unwrap();
        assert_eq!(hello_version(&goodbye), None);
    }

    fn sample_dispatch() -> Dispatch {
        Dispatch {
            index: 3,
            kernel: KernelName {
                mangled: "_Z12scale_valuesIfEvPT_S1_S0_i".into(),
                demangled: "void scale_values<float>(float*, float*, float, int)".into(),
            },
            grid: [1024, 1, 1],
            block: [256, 1, 1],
            duration_ns: Some(1500),
            buffers: vec![
                Buffer {
                    phase: Phase::Before,
                    arg_index: 1,
                    name: Some("output".into()),
                    dtype: DType::F32,
                    transport: Transport::Ipc {
                        handle: vec![7; 32],
                        owner_node: Some(2),
                    },
                    owner_pid: 4242,
                    alloc_base: 0x7f00_0000_0000,
                    alloc_size: 4096,
                    offset: 0,
                    extent: 4096,
                    fingerprint: 0x1234,
                },
                Buffer {
                    phase: Phase::After,
                    arg_index: 2,
                    name: None,
                    dtype: DType::U8,
                    transport: Transport::SharedMemory,
                    owner_pid: 4242,
                    alloc_base: 0x5500_0000,
                    alloc_size: 100,
                    offset: 10,
                    extent: 90,
                    fingerprint: 0x5678,
                },
            ],
        }
    }

    #[test]
    fn dispatch_survives_a_frame_round_trip() {
        let msg = ToolMessage::Dispatch(sample_dispatch());
        let mut wire = Vec::new();
        write_frame(&mut wire, &msg).unwrap();
        let back: ToolMessage = read_frame(&mut wire.as_slice()).unwrap();
        assert_eq!(back, msg);
    }

    #[test]
    fn only_a_dispatch_whose_buffers_are_all_staged_goes_unanswered() {
        let mut d = sample_dispatch();
        assert!(d.needs_ack(), "IPC and shared memory");
        d.buffers[1].transport = Transport::Staged { at: 64 };
        assert!(d.needs_ack(), "one buffer still read through IPC");
        d.buffers[0].transport = Transport::Staged { at: 4160 };
        assert!(!d.needs_ack());
        d.buffers.clear();
        assert!(
            d.needs_ack(),
            "nothing captured: answered, as before staging"
        );
    }

    #[test]
    fn staging_and_a_staged_buffer_survive_a_frame_round_trip() {
        let staging = ToolMessage::Staging { size: 64 << 20 };
        let mut d = sample_dispatch();
        d.buffers[1].transport = Transport::Staged { at: 12_288 };
        let dispatch = ToolMessage::Dispatch(d);
        for msg in [staging, dispatch] {
            let mut wire = Vec::new();
            write_frame(&mut wire, &msg).unwrap();
            let back: ToolMessage = read_frame(&mut wire.as_slice()).unwrap();
            assert_eq!(back, msg);
        }
    }

    #[test]
    fn missed_survives_a_frame_round_trip_and_older_variants_keep_their_encoding() {
        let msg = ToolMessage::Missed(Missed {
            index: 4,
            count: 3,
            arg: Some(1),
            phase: Phase::After,
            reason: MissReason::Timeout,
            detail: "no Ack".into(),
        });
        let mut wire = Vec::new();
        write_frame(&mut wire, &msg).unwrap();
        let back: ToolMessage = read_frame(&mut wire.as_slice()).unwrap();
        assert_eq!(back, msg);
        // Added last: Hello, Dispatch and Goodbye are still variants 0, 1, 2.
        let goodbye = postcard::to_stdvec(&ToolMessage::Goodbye(Goodbye::default())).unwrap();
        assert_eq!(goodbye[0], 2);
        assert_eq!(postcard::to_stdvec(&msg).unwrap()[0], 3);
        let never = ToolMessage::NeverLoaded(NeverLoaded {
            runtime: "/opt/rocm/lib/libhsa-runtime64.so.1".into(),
            reason: "HSA_TOOLS_LIB is not set".into(),
        });
        let mut wire = Vec::new();
        write_frame(&mut wire, &never).unwrap();
        assert_eq!(
            read_frame::<_, ToolMessage>(&mut wire.as_slice()).unwrap(),
            never
        );
        assert_eq!(postcard::to_stdvec(&never).unwrap()[0], 5);
    }

    #[test]
    fn oversized_length_is_rejected_before_allocation() {
        let mut wire = (MAX_FRAME_BYTES + 1).to_le_bytes().to_vec();
        wire.extend_from_slice(&[0; 8]);
        let err = read_frame::<_, ToolMessage>(&mut wire.as_slice()).unwrap_err();
        assert!(matches!(err, FrameError::TooLarge(n) if n == MAX_FRAME_BYTES + 1));
    }

    #[test]
    fn end_of_stream_before_a_frame_is_closed() {
        let err = read_frame::<_, ToolMessage>(&mut [].as_slice()).unwrap_err();
        assert!(matches!(err, FrameError::Closed));
    }

    #[test]
    fn truncated_frame_is_an_io_error() {
        let mut wire = Vec::new();
        write_frame(&mut wire, &ToolMessage::Dispatch(sample_dispatch())).unwrap();
        wire.truncate(wire.len() - 5);
        let err = read_frame::<_, ToolMessage>(&mut wire.as_slice()).unwrap_err();
        assert!(matches!(err, FrameError::Io(_)));
    }

    #[test]
    fn fingerprint_sees_a_changed_byte_in_small_buffers_and_length_changes() {
        let a = vec![1u8; 1000];
        let mut b = a.clone();
        b[999] = 2;
        assert_ne!(fingerprint(&a), fingerprint(&b));
        assert_ne!(fingerprint(&a), fingerprint(&a[..999]));
        assert_eq!(fingerprint(&a), fingerprint(&a.clone()));
    }

    #[test]
    fn fingerprint_sees_every_single_bit_flip_and_swapped_words_of_a_4_kib_buffer() {
        let a: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let base = fingerprint(&a);
        for bit in 0..a.len() * 8 {
            let mut b = a.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert_ne!(fingerprint(&b), base, "bit {bit}");
        }
        // Two words of one lane exchanged, and two words of different lanes.
        for (x, y) in [(0usize, 32usize), (8, 16), (4088, 0)] {
            let mut b = a.clone();
            for k in 0..8 {
                b.swap(x + k, y + k);
            }
            assert_ne!(fingerprint(&b), base, "words at {x} and {y}");
        }
    }

    #[test]
    fn fingerprint_samples_large_buffers_including_both_ends() {
        let a = vec![0u8; 1 << 20];
        let mut first = a.clone();
        first[0] = 1;
        let mut last = a.clone();
        *last.last_mut().unwrap() = 1;
        assert_ne!(fingerprint(&a), fingerprint(&first));
        assert_ne!(fingerprint(&a), fingerprint(&last));
    }

    #[test]
    fn a_cuda_ipc_buffer_survives_a_frame_round_trip() {
        let mut d = sample_dispatch();
        d.buffers[0].transport = Transport::CudaIpc {
            handle: (0..CUDA_IPC_HANDLE_BYTES as u8).collect(),
            device_uuid: Some([0xa5; CUDA_UUID_BYTES]),
        };
        let msg = ToolMessage::Dispatch(d);
        let mut wire = Vec::new();
        write_frame(&mut wire, &msg).unwrap();
        let back: ToolMessage = read_frame(&mut wire.as_slice()).unwrap();
        assert_eq!(back, msg);
        let ToolMessage::Dispatch(back) = back else {
            unreachable!()
        };
        let Transport::CudaIpc {
            handle,
            device_uuid,
        } = &back.buffers[0].transport
        else {
            panic!("transport changed: {:?}", back.buffers[0].transport);
        };
        assert_eq!(handle[63], 63);
        assert_eq!(device_uuid.map(|u| u[15]), Some(0xa5));
    }

    /// Bytes (7 i + 3) mod 256, as `pattern` in python/tests/test_snapshot_files.py.
    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + 3) as u8).collect()
    }

    #[test]
    fn fingerprint_of_fixed_inputs_is_pinned_for_the_python_port() {
        // The Python package checks stored buffers with its own port of
        // `fingerprint` (python/ditto/snapshot.py), pinned to these same
        // values by python/tests/test_snapshot_files.py: change both or
        // neither.
        let pinned = [
            (0, 0xB2C9_ADD9_E514_70CD),
            (1, 0x37DF_A922_FAC8_BE34),
            (100, 0x7FB6_7F77_E416_CBF2),
            (4096, 0x5175_80BA_F9B6_78F9),
            (4097, 0x5372_9E27_ABAD_B3E7),
            (10_000, 0x0516_F58F_9449_2535),
            ((1 << 20) + 13, 0x1851_224D_11E8_0442),
        ];
        for (len, expected) in pinned {
            assert_eq!(fingerprint(&pattern(len)), expected, "{len} bytes");
        }
    }

    #[test]
    fn fingerprint_from_windows_equals_fingerprint_of_the_whole_buffer() {
        for len in [0usize, 1, 4096, 4097, 1 << 20, (1 << 20) + 13] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let windows = fingerprint_windows(len as u64);
            assert!(
                windows.len() == 1 || windows.len() == 64,
                "{len}: {windows:?}"
            );
            assert_eq!(windows.last().map(|(s, l)| s + l), Some(len as u64));
            let from_windows = fingerprint_of_windows(
                len as u64,
                windows
                    .iter()
                    .map(|&(s, l)| &bytes[s as usize..(s + l) as usize]),
            );
            assert_eq!(from_windows, fingerprint(&bytes), "{len} bytes");
        }
    }

    #[test]
    fn dtypes_and_kernel_names_keep_their_wire_encoding() {
        use DType::*;
        let indices = [
            (F16, 0u8),
            (BF16, 1),
            (F32, 2),
            (F64, 3),
            (I8, 4),
            (I16, 5),
            (I32, 6),
            (I64, 7),
            (U8, 8),
            (U16, 9),
            (U32, 10),
            (U64, 11),
            (Bool, 12),
            (Bytes, 13),
        ];
        for (d, i) in indices {
            assert_eq!(postcard::to_stdvec(&d).unwrap(), [i], "{d:?}");
        }
        let name = KernelName {
            mangled: "_Z1fv".into(),
            demangled: "f()".into(),
        };
        assert_eq!(postcard::to_stdvec(&name).unwrap(), b"\x05_Z1fv\x03f()");
    }

    #[test]
    fn a_dispatch_frame_keeps_its_bytes() {
        let mut wire = Vec::new();
        write_frame(&mut wire, &ToolMessage::Dispatch(sample_dispatch())).unwrap();
        let hex: String = wire.iter().map(|b| format!("{b:02x}")).collect();
        // Pinned: a tool and a collector built from different commits of
        // one PROTOCOL_VERSION must understand each other, so moving or
        // refactoring message types must not change a byte.
        assert_eq!(
            hex,
            concat!(
                "b300000001031e5f5a31327363616c655f76616c7565734966457650545f5331",
                "5f53305f6934766f6964207363616c655f76616c7565733c666c6f61743e2866",
                "6c6f61742a2c20666c6f61742a2c20666c6f61742c20696e7429800801018002",
                "010101dc0b02010001066f757470757402002007070707070707070707070707",
                "07070707070707070707070707070707070707010292218080808080e01f8020",
                "008020b42402010008019221808080a805640a5af8ac01",
            )
        );
    }
}
