//! The snapshot reader: a snapshot directory opened for reading, its
//! manifest completed from the journal (dispatches stored after the
//! manifest's last write, missing records applied in order), or a run
//! written by one collector per node read as one (each part completed so,
//! then merged by [`parts::merge`]), and one dispatch's arrays read back
//! from its tensor file (in its rank's part). Owns the checks a
//! reader makes: the format version; files that are regular files of the
//! directory opened (a plain name, not a link wherever it points, not a
//! FIFO, which would block, [`DirHandle::open_regular`]); each tensor's
//! dtype and shape as the manifest gives them; and each array's bytes
//! against the fingerprint the tool took of them. Never writes.

use super::dir_handle::{DirHandle, is_plain_name};
use super::error::{StoreError, io_err};
use super::journal;
use super::manifest::{
    DispatchRecord, MANIFEST_FILE, Manifest, SNAPSHOT_FORMAT, safetensors_dtype,
};
use super::missing;
use super::parts;
use super::tensor_file::{self, TensorBytes};
use ditto_protocol::DType;
use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    /// The directory, opened once: every file is read through it.
    handle: Arc<DirHandle>,
    /// A run written by one collector per node ([`parts`]): each part's
    /// directory, and the part of each rank; empty for one collector's.
    parts: Vec<(PathBuf, Arc<DirHandle>)>,
    rank_part: BTreeMap<u32, usize>,
}

/// What a manifest missing from `dir` says.
fn no_manifest(path: PathBuf) -> StoreError {
    StoreError::BadManifest {
        path,
        reason: "missing: is this a directory written by `ditto run` or `ditto collect`?".into(),
    }
}

impl Snapshot {
    /// Opens the snapshot at `dir`: one collector's (its `manifest.json`),
    /// or a run written by one collector per node, whose parts
    /// (`node-<NAME>/`) are merged into one manifest (`parts::merge`).
    pub fn load(dir: &Path) -> Result<Snapshot, StoreError> {
        let path = dir.join(MANIFEST_FILE);
        // The directory the user names may be reached through a link of
        // theirs; the files in it may not.
        let handle = Arc::new(DirHandle::open_following(dir).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => no_manifest(path.clone()),
            std::io::ErrorKind::Other => StoreError::BadManifest {
                path: path.clone(),
                reason: format!("{} {e}: give a snapshot directory", dir.display()),
            },
            _ => io_err(dir)(e),
        })?);
        let part_names = match handle.contains(MANIFEST_FILE) {
            Ok(false) => parts::part_names(&handle)?,
            _ => Vec::new(),
        };
        if part_names.is_empty() {
            let manifest = read_manifest(&handle)?;
            return Ok(Snapshot {
                dir: dir.to_path_buf(),
                manifest,
                handle,
                parts: Vec::new(),
                rank_part: BTreeMap::new(),
            });
        }
        let mut loaded = Vec::with_capacity(part_names.len());
        let mut opened = Vec::with_capacity(part_names.len());
        for name in part_names {
            let part_path = dir.join(&name);
            // A part is a directory of the run's own, never a link.
            let part =
                Arc::new(
                    DirHandle::open(&part_path).map_err(|e| StoreError::BadManifest {
                        path: part_path.clone(),
                        reason: format!("a node's part of the run that cannot be read: {e}"),
                    })?,
                );
            let manifest = read_manifest(&part)?;
            loaded.push(parts::LoadedPart { name, manifest });
            opened.push((part_path, part));
        }
        let (manifest, rank_part) = parts::merge(dir, loaded)?;
        Ok(Snapshot {
            dir: dir.to_path_buf(),
            manifest,
            handle,
            parts: opened,
            rank_part,
        })
    }

    /// The directory that holds rank `rank`'s files: the snapshot's own,
    /// or in a run written by one collector per node, its node's part.
    pub fn dir_of_rank(&self, rank: u32) -> &Path {
        match self.rank_part.get(&rank) {
            Some(&i) => &self.parts[i].0,
            None => &self.dir,
        }
    }

    /// Opens `name`, a file of rank `rank`'s directory ([`Self::dir_of_rank`]),
    /// by the rule of every file of a snapshot: a plain name, a regular file
    /// (a link, wherever it points, a FIFO or a device is refused naming
    /// what it is), opened without blocking.
    pub fn open_file_of_rank(&self, rank: u32, name: &str) -> Result<File, StoreError> {
        let handle = self.handle_of_rank(rank);
        let path = handle.shown(name);
        match handle.open_regular(name) {
            Ok(Some(file)) => Ok(file),
            Ok(None) => Err(StoreError::Io {
                path,
                error: std::io::ErrorKind::NotFound.into(),
            }),
            Err(e) => Err(StoreError::NotRegularFile { path, what: e.0 }),
        }
    }

    /// The opened directory of rank `rank`'s files ([`Self::dir_of_rank`]).
    fn handle_of_rank(&self, rank: u32) -> &DirHandle {
        match self.rank_part.get(&rank) {
            Some(&i) => &self.parts[i].1,
            None => &self.handle,
        }
    }

    /// Reads every argument of one dispatch, in manifest order.
    pub fn load_dispatch(&self, d: &DispatchRecord) -> Result<Vec<(u32, Array)>, StoreError> {
        // Only a file of this directory: a manifest must not point elsewhere.
        if !is_plain_name(&d.file) || d.file.starts_with('.') {
            return Err(StoreError::BadManifest {
                path: self.dir.join(MANIFEST_FILE),
                reason: format!(
                    "dispatch {} of rank {} names the file {:?}, which is not a file of this snapshot directory",
                    d.index, d.rank, d.file
                ),
            });
        }
        let path = self.dir_of_rank(d.rank).join(&d.file);
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
        let file = match self.handle_of_rank(d.rank).open_regular(&d.file) {
            Ok(Some(file)) => file,
            Ok(None) => {
                return Err(StoreError::Io {
                    path,
                    error: std::io::ErrorKind::NotFound.into(),
                });
            }
            Err(e) => return Err(StoreError::NotRegularFile { path, what: e.0 }),
        };
        let arrays = tensor_file::read_tensors(&file, &path, &wanted)?;
        let mut out = Vec::with_capacity(arrays.len());
        for (bytes, (b, dtype)) in arrays.into_iter().zip(d.buffers.iter().zip(dtypes)) {
            // The tool's fingerprint of what it captured (all of a small
            // buffer; 64 windows of a large one).
            let seen = ditto_protocol::fingerprint(&bytes);
            if seen != b.fingerprint && ditto_protocol::legacy_fingerprint(&bytes) != b.fingerprint
            {
                return Err(StoreError::BadTensorFile {
                    path,
                    reason: format!(
                        "tensor {} (dispatch {} of rank {}, argument {}) does not hold what was \
                         captured: its fingerprint is {seen:016x}, the manifest's {:016x}; the \
                         file was changed after ditto wrote it",
                        b.tensor, d.index, d.rank, b.arg, b.fingerprint
                    ),
                });
            }
            out.push((b.arg, Array { dtype, bytes }));
        }
        Ok(out)
    }
}

/// The manifest of the snapshot directory `handle` has open, completed
/// from its journal: dispatches stored after the manifest's last write (a
/// collector that was killed, or is still writing), missing records
/// applied in order.
fn read_manifest(handle: &DirHandle) -> Result<Manifest, StoreError> {
    let path = handle.shown(MANIFEST_FILE);
    let mut text = Vec::new();
    match handle.open_regular(MANIFEST_FILE) {
        Ok(Some(mut file)) => {
            file.read_to_end(&mut text).map_err(io_err(&path))?;
        }
        Ok(None) => return Err(no_manifest(path)),
        Err(e) => return Err(StoreError::NotRegularFile { path, what: e.0 }),
    }
    let mut manifest: Manifest =
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
        return Err(StoreError::BadManifest {
            path,
            reason: reason.to_string(),
        });
    }
    let known: HashSet<(u32, u64)> = manifest
        .dispatches
        .iter()
        .map(|d| (d.rank, d.index))
        .collect();
    for entry in journal::read(handle)? {
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
    Ok(manifest)
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
    fn a_dispatch_file_that_is_a_link_or_a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let snap = dir.path().join("snap");
        let mut w = SnapshotWriter::create(&snap, "k").unwrap();
        for i in 0..2 {
            w.add_dispatch(0, 1, &dispatch(i), &[captured(0, DType::U8, vec![i as u8])])
                .unwrap();
        }
        drop(w);
        let s = Snapshot::load(&snap).unwrap();
        // Dispatch 0: a link to a copy outside, of the right content.
        let outside = dir.path().join("outside.safetensors");
        std::fs::rename(snap.join("dispatch-0-00000.safetensors"), &outside).unwrap();
        std::os::unix::fs::symlink(&outside, snap.join("dispatch-0-00000.safetensors")).unwrap();
        // Dispatch 1: a FIFO nobody writes (a plain open would block).
        let fifo = snap.join("dispatch-0-00001.safetensors");
        std::fs::remove_file(&fifo).unwrap();
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo of a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let errors: Vec<String> = s
            .manifest
            .dispatches
            .iter()
            .map(|d| s.load_dispatch(d).unwrap_err().to_string())
            .collect();
        assert!(
            errors[0].contains("dispatch-0-00000.safetensors: not read: it is a symbolic link"),
            "{}",
            errors[0]
        );
        assert!(
            errors[1].contains("dispatch-0-00001.safetensors: not read: it is a FIFO"),
            "{}",
            errors[1]
        );
    }

    #[test]
    fn a_changed_value_in_a_tensor_file_is_found_by_its_fingerprint() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SnapshotWriter::create(dir.path(), "k").unwrap();
        let floats: Vec<u8> = [1.0f32, 2.0, 3.0]
            .iter()
            .flat_map(|f| f.to_le_bytes())
            .collect();
        w.add_dispatch(
            0,
            1,
            &dispatch(0),
            &[captured(1, DType::F32, floats.clone())],
        )
        .unwrap();
        drop(w);
        let s = Snapshot::load(dir.path()).unwrap();
        assert_eq!(
            s.load_dispatch(&s.manifest.dispatches[0]).unwrap()[0]
                .1
                .bytes,
            floats
        );
        // The last value's top byte flipped in place (the file's last byte).
        let file = dir.path().join("dispatch-0-00000.safetensors");
        let mut bytes = std::fs::read(&file).unwrap();
        *bytes.last_mut().unwrap() ^= 0x80;
        std::fs::write(&file, &bytes).unwrap();
        let err = s
            .load_dispatch(&s.manifest.dispatches[0])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "tensor arg1 (dispatch 0 of rank 0, argument 1) does not hold what was captured"
            ) && err.contains("the file was changed after ditto wrote it"),
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
