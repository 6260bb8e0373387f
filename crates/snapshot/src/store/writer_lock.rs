//! One writer per snapshot directory. While a [`SnapshotWriter`] lives it
//! holds a listening Unix socket in the abstract namespace named after the
//! directory's device and inode: a second writer's bind fails, and
//! connecting to the name tells whose it is (SO_PEERCRED: the holder's
//! pid). Nothing is written into the directory, and the lock goes with the
//! process however it ends (the kernel closes the socket). Owns that lock.
//!
//! [`SnapshotWriter`]: super::SnapshotWriter

use super::dir_handle::DirHandle;
use super::error::{StoreError, io_err};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::Path;

/// Held while a writer writes its directory; released on drop.
#[derive(Debug)]
pub struct WriterLock {
    _listener: UnixListener,
}

fn name_of((dev, ino): (u64, u64), dir: &Path) -> Result<SocketAddr, StoreError> {
    let name = format!("ditto-snapshot-writer-{dev:x}-{ino:x}");
    SocketAddr::from_abstract_name(name.as_bytes()).map_err(io_err(dir))
}

/// Takes the lock of the directory `dir` has open, or says who holds it.
pub fn acquire(dir: &DirHandle) -> Result<WriterLock, StoreError> {
    let name = name_of(dir.identity(), dir.path())?;
    match UnixListener::bind_addr(&name) {
        Ok(listener) => Ok(WriterLock {
            _listener: listener,
        }),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(StoreError::Busy {
            path: dir.path().to_path_buf(),
            holder: holder_pid(&name),
        }),
        Err(e) => Err(io_err(dir.path())(e)),
    }
}

/// The pid of the process writing the directory at `dir` now, if one is.
pub fn holder(dir: &Path) -> Option<u32> {
    let meta = std::fs::metadata(dir).ok()?;
    let name = name_of((meta.dev(), meta.ino()), dir).ok()?;
    holder_pid(&name)
}

fn holder_pid(name: &SocketAddr) -> Option<u32> {
    let stream = UnixStream::connect_addr(name).ok()?;
    ditto_protocol::peer_credentials(&stream)
        .ok()
        .map(|c| c.pid as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_writer_is_refused_naming_the_first_until_it_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let handle = DirHandle::open(dir.path()).unwrap();
        assert_eq!(holder(dir.path()), None);
        let first = acquire(&handle).unwrap();
        assert_eq!(holder(dir.path()), Some(std::process::id()));
        let e = acquire(&handle).unwrap_err().to_string();
        assert!(
            e.contains(&format!(
                "being written by another ditto (pid {})",
                std::process::id()
            )),
            "{e}"
        );
        drop(first);
        assert_eq!(holder(dir.path()), None);
        acquire(&handle).unwrap();
    }
}
