//! The collector's CUDA importer: reads a CUDA application's device memory
//! through the IPC handle of its containing allocation
//! ([`ditto_protocol::Transport::CudaIpc`]).
//!
//! Owns the collector's only contact with CUDA: libcuda.so.1 is dlopened
//! the first time a CUDA buffer arrives (never at start, so the collector
//! runs where no CUDA exists), cuInit, the primary context of device 0 made
//! current on the connection thread, then per buffer cuIpcOpenMemHandle
//! (lazy peer access) → the copy → cuIpcCloseMemHandle, through the
//! same [`BufferSource`] contract (and RAII guard) as HSA mappings: the
//! handle is closed before the Ack on every path. The library is never
//! dlclosed.
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
use super::{BufferSource, Mapping};
use ditto_protocol::CUDA_IPC_HANDLE_BYTES;
use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

type CuResult = c_int;
type CuDevice = c_int;
type CuContext = *mut c_void;
pub(super) type CuDevicePtr = u64;
pub(super) type CuStream = *mut c_void;

/// `CUipcMemHandle`: 64 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
struct CuIpcMemHandle {
    reserved: [u8; CUDA_IPC_HANDLE_BYTES],
}

/// `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`.
const LAZY_ENABLE_PEER_ACCESS: c_uint = 1;

pub(super) struct Driver {
    cu_ctx_set_current: unsafe extern "C" fn(CuContext) -> CuResult,
    cu_ipc_open: unsafe extern "C" fn(*mut CuDevicePtr, CuIpcMemHandle, c_uint) -> CuResult,
    cu_ipc_close: unsafe extern "C" fn(CuDevicePtr) -> CuResult,
    cu_memcpy_dtoh: unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize) -> CuResult,
    cu_get_error_string: Option<unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult>,
    /// The entry points of [`CopyEngine`]'s overlapped copies: without
    /// them, long runs are copied with cuMemcpyDtoH.
    pub(super) cu_stream_create: Option<unsafe extern "C" fn(*mut CuStream, c_uint) -> CuResult>,
    pub(super) cu_stream_synchronize: Option<unsafe extern "C" fn(CuStream) -> CuResult>,
    pub(super) cu_mem_alloc_host: Option<unsafe extern "C" fn(*mut *mut c_void, usize) -> CuResult>,
    pub(super) cu_memcpy_dtoh_async:
        Option<unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize, CuStream) -> CuResult>,
    context: usize,
}

// SAFETY: function pointers and the primary context handle, which the
// driver lets any thread make current.
unsafe impl Send for Driver {}
unsafe impl Sync for Driver {}

/// The driver library the importer loads.
fn library_name() -> String {
    std::env::var("DITTO_CUDA_DRIVER").unwrap_or_else(|_| "libcuda.so.1".into())
}

fn dlerror_text() -> String {
    // SAFETY: dlerror returns null or a thread-local C string.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dynamic-loader error".into()
    } else {
        // SAFETY: non-null, NUL-terminated.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// A symbol's address as the function-pointer type `F`.
///
/// # Safety
/// `p` is the address of a function whose C signature is exactly `F`.
unsafe fn as_fn<F: Copy>(p: *mut c_void) -> F {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: same size (checked); the caller vouches for the signature.
    unsafe { std::mem::transmute_copy(&p) }
}

impl Driver {
    fn load() -> Result<Driver, String> {
        let name = library_name();
        let c_name = CString::new(name.clone()).map_err(|_| format!("bad library name {name}"))?;
        // SAFETY: valid C string.
        let handle = unsafe { libc::dlopen(c_name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(format!(
                "a CUDA buffer arrived but the CUDA driver {name} cannot be loaded ({}): \
                 run the collector on the machine of the CUDA application",
                dlerror_text()
            ));
        }
        let sym = |s: &str| -> Result<*mut c_void, String> {
            let c = CString::new(s).expect("symbol names have no NUL");
            // SAFETY: live handle, valid C string.
            let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
            if p.is_null() {
                Err(format!("the CUDA driver {name} lacks {s}"))
            } else {
                Ok(p)
            }
        };
        // SAFETY: each symbol has the C signature of the driver API named.
        unsafe {
            let cu_init: unsafe extern "C" fn(c_uint) -> CuResult = as_fn(sym("cuInit")?);
            let cu_device_get: unsafe extern "C" fn(*mut CuDevice, c_int) -> CuResult =
                as_fn(sym("cuDeviceGet")?);
            let cu_retain: unsafe extern "C" fn(*mut CuContext, CuDevice) -> CuResult =
                as_fn(sym("cuDevicePrimaryCtxRetain")?);
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
                context: 0,
            };
            driver.check(cu_init(0), "cuInit")?;
            let mut device: CuDevice = 0;
            driver.check(cu_device_get(&mut device, 0), "cuDeviceGet(0)")?;
            let mut ctx: CuContext = std::ptr::null_mut();
            driver.check(cu_retain(&mut ctx, device), "cuDevicePrimaryCtxRetain")?;
            driver.context = ctx as usize;
            Ok(driver)
        }
    }

    pub(super) fn check(&self, result: CuResult, call: &str) -> Result<(), String> {
        if result == 0 {
            return Ok(());
        }
        let mut text: *const c_char = std::ptr::null();
        let described = self.cu_get_error_string.is_some_and(|f| {
            // SAFETY: out-pointer to a static string of the driver.
            unsafe { f(result, &mut text) == 0 && !text.is_null() }
        });
        let name = if described {
            // SAFETY: non-null static NUL-terminated string.
            unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned()
        } else {
            "unknown error".into()
        };
        Err(format!("{call} failed: CUDA error {result} ({name})"))
    }

    pub(super) fn make_current(&self) -> Result<(), String> {
        // SAFETY: the retained primary context stays valid for the process.
        let r = unsafe { (self.cu_ctx_set_current)(self.context as CuContext) };
        self.check(r, "cuCtxSetCurrent")
    }

    /// Copies `dst.len()` bytes at device address `src` with one
    /// cuMemcpyDtoH; the context must be current.
    pub(super) fn copy_to_host(&self, src: CuDevicePtr, dst: &mut [u8]) -> Result<(), String> {
        // SAFETY: dst is a writable host buffer of dst.len() bytes; the
        // driver checks the device range.
        let r = unsafe { (self.cu_memcpy_dtoh)(dst.as_mut_ptr() as *mut c_void, src, dst.len()) };
        self.check(r, "cuMemcpyDtoH")
    }
}

#[cfg(test)]
impl Driver {
    /// A driver over host memory for the copy engine's tests: the plain
    /// copy is a memcpy, the context a no-op; the engine's entry points are
    /// the test's.
    pub(super) fn stand_in(
        stream_create: Option<unsafe extern "C" fn(*mut CuStream, c_uint) -> CuResult>,
        stream_synchronize: Option<unsafe extern "C" fn(CuStream) -> CuResult>,
        mem_alloc_host: Option<unsafe extern "C" fn(*mut *mut c_void, usize) -> CuResult>,
        memcpy_dtoh_async: Option<
            unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize, CuStream) -> CuResult,
        >,
    ) -> Driver {
        unsafe extern "C" fn set_current(_: CuContext) -> CuResult {
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
            context: 0,
        }
    }
}

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

/// Whether `DITTO_CUDA_COPY=chunked` asks for the older copy.
fn chunked_copy_asked() -> bool {
    std::env::var("DITTO_CUDA_COPY").is_ok_and(|v| v == "chunked")
}

impl BufferSource for CudaBufferSource {
    fn attach(&self, handle: &[u8], alloc_size: u64) -> Result<Mapping, String> {
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
