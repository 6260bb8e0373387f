//! What the runtime says of an address (`hsa_amd_pointer_info`, through
//! the original entry): the allocation holding it and the NODE of the
//! agent that owns it. Owns no state.

use super::HsaTool;
use crate::capture::allocation_map::Allocation;
use hsa::*;
use std::ffi::c_void;

impl HsaTool {
    /// The NODE of the agent that owns the memory pointer info describes
    /// (its agentOwner), for the collector to attach on the same GPU.
    pub(super) fn owner_node(&self, info: &hsa_amd_pointer_info_t) -> Option<u32> {
        let get_info = self.core.hsa_agent_get_info_fn?;
        if info.agentOwner.handle == 0 {
            return None;
        }
        let mut node = u32::MAX;
        // SAFETY: original hsa_agent_get_info; NODE is a uint32_t.
        let st = unsafe {
            get_info(
                info.agentOwner,
                HSA_AGENT_INFO_NODE,
                (&mut node as *mut u32).cast(),
            )
        };
        (st == HSA_STATUS_SUCCESS && node != u32::MAX).then_some(node)
    }

    /// The runtime's description of the memory at `address`.
    pub(super) fn pointer_info_of(&self, address: u64) -> Option<hsa_amd_pointer_info_t> {
        let f = self.amd.hsa_amd_pointer_info_fn?;
        let mut info = hsa_amd_pointer_info_t::default();
        // SAFETY: original hsa_amd_pointer_info; `info.size` is set by Default;
        // no agent list is requested.
        let st = unsafe {
            f(
                address as *const c_void,
                &mut info,
                None,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        if st != HSA_STATUS_SUCCESS || info.type_ == HSA_EXT_POINTER_TYPE_UNKNOWN {
            return None;
        }
        Some(info)
    }

    pub(super) fn pointer_info(&self, address: u64) -> Option<Allocation> {
        let info = self.pointer_info_of(address)?;
        allocation_described(&info, address)
    }
}

/// The allocation holding `address` that pointer info `info` describes.
/// None for a virtual-memory mapping: ROCr gives the address asked about as
/// its base, with the whole mapping's size, so the range would reach past
/// the mapping (and a copy of it fault); mappings are known from the
/// `hsa_amd_vmem_map` wrap instead.
pub(super) fn allocation_described(
    info: &hsa_amd_pointer_info_t,
    address: u64,
) -> Option<Allocation> {
    if info.type_ == HSA_EXT_POINTER_TYPE_HSA_VMEM {
        return None;
    }
    let base = if info.agentBaseAddress.is_null() {
        info.hostBaseAddress
    } else {
        info.agentBaseAddress
    };
    let a = Allocation {
        base: base as u64,
        size: info.sizeInBytes as u64,
    };
    a.contains(address).then_some(a)
}
