//! The manifest schema: `manifest.json` (the "Snapshot directories"
//! contract between the collector and every reader) and the names the
//! records give to files and tensors: `dispatch-<rank>-<index:05>.safetensors`,
//! tensors `arg<N>` and `arg<N>.before`, and the safetensors dtype of each
//! [`DType`]. Owns the serialised form and its defaults for older
//! manifests; never touches a file.

use super::StoreError;
use ditto_protocol::{DType, KernelName, MissReason, Phase};
use safetensors::tensor::Dtype as StDtype;
use serde::{Deserialize, Serialize};

/// Version of the snapshot format (`manifest.json` "format").
pub const SNAPSHOT_FORMAT: u32 = 1;
pub const MANIFEST_FILE: &str = "manifest.json";
/// `manifest.json`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Manifest {
    pub format: u32,
    pub ditto_version: String,
    pub kernel_query: String,
    pub runs: Vec<RunRecord>,
    /// The kernel of the first captured dispatch; null when none was captured.
    pub kernel: Option<KernelName>,
    pub dispatches: Vec<DispatchRecord>,
    pub dispatched_kernels: Vec<DispatchedKernel>,
    /// Matched dispatches (or buffers) not captured, with why ([`super::missing`]);
    /// absent in older manifests.
    #[serde(default)]
    pub missing: Vec<MissingRecord>,
    /// In a node's part of a run of one collector per node: the job its
    /// collector ran in (`SLURM_JOB_ID`, else `PMIX_NAMESPACE`), so that a
    /// reader tells an earlier job's part from this one's
    /// ([`super::parts`]); absent when unknown and in other snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// In a node's part of a run: the collector process that wrote it, so
    /// that another collector of the same node name never replaces it
    /// unseen ([`super::parts`]); absent in other snapshots and in parts
    /// written before 2026-12-07.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collector: Option<CollectorRecord>,
}

/// The collector process writing a node's part of a run.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct CollectorRecord {
    /// The host it runs on.
    pub host: String,
    pub pid: u32,
    /// When it started, in milliseconds since the Unix epoch.
    pub started_ms: u64,
    /// When it stopped (its last manifest), in milliseconds since the Unix
    /// epoch; absent while it runs, and when it was killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<u64>,
}

impl CollectorRecord {
    /// This process, started now.
    pub fn this_process(host: String) -> CollectorRecord {
        CollectorRecord {
            host,
            pid: std::process::id(),
            started_ms: now_ms(),
            ended_ms: None,
        }
    }

    /// Whether `other` is a record of the same collector process.
    pub fn same_process(&self, other: &CollectorRecord) -> bool {
        self.host == other.host && self.pid == other.pid && self.started_ms == other.started_ms
    }
}

/// Milliseconds since the Unix epoch, now.
pub(super) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// One application process that connected. Its rank is the launcher's
/// (OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID, torchrun's RANK) when the tool found one,
/// else the lowest rank not yet taken in this snapshot (connection order).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct RunRecord {
    pub rank: u32,
    /// `"launcher"` or `"connection order"`.
    #[serde(default = "connection_order")]
    pub rank_source: String,
    pub pid: u32,
    pub run: String,
    pub command_line: Vec<String>,
    pub working_directory: String,
    /// Set when the process's connection ended without its Goodbye: how
    /// many of its dispatches matched is unknown from `from_index` on.
    /// Absent for a process whose every matched dispatch is accounted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unaccounted: Option<Unaccounted>,
    /// The node whose collector served the process, in a run captured by
    /// one collector per node (its part, `node-<NAME>/`, [`super::parts`]);
    /// set by the reader that merges the parts, absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The process's host build on ditto's CPU runtime (`<exe>.host.so`
    /// beside its executable), stored with a replay capture as
    /// [`host_build_file_name`]: the file `ditto replay` loads, after its
    /// SHA-256 matches the name's. Absent otherwise and in older snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_build: Option<String>,
}

/// A process's dispatches of unknown fate: from `from_index` on, whether
/// and how often the kernel ran is not known (`reason` says why).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Unaccounted {
    pub from_index: u64,
    pub reason: String,
}

impl Manifest {
    /// "pid 12 (rank 0): dispatches from 4631 on are unaccounted: ...", one
    /// per process whose connection ended without Goodbye.
    pub fn unaccounted(&self) -> Vec<String> {
        self.runs
            .iter()
            .filter_map(|r| {
                let u = r.unaccounted.as_ref()?;
                Some(format!(
                    "pid {} (rank {}): its dispatches from index {} on are unaccounted ({})",
                    r.pid, r.rank, u.from_index, u.reason
                ))
            })
            .collect()
    }
}

pub(super) fn connection_order() -> String {
    "connection order".into()
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DispatchRecord {
    pub rank: u32,
    pub index: u64,
    pub pid: u32,
    /// The kernel this dispatch ran (a bare-name query can match several
    /// instantiations); null only in snapshots of older ditto versions.
    #[serde(default)]
    pub kernel: Option<KernelName>,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Kernel execution time in nanoseconds; null when the runtime gave none.
    #[serde(default)]
    pub duration_ns: Option<u64>,
    /// File name inside the snapshot directory.
    pub file: String,
    pub buffers: Vec<BufferRecord>,
    /// What `ditto replay` needs beyond the buffers (`--capture replay`);
    /// absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch: Option<Box<LaunchRecord>>,
}

/// A replayable dispatch's launch ([`ditto_protocol::Launch`]): its
/// memory before the kernel is in the `replay` buffers (tensors
/// `memory<N>`), its code object in the file `code_object` names.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct LaunchRecord {
    /// The kernel-argument segment as dispatched, lowercase hex.
    pub kernarg: String,
    pub group_segment_size: u32,
    pub private_segment_size: u32,
    /// The kernel's symbol in its code object (`<mangled>.kd` on HSA).
    pub symbol: String,
    /// File name of the code object inside the snapshot directory
    /// ([`code_object_file_name`]); null when the tool had no copy.
    pub code_object: Option<String>,
    /// Why there is no code object, when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_object_missing: Option<String>,
    /// The GPU the code object is built for (`gfx90a:sramecc+:xnack-`).
    pub isa: Option<String>,
    /// Module-scope variables among the replay buffers.
    pub variables: Vec<VariableRecord>,
    /// Every live allocation was taken (`replay-all`).
    pub all_allocations: bool,
}

/// A module-scope variable's image: the replay buffer `memory<image>`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct VariableRecord {
    pub image: u32,
    pub name: String,
}

impl LaunchRecord {
    /// The kernel-argument bytes.
    pub fn kernarg_bytes(&self) -> Result<Vec<u8>, StoreError> {
        let text = self.kernarg.as_bytes();
        if !text.len().is_multiple_of(2) {
            return Err(StoreError::Invalid(format!(
                "launch of `{}`: kernarg has an odd number of hex digits",
                self.symbol
            )));
        }
        text.chunks(2)
            .map(|pair| {
                std::str::from_utf8(pair)
                    .ok()
                    .and_then(|p| u8::from_str_radix(p, 16).ok())
                    .ok_or_else(|| {
                        StoreError::Invalid(format!(
                            "launch of `{}`: kernarg is not hex",
                            self.symbol
                        ))
                    })
            })
            .collect()
    }
}

/// `code-object-<digest>.co`: a code object a replay capture refers to,
/// stored once per snapshot under the SHA-256 of its bytes.
pub fn code_object_file_name(digest: &str) -> String {
    format!("code-object-{digest}.co")
}

/// `host-build-<digest>.so`: a process's host build a replay capture
/// stored ([`RunRecord::host_build`]), under the SHA-256 of its bytes.
pub fn host_build_file_name(digest: &str) -> String {
    format!("host-build-{digest}.so")
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct BufferRecord {
    pub arg: u32,
    /// The parameter's name when known (null: demangled names carry none).
    #[serde(default)]
    pub name: Option<String>,
    /// Tensor name inside `file` (`arg<N>`, `arg<N>.before` for inputs,
    /// `memory<N>` for a replay capture's images).
    pub tensor: String,
    /// `before` (taken before the kernel ran), `after`, or `replay` (a
    /// whole allocation or module variable before the kernel, for replay:
    /// `arg` is then the image's number); absent in older manifests, which
    /// hold only `after`.
    #[serde(default)]
    pub phase: Phase,
    /// [`DType::name`].
    pub dtype: String,
    /// Shape of the tensor in the dispatch file (`[elements]`: buffers are 1-D).
    #[serde(default)]
    pub shape: Vec<u64>,
    pub elements: u64,
    pub owner_pid: u32,
    pub alloc_base: u64,
    pub alloc_size: u64,
    pub offset: u64,
    pub extent: u64,
    pub fingerprint: u64,
    /// How the collector read the bytes; absent in older manifests (IPC).
    #[serde(default)]
    pub transport: TransportKind,
    /// IPC handle bytes, lowercase hex; only for the `ipc` and `cuda-ipc` transports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<String>,
}

/// `"ipc"`: mapped through the runtime's IPC handle of the allocation;
/// `"shared-memory"`: copied by the tool into shared memory passed over the
/// socket (memory the runtime would not export); `"cuda-ipc"`: opened
/// through a CUDA IPC memory handle and copied to the host; `"staged"`: a
/// small buffer the tool copied into its connection's staging file.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum TransportKind {
    #[default]
    Ipc,
    SharedMemory,
    CudaIpc,
    Staged,
}

impl BufferRecord {
    pub fn dtype(&self) -> Result<DType, StoreError> {
        DType::from_name(&self.dtype).ok_or_else(|| {
            StoreError::Invalid(format!(
                "argument {}: unknown dtype {:?}",
                self.arg, self.dtype
            ))
        })
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DispatchedKernel {
    pub mangled: String,
    pub demangled: String,
    pub count: u64,
}

pub fn safetensors_dtype(d: DType) -> StDtype {
    match d {
        DType::F16 => StDtype::F16,
        DType::BF16 => StDtype::BF16,
        DType::F32 => StDtype::F32,
        DType::F64 => StDtype::F64,
        DType::I8 => StDtype::I8,
        DType::I16 => StDtype::I16,
        DType::I32 => StDtype::I32,
        DType::I64 => StDtype::I64,
        DType::U8 | DType::Bytes => StDtype::U8,
        DType::U16 => StDtype::U16,
        DType::U32 => StDtype::U32,
        DType::U64 => StDtype::U64,
        DType::Bool => StDtype::BOOL,
    }
}

pub fn dispatch_file_name(rank: u32, index: u64) -> String {
    format!("dispatch-{rank}-{index:05}.safetensors")
}

/// `arg<N>` for a buffer taken after the kernel ran, `arg<N>.before` for
/// one taken before it (`--capture inputs`), `memory<N>` for a replay
/// capture's image number N.
pub fn tensor_name(arg: u32, phase: Phase) -> String {
    match phase {
        Phase::Before => format!("arg{arg}.before"),
        Phase::After => format!("arg{arg}"),
        Phase::Replay => format!("memory{arg}"),
    }
}

/// One record of "missing": a run of dispatches (or one buffer) not
/// captured, and why; the rules that merge them are `missing`'s.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct MissingRecord {
    pub rank: u32,
    pub pid: u32,
    /// First dispatch index of the run.
    pub index: u64,
    /// Number of consecutive dispatches from `index`.
    pub count: u64,
    /// Null: the whole dispatches are missing; else only this argument of
    /// dispatch `index` (in `phase`), the rest of which was captured.
    #[serde(default)]
    pub arg: Option<u32>,
    #[serde(default)]
    pub phase: Option<Phase>,
    pub reason: MissReason,
    pub detail: String,
}

impl MissingRecord {
    /// Whether this record says the whole dispatch (rank, index) is missing.
    pub fn covers(&self, rank: u32, index: u64) -> bool {
        self.arg.is_none()
            && self.rank == rank
            && index >= self.index
            && index - self.index < self.count
    }

    /// The record's dispatch indices, as people read them.
    pub fn indices(&self) -> String {
        match self.count {
            0 | 1 => format!("{}", self.index),
            n => format!("{}..{}", self.index, self.index.saturating_add(n - 1)),
        }
    }

    /// Why the record cannot be right, if it cannot: it covers no
    /// dispatch, runs past the largest index, or is a buffer's record for
    /// more than one dispatch.
    pub fn check(&self) -> Result<(), BadMissingRecord> {
        if self.count == 0 {
            return Err(BadMissingRecord::NoDispatch { index: self.index });
        }
        if self.index.checked_add(self.count).is_none() {
            return Err(BadMissingRecord::PastLargestIndex {
                index: self.index,
                count: self.count,
            });
        }
        if self.arg.is_some() && self.count != 1 {
            return Err(BadMissingRecord::ArgumentOfSeveral {
                index: self.index,
                count: self.count,
            });
        }
        Ok(())
    }
}

/// Why a missing record cannot be right ([`MissingRecord::check`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadMissingRecord {
    #[error("a missing record of dispatch {index} covers no dispatch (count 0)")]
    NoDispatch { index: u64 },
    #[error(
        "a missing record from dispatch {index} of {count} dispatches runs past the largest index"
    )]
    PastLargestIndex { index: u64, count: u64 },
    #[error(
        "a missing record of one argument covers {count} dispatches from {index} (a buffer's \
         record is for one dispatch)"
    )]
    ArgumentOfSeveral { index: u64, count: u64 },
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{captured, dispatch, hello};
    use super::super::{Snapshot, SnapshotWriter};
    use super::*;
    use ditto_protocol::Transport;

    #[test]
    fn manifest_has_the_contract_field_names() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SnapshotWriter::create(dir.path(), "k").unwrap();
        w.add_run(&hello("r")).unwrap();
        w.add_dispatch(0, 77, &dispatch(4), &[captured(0, DType::I32, vec![0; 8])])
            .unwrap();
        w.flush().unwrap();
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join(MANIFEST_FILE)).unwrap())
                .unwrap();
        assert_eq!(v["format"], 1);
        assert_eq!(v["dispatches"][0]["file"], "dispatch-0-00004.safetensors");
        assert_eq!(v["dispatches"][0]["grid"], serde_json::json!([16, 1, 1]));
        let b = &v["dispatches"][0]["buffers"][0];
        for key in [
            "arg",
            "tensor",
            "dtype",
            "elements",
            "owner_pid",
            "alloc_base",
            "alloc_size",
            "offset",
            "extent",
            "fingerprint",
            "transport",
            "handle",
        ] {
            assert!(!b[key].is_null(), "missing {key}");
        }
        assert_eq!(b["transport"], "ipc");
        assert_eq!(b["shape"], serde_json::json!([2]));
        assert!(b["name"].is_null(), "unknown parameter names are null");
        assert!(v["dispatches"][0]["duration_ns"].is_null());
        assert_eq!(
            v["dispatches"][0]["kernel"]["mangled"],
            "_Z12scale_valuesIfEvPT_S1_S0_i"
        );
        assert_eq!(v["runs"][0]["rank"], 0);
        assert_eq!(v["runs"][0]["rank_source"], "connection order");
        assert_eq!(
            v["runs"][0]["command_line"],
            serde_json::json!(["app", "float"])
        );
        assert_eq!(v["runs"][0]["working_directory"], "/tmp");
        assert!(!v["ditto_version"].as_str().unwrap().is_empty());
        assert_eq!(
            v["kernel"]["demangled"],
            "void scale_values<float>(float*, float*, float, int)"
        );
    }

    #[test]
    fn a_shared_memory_buffer_says_so_and_has_no_handle_and_old_manifests_read_as_ipc() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SnapshotWriter::create(dir.path(), "k").unwrap();
        w.add_run(&hello("r")).unwrap();
        let mut copied = captured(1, DType::U8, vec![5; 4]);
        copied.buffer.transport = Transport::SharedMemory;
        w.add_dispatch(
            0,
            77,
            &dispatch(0),
            &[captured(0, DType::U8, vec![1; 4]), copied],
        )
        .unwrap();
        w.flush().unwrap();
        let path = dir.path().join(MANIFEST_FILE);
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let buffers = &v["dispatches"][0]["buffers"];
        assert_eq!(buffers[0]["transport"], "ipc");
        assert_eq!(buffers[0]["handle"], "ab".repeat(32));
        assert_eq!(buffers[1]["transport"], "shared-memory");
        assert!(
            buffers[1].get("handle").is_none(),
            "no handle for a copy: {}",
            buffers[1]
        );
        let s = Snapshot::load(dir.path()).unwrap();
        assert_eq!(
            s.manifest.dispatches[0].buffers[1].transport,
            TransportKind::SharedMemory
        );
        // A manifest written before the copy transport existed.
        v["dispatches"][0]["buffers"][1]
            .as_object_mut()
            .unwrap()
            .remove("transport");
        std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
        let old = Snapshot::load(dir.path()).unwrap();
        assert_eq!(
            old.manifest.dispatches[0].buffers[1].transport,
            TransportKind::Ipc
        );
    }
}
