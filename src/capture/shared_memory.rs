//! The copy transport's tool side: a buffer's bytes copied into a fresh
//! sealed memfd, handed to the collector with the Dispatch frame
//! (SCM_RIGHTS) when the runtime cannot export the memory over IPC.
//!
//! Owns only the copy: memfd_create, the write, the seals, and the copy of
//! application memory into a file ([`copy_from_address`], also the staging
//! file's), which reads the memory through pwrite(2), so a range that is
//! not readable is an error (EFAULT), never a fault in the application.
//! Never keeps the fd: the caller sends it and closes its copy.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Why application memory could not be copied into a file.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("{len} bytes do not fit in memory")]
    TooLarge { len: u64 },
    #[error(
        "{len} bytes at 0x{address:x} are not all readable by the process \
         (stopped at byte {done}: {source}): check the argument's extent (--arg-sizes)"
    )]
    Unreadable {
        len: usize,
        address: u64,
        done: usize,
        source: io::Error,
    },
    #[error("cannot copy {len} bytes into {into}: {source}")]
    Write {
        len: usize,
        into: &'static str,
        source: io::Error,
    },
    #[error("cannot copy {len} bytes into {into}: the write stopped at byte {done}")]
    Stopped {
        len: usize,
        into: &'static str,
        done: usize,
    },
    #[error("memfd_create for a shared-memory copy failed: {0}")]
    MemfdCreate(io::Error),
    #[error("cannot seal the shared-memory copy: {0}")]
    Seal(io::Error),
}

/// Name of every copy's memfd (`/memfd:ditto-copy` in `/proc/<pid>/fd` and
/// `/proc/<pid>/maps`), so tests can see that nobody keeps one.
pub const COPY_MEMFD_NAME: &CStr = c"ditto-copy";

/// Largest single write (Linux writes at most ~2 GiB per call anyway).
const WRITE_CHUNK: usize = 1 << 30;

/// A memfd holding the `len` bytes at `address` from its byte 0, sealed
/// against writing, shrinking and growing (and further sealing), with
/// close-on-exec.
pub fn copy_to_sealed_memfd(address: u64, len: u64) -> Result<OwnedFd, CopyError> {
    sealed_memfd_filled(|fd| copy_from_address(fd, address, len, 0, "shared memory"))
}

/// A fresh memfd, filled by `fill` (which writes it through the fd it is
/// given), then sealed as [`copy_to_sealed_memfd`]'s. `fill`'s error (a
/// backend's, which a [`CopyError`] converts into) comes back as it is.
pub fn sealed_memfd_filled<E: From<CopyError>>(
    fill: impl FnOnce(BorrowedFd) -> Result<(), E>,
) -> Result<OwnedFd, E> {
    // SAFETY: a valid C string and flags; the result is checked.
    let raw = unsafe {
        libc::memfd_create(
            COPY_MEMFD_NAME.as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if raw < 0 {
        return Err(CopyError::MemfdCreate(io::Error::last_os_error()).into());
    }
    // SAFETY: `raw` is a new fd owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    fill(fd.as_fd())?;
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on our own memfd, created with MFD_ALLOW_SEALING and never mapped.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(CopyError::Seal(io::Error::last_os_error()).into());
    }
    Ok(fd)
}

/// Copies the `len` bytes at `address` of this process into `file` from
/// its byte `at`, with pwrite(2): the kernel reads the range on our behalf,
/// so an unreadable one is an error (EFAULT), never a fault. `into` names
/// the file in messages.
pub fn copy_from_address(
    file: BorrowedFd,
    address: u64,
    len: u64,
    at: u64,
    into: &'static str,
) -> Result<(), CopyError> {
    let len = usize::try_from(len).map_err(|_| CopyError::TooLarge { len })?;
    let mut done = 0usize;
    while done < len {
        let chunk = (len - done).min(WRITE_CHUNK);
        // SAFETY: pwrite(2) only reads [address+done, +chunk); an unreadable
        // range makes it fail with EFAULT instead of faulting.
        let n = unsafe {
            libc::pwrite(
                file.as_raw_fd(),
                (address as usize + done) as *const libc::c_void,
                chunk,
                (at + done as u64) as libc::off_t,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            if e.raw_os_error() == Some(libc::EFAULT) {
                return Err(CopyError::Unreadable {
                    len,
                    address,
                    done,
                    source: e,
                });
            }
            return Err(CopyError::Write {
                len,
                into,
                source: e,
            });
        }
        if n == 0 {
            return Err(CopyError::Stopped { len, into, done });
        }
        done += n as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};

    #[test]
    fn the_copy_holds_the_bytes_and_is_sealed_against_change() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let fd = copy_to_sealed_memfd(data.as_ptr() as u64, data.len() as u64).unwrap();
        // SAFETY: F_GETFD / F_GET_SEALS on our own fd.
        let (fd_flags, seals) = unsafe {
            (
                libc::fcntl(fd.as_raw_fd(), libc::F_GETFD),
                libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS),
            )
        };
        assert_eq!(fd_flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        let wanted = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
        assert_eq!(seals & wanted, wanted);
        let mut f = std::fs::File::from(fd);
        f.rewind().unwrap();
        let mut back = Vec::new();
        f.read_to_end(&mut back).unwrap();
        assert_eq!(back, data);
        assert!(f.write_all(b"x").is_err(), "sealed against writes");
        assert!(f.set_len(1).is_err(), "sealed against shrinking");
    }

    #[test]
    fn an_unreadable_range_is_an_error_not_a_fault() {
        // The first page is never mapped.
        let err = copy_to_sealed_memfd(0x10, 64).unwrap_err().to_string();
        assert!(err.contains("not all readable"), "{err}");
        // A readable page followed by an inaccessible one: the copy stops
        // at the boundary and says so.
        // SAFETY: an anonymous private mapping of two pages, unmapped below.
        let page = unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            assert_eq!(
                libc::mprotect((p as usize + 4096) as *mut _, 4096, libc::PROT_NONE),
                0
            );
            p
        };
        let err = copy_to_sealed_memfd(page as u64, 8192)
            .unwrap_err()
            .to_string();
        assert!(err.contains("stopped at byte 4096"), "{err}");
        assert!(copy_to_sealed_memfd(page as u64, 4096).is_ok());
        // SAFETY: the mapping made above, used by nothing else.
        unsafe { libc::munmap(page, 8192) };
    }

    #[test]
    fn an_empty_extent_is_an_empty_copy() {
        let fd = copy_to_sealed_memfd(0x1000, 0).unwrap();
        assert_eq!(std::fs::File::from(fd).metadata().unwrap().len(), 0);
    }
}
