//! CUDA driver types and constants (`cuda.h`, x86-64): the handles and
//! pointers ditto passes, the IPC handle and device UUID it carries between
//! processes, and the few enum values it uses. Layouts are pinned by
//! `const` assertions at the end of this file.

use std::ffi::{c_int, c_uint, c_void};

/// `CUresult`: 0 is `CUDA_SUCCESS`.
pub type CuResult = c_int;
/// `CUDA_SUCCESS`.
pub const CUDA_SUCCESS: CuResult = 0;
/// `CUdevice`: a device of this process, by handle.
pub type CuDevice = c_int;
/// `CUcontext`.
pub type CuContext = *mut c_void;
/// `CUfunction`.
pub type CuFunction = *mut c_void;
/// `CUkernel`: a library-managed kernel, handed to a launch in place of a
/// `CUfunction`.
pub type CuKernel = *mut c_void;
/// `CUstream`.
pub type CuStream = *mut c_void;
/// `CUdeviceptr`.
pub type CuDevicePtr = u64;

/// Size of `CUipcMemHandle`.
pub const IPC_HANDLE_BYTES: usize = 64;
/// Size of `CUuuid`.
pub const UUID_BYTES: usize = 16;

/// `CUipcMemHandle`: 64 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CuIpcMemHandle {
    pub reserved: [u8; IPC_HANDLE_BYTES],
}

/// `CUuuid`: 16 bytes naming a device the same in every process.
pub type CuUuid = [u8; UUID_BYTES];

/// `CU_STREAM_PER_THREAD`: the per-thread default stream, which a `_ptsz`
/// launch on stream 0 goes to.
pub const CU_STREAM_PER_THREAD: usize = 0x2;
/// `CU_STREAM_NON_BLOCKING`: the stream does not wait for the legacy
/// default stream.
pub const CU_STREAM_NON_BLOCKING: c_uint = 1;
/// `CU_STREAM_CAPTURE_STATUS_NONE`.
pub const CU_STREAM_CAPTURE_STATUS_NONE: c_int = 0;
/// `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`: the ordinal (in this process)
/// of the device that owns an allocation.
pub const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_int = 9;
/// `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`.
pub const CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS: c_uint = 1;

const _: () = {
    assert!(std::mem::size_of::<CuIpcMemHandle>() == 64);
    assert!(std::mem::align_of::<CuIpcMemHandle>() == 1);
    assert!(std::mem::size_of::<CuUuid>() == 16);
    assert!(std::mem::size_of::<CuDevicePtr>() == 8);
};
