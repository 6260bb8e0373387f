//! One dispatch's tensor file as the writer puts it in place, without
//! holding the writer: the arguments to store ([`TensorToStore`], from
//! memory or streamed; [`CapturedBuffer`]), their lengths checked against
//! the tool's extents, each buffer's manifest record, and the file written
//! into the unnamed file made ahead and linked into place, else through a
//! named temporary file renamed into place (not synced). A refused or
//! failed write leaves nothing. Owns no manifest and no journal: the writer
//! reserves the slot and records what it wrote ([`super::writer`]).

use crate::store::atomic::write_replacing_with;
use crate::store::dir_handle::DirHandle;
use crate::store::error::StoreError;
use crate::store::manifest::{
    BufferRecord, DispatchRecord, LaunchRecord, TransportKind, VariableRecord,
    code_object_file_name, safetensors_dtype, tensor_name,
};
use crate::store::placement;
use crate::store::spare_files;
use crate::store::tensor_file::{self, TensorSource};
use ditto_protocol::{Buffer, Dispatch, Launch, Transport};
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

/// One captured argument: what the tool said about it and the bytes read.
#[derive(Debug, Clone)]
pub struct CapturedBuffer {
    pub buffer: Buffer,
    pub data: Vec<u8>,
}

impl CapturedBuffer {
    /// This buffer to store, from its bytes in memory.
    pub fn to_store(&self) -> TensorToStore<'_> {
        TensorToStore {
            buffer: &self.buffer,
            source: TensorSource::Bytes(&self.data),
        }
    }
}

/// One argument to store: what the tool said about it and where its
/// bytes come from (in memory, or streamed into the file as it is written).
pub struct TensorToStore<'a> {
    pub buffer: &'a Buffer,
    pub source: TensorSource<'a>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The manifest record of buffer `b`, stored as `elements` elements.
fn buffer_record(b: &Buffer, elements: u64) -> BufferRecord {
    BufferRecord {
        arg: b.arg_index,
        name: b.name.clone(),
        shape: vec![elements],
        tensor: tensor_name(b.arg_index, b.phase),
        phase: b.phase,
        dtype: b.dtype.name().to_string(),
        elements,
        owner_pid: b.owner_pid,
        alloc_base: b.alloc_base,
        alloc_size: b.alloc_size,
        offset: b.offset,
        extent: b.extent,
        fingerprint: b.fingerprint,
        transport: match b.transport {
            Transport::Ipc { .. } => TransportKind::Ipc,
            Transport::SharedMemory => TransportKind::SharedMemory,
            Transport::CudaIpc { .. } => TransportKind::CudaIpc,
            Transport::Staged { .. } => TransportKind::Staged,
        },
        handle: match &b.transport {
            Transport::Ipc { handle, .. } | Transport::CudaIpc { handle, .. } => Some(hex(handle)),
            Transport::SharedMemory | Transport::Staged { .. } => None,
        },
    }
}

/// The manifest record of a replay capture's launch.
fn launch_record(l: &Launch) -> LaunchRecord {
    LaunchRecord {
        kernarg: hex(&l.kernarg),
        group_segment_size: l.group_segment_size,
        private_segment_size: l.private_segment_size,
        symbol: l.symbol.clone(),
        code_object: l.code_object.as_deref().map(code_object_file_name),
        code_object_missing: l.code_object_missing.clone(),
        isa: l.isa.clone(),
        variables: l
            .variables
            .iter()
            .map(|(image, name)| VariableRecord {
                image: *image,
                name: name.clone(),
            })
            .collect(),
        all_allocations: l.all_allocations,
    }
}

/// The tensor file of one reserved dispatch, written without the writer:
/// its name and path, and the unnamed file made ahead to write it in
/// (`None`: through a named temporary file).
pub(super) struct DispatchSlot {
    pub(super) rank: u32,
    pub(super) dir: Arc<DirHandle>,
    pub(super) file: String,
    /// `file` under the directory's path, for messages.
    pub(super) path: PathBuf,
    pub(super) spare: Option<File>,
}

/// A dispatch whose tensor file is in place, waiting to be recorded.
pub(super) struct WrittenDispatch {
    pub(super) record: DispatchRecord,
    pub(super) path: PathBuf,
    /// Linking the unnamed file failed here: use none from now on.
    pub(super) spares_failed: bool,
}

impl DispatchSlot {
    /// Writes the dispatch's tensor file and gives its manifest record.
    pub(super) fn write(
        mut self,
        pid: u32,
        dispatch: &Dispatch,
        tensors: &mut [TensorToStore],
    ) -> Result<WrittenDispatch, StoreError> {
        let mut records = Vec::with_capacity(tensors.len());
        let mut parts = Vec::with_capacity(tensors.len());
        for t in tensors.iter_mut() {
            let b = t.buffer;
            let size = b.dtype.size();
            let len = match &t.source {
                TensorSource::Bytes(data) => data.len() as u64,
                TensorSource::Streamed(_) => b.extent,
            };
            if len != b.extent || len % size as u64 != 0 {
                return Err(StoreError::Invalid(format!(
                    "dispatch {}, argument {}: {len} bytes captured for an extent of {} bytes of {}",
                    dispatch.index,
                    b.arg_index,
                    b.extent,
                    b.dtype.name()
                )));
            }
            let len = usize::try_from(len).map_err(|_| {
                StoreError::Invalid(format!(
                    "dispatch {}, argument {}: {len} bytes do not fit in this machine's memory \
                     addresses",
                    dispatch.index, b.arg_index
                ))
            })?;
            let elements = len / size;
            let source = std::mem::replace(&mut t.source, TensorSource::Bytes(&[]));
            parts.push(tensor_file::TensorPart {
                name: tensor_name(b.arg_index, b.phase),
                dtype: safetensors_dtype(b.dtype),
                len,
                source,
            });
            records.push(buffer_record(b, elements as u64));
        }
        let layout = tensor_file::encode(&parts).map_err(|e| StoreError::BadTensorFile {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        let spares_failed = self.write_file(&layout, &mut parts)?;
        Ok(WrittenDispatch {
            record: DispatchRecord {
                rank: self.rank,
                index: dispatch.index,
                pid,
                kernel: Some(dispatch.kernel.clone()),
                grid: dispatch.grid,
                block: dispatch.block,
                duration_ns: dispatch.duration_ns,
                file: self.file,
                buffers: records,
                launch: dispatch.launch.as_ref().map(|l| Box::new(launch_record(l))),
            },
            path: self.path,
            spares_failed,
        })
    }

    /// Puts the whole tensor file in place (not synced): the spare unnamed
    /// file written then linked into place, else a named temporary file
    /// renamed into place (also when linking fails here; returns whether
    /// it did). Small files go out in one write, large ones part by part
    /// (no copy). A refused or failed write leaves nothing: the unnamed
    /// file is never linked, the temporary file is removed.
    fn write_file(
        &mut self,
        layout: &tensor_file::Layout,
        parts: &mut [tensor_file::TensorPart],
    ) -> Result<bool, StoreError> {
        let path = &self.path;
        let failed = |e: tensor_file::WriteError| match e {
            tensor_file::WriteError::Io(source) => StoreError::Io {
                path: path.to_path_buf(),
                error: source,
            },
            tensor_file::WriteError::Refused(reason) => StoreError::Refused(reason),
        };
        if let Some(file) = &mut self.spare {
            tensor_file::write_file(file, layout, parts).map_err(failed)?;
            if spare_files::link_into_place(&self.dir, file, &self.file).is_ok() {
                return Ok(false);
            }
        }
        write_replacing_with(&self.dir, &self.file, false, |w| {
            tensor_file::write_file(&mut placement::Plain(w), layout, parts).map_err(failed)
        })?;
        Ok(self.spare.is_some())
    }
}
