//! The one thing the neutral capture core needs from a backend: access to
//! the buffers of a completed dispatch. Each backend implements
//! [`BufferAccess`] over its runtime (the HSA tool over the original table
//! entries, the CUDA backend over the driver); the describe step reads
//! memory only through it. Holding and releasing a dispatch is not here:
//! each backend owns its hold. Each backend says why an access failed in
//! an error type of its own ([`BufferAccess::Error`]); the describe step
//! shows it to the user as it is.

use super::allocation_map::Allocation;
use super::shared_memory::CopyError;
use super::staging::StagingFile;
use ditto_protocol::Transport;
use std::os::fd::OwnedFd;

/// Where [`BufferAccess::stage`] put a buffer: its offset in the staging
/// file and, where the backend read the bytes once for both, their
/// fingerprint (a device buffer copied to the host: the fingerprint of that
/// copy, so the buffer is not read from the device a second time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagedCopy {
    pub at: u64,
    pub fingerprint: Option<u64>,
}

pub trait BufferAccess {
    /// Why a buffer could not be exported, copied, staged or
    /// fingerprinted: the backend's own error, whose text the describe
    /// step logs and accounts for. A copy of memory the CPU reads itself
    /// fails with a [`CopyError`], which it must hold.
    type Error: std::error::Error + From<CopyError>;

    /// The allocation containing `address`, if the runtime knows one.
    fn containing_allocation(&self, address: u64) -> Option<Allocation>;
    /// How the collector reaches a whole allocation: an IPC handle of the
    /// runtime's kind (cached per allocation where the backend can);
    /// `Err` when the runtime refuses to export it.
    fn export(&self, allocation: &Allocation) -> Result<Transport, Self::Error>;
    /// The copy transport: `len` bytes at `address` copied into a fresh
    /// memfd, sealed against change, for memory `export` refused.
    fn copy_to_shared_memory(&self, address: u64, len: u64) -> Result<OwnedFd, Self::Error>;
    /// Copies the `len` bytes at `address` into the staging file: where
    /// they went, `Ok(None)` when the buffer is too large or there is no
    /// room now. By default the CPU reads the memory itself (pwrite):
    /// memory it cannot read is an `Err`, and the buffer travels another way.
    fn stage(
        &self,
        address: u64,
        len: u64,
        staging: &mut StagingFile,
    ) -> Result<Option<StagedCopy>, Self::Error> {
        Ok(stage_in_place(address, len, staging)?)
    }
    /// Fingerprint of `len` bytes at `address`, read by the tool itself.
    fn fingerprint(&self, address: u64, len: u64) -> Result<u64, Self::Error>;
    /// Every live allocation the backend tracks (`--capture replay-all`);
    /// by default none.
    fn tracked_allocations(&self) -> Vec<Allocation> {
        Vec::new()
    }
}

/// Stages the `len` bytes at `address`, host memory, where they are (the
/// default [`BufferAccess::stage`]); the fingerprint is taken later.
pub fn stage_in_place(
    address: u64,
    len: u64,
    staging: &mut StagingFile,
) -> Result<Option<StagedCopy>, CopyError> {
    Ok(staging.stage(address, len)?.map(|at| StagedCopy {
        at,
        fingerprint: None,
    }))
}

/// Stages `bytes`, a host copy of a device buffer, with their fingerprint:
/// the buffer is read from the device once for both.
pub fn stage_host_copy(
    bytes: &[u8],
    staging: &mut StagingFile,
) -> Result<Option<StagedCopy>, CopyError> {
    let seen = ditto_protocol::fingerprint(bytes);
    Ok(staging
        .stage(bytes.as_ptr() as u64, bytes.len() as u64)?
        .map(|at| StagedCopy {
            at,
            fingerprint: Some(seen),
        }))
}
