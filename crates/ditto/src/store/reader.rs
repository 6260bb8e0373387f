//! The snapshot reader: a snapshot directory opened for reading, its
//! manifest completed from the journal (dispatches stored after the
//! manifest's last write, missing records applied in order), and one
//! dispatch's arrays read back from its tensor file. Owns the checks a
//! reader makes (format version, file names inside the directory); never
//! writes.

use super::error::StoreError;
use super::journal;
use super::manifest::{
    DispatchRecord, MANIFEST_FILE, Manifest, SNAPSHOT_FORMAT, safetensors_dtype,
};
use super::missing;
use super::tensor_file::{self, TensorBytes};
use ditto_protocol::DType;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// One array as read back from a snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct Array {
    pub dtype: DType,
    /// Little-endian elements, not necessarily aligned to their size.
    pub bytes: TensorBytes,
}

impl Array {
    pub fn elements(&self) -> usize {
        self.bytes.len() / self.dtype.size()
    }
}

/// A snapshot directory opened for reading.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub dir: PathBuf,
    pub manifest: Manifest,
}

impl Snapshot {
    pub fn load(dir: &Path) -> Result<Snapshot, StoreError> {
        let path = dir.join(MANIFEST_FILE);
        let text = std::fs::read(&path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                StoreError::BadManifest {
                    path: path.clone(),
                    reason:
                        "missing: is this a directory written by `ditto run` or `ditto collect`?"
                            .into(),
                }
            } else {
                StoreError::Io {
                    path: path.clone(),
                    error: source,
                }
            }
        })?;
        let manifest: Manifest =
            serde_json::from_slice(&text).map_err(|e| StoreError::BadManifest {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        if manifest.format != SNAPSHOT_FORMAT {
            return Err(StoreError::BadManifest {
                path,
                reason: format!(
                    "format {} but this ditto reads format {SNAPSHOT_FORMAT}",
                    manifest.format
                ),
            });
        }
        if let Some(reason) = manifest.missing.iter().find_map(|m| m.check().err()) {
            return Err(StoreError::BadManifest { path, reason });
        }
        // Dispatches stored after the manifest's last write (a collector
        // that was killed, or is still writing).
        let mut manifest = manifest;
        let known: HashSet<(u32, u64)> = manifest
            .dispatches
            .iter()
            .map(|d| (d.rank, d.index))
            .collect();
        for entry in journal::read(dir)? {
            match entry {
                journal::Entry::Dispatch(record) => {
                    if !known.contains(&(record.rank, record.index)) {
                        if manifest.kernel.is_none() {
                            manifest.kernel = record.kernel.clone();
                        }
                        manifest.dispatches.push(record);
                    }
                }
                journal::Entry::Missing(record) => {
                    missing::merge(&mut manifest, record);
                }
            }
        }
        missing::drop_covered(&mut manifest);
        Ok(Snapshot {
            dir: dir.to_path_buf(),
            manifest,
        })
    }

    /// Reads every argument of one dispatch, in manifest order.
    pub fn load_dispatch(&self, d: &DispatchRecord) -> Result<Vec<(u32, Array)>, StoreError> {
        // Only a file of this directory: a manifest must not point elsewhere.
        if d.file.is_empty() || d.file.starts_with('.') || d.file.contains('/') {
            return Err(StoreError::BadManifest {
                path: self.dir.join(MANIFEST_FILE),
                reason: format!(
                    "dispatch {} of rank {} names the file {:?}, which is not a file of this snapshot directory",
                    d.index, d.rank, d.file
                ),
            });
        }
        let path = self.dir.join(&d.file);
        let mut dtypes = Vec::with_capacity(d.buffers.len());
        let mut wanted = Vec::with_capacity(d.buffers.len());
        for b in &d.buffers {
            let dtype = b.dtype()?;
            dtypes.push(dtype);
            wanted.push(tensor_file::Wanted {
                name: &b.tensor,
                dtype: safetensors_dtype(dtype),
                elements: usize::try_from(b.elements).map_err(|_| StoreError::BadManifest {
                    path: self.dir.join(MANIFEST_FILE),
                    reason: format!("tensor {}: {} elements", b.tensor, b.elements),
                })?,
                arg: b.arg,
                manifest_dtype: &b.dtype,
            });
        }
        let out = tensor_file::read_tensors(&path, &wanted)?
            .into_iter()
            .zip(d.buffers.iter().zip(dtypes))
            .map(|(bytes, (b, dtype))| (b.arg, Array { dtype, bytes }))
            .collect();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::SnapshotWriter;
    use super::super::fixtures::{captured, dispatch, hello};
    use super::*;
    use ditto_protocol::DType;

    #[test]
    fn dispatches_the_manifest_lacks_are_read_back_from_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let snap = dir.path().join("snap");
        let mut w = SnapshotWriter::create(&snap, "scale_values").unwrap();
        let rank = w.add_run(&hello("ref")).unwrap();
        let manifest_with_one = |w: &mut SnapshotWriter| {
            w.flush().unwrap();
            std::fs::read(snap.join(MANIFEST_FILE)).unwrap()
        };
        w.add_dispatch(rank, 77, &dispatch(0), &[captured(1, DType::U8, vec![1])])
            .unwrap();
        let stale = manifest_with_one(&mut w);
        for i in 1..3 {
            w.add_dispatch(
                rank,
                77,
                &dispatch(i),
                &[captured(1, DType::U8, vec![i as u8])],
            )
            .unwrap();
        }
        drop(w);
        let complete = Snapshot::load(&snap).unwrap();
        assert_eq!(
            complete.manifest.dispatches.len(),
            3,
            "dropping the writer writes it all"
        );
        // A collector killed after the third Ack: the manifest still says one
        // dispatch, the journal has three and a line cut short.
        std::fs::write(snap.join(MANIFEST_FILE), &stale).unwrap();
        let journal = snap.join(journal::JOURNAL_FILE);
        let mut text = std::fs::read(&journal).unwrap();
        text.extend_from_slice(b"{\"rank\":0,\"ind");
        std::fs::write(&journal, &text).unwrap();
        let s = Snapshot::load(&snap).unwrap();
        let indices: Vec<u64> = s.manifest.dispatches.iter().map(|d| d.index).collect();
        assert_eq!(indices, vec![0, 1, 2]);
        let arrays = s.load_dispatch(&s.manifest.dispatches[2]).unwrap();
        assert_eq!(arrays[0].1.bytes, vec![2u8]);
        // A damaged line in the middle is an error, not a silent loss.
        let mut lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
        lines[1] = b"not json";
        std::fs::write(&journal, lines.join(&b'\n')).unwrap();
        let err = Snapshot::load(&snap).unwrap_err().to_string();
        assert!(
            err.contains("dispatches.jsonl") && err.contains("line 2"),
            "{err}"
        );
    }

    #[test]
    fn missing_manifest_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = Snapshot::load(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("manifest.json") && err.contains("ditto run"),
            "{err}"
        );
    }

    #[test]
    fn a_manifest_naming_a_file_outside_the_snapshot_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let snap = dir.path().join("snap");
        let mut w = SnapshotWriter::create(&snap, "k").unwrap();
        w.add_dispatch(0, 1, &dispatch(0), &[captured(0, DType::U8, vec![1])])
            .unwrap();
        let mut s = Snapshot::load(&snap).unwrap();
        std::fs::copy(
            snap.join("dispatch-0-00000.safetensors"),
            dir.path().join("elsewhere.safetensors"),
        )
        .unwrap();
        for file in ["../elsewhere.safetensors", "/etc/passwd", ""] {
            s.manifest.dispatches[0].file = file.into();
            let err = s.load_dispatch(&s.manifest.dispatches[0]).unwrap_err();
            assert!(
                matches!(err, StoreError::BadManifest { .. }),
                "{file:?}: {err}"
            );
        }
    }
}
