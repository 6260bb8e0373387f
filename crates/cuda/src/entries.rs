//! The signatures of the CUDA driver entry points ditto calls, each named
//! after its entry point (the `_v2` symbol where the driver has one). The
//! tool library calls those of the capture path (parameters, address
//! ranges, IPC export, copies, streams, owners); the collector those of the
//! importer (init, contexts, IPC open/close, copies, streams, devices).

use crate::types::{
    CuContext, CuDevice, CuDevicePtr, CuFunction, CuIpcMemHandle, CuKernel, CuResult, CuStream,
    CuUuid,
};
use std::ffi::{c_char, c_int, c_uint, c_void};

/// `cuInit`.
pub type CuInitFn = unsafe extern "C" fn(c_uint) -> CuResult;
/// `cuGetErrorString`: status in, pointer to a static string out.
pub type CuGetErrorStringFn = unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult;

/// `cuDeviceGet`.
pub type CuDeviceGetFn = unsafe extern "C" fn(*mut CuDevice, c_int) -> CuResult;
/// `cuDeviceGetCount`.
pub type CuDeviceGetCountFn = unsafe extern "C" fn(*mut c_int) -> CuResult;
/// `cuDeviceGetUuid_v2` (and `cuDeviceGetUuid`, the same signature).
pub type CuDeviceGetUuidFn = unsafe extern "C" fn(*mut CuUuid, CuDevice) -> CuResult;
/// `cuDevicePrimaryCtxRetain`.
pub type CuDevicePrimaryCtxRetainFn = unsafe extern "C" fn(*mut CuContext, CuDevice) -> CuResult;
/// `cuCtxSetCurrent`.
pub type CuCtxSetCurrentFn = unsafe extern "C" fn(CuContext) -> CuResult;

/// `cuFuncGetParamInfo`: a parameter's offset and size.
pub type CuFuncGetParamInfoFn =
    unsafe extern "C" fn(CuFunction, usize, *mut usize, *mut usize) -> CuResult;
/// `cuKernelGetParamInfo`: as [`CuFuncGetParamInfoFn`], for a `CUkernel`.
pub type CuKernelGetParamInfoFn =
    unsafe extern "C" fn(CuKernel, usize, *mut usize, *mut usize) -> CuResult;

/// `cuMemGetAddressRange_v2`: base and size of the containing allocation.
pub type CuMemGetAddressRangeFn =
    unsafe extern "C" fn(*mut CuDevicePtr, *mut usize, CuDevicePtr) -> CuResult;
/// `cuPointerGetAttribute`.
pub type CuPointerGetAttributeFn =
    unsafe extern "C" fn(*mut c_void, c_int, CuDevicePtr) -> CuResult;
/// `cuMemAllocHost_v2`: page-locked host memory.
pub type CuMemAllocHostFn = unsafe extern "C" fn(*mut *mut c_void, usize) -> CuResult;
/// `cuMemcpyDtoH_v2`.
pub type CuMemcpyDtoHFn = unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize) -> CuResult;
/// `cuMemcpyDtoHAsync_v2`.
pub type CuMemcpyDtoHAsyncFn =
    unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize, CuStream) -> CuResult;

/// `cuIpcGetMemHandle`.
pub type CuIpcGetMemHandleFn = unsafe extern "C" fn(*mut CuIpcMemHandle, CuDevicePtr) -> CuResult;
/// `cuIpcOpenMemHandle_v2`.
pub type CuIpcOpenMemHandleFn =
    unsafe extern "C" fn(*mut CuDevicePtr, CuIpcMemHandle, c_uint) -> CuResult;
/// `cuIpcCloseMemHandle`.
pub type CuIpcCloseMemHandleFn = unsafe extern "C" fn(CuDevicePtr) -> CuResult;

/// `cuStreamCreate`.
pub type CuStreamCreateFn = unsafe extern "C" fn(*mut CuStream, c_uint) -> CuResult;
/// `cuStreamSynchronize`.
pub type CuStreamSynchronizeFn = unsafe extern "C" fn(CuStream) -> CuResult;
/// `cuStreamIsCapturing`: whether a stream is being captured into a graph.
pub type CuStreamIsCapturingFn = unsafe extern "C" fn(CuStream, *mut c_int) -> CuResult;
