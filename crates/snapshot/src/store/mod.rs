//! The snapshot directory: one safetensors file per captured dispatch plus
//! `manifest.json` and the journal, written by the collector and read back
//! by `compare`, `inspect` and `validate`.
//!
//! Layout: `DIR/manifest.json`, `DIR/dispatch-<rank>-<index:05>.safetensors`
//! holding 1-D tensors named `arg<N>` (dtype `bytes` stored as U8), the
//! journal `DIR/dispatches.jsonl` ([`journal`]) and, for a replay capture,
//! `DIR/code-object-<sha256>.co` (and on ditto's CPU runtime the
//! process's host build, `DIR/host-build-<sha256>.so`). A run captured by
//! one collector per node has no files of its own: `DIR/node-<NAME>/` per
//! node, each laid out as above ([`parts`]).
//!
//! This file is the module map and its re-exports only:
//! - `manifest`: the schema of `manifest.json` and the names of files and tensors;
//! - [`dir_handle`]: the directory opened once, every file made, replaced,
//!   read and removed through it (no link followed, no FIFO waited on);
//! - `atomic`: files replaced through a temporary name, and a killed writer's leftovers;
//! - `room`: room kept for the last manifest, given back when the disk fills;
//! - `writer`: the snapshot writer (tensor file, journal line, manifest);
//! - `dispatch_file`: one dispatch's tensor file put in place without the
//!   writer's lock, and its manifest record;
//! - `reader`: a snapshot opened for reading;
//! - [`journal`], [`missing`]: the journal and the accounting of dispatches not captured;
//! - [`output_dir`]: what a directory offered for a snapshot holds (checked first);
//! - [`writer_lock`]: one writer per snapshot directory;
//! - [`parts`]: a run written by one collector per node, each into its own
//!   part (`node-<NAME>/`), and the parts merged for a reader;
//! - `tensor_file`, `placement`, `spare_files`: one tensor file's bytes,
//!   how a large run gets into it, and files made ahead;
//! - `error`: why something could not be written or read.

mod atomic;
pub mod dir_handle;
mod dispatch_file;
mod error;
#[cfg(test)]
mod fixtures;
pub mod journal;
mod manifest;
pub mod missing;
pub mod output_dir;
pub mod parts;
mod placement;
mod reader;
mod room;
mod spare_files;
mod tensor_file;
mod writer;
pub mod writer_lock;

pub use atomic::write_atomically;
pub use dispatch_file::{CapturedBuffer, TensorToStore};
pub use error::StoreError;
pub use manifest::{
    BufferRecord, CollectorRecord, DispatchRecord, DispatchedKernel, LaunchRecord, MANIFEST_FILE,
    Manifest, RunRecord, SNAPSHOT_FORMAT, TransportKind, VariableRecord, code_object_file_name,
    dispatch_file_name, host_build_file_name, safetensors_dtype, tensor_name,
};
pub use placement::{Filled, Refusal, TensorOut, share_cuts};
pub use reader::{Array, Snapshot};
pub use tensor_file::{TensorBytes, TensorSource, zeroed_buffer};
pub use writer::{MANIFEST_INTERVAL, SnapshotWriter};
