//! The messages of the wire protocol between the tool library (inside the
//! application) and the collector (`ditto collect`, or the collector inside
//! `ditto run` / `ditto validate`), and the types inside them: `Hello`,
//! `Dispatch` and its `Buffer`s (their `Phase` and `Transport`), `Missed`
//! and its `MissReason`, `Goodbye`, `NeverLoaded`, `Ack`, and the
//! [`PROTOCOL_VERSION`] their layout carries.
//!
//! Owns the messages' fields and their postcard layout (the order of
//! variants and fields is the wire format: a variant is only ever added
//! last). How a message travels is [`crate::framing`]'s; the buffer
//! fingerprint a `Buffer` carries is
//! [`crate::fingerprint`](mod@crate::fingerprint)'s. The vocabulary inside
//! the messages ([`DType`], [`KernelName`]) is `ditto-types`'.
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

use ditto_types::{DType, KernelName};
use serde::{Deserialize, Serialize};

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
/// 12: replay captures: `Phase::Replay`, `Dispatch.launch` and
///    `ToolMessage::CodeObject`.
pub const PROTOCOL_VERSION: u32 = 12;
/// Size of a CUDA device's UUID (`CUuuid`).
pub const CUDA_UUID_BYTES: usize = 16;
/// Size of a CUDA IPC memory handle (`CUipcMemHandle`).
pub const CUDA_IPC_HANDLE_BYTES: usize = 64;

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
    /// A code object a replay capture refers to ([`Launch::code_object`]),
    /// sent once per connection before the first Dispatch that names it:
    /// its bytes travel in a sealed memfd of `size` bytes attached to the
    /// frame (SCM_RIGHTS). No answer; the collector stores it under its
    /// digest and checks the digest.
    CodeObject(CodeObject),
}

/// A code object as the runtime loaded it, named by the SHA-256 of its bytes.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct CodeObject {
    /// Lowercase hex SHA-256 of the bytes.
    pub digest: String,
    pub size: u64,
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
    /// What a replay needs beyond memory (`--capture replay`), on the
    /// inputs part of a dispatch, whose buffers are then the memory the
    /// kernel could reach ([`Phase::Replay`]) and the inputs asked for; on
    /// the After part only to name a code object the inputs part could not
    /// (a CUDA module loaded during the launch).
    pub launch: Option<Launch>,
}

/// A dispatch as the runtime received it, for running it again: the
/// kernel, its argument bytes and its launch beyond grid and block.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct Launch {
    /// The kernel-argument segment as dispatched, hidden arguments
    /// included (the kernel's KERNARG_SEGMENT_SIZE bytes).
    pub kernarg: Vec<u8>,
    /// The packet's group segment size (static and dynamic) and private
    /// segment size, in bytes.
    pub group_segment_size: u32,
    pub private_segment_size: u32,
    /// The kernel's symbol in its code object (`<mangled>.kd` on HSA).
    pub symbol: String,
    /// Digest of the code object that holds the kernel, sent earlier on
    /// the connection ([`ToolMessage::CodeObject`]); `None`: the tool kept
    /// no copy of it (`code_object_missing` says why).
    pub code_object: Option<String>,
    pub code_object_missing: Option<String>,
    /// The GPU the kernel's code object is built for, as its metadata says
    /// (`gfx90a:sramecc+:xnack-`); `None` when it does not say.
    pub isa: Option<String>,
    /// The module-scope variables among the dispatch's [`Phase::Replay`]
    /// buffers: (the buffer's image number, the variable's symbol name).
    pub variables: Vec<(u32, String)>,
    /// Every live allocation the tool tracked was taken (`replay-all`),
    /// not only those an argument reaches.
    pub all_allocations: bool,
}

impl Dispatch {
    /// Whether this is the inputs part of a dispatch (`--capture inputs`:
    /// every buffer taken before the kernel; a replay capture's part with
    /// its launch), whose After part is still to come.
    /// An After part may carry a launch too: a CUDA kernel's module loaded
    /// during its launch, its code object named only then.
    pub fn is_inputs_part(&self) -> bool {
        self.buffers.iter().all(|b| b.phase.before_kernel())
            && (self.launch.is_some() || !self.buffers.is_empty())
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
    /// A whole allocation (or a module variable) as it was before the
    /// kernel started, for `ditto replay` (`--capture replay`). Its
    /// buffer's `arg_index` numbers the image within the dispatch (from 0),
    /// since an allocation may be reached by several arguments or by none;
    /// `offset` is 0 and `extent` the allocation's size.
    Replay,
}

impl Phase {
    /// Whether the buffer was taken before the kernel ran.
    pub fn before_kernel(self) -> bool {
        matches!(self, Phase::Before | Phase::Replay)
    }
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
    /// [`crate::fd_passing`]); the frame's fds are in the order of its
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
    /// [`fingerprint`](crate::fingerprint()) of the `extent` bytes at
    /// `offset`, read by the tool.
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A dispatch with an IPC buffer before and a shared-memory one after
    /// the kernel; the framing's tests send it too.
    pub(crate) fn sample_dispatch() -> Dispatch {
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
            launch: None,
        }
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
}
