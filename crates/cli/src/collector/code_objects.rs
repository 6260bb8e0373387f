//! The code objects a replay capture sends (`ToolMessage::CodeObject`):
//! one sealed memfd per message, checked (one file, the size and the
//! SHA-256 the tool named) and stored once per snapshot as
//! `code-object-<digest>.co`. Owns that check only; the store writes the file.

use crate::store::SnapshotWriter;
use ditto_protocol::CodeObject;
use sha2::{Digest, Sha256};
use std::io::{Read, Seek};
use std::os::fd::OwnedFd;
use std::sync::Mutex;

/// Largest code object taken (a fat binary of a large library is a few
/// hundred MiB).
pub(super) const MAX_CODE_OBJECT_BYTES: u64 = crate::program_file::MAX_PROGRAM_FILE_BYTES;

/// Why a code object was not stored; the connection's report says it.
#[derive(Debug, thiserror::Error)]
pub(super) enum CodeObjectError {
    #[error("code object {digest}: {came} files came with it, not one")]
    FileCount { digest: String, came: usize },
    #[error("code object {digest}: named {named} bytes, its file has {found}")]
    Size {
        digest: String,
        named: u64,
        found: u64,
    },
    #[error("code object {digest}: {size} bytes, more than the {MAX_CODE_OBJECT_BYTES} taken")]
    TooLarge { digest: String, size: u64 },
    #[error("code object {digest}: its bytes have the SHA-256 {found}")]
    Digest { digest: String, found: String },
    #[error("code object {digest}: {error}")]
    Io {
        digest: String,
        error: std::io::Error,
    },
    #[error("code object {digest}: {error}")]
    Store {
        digest: String,
        error: crate::store::StoreError,
    },
}

/// Checks the code object that came with `message` in `fds` and stores it.
pub(super) fn store_code_object(
    writer: &Mutex<SnapshotWriter>,
    message: &CodeObject,
    fds: Vec<OwnedFd>,
) -> Result<(), CodeObjectError> {
    let digest = message.digest.clone();
    let came = fds.len();
    let Ok([fd]) = <[OwnedFd; 1]>::try_from(fds) else {
        return Err(CodeObjectError::FileCount { digest, came });
    };
    let io = |error| CodeObjectError::Io {
        digest: message.digest.clone(),
        error,
    };
    let mut file = std::fs::File::from(fd);
    let found = file.metadata().map_err(io)?.len();
    if found != message.size {
        return Err(CodeObjectError::Size {
            digest,
            named: message.size,
            found,
        });
    }
    if found > MAX_CODE_OBJECT_BYTES {
        return Err(CodeObjectError::TooLarge {
            digest,
            size: found,
        });
    }
    let mut hasher = Sha256::new();
    let mut chunk = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut chunk).map_err(io)?;
        if n == 0 {
            break;
        }
        hasher.update(&chunk[..n]);
    }
    let seen: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if seen != message.digest {
        return Err(CodeObjectError::Digest {
            digest,
            found: seen,
        });
    }
    file.rewind().map_err(io)?;
    writer
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .add_code_object(&message.digest, &mut file)
        .map_err(|error| CodeObjectError::Store { digest, error })?;
    Ok(())
}
