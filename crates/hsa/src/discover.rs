//! Walking a runtime's topology through the entries a caller holds: the
//! agents `hsa_iterate_agents` lists, an agent's pools, and the flags of a
//! global pool. One place for the C callbacks that collect them, for the
//! tool (through its original table entries) and the collector (through
//! the symbols of the runtime it loaded).

use crate::signatures::{
    HsaAgentGetInfoFn, HsaAmdAgentIterateMemoryPoolsFn, HsaAmdMemoryPoolGetInfoFn,
    HsaIterateAgentsFn,
};
use crate::types::*;
use std::ffi::c_void;

unsafe extern "C" fn push<T>(item: T, data: *mut c_void) -> hsa_status_t {
    // SAFETY: `data` is the Vec<T> handed to the iteration that calls this.
    unsafe { (*(data as *mut Vec<T>)).push(item) };
    HSA_STATUS_SUCCESS
}

/// Every agent, in the runtime's order; the iteration's status when it fails.
///
/// # Safety
/// `iterate` is a runtime's hsa_iterate_agents, initialised.
pub unsafe fn agents(iterate: HsaIterateAgentsFn) -> Result<Vec<hsa_agent_t>, hsa_status_t> {
    let mut found: Vec<hsa_agent_t> = Vec::new();
    // SAFETY: the callback only pushes into `found`, which outlives the call.
    let st = unsafe {
        iterate(
            Some(push::<hsa_agent_t>),
            (&mut found as *mut Vec<hsa_agent_t>).cast(),
        )
    };
    if st != HSA_STATUS_SUCCESS && st != HSA_STATUS_INFO_BREAK {
        return Err(st);
    }
    Ok(found)
}

/// `agent`'s memory pools, in the runtime's order; the iteration's status
/// when it fails.
///
/// # Safety
/// `iterate` is a runtime's hsa_amd_agent_iterate_memory_pools, initialised.
pub unsafe fn memory_pools(
    iterate: HsaAmdAgentIterateMemoryPoolsFn,
    agent: hsa_agent_t,
) -> Result<Vec<hsa_amd_memory_pool_t>, hsa_status_t> {
    let mut found: Vec<hsa_amd_memory_pool_t> = Vec::new();
    // SAFETY: the callback only pushes into `found`, which outlives the call.
    let st = unsafe {
        iterate(
            agent,
            Some(push::<hsa_amd_memory_pool_t>),
            (&mut found as *mut Vec<hsa_amd_memory_pool_t>).cast(),
        )
    };
    if st != HSA_STATUS_SUCCESS && st != HSA_STATUS_INFO_BREAK {
        return Err(st);
    }
    Ok(found)
}

/// The agent's HSA_AGENT_INFO_DEVICE (None when the runtime cannot say).
///
/// # Safety
/// `get_info` is a runtime's hsa_agent_get_info, initialised.
pub unsafe fn device_type(get_info: HsaAgentGetInfoFn, agent: hsa_agent_t) -> Option<u32> {
    let mut device: u32 = u32::MAX;
    // SAFETY: DEVICE writes one hsa_device_type_t (u32).
    let st = unsafe {
        get_info(
            agent,
            HSA_AGENT_INFO_DEVICE,
            (&mut device as *mut u32).cast(),
        )
    };
    (st == HSA_STATUS_SUCCESS).then_some(device)
}

/// The GLOBAL_FLAGS of `pool` if it is a global-segment pool the runtime
/// allocates from (None for any other pool, or when it cannot say).
///
/// # Safety
/// `get_info` is a runtime's hsa_amd_memory_pool_get_info, initialised.
pub unsafe fn allocatable_global_flags(
    get_info: HsaAmdMemoryPoolGetInfoFn,
    pool: hsa_amd_memory_pool_t,
) -> Option<u32> {
    let mut segment: u32 = u32::MAX;
    let mut flags: u32 = 0;
    let mut alloc_allowed = false;
    // SAFETY: SEGMENT and GLOBAL_FLAGS write a u32, RUNTIME_ALLOC_ALLOWED a bool.
    let ok = unsafe {
        get_info(
            pool,
            HSA_AMD_MEMORY_POOL_INFO_SEGMENT,
            (&mut segment as *mut u32).cast(),
        ) == HSA_STATUS_SUCCESS
            && get_info(
                pool,
                HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS,
                (&mut flags as *mut u32).cast(),
            ) == HSA_STATUS_SUCCESS
            && get_info(
                pool,
                HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED,
                (&mut alloc_allowed as *mut bool).cast(),
            ) == HSA_STATUS_SUCCESS
    };
    (ok && segment == HSA_AMD_SEGMENT_GLOBAL && alloc_allowed).then_some(flags)
}
