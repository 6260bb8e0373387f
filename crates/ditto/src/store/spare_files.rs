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

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

/// How many unnamed files wait, made ahead.
pub const SPARES: usize = 8;

/// An unnamed file in `dir`, readable and writable by its owner only (as
/// the named temporary files are).
fn create_unnamed(dir: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE)
        .open(dir)
}

/// Gives the unnamed `file` the name `path` (which must not exist): a
/// `linkat` of its /proc/self/fd entry, as open(2) describes for O_TMPFILE.
pub fn link_into_place(file: &File, path: &Path) -> io::Result<()> {
    let from = std::ffi::CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .expect("no NUL in a /proc path");
    let to = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in the path"))?;
    // SAFETY: two NUL-terminated paths that outlive the call.
    let r = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The spares of one snapshot directory and the thread that makes them.
pub struct SpareFiles {
    dir: PathBuf,
    spares: Option<Receiver<File>>,
    maker: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for SpareFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpareFiles")
            .field("dir", &self.dir)
            .finish()
    }
}

fn make_spares(dir: PathBuf, first: File, out: SyncSender<File>) {
    let mut next = Some(first);
    while let Some(file) = next.take() {
        // Blocks while SPARES wait; fails once the owner is gone.
        if out.send(file).is_err() {
            return;
        }
        // An error ends the thread; `take` then creates each file itself
        // and reports the error where it matters.
        next = create_unnamed(&dir).ok();
    }
}

impl SpareFiles {
    /// Starts making spares in `dir`; `None` where it cannot hold unnamed
    /// files (or /proc/self/fd is missing to link them) or no thread starts.
    pub fn start(dir: &Path) -> Option<SpareFiles> {
        if !Path::new("/proc/self/fd").is_dir() {
            return None;
        }
        let first = create_unnamed(dir).ok()?;
        let (tx, rx) = sync_channel(SPARES);
        let owned = dir.to_path_buf();
        let maker = std::thread::Builder::new()
            .name("ditto-spare-files".into())
            .spawn(move || make_spares(owned, first, tx))
            .ok()?;
        Some(SpareFiles {
            dir: dir.to_path_buf(),
            spares: Some(rx),
            maker: Some(maker),
        })
    }

    /// A file made ahead, or a new one when none is waiting.
    pub fn take(&self) -> io::Result<File> {
        match self.spares.as_ref().map(|r| r.try_recv()) {
            Some(Ok(file)) => Ok(file),
            _ => create_unnamed(&self.dir),
        }
    }
}

impl Drop for SpareFiles {
    /// Closes the spares (their inodes are freed) and waits for the thread,
    /// so nothing of this directory is touched after the writer is gone.
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
        let Some(spares) = SpareFiles::start(dir.path()) else {
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
        link_into_place(&file, &path).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"whole");
        // A name that exists is not replaced.
        let again = spares.take().unwrap();
        assert_eq!(
            link_into_place(&again, &path).unwrap_err().kind(),
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
