//! The collector's CUDA importer: reads a CUDA application's device memory
//! through the IPC handle of its containing allocation
//! ([`ditto_protocol::Transport::CudaIpc`]).
//!
//! The driver (`cuda_driver`) is loaded the first time a CUDA buffer
//! arrives (never at start, so the collector runs where no CUDA exists).
//! A buffer names the device that owns it by UUID (ordinals differ between
//! processes under CUDA_VISIBLE_DEVICES); that device's primary context is
//! made current on the connection thread, then per buffer
//! cuIpcOpenMemHandle → the copy → cuIpcCloseMemHandle, all in that
//! context, so no peer mapping is needed to read a rank's buffer. A buffer
//! without an owner, or whose owner this process does not see, is opened on
//! device 0 with peer access enabled lazily. Same [`BufferSource`] contract
//! (and RAII guard) as HSA mappings: the handle is closed before the Ack on
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

use super::cuda_copy::{CopyEngine, CopyError};
use super::cuda_driver::{Driver, DriverError, uuid_text};
use super::{BufferSource, Mapping, SourceError};
use cuda_abi::{CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, CuDevicePtr, CuIpcMemHandle};
use ditto_protocol::{CUDA_IPC_HANDLE_BYTES, CUDA_UUID_BYTES};
use std::sync::OnceLock;

/// The buffers of one owning device through libcuda, loaded on first use.
pub struct CudaBufferSource {
    driver: &'static Driver,
    engine: &'static CopyEngine,
    /// The owner the tool named, if any.
    owner: Option<[u8; CUDA_UUID_BYTES]>,
}

/// Why the CUDA importer could not attach, copy or detach.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CudaSourceError {
    /// The driver could not be loaded, or a call failed.
    #[error(transparent)]
    Driver(#[from] DriverError),
    #[error("a CUDA IPC handle has {CUDA_IPC_HANDLE_BYTES} bytes, this one {0}")]
    HandleSize(usize),
    /// Opened on device 0 because the owner is not seen here, and failed.
    #[error("{error} ({why})")]
    OnDevice0 {
        error: DriverError,
        why: DeviceNotSeen,
    },
    #[error("{len} bytes at offset {offset} exceed the {size}-byte allocation")]
    OutsideAllocation { len: usize, offset: u64, size: u64 },
    #[error(transparent)]
    Copy(#[from] CopyError),
}

/// The device that owns a buffer is not among the collector's.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "the buffer's device {uuid} is not among the collector's {count} CUDA device(s), so it was \
     opened on device 0: start the collector where it sees every device of the application \
     (without a narrower CUDA_VISIBLE_DEVICES)"
)]
pub struct DeviceNotSeen {
    /// As nvidia-smi writes it.
    pub uuid: String,
    pub count: usize,
}

static DRIVER: OnceLock<Result<Driver, DriverError>> = OnceLock::new();
static ENGINE: OnceLock<CopyEngine> = OnceLock::new();

/// Runs at least this long go through [`CopyEngine`].
const ENGINE_FROM_BYTES: usize = 8 << 20;

/// The importer of buffers owned by the device `owner` (a UUID from the
/// tool), loading the driver the first time (its error is kept and
/// returned to every later caller).
pub fn cuda_source(
    owner: Option<&[u8; CUDA_UUID_BYTES]>,
) -> Result<CudaBufferSource, CudaSourceError> {
    match DRIVER.get_or_init(Driver::load) {
        Ok(driver) => Ok(CudaBufferSource {
            driver,
            engine: ENGINE.get_or_init(CopyEngine::new),
            owner: owner.copied(),
        }),
        Err(e) => Err(e.clone().into()),
    }
}

/// Whether `DITTO_CUDA_COPY=chunked` asks for the older copy (read once).
fn chunked_copy_asked() -> bool {
    static ASKED: OnceLock<bool> = OnceLock::new();
    *ASKED.get_or_init(|| std::env::var("DITTO_CUDA_COPY").is_ok_and(|v| v == "chunked"))
}

impl CudaBufferSource {
    /// The ordinal of the owning device here, or device 0 (with why, for
    /// an error) where there is no owner or this process does not see it.
    fn device(&self) -> (usize, Option<DeviceNotSeen>) {
        let Some(owner) = &self.owner else {
            return (0, None);
        };
        match self.driver.device_of(owner) {
            Some(ordinal) => (ordinal, None),
            None => (
                0,
                Some(DeviceNotSeen {
                    uuid: uuid_text(owner),
                    count: self.driver.device_count(),
                }),
            ),
        }
    }
}

impl BufferSource for CudaBufferSource {
    /// In the primary context of the owning device (`owner_node` is HSA's;
    /// the CUDA owner came with the source).
    fn attach(
        &self,
        handle: &[u8],
        alloc_size: u64,
        _owner_node: Option<u32>,
    ) -> Result<Mapping, SourceError> {
        let bytes: [u8; CUDA_IPC_HANDLE_BYTES] = handle
            .try_into()
            .map_err(|_| CudaSourceError::HandleSize(handle.len()))?;
        let (device, elsewhere) = self.device();
        let with_why = |error: DriverError| match &elsewhere {
            Some(why) => CudaSourceError::OnDevice0 {
                error,
                why: why.clone(),
            },
            None => CudaSourceError::Driver(error),
        };
        self.driver.make_current(device).map_err(with_why)?;
        let mut dptr: CuDevicePtr = 0;
        // SAFETY: out-pointer; the handle is passed by value as the driver expects.
        let r = unsafe {
            (self.driver.cu_ipc_open)(
                &mut dptr,
                CuIpcMemHandle { reserved: bytes },
                CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
            )
        };
        self.driver
            .check(r, "cuIpcOpenMemHandle")
            .map_err(with_why)?;
        Ok(Mapping {
            address: dptr as usize,
            len: alloc_size,
            gpu: Some(device as u32),
        })
    }

    fn copy(&self, mapping: &Mapping, offset: u64, dst: &mut [u8]) -> Result<(), SourceError> {
        if offset
            .checked_add(dst.len() as u64)
            .is_none_or(|end| end > mapping.len)
        {
            return Err(CudaSourceError::OutsideAllocation {
                len: dst.len(),
                offset,
                size: mapping.len,
            }
            .into());
        }
        if dst.is_empty() {
            return Ok(());
        }
        // The source range lies inside the opened allocation (checked above).
        let src = mapping.address as u64 + offset;
        let device = mapping.gpu.unwrap_or(0) as usize;
        if dst.len() >= ENGINE_FROM_BYTES && !chunked_copy_asked() {
            return Ok(self
                .engine
                .copy(self.driver, device, src, dst)
                .map_err(CudaSourceError::from)?);
        }
        self.driver
            .make_current(device)
            .map_err(CudaSourceError::from)?;
        Ok(self
            .driver
            .copy_to_host(src, dst)
            .map_err(CudaSourceError::from)?)
    }

    fn copies_long_runs(&self) -> bool {
        !chunked_copy_asked()
    }

    fn detach(&self, mapping: Mapping) -> Result<(), SourceError> {
        self.driver
            .make_current(mapping.gpu.unwrap_or(0) as usize)
            .map_err(CudaSourceError::from)?;
        // SAFETY: an address returned by cuIpcOpenMemHandle, closed once.
        let r = unsafe { (self.driver.cu_ipc_close)(mapping.address as u64) };
        Ok(self
            .driver
            .check(r, "cuIpcCloseMemHandle")
            .map_err(CudaSourceError::from)?)
    }

    fn gpu_name(&self, gpu: u32) -> String {
        match &self.owner {
            Some(uuid) => format!("CUDA device {gpu} ({})", uuid_text(uuid)),
            None => format!("CUDA device {gpu} (owner not reported)"),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_driver_is_loaded_only_when_asked_and_its_absence_is_a_clear_error() {
        // No test sets DITTO_CUDA_DRIVER, so this names the real library;
        // CI machines have none, GPU machines have it: either outcome must be
        // a value, never a crash, and an error must say what to do.
        match super::cuda_source(None) {
            Ok(_) => {}
            Err(e) => {
                let e = e.to_string();
                assert!(
                    e.contains("cannot be loaded") || e.contains("failed"),
                    "unexpected error text: {e}"
                )
            }
        }
    }
}
