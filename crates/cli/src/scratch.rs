//! The temporary directories ditto makes (`ditto-validate-*` for
//! snapshots nobody asked to keep, `ditto-collector-*` for a private
//! socket, `ditto-replay-*` for a replay's work): each is made mode 0700
//! and holds an `owner` file that the ditto using it keeps locked (flock)
//! for as long as it lives. The lock goes with the process, however it
//! ends, so a directory whose `owner` can be locked again belongs to a
//! ditto that died (SIGKILL, a crash) and [`sweep_stale`] removes it. Owns the naming, the lock and the
//! sweep; what goes inside is the caller's.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Name prefixes of the directories ditto makes under the temporary directory.
pub const PREFIXES: [&str; 3] = ["ditto-validate-", "ditto-collector-", "ditto-replay-"];

/// The file each directory holds, locked while its ditto lives.
const OWNER_FILE: &str = "owner";

/// A temporary directory in use: removed when dropped; removed by the
/// next ditto if this process dies first.
#[derive(Debug)]
pub struct ScratchDir {
    dir: tempfile::TempDir,
    /// Holds the lock (closed, and so unlocked, after the directory is gone).
    _owner: File,
}

impl ScratchDir {
    /// A new directory `<temp>/<prefix>XXXXXX`, mode 0700, locked by this
    /// process. `prefix` is one of [`PREFIXES`].
    pub fn create(prefix: &str) -> io::Result<ScratchDir> {
        debug_assert!(PREFIXES.contains(&prefix));
        // Made 0700 (never readable by others, not even for an instant).
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()?;
        // Locked before it takes its name: a sweep never sees it unlocked.
        let unnamed = dir.path().join(".owner.new");
        let owner = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&unnamed)?;
        lock(&owner, false)?;
        std::fs::rename(&unnamed, dir.path().join(OWNER_FILE))?;
        Ok(ScratchDir { dir, _owner: owner })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// flock LOCK_EX, waiting or not.
fn lock(file: &File, nonblocking: bool) -> io::Result<()> {
    let op = libc::LOCK_EX | if nonblocking { libc::LOCK_NB } else { 0 };
    // SAFETY: flock on a file descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Removes, under `temp` (the temporary directory), every directory ditto
/// made whose ditto is gone: named with one of [`PREFIXES`], a real
/// directory owned by this uid, holding an `owner` file no process has
/// locked. Anything else is left alone (another user's directory, one in
/// use, one without an `owner` file). Returns the directories removed.
pub fn sweep_stale(temp: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(temp) else {
        return Vec::new();
    };
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !PREFIXES.iter().any(|p| name.starts_with(p)) {
            continue;
        }
        let path = entry.path();
        // symlink_metadata: a link named like ours is not followed.
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != uid {
            continue;
        }
        if is_abandoned(&path) && std::fs::remove_dir_all(&path).is_ok() {
            removed.push(path);
        }
    }
    removed
}

/// Whether the directory's `owner` file exists and no process holds its lock.
fn is_abandoned(dir: &Path) -> bool {
    let Ok(owner) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dir.join(OWNER_FILE))
    else {
        return false;
    };
    lock(&owner, true).is_ok()
}

/// [`sweep_stale`] of the temporary directory, saying what it removed at
/// debug level.
pub fn sweep_stale_temp_dirs() {
    for path in sweep_stale(&std::env::temp_dir()) {
        crate::log::debug(&format!(
            "removed {}, left behind by a ditto that did not end cleanly",
            path.display()
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_is_swept_only_once_its_owner_is_gone() {
        let temp = tempfile::tempdir().unwrap();
        let in_use = tempfile::Builder::new()
            .prefix("ditto-validate-")
            .tempdir_in(temp.path())
            .unwrap()
            .keep();
        let owner = File::create(in_use.join(OWNER_FILE)).unwrap();
        lock(&owner, false).unwrap();
        // Someone else's kind of directory, and one of ours without an owner file.
        std::fs::create_dir(temp.path().join("unrelated-dir")).unwrap();
        std::fs::create_dir(temp.path().join("ditto-collector-nolock")).unwrap();
        assert_eq!(sweep_stale(temp.path()), Vec::<PathBuf>::new());
        assert!(in_use.exists());
        // The lock goes with its file: the directory is abandoned now.
        drop(owner);
        assert_eq!(sweep_stale(temp.path()), vec![in_use.clone()]);
        assert!(!in_use.exists());
        assert!(temp.path().join("unrelated-dir").exists());
        assert!(temp.path().join("ditto-collector-nolock").exists());
    }

    #[test]
    fn a_symlink_named_like_a_scratch_directory_is_not_followed() {
        let temp = tempfile::tempdir().unwrap();
        let target = tempfile::tempdir().unwrap();
        File::create(target.path().join(OWNER_FILE)).unwrap();
        std::os::unix::fs::symlink(target.path(), temp.path().join("ditto-validate-link")).unwrap();
        assert_eq!(sweep_stale(temp.path()), Vec::<PathBuf>::new());
        assert!(target.path().join(OWNER_FILE).exists());
    }

    #[test]
    fn a_scratch_directory_is_private_and_locked_while_it_lives() {
        let scratch = ScratchDir::create("ditto-collector-").unwrap();
        let mode = std::fs::metadata(scratch.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        assert!(!is_abandoned(scratch.path()));
        let path = scratch.path().to_path_buf();
        drop(scratch);
        assert!(!path.exists());
    }
}
