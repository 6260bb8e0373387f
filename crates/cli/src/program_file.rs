//! Reading a file a command reads whole (the file `ditto kernels` lists,
//! and every file `ditto replay` reads: a code object, a program, a host
//! build): a regular file of bounded size, opened without blocking and
//! checked before a byte is read, so that a FIFO or a device is refused
//! rather than waited on or read forever. A path the user named may be a
//! link of theirs ([`open_named`]); a file of a snapshot is opened through
//! the snapshot's directory, never through a link, and read here
//! ([`read_opened`]). Owns that check and the caps; what the bytes hold is
//! the caller's.

use anyhow::{Context, Result};
use std::fs::File;
use std::path::Path;

/// The largest file `ditto kernels` reads (the biggest HIP programs carry
/// fat binaries of a few hundred MiB).
pub const MAX_PROGRAM_FILE_BYTES: u64 = 4 << 30;

/// The largest file `ditto replay` reads of what the user names (a
/// replacement's program or code object, a host build) and the largest
/// host build a capture stores: one kernel's code, or one program's host
/// code, is far less.
pub const MAX_REPLAY_INPUT_BYTES: u64 = 1 << 30;

/// The bytes of a regular file of at most [`MAX_PROGRAM_FILE_BYTES`]. It is
/// opened without blocking and checked before anything is read: a FIFO or a
/// device (`/dev/zero`) is refused, never read or waited on.
pub fn read_program_file(file: &Path) -> Result<Vec<u8>> {
    let opened = open_named(file, "give a code object, a HIP program or a bundle file")?;
    read_opened(
        opened,
        file,
        MAX_PROGRAM_FILE_BYTES,
        "`ditto kernels` reads",
    )
}

/// Opens `file`, a path the user named (a link of theirs is followed), for
/// reading: without blocking, and only if it is a regular file; anything
/// else is refused naming it, with `advice`.
pub fn open_named(file: &Path, advice: &str) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(file)
        .with_context(|| format!("cannot read {}", file.display()))?;
    let meta = f
        .metadata()
        .with_context(|| format!("cannot read {}", file.display()))?;
    if !meta.is_file() {
        anyhow::bail!("{} is not a regular file: {advice}", file.display());
    }
    Ok(f)
}

/// The bytes of the opened file `f` (shown as `file`): a regular file of
/// at most `cap` bytes, checked before anything is read and read no
/// further than the cap (`reader` says who reads, for the message).
pub fn read_opened(f: File, file: &Path, cap: u64, reader: &str) -> Result<Vec<u8>> {
    use std::io::Read;
    let meta = f
        .metadata()
        .with_context(|| format!("cannot read {}", file.display()))?;
    if !meta.is_file() {
        anyhow::bail!("{} is not a regular file", file.display());
    }
    if meta.len() > cap {
        anyhow::bail!(
            "{} is {} bytes, more than the {} ({cap} bytes) {reader}",
            file.display(),
            meta.len(),
            crate::units::human_bytes(cap)
        );
    }
    // Reads of a regular file never block; the flag goes all the same.
    rustix::fs::fcntl_setfl(&f, rustix::fs::OFlags::empty())
        .with_context(|| format!("cannot read {}", file.display()))?;
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    f.take(cap + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {}", file.display()))?;
    if bytes.len() as u64 > cap {
        anyhow::bail!("{} grew past {cap} bytes while it was read", file.display());
    }
    Ok(bytes)
}
