//! Reading the file `ditto kernels` lists: a regular file of bounded size
//! (a code object, a HIP program or a bundle file), opened without
//! blocking and checked before a byte is read, so that a FIFO or a device
//! is refused rather than waited on or read forever. Owns that check and
//! the cap; what the bytes hold is [`crate::kernel_list`]'s.

use anyhow::{Context, Result};
use std::path::Path;

/// The largest file `ditto kernels` reads (the biggest HIP programs carry
/// fat binaries of a few hundred MiB).
pub const MAX_PROGRAM_FILE_BYTES: u64 = 4 << 30;

/// The bytes of a regular file of at most [`MAX_PROGRAM_FILE_BYTES`]. It is
/// opened without blocking and checked before anything is read: a FIFO or a
/// device (`/dev/zero`) is refused, never read or waited on.
pub fn read_program_file(file: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(file)
        .with_context(|| format!("cannot read {}", file.display()))?;
    let meta = f
        .metadata()
        .with_context(|| format!("cannot read {}", file.display()))?;
    if !meta.is_file() {
        anyhow::bail!(
            "{} is not a regular file: give a code object, a HIP program or a bundle file",
            file.display()
        );
    }
    if meta.len() > MAX_PROGRAM_FILE_BYTES {
        anyhow::bail!(
            "{} is {} bytes, more than the {} bytes `ditto kernels` reads",
            file.display(),
            meta.len(),
            MAX_PROGRAM_FILE_BYTES
        );
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    f.by_ref()
        .take(MAX_PROGRAM_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {}", file.display()))?;
    if bytes.len() as u64 > MAX_PROGRAM_FILE_BYTES {
        anyhow::bail!(
            "{} grew past {MAX_PROGRAM_FILE_BYTES} bytes while it was read",
            file.display()
        );
    }
    Ok(bytes)
}
