//! The CUDA backend's buffer access: the driver as the capture core's
//! describe step reads it ([`BufferAccess`]): containing allocations
//! (cuMemGetAddressRange), IPC export (cuIpcGetMemHandle), shared-memory
//! copies through a host copy, and fingerprints computed from device
//! memory by copying only their windows to the host. Called only on the
//! launching thread, whose current context is the launch's.

use super::driver::{Driver, IPC_HANDLE_BYTES};
use crate::capture::BufferAccess;
use crate::capture::allocation_map::Allocation;
use ditto_protocol::{Transport, fingerprint_of_windows, fingerprint_windows};
use std::os::fd::OwnedFd;

/// The CUDA driver as the describe step reads it.
pub struct CudaDevice<'a> {
    pub driver: &'a Driver,
}

/// Largest host staging copy made at once for a shared-memory copy.
const STAGING_LIMIT: u64 = 16 << 30;

impl BufferAccess for CudaDevice<'_> {
    fn containing_allocation(&self, address: u64) -> Option<Allocation> {
        let (base, size) = self.driver.address_range(address).ok()?;
        Some(Allocation { base, size })
    }

    fn export(&self, allocation: &Allocation) -> Result<Transport, String> {
        let mut handle = [0u8; IPC_HANDLE_BYTES];
        // SAFETY: out-pointer to 64 bytes; the driver checks the address.
        let r = unsafe { (self.driver.ipc_get_mem_handle)(&mut handle, allocation.base) };
        self.driver.check(r, "cuIpcGetMemHandle")?;
        Ok(Transport::CudaIpc {
            handle: handle.to_vec(),
        })
    }

    fn copy_to_shared_memory(&self, address: u64, len: u64) -> Result<OwnedFd, String> {
        if len > STAGING_LIMIT {
            return Err(format!(
                "{len} bytes are too many for a shared-memory copy (at most {STAGING_LIMIT})"
            ));
        }
        let mut staging = Vec::new();
        staging
            .try_reserve_exact(len as usize)
            .map_err(|_| format!("cannot allocate {len} host bytes for a shared-memory copy"))?;
        staging.resize(len as usize, 0);
        self.driver.copy_to_host(address, &mut staging)?;
        crate::capture::shared_memory::copy_to_sealed_memfd(staging.as_ptr() as u64, len)
    }

    fn fingerprint(&self, address: u64, len: u64) -> Result<u64, String> {
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
