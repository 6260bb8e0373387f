//! The host build of a replay capture's process on ditto's CPU runtime:
//! the library beside its executable (`<exe>.host.so`, which `ditto
//! hipcc` writes and the CPU runtime loads the kernels' host code from),
//! stored once per process with the process's first code object as
//! `host-build-<sha256>.so` and named in its run record, so that `ditto
//! replay` loads exactly that file (after its digest matches) and never a
//! path the manifest names. Owns finding and checking that file only; the
//! store writes it.
//!
//! The executable is the connected process's own (`/proc/<pid>/exe`, the
//! pid the socket's peer credentials give), not the command line it sent.
//! A program without a host build (a real ROCm program, a CUDA program) has
//! nothing stored; host builds of modules the program loads itself, or
//! named in `DITTO_HIP_HOST_KERNELS`, are not stored either (replay takes
//! them with `--host-build`).

use crate::program_file::{MAX_REPLAY_INPUT_BYTES, open_named, read_opened};
use crate::store::SnapshotWriter;
use sha2::{Digest, Sha256};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Mutex;

/// Stores the host build beside the executable of the process at the
/// other end of `stream` as rank `rank`'s, if it has one: its path, or
/// `None` when there is none.
pub(super) fn store_host_build(
    writer: &Mutex<SnapshotWriter>,
    rank: u32,
    stream: &UnixStream,
) -> anyhow::Result<Option<PathBuf>> {
    let pid = ditto_protocol::peer_credentials(stream)?.pid;
    let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) else {
        return Ok(None);
    };
    let mut name = exe.into_os_string();
    name.push(".host.so");
    let path = PathBuf::from(name);
    if !path.exists() {
        return Ok(None);
    }
    let file = open_named(&path, "a host build is a library")?;
    let bytes = read_opened(file, &path, MAX_REPLAY_INPUT_BYTES, "a capture stores")?;
    let digest: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    writer
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .add_host_build(rank, &digest, &mut bytes.as_slice())?;
    Ok(Some(path))
}
