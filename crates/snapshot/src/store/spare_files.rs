//! Tensor files made ahead of time. Creating a file (allocating its inode)
//! is the costliest step of storing a dispatch on some file systems: ext4
//! without a journal skips every inode of the group freed in the last
//! minute, one inode-table lookup each, so on a machine where files are
//! deleted by the thousand (builds, test runs) one create took ~1 ms of CPU
//! while the write and the rename took tens of µs. A background thread keeps
//! [`SPARES`] unnamed files (`O_TMPFILE`) of the snapshot directory open and
//! ready; storing a dispatch writes one and links it into place under its
//! final name ([`link_into_place`]).
//!
//! An unnamed file has no directory entry until it is linked, whole: a
//! reader never sees half a tensor file, and a collector killed at any
//! point leaves nothing behind (the kernel frees unlinked inodes with their
//! last fd). Owns the thread and the spares; knows nothing of the format.
//! Where the file system has no `O_TMPFILE`, [`SpareFiles::start`] gives
//! `None` and the caller writes through a named temporary file and a rename.

use super::dir_handle::DirHandle;
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

/// How many unnamed files wait, made ahead.
pub const SPARES: usize = 8;

/// Links the unnamed `file` of `dir` into place as `name`; fails if that
/// name exists.
pub fn link_into_place(dir: &DirHandle, file: &File, name: &str) -> io::Result<()> {
    dir.link_unnamed(file, name)
}

/// Unnamed files of one directory, made ahead by a thread.
pub struct SpareFiles {
    dir: Arc<DirHandle>,
    /// `None` once dropping (the thread ends when its sends fail).
    spares: Option<Receiver<File>>,
    maker: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for SpareFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpareFiles")
            .field("dir", &self.dir.path())
            .finish()
    }
}

fn make_spares(dir: Arc<DirHandle>, first: File, out: SyncSender<File>) {
    let mut next = Some(first);
    while let Some(file) = next.take() {
        if out.send(file).is_err() {
            return;
        }
        next = dir.create_unnamed().ok();
    }
}

impl SpareFiles {
    /// Starts making spares in `dir`; `None` where its file system has no
    /// unnamed files (or /proc is not mounted, which linking them needs).
    pub fn start(dir: &Arc<DirHandle>) -> Option<SpareFiles> {
        if !Path::new("/proc/self/fd").is_dir() {
            return None;
        }
        let first = dir.create_unnamed().ok()?;
        let (tx, rx) = sync_channel(SPARES);
        let owned = dir.clone();
        let maker = std::thread::Builder::new()
            .name("ditto-spare-files".into())
            .spawn(move || make_spares(owned, first, tx))
            .ok()?;
        Some(SpareFiles {
            dir: dir.clone(),
            spares: Some(rx),
            maker: Some(maker),
        })
    }

    /// A spare file, made now if none is waiting.
    pub fn take(&self) -> io::Result<File> {
        match self.spares.as_ref().map(|r| r.try_recv()) {
            Some(Ok(file)) => Ok(file),
            _ => self.dir.create_unnamed(),
        }
    }
}

impl Drop for SpareFiles {
    fn drop(&mut self) {
        drop(self.spares.take());
        if let Some(maker) = self.maker.take() {
            let _ = maker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Duration;

    #[test]
    fn spares_are_made_ahead_and_a_linked_one_appears_whole_under_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let handle = Arc::new(DirHandle::open(dir.path()).unwrap());
        let Some(spares) = SpareFiles::start(&handle) else {
            panic!("the test directory's file system has no O_TMPFILE");
        };
        // Made by the thread (bounded wait).
        let mut file = spares
            .spares
            .as_ref()
            .unwrap()
            .recv_timeout(Duration::from_secs(10))
            .expect("a spare file made ahead");
        file.write_all(b"whole").unwrap();
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "unnamed files have no directory entry"
        );
        let path = dir.path().join("dispatch-0-00000.safetensors");
        link_into_place(&handle, &file, "dispatch-0-00000.safetensors").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"whole");
        // A name that exists is not replaced.
        let again = spares.take().unwrap();
        assert_eq!(
            link_into_place(&handle, &again, "dispatch-0-00000.safetensors")
                .unwrap_err()
                .kind(),
            io::ErrorKind::AlreadyExists
        );
        drop(spares);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["dispatch-0-00000.safetensors"]);
    }
}
