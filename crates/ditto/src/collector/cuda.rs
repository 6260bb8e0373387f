//! The collector's CUDA importer: reads a CUDA application's device memory
//! through the IPC handle of its containing allocation
//! ([`ditto_protocol::Transport::CudaIpc`]).
//!
//! The driver (`cuda_driver`) is loaded the first time a CUDA buffer
//! arrives (never at start, so the collector runs where no CUDA exists);
//! device 0's primary context is made current on the connection thread,
//! then per buffer cuIpcOpenMemHandle (lazy peer access) → the copy →
//! cuIpcCloseMemHandle, through the same [`BufferSource`] contract (and
//! RAII guard) as HSA mappings: the handle is closed before the Ack on
//! every path.
//!
//! The copy: a long run (a large buffer stored into its tensor file) goes
//! straight into the file's mapping through [`CopyEngine`] (several
//! threads, page-locked buffers, copies overlapped with the stores);
//! shorter ones with one cuMemcpyDtoH. `DITTO_CUDA_COPY=chunked` keeps the
//! older way for comparison (8 MiB at a time through one pageable buffer,
//! each chunk written before the next is copied: `scripts/gpu-test` sets
//! them side by side).
//!
//! `DITTO_CUDA_DRIVER` names another driver library (tests point it at a
//! missing file to see the error).

use super::cuda_copy::CopyEngine;
use super::cuda_driver::{CuDevicePtr, CuIpcMemHandle, Driver, LAZY_ENABLE_PEER_ACCESS};
use super::{BufferSource, Mapping};
use ditto_protocol::CUDA_IPC_HANDLE_BYTES;
use std::sync::OnceLock;

/// Device 0's primary context through libcuda, loaded on first use.
pub struct CudaBufferSource {
    driver: &'static Driver,
    engine: &'static CopyEngine,
}

static DRIVER: OnceLock<Result<Driver, String>> = OnceLock::new();
static ENGINE: OnceLock<CopyEngine> = OnceLock::new();

/// Runs at least this long go through [`CopyEngine`].
const ENGINE_FROM_BYTES: usize = 8 << 20;

/// The importer, loading the driver the first time (its error is kept and
/// returned to every later caller).
pub fn cuda_source() -> Result<CudaBufferSource, String> {
    match DRIVER.get_or_init(Driver::load) {
        Ok(driver) => Ok(CudaBufferSource {
            driver,
            engine: ENGINE.get_or_init(CopyEngine::new),
        }),
        Err(e) => Err(e.clone()),
    }
}

/// Whether `DITTO_CUDA_COPY=chunked` asks for the older copy (read once).
fn chunked_copy_asked() -> bool {
    static ASKED: OnceLock<bool> = OnceLock::new();
    *ASKED.get_or_init(|| std::env::var("DITTO_CUDA_COPY").is_ok_and(|v| v == "chunked"))
}

impl BufferSource for CudaBufferSource {
    /// In the primary context of device 0 (`owner_node` is HSA's; CUDA
    /// buffers carry no owner yet).
    fn attach(
        &self,
        handle: &[u8],
        alloc_size: u64,
        _owner_node: Option<u32>,
    ) -> Result<Mapping, String> {
        let bytes: [u8; CUDA_IPC_HANDLE_BYTES] = handle.try_into().map_err(|_| {
            format!(
                "a CUDA IPC handle has {CUDA_IPC_HANDLE_BYTES} bytes, this one {}",
                handle.len()
            )
        })?;
        self.driver.make_current()?;
        let mut dptr: CuDevicePtr = 0;
        // SAFETY: out-pointer; the handle is passed by value as the driver expects.
        let r = unsafe {
            (self.driver.cu_ipc_open)(
                &mut dptr,
                CuIpcMemHandle { reserved: bytes },
                LAZY_ENABLE_PEER_ACCESS,
            )
        };
        self.driver.check(r, "cuIpcOpenMemHandle")?;
        Ok(Mapping {
            address: dptr as usize,
            len: alloc_size,
            node: None,
        })
    }

    fn copy(&self, mapping: &Mapping, offset: u64, dst: &mut [u8]) -> Result<(), String> {
        if offset
            .checked_add(dst.len() as u64)
            .is_none_or(|end| end > mapping.len)
        {
            return Err(format!(
                "{} bytes at offset {offset} exceed the {}-byte allocation",
                dst.len(),
                mapping.len
            ));
        }
        if dst.is_empty() {
            return Ok(());
        }
        // The source range lies inside the opened allocation (checked above).
        let src = mapping.address as u64 + offset;
        if dst.len() >= ENGINE_FROM_BYTES && !chunked_copy_asked() {
            return self.engine.copy(self.driver, src, dst);
        }
        self.driver.make_current()?;
        self.driver.copy_to_host(src, dst)
    }

    fn copies_long_runs(&self) -> bool {
        !chunked_copy_asked()
    }

    fn detach(&self, mapping: Mapping) -> Result<(), String> {
        self.driver.make_current()?;
        // SAFETY: an address returned by cuIpcOpenMemHandle, closed once.
        let r = unsafe { (self.driver.cu_ipc_close)(mapping.address as u64) };
        self.driver.check(r, "cuIpcCloseMemHandle")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_driver_is_loaded_only_when_asked_and_its_absence_is_a_clear_error() {
        // No test sets DITTO_CUDA_DRIVER, so this names the real library;
        // CI machines have none, GPU machines have it: either outcome must be
        // a value, never a crash, and an error must say what to do.
        match super::cuda_source() {
            Ok(_) => {}
            Err(e) => assert!(
                e.contains("cannot be loaded") || e.contains("failed"),
                "unexpected error text: {e}"
            ),
        }
    }
}
