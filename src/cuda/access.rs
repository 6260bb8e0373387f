//! The CUDA backend's buffer access: the driver as the capture core's
//! describe step reads it ([`BufferAccess`]): containing allocations
//! (cuMemGetAddressRange), IPC export (cuIpcGetMemHandle, with the owning
//! device's UUID), shared-memory
//! copies through a host copy, small buffers staged (one device-to-host
//! copy into a page-locked bounce buffer, written into the staging file
//! and fingerprinted from it), and fingerprints of other buffers computed
//! from device memory by copying only their windows to the host. Called
//! only on the launching thread, whose current context is the launch's.

use super::driver::{CallFailed, Driver, HostBuffer};
use crate::capture::access::stage_host_copy;
use crate::capture::allocation_map::Allocation;
use crate::capture::shared_memory::CopyError;
use crate::capture::staging::{MAX_STAGED_BUFFER, StagingFile};
use crate::capture::{BufferAccess, StagedCopy};
use crate::log::log_debug;
use cuda_abi::{CuIpcMemHandle, IPC_HANDLE_BYTES};
use ditto_protocol::{Transport, fingerprint_of_windows, fingerprint_windows};
use std::os::fd::OwnedFd;
use std::sync::Mutex;

/// The CUDA driver as the describe step reads it.
pub struct CudaDevice<'a> {
    pub driver: &'a Driver,
    /// Where staged buffers are copied to the host ([`MAX_STAGED_BUFFER`]
    /// bytes, allocated on first use).
    pub bounce: &'a Mutex<Option<HostBuffer>>,
}

// The handle travels in a Dispatch as the protocol's bytes.
const _: () = assert!(IPC_HANDLE_BYTES == ditto_protocol::CUDA_IPC_HANDLE_BYTES);

/// Largest host staging copy made at once for a shared-memory copy.
const STAGING_LIMIT: u64 = 16 << 30;

/// Why the CUDA backend could not reach a buffer; the text of each is the
/// part of a miss's message that says why.
#[derive(Debug, thiserror::Error)]
pub enum CudaAccessError {
    #[error(transparent)]
    Driver(#[from] CallFailed),
    #[error(transparent)]
    Copy(#[from] CopyError),
    #[error("{len} bytes are too many for a shared-memory copy (at most {STAGING_LIMIT})")]
    TooLarge { len: u64 },
    #[error("cannot allocate {len} host bytes for a shared-memory copy")]
    HostMemory { len: u64 },
}

impl BufferAccess for CudaDevice<'_> {
    type Error = CudaAccessError;

    fn containing_allocation(&self, address: u64) -> Option<Allocation> {
        let (base, size) = self.driver.address_range(address).ok()?;
        Some(Allocation { base, size })
    }

    fn export(&self, allocation: &Allocation) -> Result<Transport, CudaAccessError> {
        let mut handle = CuIpcMemHandle {
            reserved: [0; IPC_HANDLE_BYTES],
        };
        // SAFETY: out-pointer to 64 bytes; the driver checks the address.
        let r = unsafe { (self.driver.ipc_get_mem_handle)(&mut handle, allocation.base) };
        self.driver.check(r, "cuIpcGetMemHandle")?;
        // Without an owner the collector opens the handle on its device 0
        // (peer access enabled lazily), as before owners were sent.
        let device_uuid = self
            .driver
            .owner_uuid(allocation.base)
            .inspect_err(|e| {
                log_debug!(
                    "the owner of the allocation at 0x{:x} is not known: {e}",
                    allocation.base
                )
            })
            .ok();
        Ok(Transport::CudaIpc {
            handle: handle.reserved.to_vec(),
            device_uuid,
        })
    }

    fn copy_to_shared_memory(&self, address: u64, len: u64) -> Result<OwnedFd, CudaAccessError> {
        if len > STAGING_LIMIT {
            return Err(CudaAccessError::TooLarge { len });
        }
        let mut staging = Vec::new();
        staging
            .try_reserve_exact(len as usize)
            .map_err(|_| CudaAccessError::HostMemory { len })?;
        staging.resize(len as usize, 0);
        self.driver.copy_to_host(address, &mut staging)?;
        Ok(crate::capture::shared_memory::copy_to_sealed_memfd(
            staging.as_ptr() as u64,
            len,
        )?)
    }

    /// One device-to-host copy into the bounce buffer, written into the
    /// staging file from there; the fingerprint is that copy's, so the
    /// device is read once. The collector checks the staged bytes against
    /// it (what the launch's stream held when it was synchronised).
    fn stage(
        &self,
        address: u64,
        len: u64,
        staging: &mut StagingFile,
    ) -> Result<Option<StagedCopy>, CudaAccessError> {
        if !staging.takes(len) {
            return Ok(None);
        }
        let mut bounce = self.bounce.lock().unwrap_or_else(|e| e.into_inner());
        let buffer =
            bounce.get_or_insert_with(|| HostBuffer::new(self.driver, MAX_STAGED_BUFFER as usize));
        if (buffer.capacity() as u64) < len {
            return Ok(None);
        }
        let bytes = buffer.bytes_mut(len as usize);
        self.driver.copy_to_host(address, bytes)?;
        Ok(stage_host_copy(bytes, staging)?)
    }

    fn fingerprint(&self, address: u64, len: u64) -> Result<u64, CudaAccessError> {
        let windows = fingerprint_windows(len);
        let mut bytes = Vec::with_capacity(windows.len());
        for (start, n) in windows {
            let mut w = vec![0u8; n as usize];
            self.driver.copy_to_host(address + start, &mut w)?;
            bytes.push(w);
        }
        Ok(fingerprint_of_windows(len, bytes.iter().map(Vec::as_slice)))
    }
}
