//! Kernel execution: turns one kernel-dispatch packet into one call of the
//! kernel's host entry (include/ditto_hsa_cpu.h). Owns the C ABI of that call.
//! Never jumps to an address that is not the entry of a live kernel
//! descriptor (`executables` keeps the registry).

use crate::executables;
use hsa::*;
use std::ffi::c_void;

/// `ditto_cpu_dispatch_t`.
#[repr(C)]
#[derive(Debug)]
pub struct CpuDispatch {
    pub grid_size: [u32; 3],
    pub workgroup_size: [u16; 3],
    pub dimensions: u16,
    pub group_segment_size: u32,
    pub private_segment_size: u32,
    pub kernarg: *const c_void,
}

/// `ditto_cpu_kernel_entry_t`.
pub type KernelEntry = unsafe extern "C" fn(*const CpuDispatch) -> i32;

/// `ditto_cpu_kernel_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CpuKernel {
    pub name: *const std::ffi::c_char,
    pub kernarg_segment_size: u32,
    pub kernarg_segment_alignment: u32,
    pub group_segment_size: u32,
    pub reserved: u32,
    pub entry: Option<KernelEntry>,
}

const _: () = {
    assert!(std::mem::size_of::<CpuDispatch>() == 40);
    assert!(std::mem::offset_of!(CpuDispatch, kernarg) == 32);
    assert!(std::mem::size_of::<CpuKernel>() == 32);
};

/// Runs the dispatch; the status is reported to the queue's error callback
/// when it is not SUCCESS (the packet still completes).
pub(crate) fn run(d: &hsa_kernel_dispatch_packet_t) -> hsa_status_t {
    let Some(kernel) = executables::lookup_kernel(d.kernel_object) else {
        return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
    };
    let Some(entry) = kernel.entry else {
        return HSA_STATUS_ERROR_INVALID_CODE_OBJECT;
    };
    let args = CpuDispatch {
        grid_size: [d.grid_size_x, d.grid_size_y, d.grid_size_z],
        workgroup_size: [d.workgroup_size_x, d.workgroup_size_y, d.workgroup_size_z],
        dimensions: d.setup & 3,
        group_segment_size: d.group_segment_size,
        private_segment_size: d.private_segment_size,
        kernarg: d.kernarg_address,
    };
    // SAFETY: entry belongs to a loaded code object kept alive by `kernel`
    // (an Arc on its library) for the duration of the call.
    let rc = unsafe { entry(&args) };
    drop(kernel);
    if rc == 0 {
        HSA_STATUS_SUCCESS
    } else {
        HSA_STATUS_ERROR_EXCEPTION
    }
}
