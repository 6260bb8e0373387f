//! The virtual-memory API (`hsa_amd_vmem_*`, AMD extension interface 1.6
//! and later: HIP's hipMemCreate/hipMemMap, graph memory pools, PyTorch's
//! expandable segments on ROCm), in no ROCm 5.2 header: its types and the
//! signatures of the entries a tool wraps, read from ROCm 7.2.4's
//! hsa_ext_amd.h (Debian experimental's `libhsa-runtime-dev`).
//!
//! Rules the header states: a reserved range and a handle's size are
//! multiples of the page size (of the pool's granule for a handle); a
//! handle is mapped whole (`size` equal to its size, `in_offset` 0) inside
//! a reserved range; a mapping is accessible to no agent until
//! `hsa_amd_vmem_set_access`; freeing a range that still has mappings is
//! HSA_STATUS_ERROR_RESOURCE_FREE. Pointer info (interface 1.12) reports a
//! mapped address as HSA_EXT_POINTER_TYPE_HSA_VMEM and a reserved but
//! unmapped one as HSA_EXT_POINTER_TYPE_RESERVED_ADDR; ROCr gives a mapped
//! address itself as its base address, with the mapping's size
//! (ROCm/ROCR-Runtime `Runtime::VMemoryPtrInfo`), so a tool cannot find a
//! mapping's start through pointer info.

#![allow(non_camel_case_types)]

use crate::types::{hsa_agent_t, hsa_amd_pointer_type_t, hsa_status_t};
use std::ffi::c_void;

/// An allocation handle (opaque).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct hsa_amd_vmem_alloc_handle_t {
    pub handle: u64,
}

/// `hsa_amd_memory_type_t`.
pub type hsa_amd_memory_type_t = u32;
pub const MEMORY_TYPE_NONE: hsa_amd_memory_type_t = 0;
pub const MEMORY_TYPE_PINNED: hsa_amd_memory_type_t = 1;

/// `hsa_access_permission_t` (hsa.h).
pub type hsa_access_permission_t = u32;
pub const HSA_ACCESS_PERMISSION_NONE: hsa_access_permission_t = 0;
pub const HSA_ACCESS_PERMISSION_RO: hsa_access_permission_t = 1;
pub const HSA_ACCESS_PERMISSION_WO: hsa_access_permission_t = 2;
pub const HSA_ACCESS_PERMISSION_RW: hsa_access_permission_t = 3;

/// One agent's access to a mapping.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct hsa_amd_memory_access_desc_t {
    pub permissions: hsa_access_permission_t,
    pub agent_handle: hsa_agent_t,
}

/// Pointer info of an address reserved and not mapped.
pub const HSA_EXT_POINTER_TYPE_RESERVED_ADDR: hsa_amd_pointer_type_t = 5;
/// Pointer info of an address inside a mapping.
pub const HSA_EXT_POINTER_TYPE_HSA_VMEM: hsa_amd_pointer_type_t = 6;

pub type HsaAmdVmemMapFn = unsafe extern "C" fn(
    va: *mut c_void,
    size: usize,
    in_offset: usize,
    memory_handle: hsa_amd_vmem_alloc_handle_t,
    flags: u64,
) -> hsa_status_t;
pub type HsaAmdVmemUnmapFn = unsafe extern "C" fn(va: *mut c_void, size: usize) -> hsa_status_t;
/// `hsa_amd_vmem_address_reserve`: `address` is the requested start
/// (SUCCESS elsewhere when it is taken: compare `*va`).
pub type HsaAmdVmemAddressReserveFn = unsafe extern "C" fn(
    va: *mut *mut c_void,
    size: usize,
    address: u64,
    flags: u64,
) -> hsa_status_t;
pub type HsaAmdVmemAddressFreeFn =
    unsafe extern "C" fn(va: *mut c_void, size: usize) -> hsa_status_t;
pub type HsaAmdVmemHandleCreateFn = unsafe extern "C" fn(
    pool: crate::types::hsa_amd_memory_pool_t,
    size: usize,
    memory_type: hsa_amd_memory_type_t,
    flags: u64,
    memory_handle: *mut hsa_amd_vmem_alloc_handle_t,
) -> hsa_status_t;
pub type HsaAmdVmemSetAccessFn = unsafe extern "C" fn(
    va: *mut c_void,
    size: usize,
    desc: *const hsa_amd_memory_access_desc_t,
    desc_cnt: usize,
) -> hsa_status_t;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_are_the_headers() {
        // x86-64: the permission (4 bytes), padding, the agent handle.
        assert_eq!(std::mem::size_of::<hsa_amd_memory_access_desc_t>(), 16);
        assert_eq!(
            std::mem::offset_of!(hsa_amd_memory_access_desc_t, agent_handle),
            8
        );
        assert_eq!(std::mem::size_of::<hsa_amd_vmem_alloc_handle_t>(), 8);
    }
}
