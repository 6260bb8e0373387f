//! GPU system events (`hsa_amd_register_system_event_handler`): the event
//! types, the memory-fault reasons and the event's layout as the
//! `hsa_ext_amd.h` of ROCr 6.2 to 7.x declares them (AMD interface 1.6 and
//! later). ROCm 5.2's header has the memory-fault event only, in a union of
//! one member; the later events (hardware exception, memory error) grew the
//! union, so this layout is pinned by the assertions below rather than
//! compared with 5.2's header (tests/abi_conformance.rs leaves this file
//! out, as it does vmem.rs).

#![allow(non_camel_case_types)]

use crate::types::{hsa_agent_t, hsa_status_t};
use std::ffi::c_void;

/// `hsa_amd_event_type_t`.
pub type hsa_amd_event_type_t = u32;
pub const HSA_AMD_GPU_MEMORY_FAULT_EVENT: hsa_amd_event_type_t = 0;
pub const HSA_AMD_GPU_HW_EXCEPTION_EVENT: hsa_amd_event_type_t = 1;
pub const HSA_AMD_GPU_MEMORY_ERROR_EVENT: hsa_amd_event_type_t = 2;

/// `hsa_amd_memory_fault_reason_t`: bits of `fault_reason_mask`.
pub const HSA_AMD_MEMORY_FAULT_PAGE_NOT_PRESENT: u32 = 1 << 0;
pub const HSA_AMD_MEMORY_FAULT_READ_ONLY: u32 = 1 << 1;
pub const HSA_AMD_MEMORY_FAULT_NX: u32 = 1 << 2;
pub const HSA_AMD_MEMORY_FAULT_HOST_ONLY: u32 = 1 << 3;
pub const HSA_AMD_MEMORY_FAULT_DRAMECC: u32 = 1 << 4;
pub const HSA_AMD_MEMORY_FAULT_IMPRECISE: u32 = 1 << 5;
pub const HSA_AMD_MEMORY_FAULT_SRAMECC: u32 = 1 << 6;
pub const HSA_AMD_MEMORY_FAULT_HANG: u32 = 1 << 31;

/// `hsa_amd_gpu_memory_fault_info_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hsa_amd_gpu_memory_fault_info_t {
    pub agent: hsa_agent_t,
    pub virtual_address: u64,
    pub fault_reason_mask: u32,
}

/// `hsa_amd_event_t`: the event type, then a union whose largest member
/// (the memory fault and memory error infos) is 24 bytes. Only the memory
/// fault member is named here; the others share its bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hsa_amd_event_t {
    pub event_type: hsa_amd_event_type_t,
    pub memory_fault: hsa_amd_gpu_memory_fault_info_t,
}

/// `hsa_amd_system_event_callback_t`.
pub type hsa_amd_system_event_callback_t =
    Option<unsafe extern "C" fn(event: *const hsa_amd_event_t, data: *mut c_void) -> hsa_status_t>;

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<hsa_amd_gpu_memory_fault_info_t>() == 24);
    assert!(offset_of!(hsa_amd_gpu_memory_fault_info_t, virtual_address) == 8);
    assert!(offset_of!(hsa_amd_gpu_memory_fault_info_t, fault_reason_mask) == 16);
    assert!(size_of::<hsa_amd_event_t>() == 32);
    assert!(offset_of!(hsa_amd_event_t, memory_fault) == 8);
};
