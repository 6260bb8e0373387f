//! The capture core's [`BufferAccess`] over the original HSA entries: the
//! allocation holding an address (the allocation map, else pointer info),
//! IPC export (`ipc_cache`), the copy transport, staging and fingerprints.
//! GPU memory is read only through the runtime's copy engine
//! (`device_copy`); host memory in place.

use super::HsaTool;
use super::ipc_cache::IpcExportError;
use crate::capture::BufferAccess;
use crate::capture::access::{StagedCopy, stage_host_copy, stage_in_place};
use crate::capture::allocation_map::Allocation;
use crate::capture::shared_memory::CopyError;
use crate::capture::staging::StagingFile;
use crate::hsa::device_copy::{BOUNCE_BYTES, CopyEntries, DeviceCopyError, Placement};
use ditto_protocol::Transport;
use std::os::fd::OwnedFd;

/// Why the HSA tool could not reach a buffer; the text of each is the
/// part of a miss's message that says why.
#[derive(Debug, thiserror::Error)]
pub enum HsaAccessError {
    #[error(transparent)]
    Export(#[from] IpcExportError),
    #[error(transparent)]
    DeviceCopy(#[from] DeviceCopyError),
    #[error(transparent)]
    Copy(#[from] CopyError),
    #[error("null address")]
    NullAddress,
}

impl BufferAccess for HsaTool {
    type Error = HsaAccessError;

    fn containing_allocation(&self, address: u64) -> Option<Allocation> {
        self.allocations
            .find(address)
            .or_else(|| self.pointer_info(address))
    }

    /// IPC export, cached where the tool sees the allocation's free
    /// (`HsaTool::export_ipc`).
    fn export(&self, allocation: &Allocation) -> Result<Transport, HsaAccessError> {
        Ok(self.export_ipc(allocation)?)
    }

    /// The copy transport, for memory the runtime would not export: GPU
    /// memory through the copy engine, a bounce buffer at a time; host
    /// memory read in place (pwrite, so an unreadable range is an error).
    /// NOTE(real GPU): locked host memory is read through its agent
    /// address, which on ROCr may differ from its host address
    /// (pointer_info's hostBaseAddress); the CPU runtime's are the same.
    fn copy_to_shared_memory(&self, address: u64, len: u64) -> Result<OwnedFd, HsaAccessError> {
        match self.placement(address) {
            Placement::Host => Ok(crate::capture::shared_memory::copy_to_sealed_memfd(
                address, len,
            )?),
            Placement::Device { owner } => {
                crate::capture::shared_memory::sealed_memfd_filled(|fd| {
                    self.copier.copy_in_chunks(
                        self.copy_entries(),
                        address,
                        owner,
                        len,
                        |at, bytes| {
                            crate::capture::shared_memory::copy_from_address(
                                fd,
                                bytes.as_ptr() as u64,
                                bytes.len() as u64,
                                at,
                                "shared memory",
                            )
                            .map_err(HsaAccessError::from)
                        },
                    )
                })
            }
        }
    }

    /// GPU memory is copied to the host once, and staged and fingerprinted
    /// from that copy; host memory is staged in place.
    fn stage(
        &self,
        address: u64,
        len: u64,
        staging: &mut StagingFile,
    ) -> Result<Option<StagedCopy>, HsaAccessError> {
        let owner = match self.placement(address) {
            Placement::Device { owner } => owner,
            Placement::Host => return Ok(stage_in_place(address, len, staging)?),
        };
        if !staging.takes(len) || len > BOUNCE_BYTES as u64 {
            return Ok(None);
        }
        Ok(self
            .copier
            .with_copy(self.copy_entries(), address, owner, &[(0, len)], |bytes| {
                stage_host_copy(bytes, staging)
            })??)
    }

    /// The allocations seen through the pool allocators' wraps.
    fn tracked_allocations(&self) -> Vec<Allocation> {
        self.allocations.all()
    }

    /// Of GPU memory, the fingerprint's windows are copied to the host.
    fn fingerprint(&self, address: u64, len: u64) -> Result<u64, HsaAccessError> {
        if address == 0 {
            return Err(HsaAccessError::NullAddress);
        }
        match self.placement(address) {
            Placement::Device { owner } => {
                let windows = ditto_protocol::fingerprint_windows(len);
                Ok(self.copier.with_copy(
                    self.copy_entries(),
                    address,
                    owner,
                    &windows,
                    |bytes| {
                        let mut at = 0usize;
                        let slices = windows.iter().map(|(_, n)| {
                            let w = &bytes[at..at + *n as usize];
                            at += *n as usize;
                            w
                        });
                        ditto_protocol::fingerprint_of_windows(len, slices)
                    },
                )?)
            }
            Placement::Host => {
                // SAFETY: [address, address+len) lies inside a live
                // allocation of host memory (resolved just before) whose
                // dispatch has completed and is held: nothing writes it.
                let bytes =
                    unsafe { std::slice::from_raw_parts(address as *const u8, len as usize) };
                Ok(ditto_protocol::fingerprint(bytes))
            }
        }
    }
}

impl HsaTool {
    fn copy_entries(&self) -> CopyEntries<'_> {
        CopyEntries {
            core: &self.core,
            amd: &self.amd,
        }
    }

    /// Where the memory at `address` lives (pointer info's owner).
    fn placement(&self, address: u64) -> Placement {
        let info = self.pointer_info_of(address);
        self.copier.placement(self.copy_entries(), info.as_ref())
    }
}
