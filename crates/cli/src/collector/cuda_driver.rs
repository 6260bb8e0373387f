//! The CUDA driver as the collector uses it, loaded at run time: dlopen of
//! libcuda.so.1 (or `DITTO_CUDA_DRIVER`), cuInit, the machine's devices
//! with their UUIDs (a buffer names its owner by UUID), each device's
//! primary context retained on first use, and the entry points of the
//! importer (`cuda`) and of the copy engine (`cuda_copy`, optional: without
//! them long runs are copied with cuMemcpyDtoH). Owns no state beyond the
//! function pointers, the devices and their contexts; the library is never
//! dlclosed. The driver's types and signatures, and dlopen, are
//! `cuda_abi`'s (shared with the tool library).

use cuda_abi::CallFailed;
use cuda_abi::{
    CuContext, CuCtxSetCurrentFn, CuDevice, CuDeviceGetCountFn, CuDeviceGetFn, CuDeviceGetUuidFn,
    CuDevicePrimaryCtxRetainFn, CuDevicePtr, CuGetErrorStringFn, CuInitFn, CuIpcCloseMemHandleFn,
    CuIpcOpenMemHandleFn, CuMemAllocHostFn, CuMemcpyDtoHAsyncFn, CuMemcpyDtoHFn, CuResult,
    CuStreamCreateFn, CuStreamSynchronizeFn, CuUuid, Library, OpenError, as_fn,
};
use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

/// Why the driver could not be loaded or used.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DriverError {
    #[error("bad library name {0}")]
    BadName(String),
    #[error(
        "a CUDA buffer arrived but the CUDA driver {name} cannot be loaded ({text}): run the \
         collector on the machine of the CUDA application"
    )]
    Unloadable { name: String, text: String },
    #[error("the CUDA driver {name} lacks {symbol}")]
    MissingSymbol { name: String, symbol: String },
    #[error(transparent)]
    Call(#[from] CallFailed),
    #[error("the CUDA driver sees no device")]
    NoDevice,
    #[error("CUDA device {ordinal} does not exist here ({count} device(s))")]
    NoSuchDevice { ordinal: usize, count: usize },
}

pub(super) struct Driver {
    cu_ctx_set_current: CuCtxSetCurrentFn,
    pub(super) cu_ipc_open: CuIpcOpenMemHandleFn,
    pub(super) cu_ipc_close: CuIpcCloseMemHandleFn,
    cu_memcpy_dtoh: CuMemcpyDtoHFn,
    cu_get_error_string: Option<CuGetErrorStringFn>,
    /// The entry points of [`CopyEngine`]'s overlapped copies: without
    /// them, long runs are copied with cuMemcpyDtoH.
    pub(super) cu_stream_create: Option<CuStreamCreateFn>,
    pub(super) cu_stream_synchronize: Option<CuStreamSynchronizeFn>,
    pub(super) cu_mem_alloc_host: Option<CuMemAllocHostFn>,
    pub(super) cu_memcpy_dtoh_async: Option<CuMemcpyDtoHAsyncFn>,
    cu_retain: CuDevicePrimaryCtxRetainFn,
    /// The devices by ordinal (in the collector's process).
    devices: Vec<Device>,
}

/// One device of the collector's process.
struct Device {
    handle: CuDevice,
    /// `None` where the driver cannot tell (no cuDeviceGetUuid).
    uuid: Option<CuUuid>,
    /// Its primary context, retained on first use (or why not).
    context: OnceLock<Result<usize, DriverError>>,
}

// SAFETY: function pointers and the primary context handle, which the
// driver lets any thread make current.
unsafe impl Send for Driver {}
unsafe impl Sync for Driver {}

/// The driver library the importer loads.
fn library_name() -> String {
    std::env::var("DITTO_CUDA_DRIVER").unwrap_or_else(|_| "libcuda.so.1".into())
}

impl Driver {
    pub(super) fn load() -> Result<Driver, DriverError> {
        let name = library_name();
        let library = Library::open(&name).map_err(|e| match e {
            OpenError::BadName(_) => DriverError::BadName(name.clone()),
            OpenError::Loader(text) => DriverError::Unloadable {
                name: name.clone(),
                text,
            },
        })?;
        let sym = |s: &str| -> Result<*mut c_void, DriverError> {
            library.symbol(s).ok_or_else(|| DriverError::MissingSymbol {
                name: name.clone(),
                symbol: s.to_string(),
            })
        };
        // SAFETY: each symbol has the C signature of the driver API named.
        unsafe {
            let cu_init: CuInitFn = as_fn(sym("cuInit")?);
            let mut driver = Driver {
                cu_ctx_set_current: as_fn(sym("cuCtxSetCurrent")?),
                cu_ipc_open: as_fn(sym("cuIpcOpenMemHandle_v2")?),
                cu_ipc_close: as_fn(sym("cuIpcCloseMemHandle")?),
                cu_memcpy_dtoh: as_fn(sym("cuMemcpyDtoH_v2")?),
                cu_get_error_string: sym("cuGetErrorString").ok().map(|p| as_fn(p)),
                cu_stream_create: sym("cuStreamCreate").ok().map(|p| as_fn(p)),
                cu_stream_synchronize: sym("cuStreamSynchronize").ok().map(|p| as_fn(p)),
                cu_mem_alloc_host: sym("cuMemAllocHost_v2").ok().map(|p| as_fn(p)),
                cu_memcpy_dtoh_async: sym("cuMemcpyDtoHAsync_v2").ok().map(|p| as_fn(p)),
                cu_retain: as_fn(sym("cuDevicePrimaryCtxRetain")?),
                devices: Vec::new(),
            };
            driver.check(cu_init(0), "cuInit")?;
            driver.devices = list_devices(&driver, &sym)?;
            Ok(driver)
        }
    }

    pub(super) fn check(&self, result: CuResult, call: &str) -> Result<(), DriverError> {
        Ok(cuda_abi::check(self.cu_get_error_string, result, call)?)
    }

    /// The ordinal of the device whose UUID is `uuid`, if this process
    /// sees it.
    pub(super) fn device_of(&self, uuid: &CuUuid) -> Option<usize> {
        self.devices
            .iter()
            .position(|d| d.uuid.as_ref() == Some(uuid))
    }

    /// How many devices this process sees.
    pub(super) fn device_count(&self) -> usize {
        self.devices.len()
    }

    /// Makes device `ordinal`'s primary context current on this thread,
    /// retaining it the first time.
    pub(super) fn make_current(&self, ordinal: usize) -> Result<(), DriverError> {
        let device = self.devices.get(ordinal).ok_or(DriverError::NoSuchDevice {
            ordinal,
            count: self.devices.len(),
        })?;
        let context = device.context.get_or_init(|| {
            let mut ctx: CuContext = std::ptr::null_mut();
            // SAFETY: out-pointer; a device handle from cuDeviceGet.
            let r = unsafe { (self.cu_retain)(&mut ctx, device.handle) };
            self.check(r, &format!("cuDevicePrimaryCtxRetain(device {ordinal})"))
                .map(|()| ctx as usize)
        });
        let context = context.clone()?;
        // SAFETY: a retained primary context stays valid for the process.
        let r = unsafe { (self.cu_ctx_set_current)(context as CuContext) };
        self.check(r, "cuCtxSetCurrent")
    }

    /// Copies `dst.len()` bytes at device address `src` with one
    /// cuMemcpyDtoH; the context must be current.
    pub(super) fn copy_to_host(&self, src: CuDevicePtr, dst: &mut [u8]) -> Result<(), DriverError> {
        // SAFETY: dst is a writable host buffer of dst.len() bytes; the
        // driver checks the device range.
        let r = unsafe { (self.cu_memcpy_dtoh)(dst.as_mut_ptr() as *mut c_void, src, dst.len()) };
        self.check(r, "cuMemcpyDtoH")
    }
}

/// The devices this process sees, with their UUIDs where the driver gives
/// them (`cuDeviceGetUuid_v2`, else `cuDeviceGetUuid`: the same function
/// the tool reads its owners with). Without `cuDeviceGetCount`, device 0.
///
/// # Safety
/// `sym` returns addresses of the driver's functions of those names.
unsafe fn list_devices(
    driver: &Driver,
    sym: &dyn Fn(&str) -> Result<*mut c_void, DriverError>,
) -> Result<Vec<Device>, DriverError> {
    // SAFETY: the caller vouches for the symbols; their C signatures are
    // the driver API's.
    unsafe {
        let device_get: CuDeviceGetFn = as_fn(sym("cuDeviceGet")?);
        let count: Option<CuDeviceGetCountFn> = sym("cuDeviceGetCount").ok().map(|p| as_fn(p));
        let uuid_of: Option<CuDeviceGetUuidFn> = sym("cuDeviceGetUuid_v2")
            .or_else(|_| sym("cuDeviceGetUuid"))
            .ok()
            .map(|p| as_fn(p));
        let mut n: c_int = 1;
        if let Some(count) = count {
            driver.check(count(&mut n), "cuDeviceGetCount")?;
        }
        if n < 1 {
            return Err(DriverError::NoDevice);
        }
        (0..n)
            .map(|ordinal| {
                let mut handle: CuDevice = 0;
                driver.check(
                    device_get(&mut handle, ordinal),
                    &format!("cuDeviceGet({ordinal})"),
                )?;
                let uuid = uuid_of.and_then(|f| {
                    let mut u: CuUuid = [0; cuda_abi::UUID_BYTES];
                    (f(&mut u, handle) == 0).then_some(u)
                });
                Ok(Device {
                    handle,
                    uuid,
                    context: OnceLock::new(),
                })
            })
            .collect()
    }
}

/// A UUID as nvidia-smi writes it: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub(super) fn uuid_text(uuid: &CuUuid) -> String {
    let hex = |r: std::ops::Range<usize>| -> String {
        uuid[r].iter().map(|b| format!("{b:02x}")).collect()
    };
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    )
}

#[cfg(test)]
thread_local! {
    /// The stand-in's current context on this thread: device + 1, 0 none.
    static STAND_IN_CONTEXT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The context [`Driver::stand_in`] made current on this thread.
#[cfg(test)]
pub(super) fn stand_in_context() -> usize {
    STAND_IN_CONTEXT.with(std::cell::Cell::get)
}

#[cfg(test)]
impl Driver {
    /// A driver over host memory for the copy engine's tests, with two
    /// devices: the plain copy is a memcpy, device d's context is d + 1
    /// ([`stand_in_context`]); the engine's entry points are the test's.
    pub(super) fn stand_in(
        stream_create: Option<CuStreamCreateFn>,
        stream_synchronize: Option<CuStreamSynchronizeFn>,
        mem_alloc_host: Option<CuMemAllocHostFn>,
        memcpy_dtoh_async: Option<CuMemcpyDtoHAsyncFn>,
    ) -> Driver {
        use cuda_abi::CuIpcMemHandle;
        use std::ffi::c_uint;
        unsafe extern "C" fn set_current(context: CuContext) -> CuResult {
            STAND_IN_CONTEXT.with(|c| c.set(context as usize));
            0
        }
        unsafe extern "C" fn ipc_open(
            _: *mut CuDevicePtr,
            _: CuIpcMemHandle,
            _: c_uint,
        ) -> CuResult {
            1
        }
        unsafe extern "C" fn ipc_close(_: CuDevicePtr) -> CuResult {
            1
        }
        unsafe extern "C" fn retain(ctx: *mut CuContext, device: CuDevice) -> CuResult {
            // SAFETY: the driver's out-pointer.
            unsafe { *ctx = (device as usize + 1) as CuContext };
            0
        }
        unsafe extern "C" fn memcpy(dst: *mut c_void, src: CuDevicePtr, len: usize) -> CuResult {
            // SAFETY: the tests pass host ranges of `len` bytes.
            unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len) };
            0
        }
        Driver {
            cu_ctx_set_current: set_current,
            cu_ipc_open: ipc_open,
            cu_ipc_close: ipc_close,
            cu_memcpy_dtoh: memcpy,
            cu_get_error_string: None,
            cu_stream_create: stream_create,
            cu_stream_synchronize: stream_synchronize,
            cu_mem_alloc_host: mem_alloc_host,
            cu_memcpy_dtoh_async: memcpy_dtoh_async,
            cu_retain: retain,
            devices: (0..2)
                .map(|handle| Device {
                    handle,
                    uuid: Some([handle as u8; cuda_abi::UUID_BYTES]),
                    context: OnceLock::new(),
                })
                .collect(),
        }
    }
}
