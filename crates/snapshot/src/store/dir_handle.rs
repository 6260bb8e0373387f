//! A snapshot directory as a handle opened once. Every file of a snapshot
//! is created, replaced, linked, opened and removed relative to it
//! (`openat`, `renameat`, `linkat`, `unlinkat`; never following a link),
//! so a directory renamed away mid-run, or a link put in its place by
//! whoever may write its parent, is never written or read through: what
//! the run writes stays in the directory it opened. Whether that
//! directory is still the one at its path is asked separately
//! ([`DirHandle::displaced`]), before a manifest is committed. A handle
//! may be closed while nothing is written ([`DirHandle::close`]: a
//! collector serving many runs keeps no fd per idle directory); its next
//! use opens the path again and goes on only if it leads to the same
//! directory (device and inode).
//!
//! Owns the system calls on a snapshot's directory and the rule for what
//! a file of it is (a plain name; a regular file, opened without blocking);
//! knows nothing of what the files hold.

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// An open snapshot directory and the path it was opened at (for
/// messages, and to check it is still there).
#[derive(Debug)]
pub struct DirHandle {
    /// `None` while closed ([`Self::close`]).
    fd: Mutex<Option<Arc<OwnedFd>>>,
    path: PathBuf,
    /// (device, inode) of the directory opened.
    identity: (u64, u64),
    /// Owner and mode bits when opened.
    owner: u32,
    mode: u32,
}

fn identity_of(st: &rustix::fs::Stat) -> (u64, u64) {
    (st.st_dev, st.st_ino)
}

/// Whether `name` is a plain name of a file in a directory: not empty,
/// no `/`, not `.` or `..`.
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains('/') && !name.contains('\0')
}

impl DirHandle {
    /// Opens the directory at `path`, refusing a symbolic link in its last
    /// component (the components before it are the user's own path).
    pub fn open(path: &Path) -> io::Result<DirHandle> {
        Self::open_with_flags(path, OFlags::NOFOLLOW)
    }

    /// [`Self::open`] of a directory the user named for reading, which may
    /// be reached through a link of theirs.
    pub fn open_following(path: &Path) -> io::Result<DirHandle> {
        Self::open_with_flags(path, OFlags::empty())
    }

    fn open_with_flags(path: &Path, extra: OFlags) -> io::Result<DirHandle> {
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | extra,
            Mode::empty(),
        )
        .map_err(|e| match e {
            // O_DIRECTORY with O_NOFOLLOW gives ENOTDIR for a link too.
            rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => {
                match rustix::fs::lstat(path).map(|st| FileType::from_raw_mode(st.st_mode)) {
                    Ok(FileType::Symlink) => io::Error::other("it is a symbolic link"),
                    Ok(FileType::RegularFile) => io::Error::other("it is a file, not a directory"),
                    Ok(kind) => io::Error::other(format!("it is {}", kind_name(kind))),
                    Err(e) => e.into(),
                }
            }
            e => e.into(),
        })?;
        let st = rustix::fs::fstat(&fd)?;
        Ok(DirHandle {
            identity: identity_of(&st),
            owner: st.st_uid,
            mode: st.st_mode & 0o7777,
            fd: Mutex::new(Some(Arc::new(fd))),
            path: path.to_path_buf(),
        })
    }

    /// The open directory: opened again (its path, no link followed) when
    /// closed, and refused unless it is the directory first opened.
    fn fd(&self) -> io::Result<Arc<OwnedFd>> {
        let mut slot = self.fd.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(fd) = &*slot {
            return Ok(fd.clone());
        }
        let fd = rustix::fs::open(
            &self.path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|_| {
            io::Error::other(
                self.displaced()
                    .unwrap_or_else(|| "it cannot be opened again".into()),
            )
        })?;
        if identity_of(&rustix::fs::fstat(&fd)?) != self.identity {
            return Err(io::Error::other(
                "another file or directory now stands at its path",
            ));
        }
        let fd = Arc::new(fd);
        *slot = Some(fd.clone());
        Ok(fd)
    }

    /// Closes the directory until its next use (which opens it again, see
    /// `Self::fd`).
    pub fn close(&self) {
        *self.fd.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The path the directory was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `name` under the directory's path, for messages.
    pub fn shown(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// (device, inode) of the directory opened.
    pub fn identity(&self) -> (u64, u64) {
        self.identity
    }

    /// The directory's owner (uid) and permission bits, when opened.
    pub fn owner_and_mode(&self) -> (u32, u32) {
        (self.owner, self.mode)
    }

    /// Whether this user may write in the directory.
    pub fn writable(&self) -> io::Result<bool> {
        let fd = self.fd()?;
        Ok(rustix::fs::accessat(
            &*fd,
            ".",
            rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
            AtFlags::empty(),
        )
        .is_ok())
    }

    /// The size of the regular file `name`, if there is one.
    pub fn size_of(&self, name: &str) -> io::Result<Option<u64>> {
        let fd = self.fd()?;
        match rustix::fs::statat(&*fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile => {
                Ok(Some(st.st_size as u64))
            }
            Ok(_) | Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Why the path the directory was opened at no longer leads to it (it
    /// was renamed away, removed, or replaced by a link or another
    /// directory), or `None` while it does.
    pub fn displaced(&self) -> Option<String> {
        match rustix::fs::lstat(&self.path) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                Some("a symbolic link now stands at its path".into())
            }
            Ok(st) if identity_of(&st) == self.identity => None,
            Ok(_) => Some("another file or directory now stands at its path".into()),
            Err(rustix::io::Errno::NOENT) => Some("nothing stands at its path any more".into()),
            Err(e) => Some(format!(
                "its path cannot be checked ({})",
                io::Error::from(e)
            )),
        }
    }

    /// Creates `name`, which must not exist, for writing (mode `mode`).
    pub fn create_new(&self, name: &str, mode: u32) -> io::Result<File> {
        self.open_with(
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
            Mode::from_raw_mode(mode),
        )
    }

    /// Creates or truncates `name` for writing; a link under that name is
    /// refused, not followed.
    pub fn create_truncated(&self, name: &str, mode: u32) -> io::Result<File> {
        self.open_with(
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC,
            Mode::from_raw_mode(mode),
        )
    }

    /// Opens the existing `name` for appending.
    pub fn open_append(&self, name: &str) -> io::Result<File> {
        self.open_with(name, OFlags::WRONLY | OFlags::APPEND, Mode::empty())
    }

    fn open_with(&self, name: &str, flags: OFlags, mode: Mode) -> io::Result<File> {
        if !is_plain_name(name) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name:?} is not a file name of this directory"),
            ));
        }
        let dir = self.fd()?;
        let fd = rustix::fs::openat(
            &*dir,
            name,
            flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            mode,
        )?;
        Ok(File::from(fd))
    }

    /// Opens `name` for reading if it is a regular file of this directory:
    /// a link (wherever it points), a FIFO, a device or a directory is
    /// refused with what it is, and opening never blocks. `Ok(None)` when
    /// there is no such file.
    pub fn open_regular(&self, name: &str) -> Result<Option<File>, NotARegularFile> {
        if !is_plain_name(name) {
            return Err(NotARegularFile(format!(
                "{name:?} is not a file name of this directory"
            )));
        }
        let dir = self.fd().map_err(|e| NotARegularFile(e.to_string()))?;
        let fd = match rustix::fs::openat(
            &*dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(rustix::io::Errno::LOOP) => {
                return Err(NotARegularFile("it is a symbolic link".into()));
            }
            Err(e) => return Err(NotARegularFile(io::Error::from(e).to_string())),
        };
        let st =
            rustix::fs::fstat(&fd).map_err(|e| NotARegularFile(io::Error::from(e).to_string()))?;
        let kind = FileType::from_raw_mode(st.st_mode);
        if kind != FileType::RegularFile {
            return Err(NotARegularFile(format!("it is {}", kind_name(kind))));
        }
        // Reads of a regular file never block; the flag goes all the same.
        rustix::fs::fcntl_setfl(&fd, OFlags::empty())
            .map_err(|e| NotARegularFile(io::Error::from(e).to_string()))?;
        Ok(Some(File::from(fd)))
    }

    /// An unnamed file in the directory (`O_TMPFILE`), to be linked into
    /// place once written.
    pub fn create_unnamed(&self) -> io::Result<File> {
        let dir = self.fd()?;
        let fd = rustix::fs::openat(
            &*dir,
            ".",
            OFlags::RDWR | OFlags::TMPFILE | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        Ok(File::from(fd))
    }

    /// Gives the unnamed `file` the name `name` in this directory; fails
    /// when that name exists.
    pub fn link_unnamed(&self, file: &File, name: &str) -> io::Result<()> {
        let from = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(file));
        let dir = self.fd()?;
        rustix::fs::linkat(
            rustix::fs::CWD,
            from.as_str(),
            &*dir,
            name,
            AtFlags::SYMLINK_FOLLOW,
        )?;
        Ok(())
    }

    /// Makes the directory `name` in this directory (mode `mode`, less the
    /// umask); fails when anything stands at that name.
    pub fn create_dir(&self, name: &str, mode: u32) -> io::Result<()> {
        if !is_plain_name(name) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name:?} is not a file name of this directory"),
            ));
        }
        let dir = self.fd()?;
        rustix::fs::mkdirat(&*dir, name, Mode::from_raw_mode(mode))?;
        Ok(())
    }

    /// Renames `from` to `to`, both in this directory (`to` replaced).
    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let dir = self.fd()?;
        rustix::fs::renameat(&*dir, from, &*dir, to)?;
        Ok(())
    }

    /// Removes the file `name` of this directory.
    pub fn remove(&self, name: &str) -> io::Result<()> {
        let dir = self.fd()?;
        rustix::fs::unlinkat(&*dir, name, AtFlags::empty())?;
        Ok(())
    }

    /// [`Self::remove`], a missing file counting as removed.
    pub fn remove_if_there(&self, name: &str) -> io::Result<()> {
        match self.remove(name) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            r => r,
        }
    }

    /// The names in the directory, `.` and `..` left out.
    pub fn names(&self) -> io::Result<Vec<OsString>> {
        let mut names = Vec::new();
        let dir = self.fd()?;
        for entry in rustix::fs::Dir::read_from(&*dir)? {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(OsString::from_vec(name.to_vec()));
            }
        }
        Ok(names)
    }

    /// Whether `name` exists in the directory (a link counts, unfollowed).
    pub fn contains(&self, name: &str) -> io::Result<bool> {
        let dir = self.fd()?;
        match rustix::fs::statat(&*dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(_) => Ok(true),
            Err(rustix::io::Errno::NOENT) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

/// Why a name of a snapshot is not a regular file of its directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotARegularFile(pub String);

fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::Directory => "a directory",
        FileType::Symlink => "a symbolic link",
        FileType::Fifo => "a FIFO (named pipe)",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        _ => "not a regular file",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn files_are_made_in_the_directory_opened_even_after_a_link_took_its_path() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let dir = DirHandle::open(&out).unwrap();
        assert_eq!(dir.displaced(), None);
        // Renamed away, and a link to a victim directory put in its place.
        let victim = root.path().join("victim");
        std::fs::create_dir(&victim).unwrap();
        std::fs::rename(&out, root.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(&victim, &out).unwrap();
        assert_eq!(
            dir.displaced().as_deref(),
            Some("a symbolic link now stands at its path")
        );
        dir.create_new("a", 0o644)
            .unwrap()
            .write_all(b"mine")
            .unwrap();
        dir.rename("a", "b").unwrap();
        let unnamed = dir.create_unnamed().unwrap();
        dir.link_unnamed(&unnamed, "c").unwrap();
        assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 0);
        let moved = root.path().join("moved");
        assert_eq!(std::fs::read(moved.join("b")).unwrap(), b"mine");
        assert!(moved.join("c").is_file());
        let mut names = dir.names().unwrap();
        names.sort();
        assert_eq!(names, ["b", "c"]);
        dir.remove("b").unwrap();
        assert!(!dir.contains("b").unwrap());
        std::fs::remove_file(&out).unwrap();
        assert_eq!(
            dir.displaced().as_deref(),
            Some("nothing stands at its path any more")
        );
        std::fs::create_dir(&out).unwrap();
        assert_eq!(
            dir.displaced().as_deref(),
            Some("another file or directory now stands at its path")
        );
    }

    #[test]
    fn a_closed_handle_opens_its_directory_again_only_if_it_is_the_same_one() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let dir = DirHandle::open(&out).unwrap();
        dir.close();
        dir.create_new("a", 0o644).unwrap();
        assert!(out.join("a").is_file(), "opened again at its path");
        dir.close();
        std::fs::rename(&out, root.path().join("moved")).unwrap();
        std::fs::create_dir(&out).unwrap();
        let e = dir.create_new("b", 0o644).unwrap_err();
        assert_eq!(
            e.to_string(),
            "another file or directory now stands at its path"
        );
        std::fs::remove_dir(&out).unwrap();
        std::os::unix::fs::symlink(root.path().join("moved"), &out).unwrap();
        let e = dir.create_new("b", 0o644).unwrap_err();
        assert_eq!(e.to_string(), "a symbolic link now stands at its path");
        assert!(!root.path().join("moved/b").exists());
    }

    #[test]
    fn a_link_fifo_or_directory_is_not_opened_as_a_file_and_nothing_blocks() {
        let root = tempfile::tempdir().unwrap();
        let outside = root.path().join("outside");
        std::fs::write(&outside, b"not the snapshot's").unwrap();
        let snap = root.path().join("snap");
        std::fs::create_dir(&snap).unwrap();
        std::fs::write(snap.join("plain"), b"data").unwrap();
        std::os::unix::fs::symlink(&outside, snap.join("link")).unwrap();
        let fifo = std::ffi::CString::new(snap.join("fifo").into_os_string().into_vec()).unwrap();
        // SAFETY: mkfifo of a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        std::fs::create_dir(snap.join("sub")).unwrap();
        let dir = DirHandle::open(&snap).unwrap();
        let mut text = String::new();
        dir.open_regular("plain")
            .unwrap()
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "data");
        let refused = |name: &str| dir.open_regular(name).unwrap_err().0;
        assert_eq!(refused("link"), "it is a symbolic link");
        assert_eq!(refused("fifo"), "it is a FIFO (named pipe)");
        assert_eq!(refused("sub"), "it is a directory");
        assert!(refused("../outside").contains("not a file name of this directory"));
        assert!(dir.open_regular("absent").unwrap().is_none());
        // The directory itself must not be a link.
        std::os::unix::fs::symlink(&snap, root.path().join("snap-link")).unwrap();
        let e = DirHandle::open(&root.path().join("snap-link")).unwrap_err();
        assert_eq!(e.to_string(), "it is a symbolic link");
    }
}
