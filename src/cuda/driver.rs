//! The CUDA driver API as the tool uses it, loaded at run time: dlopen of
//! libcuda.so.1 (already loaded by the application when the driver calls
//! `InitializeInjection`), the few entry points the capture path calls, and
//! their error texts. Owns no state beyond the function pointers; nothing
//! here is linked, so the tool builds and loads where no CUDA exists. The
//! driver's types and signatures are `cuda_abi`'s.

use cuda_abi::{
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CuDeviceGetFn, CuDeviceGetUuidFn, CuDevicePtr,
    CuFuncGetParamInfoFn, CuFunction, CuGetErrorStringFn, CuIpcGetMemHandleFn,
    CuKernelGetParamInfoFn, CuMemAllocHostFn, CuMemGetAddressRangeFn, CuMemcpyDtoHFn,
    CuPointerGetAttributeFn, CuResult, CuStreamIsCapturingFn, CuStreamSynchronizeFn, CuUuid,
    Library, OpenError, UUID_BYTES, as_fn,
};
use std::ffi::{c_int, c_void};

pub use cuda_abi::CallFailed;

/// Why the driver could not be loaded or did not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("cannot load the CUDA driver {library}: {source}")]
    Load { library: String, source: OpenError },
    #[error("the CUDA driver {library} lacks {name}")]
    MissingSymbol { library: String, name: String },
    /// A call that did not return CUDA_SUCCESS, with the driver's name of
    /// its result.
    #[error(transparent)]
    Call(#[from] CallFailed),
    #[error("cuFuncGetParamInfo reports more than 4096 parameters")]
    TooManyParameters,
    #[error("the driver lacks cuPointerGetAttribute, cuDeviceGet or cuDeviceGetUuid")]
    NoOwnerQuery,
}

/// The driver entry points of the capture path.
pub struct Driver {
    pub func_get_param_info: CuFuncGetParamInfoFn,
    /// `cuKernelGetParamInfo`: for a `CUkernel` handed to a launch in place
    /// of a `CUfunction` (the runtime's library-managed kernels).
    pub kernel_get_param_info: Option<CuKernelGetParamInfoFn>,
    pub mem_get_address_range: CuMemGetAddressRangeFn,
    pub ipc_get_mem_handle: CuIpcGetMemHandleFn,
    pub memcpy_dtoh: CuMemcpyDtoHFn,
    pub stream_synchronize: CuStreamSynchronizeFn,
    pub stream_is_capturing: CuStreamIsCapturingFn,
    pub get_error_string: Option<CuGetErrorStringFn>,
    /// `cuMemAllocHost_v2`: page-locked host memory, which a device-to-host
    /// copy fills by DMA without the driver's own bounce buffer.
    pub mem_alloc_host: Option<CuMemAllocHostFn>,
    /// The owner of an allocation, as a device UUID: `cuPointerGetAttribute`
    /// (its device ordinal), `cuDeviceGet`, and `cuDeviceGetUuid_v2` (else
    /// `cuDeviceGetUuid`). Without them the owner is not reported.
    pointer_get_attribute: Option<CuPointerGetAttributeFn>,
    device_get: Option<CuDeviceGetFn>,
    device_get_uuid: Option<CuDeviceGetUuidFn>,
}

impl Driver {
    /// Loads the entry points from `library` (normally `libcuda.so.1`).
    pub fn load(library: &str) -> Result<Driver, DriverError> {
        let handle = Library::open(library).map_err(|source| DriverError::Load {
            library: library.to_string(),
            source,
        })?;
        let need = |name: &str| {
            handle
                .symbol(name)
                .ok_or_else(|| DriverError::MissingSymbol {
                    library: library.to_string(),
                    name: name.to_string(),
                })
        };
        // SAFETY: each symbol has the C signature of the driver API it names.
        unsafe {
            Ok(Driver {
                func_get_param_info: as_fn(need("cuFuncGetParamInfo")?),
                kernel_get_param_info: handle.symbol("cuKernelGetParamInfo").map(|p| as_fn(p)),
                mem_get_address_range: as_fn(need("cuMemGetAddressRange_v2")?),
                ipc_get_mem_handle: as_fn(need("cuIpcGetMemHandle")?),
                memcpy_dtoh: as_fn(need("cuMemcpyDtoH_v2")?),
                stream_synchronize: as_fn(need("cuStreamSynchronize")?),
                stream_is_capturing: as_fn(need("cuStreamIsCapturing")?),
                get_error_string: handle.symbol("cuGetErrorString").map(|p| as_fn(p)),
                mem_alloc_host: handle.symbol("cuMemAllocHost_v2").map(|p| as_fn(p)),
                pointer_get_attribute: handle.symbol("cuPointerGetAttribute").map(|p| as_fn(p)),
                device_get: handle.symbol("cuDeviceGet").map(|p| as_fn(p)),
                device_get_uuid: handle
                    .symbol("cuDeviceGetUuid_v2")
                    .or_else(|| handle.symbol("cuDeviceGetUuid"))
                    .map(|p| as_fn(p)),
            })
        }
    }

    /// `Ok` for CUDA_SUCCESS, else `call` with the driver's error name.
    pub fn check(&self, result: CuResult, call: &str) -> Result<(), CallFailed> {
        cuda_abi::check(self.get_error_string, result, call)
    }

    /// Offsets and sizes of a kernel's parameters, in order.
    pub fn param_layout(&self, function: usize) -> Result<Vec<(u64, u64)>, DriverError> {
        let function = function as CuFunction;
        // The handle as a CUfunction, or as a CUkernel (the runtime's
        // library-managed kernels) when the function query does not know it;
        // a kernel without parameters answers index 0 with an error to both.
        let query = |as_kernel: bool, i: usize, o: &mut usize, s: &mut usize| match (
            as_kernel,
            self.kernel_get_param_info,
        ) {
            // SAFETY: out-pointers; the driver validates the handle and index.
            (true, Some(by_kernel)) => unsafe { by_kernel(function, i, o, s) },
            // SAFETY: as above.
            _ => unsafe { (self.func_get_param_info)(function, i, o, s) },
        };
        let (mut o, mut s) = (0, 0);
        let as_kernel = query(false, 0, &mut o, &mut s) != 0 && query(true, 0, &mut o, &mut s) == 0;
        let mut layout = Vec::new();
        loop {
            let (mut offset, mut size) = (0usize, 0usize);
            if query(as_kernel, layout.len(), &mut offset, &mut size) != 0 {
                break;
            }
            layout.push((offset as u64, size as u64));
            if layout.len() > 4096 {
                return Err(DriverError::TooManyParameters);
            }
        }
        Ok(layout)
    }

    /// Base and size of the allocation containing `address`.
    pub fn address_range(&self, address: CuDevicePtr) -> Result<(u64, u64), CallFailed> {
        let (mut base, mut size) = (0u64, 0usize);
        // SAFETY: out-pointers.
        let r = unsafe { (self.mem_get_address_range)(&mut base, &mut size, address) };
        self.check(r, "cuMemGetAddressRange")?;
        Ok((base, size as u64))
    }

    /// The UUID of the device that owns the allocation at `address`, or
    /// why it cannot be told. The collector finds the device by it: its
    /// ordinals may differ from this process's (CUDA_VISIBLE_DEVICES).
    pub fn owner_uuid(&self, address: CuDevicePtr) -> Result<CuUuid, DriverError> {
        let (Some(attribute), Some(device_get), Some(uuid_of)) = (
            self.pointer_get_attribute,
            self.device_get,
            self.device_get_uuid,
        ) else {
            return Err(DriverError::NoOwnerQuery);
        };
        let mut ordinal: c_int = -1;
        // SAFETY: the attribute is an int written through the out-pointer.
        let r = unsafe {
            attribute(
                (&mut ordinal as *mut c_int).cast(),
                CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                address,
            )
        };
        self.check(r, "cuPointerGetAttribute(DEVICE_ORDINAL)")?;
        let mut device: c_int = 0;
        // SAFETY: out-pointer; the driver checks the ordinal.
        self.check(unsafe { device_get(&mut device, ordinal) }, "cuDeviceGet")?;
        let mut uuid = [0u8; UUID_BYTES];
        // SAFETY: out-pointer to 16 bytes.
        self.check(unsafe { uuid_of(&mut uuid, device) }, "cuDeviceGetUuid")?;
        Ok(uuid)
    }

    /// Copies `dst.len()` bytes at device address `src` to the host.
    pub fn copy_to_host(&self, src: CuDevicePtr, dst: &mut [u8]) -> Result<(), CallFailed> {
        if dst.is_empty() {
            return Ok(());
        }
        // SAFETY: dst is writable for its length; the driver checks `src`.
        let r = unsafe { (self.memcpy_dtoh)(dst.as_mut_ptr() as *mut c_void, src, dst.len()) };
        self.check(r, "cuMemcpyDtoH")
    }
}

/// Host memory a device buffer is copied into: page-locked where the
/// driver gives it (`cuMemAllocHost`), else ordinary. Kept for the
/// process's life (never freed: a copy may use it until exit).
pub struct HostBuffer {
    ptr: *mut u8,
    len: usize,
    /// The ordinary allocation, where page-locked memory was refused.
    _plain: Option<Vec<u8>>,
}

// SAFETY: a plain allocation that only its owner (behind a Mutex) touches.
unsafe impl Send for HostBuffer {}

impl HostBuffer {
    /// `len` bytes, page-locked when the driver gives them.
    pub fn new(driver: &Driver, len: usize) -> HostBuffer {
        if let Some(alloc) = driver.mem_alloc_host {
            let mut p: *mut c_void = std::ptr::null_mut();
            // SAFETY: out-pointer; the driver allocates `len` bytes.
            if unsafe { alloc(&mut p, len) } == 0 && !p.is_null() {
                return HostBuffer {
                    ptr: p as *mut u8,
                    len,
                    _plain: None,
                };
            }
        }
        let mut plain = vec![0u8; len];
        HostBuffer {
            ptr: plain.as_mut_ptr(),
            len,
            _plain: Some(plain),
        }
    }

    pub fn capacity(&self) -> usize {
        self.len
    }

    /// The first `n` bytes (at most the length).
    pub fn bytes_mut(&mut self, n: usize) -> &mut [u8] {
        // SAFETY: `len` bytes owned by this buffer; `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, n.min(self.len)) }
    }
}
