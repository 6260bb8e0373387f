//! The files a replay reads, each by one rule ([`crate::program_file`]):
//! a regular file, opened without blocking (a FIFO or a device is refused,
//! never waited on or read forever), of bounded size. A file of the
//! snapshot (its code objects, its host builds) is opened through the
//! snapshot's directory, never through a link, and checked against the
//! SHA-256 its name carries (a mismatch is a corrupt snapshot, naming the
//! file); a file the user named (`--from`, `--kernel-object`,
//! `--host-build`) may be reached through a link of theirs.
//!
//! Host builds (a kernel's host code on ditto's CPU runtime) are code
//! that runs: replay loads only one the user named or the one the capture
//! stored in the snapshot, never a path the manifest names, and loads a
//! copy of the bytes it checked, made in its own work directory.

use super::plan::DispatchPlan;
use crate::program_file::{
    MAX_PROGRAM_FILE_BYTES, MAX_REPLAY_INPUT_BYTES, open_named, read_opened,
};
use crate::store::{Snapshot, StoreError};
use anyhow::{Result, anyhow, bail};
use sha2::{Digest, Sha256};
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The SHA-256 of `bytes`, lowercase hex.
fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The bytes of `name`, a file of rank `rank`'s part of `snapshot` named
/// `<prefix><sha256><suffix>`: opened by the snapshot's rule, at most
/// `cap` bytes, and its SHA-256 the one its name gives (`what` names the
/// file in messages).
fn stored_file(
    snapshot: &Snapshot,
    rank: u32,
    name: &str,
    (prefix, suffix): (&str, &str),
    cap: u64,
    what: &str,
) -> Result<Vec<u8>> {
    let shown = snapshot.dir_of_rank(rank).join(name);
    let digest = name
        .strip_prefix(prefix)
        .and_then(|n| n.strip_suffix(suffix))
        .filter(|d| d.len() == 64 && d.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .ok_or_else(|| {
            anyhow!(
                "corrupt snapshot: {}: the manifest names {what} {name:?}, not a file \
                 {prefix}<sha256>{suffix} of the snapshot",
                snapshot.dir.display()
            )
        })?;
    let file = snapshot
        .open_file_of_rank(rank, name)
        .map_err(|e| match e {
            StoreError::Io { error, .. } if error.kind() == std::io::ErrorKind::NotFound => {
                anyhow!(
                    "corrupt snapshot: {what} {} is missing (the manifest names it); capture again",
                    shown.display()
                )
            }
            e => anyhow!("corrupt snapshot: {e}"),
        })?;
    let bytes = read_opened(file, &shown, cap, "a replay reads")?;
    let seen = sha256(&bytes);
    if seen != digest {
        bail!(
            "corrupt snapshot: {what} {} has the SHA-256 {seen}, not the {digest} the capture \
             stored: it changed after the capture; capture again",
            shown.display()
        );
    }
    Ok(bytes)
}

/// The captured code object of `plan`, if the capture took one: read from
/// the snapshot by its rule and checked against its digest.
pub fn captured_code_object(snapshot: &Snapshot, plan: &DispatchPlan) -> Result<Option<Vec<u8>>> {
    let Some(name) = &plan.launch.code_object else {
        return Ok(None);
    };
    stored_file(
        snapshot,
        plan.record.rank,
        name,
        ("code-object-", ".co"),
        MAX_PROGRAM_FILE_BYTES,
        "the code object",
    )
    .map(Some)
}

/// The bytes of `file`, a program, code object or host build the user
/// named (`what` says which, for the message): a regular file (a link of
/// theirs followed), at most [`MAX_REPLAY_INPUT_BYTES`].
pub fn named_file(file: &Path, what: &str) -> Result<Vec<u8>> {
    let opened = open_named(file, &format!("give {what}"))?;
    read_opened(
        opened,
        file,
        MAX_REPLAY_INPUT_BYTES,
        "a replay reads of a program, code object or host build",
    )
}

/// Rank `rank`'s host build as the capture stored it in `snapshot`, when
/// it did: read by the snapshot's rule and checked against its digest.
pub fn stored_host_build(snapshot: &Snapshot, rank: u32) -> Result<Option<Vec<u8>>> {
    let Some(name) = snapshot
        .manifest
        .runs
        .iter()
        .find(|r| r.rank == rank)
        .and_then(|r| r.host_build.as_ref())
    else {
        return Ok(None);
    };
    stored_file(
        snapshot,
        rank,
        name,
        ("host-build-", ".so"),
        MAX_REPLAY_INPUT_BYTES,
        "the host build",
    )
    .map(Some)
}

/// Writes `bytes` (a host build checked or read by the rules above) as
/// `name` in `work`, replay's own directory: the file the replay process
/// loads. The name must be new there.
pub fn host_build_copy(bytes: &[u8], work: &Path, name: &str) -> Result<PathBuf> {
    let path = work.join(name);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
    file.write_all(bytes)
        .map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

/// The captured program's host build replay loads, copied into `work`:
/// `--host-build FILE` when given, else the one the snapshot holds for
/// rank `rank`; `None` when there is neither.
pub fn original_host_build(
    named: Option<&Path>,
    snapshot: &Snapshot,
    rank: u32,
    work: &Path,
) -> Result<Option<PathBuf>> {
    let bytes = match named {
        Some(file) => named_file(file, "the program's host build (`<program>.host.so`)")?,
        None => match stored_host_build(snapshot, rank)? {
            Some(bytes) => bytes,
            None => return Ok(None),
        },
    };
    host_build_copy(&bytes, work, "original.host.so").map(Some)
}

/// Whether `code` is an AMDGPU code object (ELF, `e_machine` EM_AMDGPU):
/// on ditto's CPU runtime its kernels run from a host build.
pub fn is_amdgpu(code: &[u8]) -> bool {
    code.len() >= 20
        && code.starts_with(b"\x7fELF")
        && u16::from_le_bytes([code[18], code[19]]) == 224
}
