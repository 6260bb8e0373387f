//! What the info queries answer about the topology (`agents`): system,
//! agent, ISA and memory-pool info, the iterations over agents, ISAs and
//! pools, `hsa_status_string`, and the copy-engine and scratch queries.
//! Every answer writes the attribute's documented type into the caller's
//! storage. Over `agents`; owns no state.

use crate::agents::*;
use hsa::*;
use std::ffi::{c_char, c_void};

/// Bytes of physical memory: the size reported for every pool.
fn physical_memory() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if pages > 0 && page > 0 {
        pages as usize * page as usize
    } else {
        16 << 30
    }
}

fn cpu_count() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

/// Writes `v` to the caller's attribute storage.
///
/// # Safety
/// `value` must be valid for writes of a `T` (the attribute's documented type).
unsafe fn put<T>(value: *mut c_void, v: T) -> hsa_status_t {
    // SAFETY: per the function contract; attribute storage may be unaligned.
    unsafe { (value as *mut T).write_unaligned(v) };
    HSA_STATUS_SUCCESS
}

/// Writes a NUL-padded string into a fixed char[N] attribute.
///
/// # Safety
/// `value` must be valid for writes of N bytes.
unsafe fn put_chars<const N: usize>(value: *mut c_void, s: &str) -> hsa_status_t {
    let mut buf = [0u8; N];
    let n = s.len().min(N - 1);
    buf[..n].copy_from_slice(&s.as_bytes()[..n]);
    // SAFETY: the caller's attribute storage is char[N].
    unsafe { put(value, buf) }
}

/// # Safety
/// `value` is null or valid for writes of the attribute's type (hsa.h).
pub(crate) unsafe fn system_get_info(
    attribute: hsa_system_info_t,
    value: *mut c_void,
) -> hsa_status_t {
    if value.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: value is non-null; each arm writes the attribute's type.
    unsafe {
        match attribute {
            HSA_SYSTEM_INFO_VERSION_MAJOR => put(value, 1u16),
            HSA_SYSTEM_INFO_VERSION_MINOR => put(value, 1u16),
            HSA_SYSTEM_INFO_TIMESTAMP => put(value, timestamp_ns()),
            HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY => put(value, 1_000_000_000u64),
            HSA_SYSTEM_INFO_SIGNAL_MAX_WAIT => put(value, u64::MAX),
            HSA_SYSTEM_INFO_ENDIANNESS => put(value, 0u32),
            HSA_SYSTEM_INFO_MACHINE_MODEL => put(value, 1u32),
            7 => put(value, [0u8; 128]), // HSA_SYSTEM_INFO_EXTENSIONS
            // HSA_AMD_SYSTEM_INFO_SVM_SUPPORTED / _SVM_ACCESSIBLE_BY_DEFAULT:
            // no hsa_amd_svm_* here (the real HIP runtime then disables HMM).
            0x201 | 0x202 => put(value, false),
            // VIRTUAL_MEM_API_SUPPORTED: hsa_amd_vmem_* (`virtual_memory`).
            0x205 => put(value, true),
            // MWAITX_ENABLED, DMABUF_SUPPORTED, XNACK_ENABLED.
            0x203 | 0x204 | 0x206 => put(value, false),
            _ => HSA_STATUS_ERROR_INVALID_ARGUMENT,
        }
    }
}

/// # Safety
/// `callback`, if any, may be called with each agent and `data`.
pub(crate) unsafe fn iterate_agents(
    callback: Option<unsafe extern "C" fn(hsa_agent_t, *mut c_void) -> hsa_status_t>,
    data: *mut c_void,
) -> hsa_status_t {
    let Some(cb) = callback else {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    };
    // SAFETY: `cb` may be called with each agent and `data` (our contract).
    unsafe { visit(all().iter().copied(), cb, data) }
}

/// Calls `cb` for each item until it returns anything but success, and
/// returns that status (HSA's iteration contract, e.g. INFO_BREAK).
///
/// # Safety
/// `cb` may be called with each item and `data`.
unsafe fn visit<T>(
    items: impl IntoIterator<Item = T>,
    cb: unsafe extern "C" fn(T, *mut c_void) -> hsa_status_t,
    data: *mut c_void,
) -> hsa_status_t {
    for item in items {
        // SAFETY: calling the application's callback as the API requires.
        let status = unsafe { cb(item, data) };
        if status != HSA_STATUS_SUCCESS {
            return status;
        }
    }
    HSA_STATUS_SUCCESS
}

/// # Safety
/// `value` is null or valid for writes of the attribute's type (hsa.h).
pub(crate) unsafe fn agent_get_info(
    agent: hsa_agent_t,
    attribute: hsa_agent_info_t,
    value: *mut c_void,
) -> hsa_status_t {
    if !is_agent(agent) {
        return HSA_STATUS_ERROR_INVALID_AGENT;
    }
    if value.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let gpu_index = gpu_index(agent);
    let gpu = gpu_index.is_some();
    // Node, driver id, PCI bus and UUID tell the GPUs apart (CLR orders and
    // names devices by them).
    let n = gpu_index.unwrap_or(0) as u32;
    // SAFETY: value is non-null; each arm writes the attribute's documented type.
    unsafe {
        match attribute {
            HSA_AGENT_INFO_NAME => put_chars::<64>(value, if gpu { "gfx90a" } else { "ditto-cpu" }),
            HSA_AGENT_INFO_VENDOR_NAME => put_chars::<64>(value, if gpu { "AMD" } else { "CPU" }),
            HSA_AGENT_INFO_FEATURE => put(
                value,
                if gpu {
                    HSA_AGENT_FEATURE_KERNEL_DISPATCH
                } else {
                    HSA_AGENT_FEATURE_AGENT_DISPATCH
                },
            ),
            HSA_AGENT_INFO_MACHINE_MODEL => put(value, 1u32),
            HSA_AGENT_INFO_PROFILE => put(
                value,
                if gpu {
                    HSA_PROFILE_BASE
                } else {
                    HSA_PROFILE_FULL
                },
            ),
            5 => put(value, HSA_DEFAULT_FLOAT_ROUNDING_MODE_NEAR),
            23 => put(value, HSA_DEFAULT_FLOAT_ROUNDING_MODE_NEAR),
            24 => put(value, false), // FAST_F16_OPERATION
            HSA_AGENT_INFO_WAVEFRONT_SIZE => put(value, if gpu { 64u32 } else { 0 }),
            HSA_AGENT_INFO_WORKGROUP_MAX_DIM => put(value, if gpu { [1024u16; 3] } else { [0; 3] }),
            HSA_AGENT_INFO_WORKGROUP_MAX_SIZE => put(value, if gpu { 1024u32 } else { 0 }),
            HSA_AGENT_INFO_GRID_MAX_DIM => put(value, if gpu { [u32::MAX; 3] } else { [0; 3] }),
            HSA_AGENT_INFO_GRID_MAX_SIZE => put(value, if gpu { u32::MAX } else { 0 }),
            11 => put(value, if gpu { 32u32 } else { 0 }), // FBARRIER_MAX_SIZE
            HSA_AGENT_INFO_QUEUES_MAX => put(value, if gpu { 128u32 } else { 0 }),
            HSA_AGENT_INFO_QUEUE_MIN_SIZE => put(value, if gpu { QUEUE_MIN_SIZE } else { 0 }),
            HSA_AGENT_INFO_QUEUE_MAX_SIZE => put(value, if gpu { QUEUE_MAX_SIZE } else { 0 }),
            HSA_AGENT_INFO_QUEUE_TYPE => put(value, HSA_QUEUE_TYPE_MULTI),
            HSA_AGENT_INFO_NODE => put(value, if gpu { 1 + n } else { 0 }),
            HSA_AGENT_INFO_DEVICE => put(
                value,
                if gpu {
                    HSA_DEVICE_TYPE_GPU
                } else {
                    HSA_DEVICE_TYPE_CPU
                },
            ),
            18 => put(
                value,
                if gpu {
                    [16u32 << 10, 8 << 20, 0, 0]
                } else {
                    [32 << 10, 1 << 20, 0, 0]
                },
            ),
            HSA_AGENT_INFO_ISA => put(
                value,
                if gpu {
                    GFX90A_ISA
                } else {
                    hsa_isa_t { handle: 0 }
                },
            ),
            20 => put(value, [0u8; 128]), // EXTENSIONS
            HSA_AGENT_INFO_VERSION_MAJOR => put(value, 1u16),
            HSA_AGENT_INFO_VERSION_MINOR => put(value, 1u16),
            0xA000 => put(value, if gpu { 0x740cu32 } else { 0 }), // CHIP_ID
            0xA001 => put(value, 64u32),                           // CACHELINE_SIZE
            0xA002 => put(value, if gpu { COMPUTE_UNITS } else { cpu_count() }), // COMPUTE_UNIT_COUNT
            0xA003 => put(value, if gpu { 1700u32 } else { 2000 }), // MAX_CLOCK_FREQUENCY
            0xA004 => put(value, if gpu { 1 + n } else { 0 }),      // DRIVER_NODE_ID
            0xA005 => put(value, if gpu { 4u32 } else { 0 }),       // MAX_ADDRESS_WATCH_POINTS
            0xA006 => put(value, if gpu { (1 + n) << 8 } else { 0 }), // BDFID: bus 1 + n
            0xA007 => put(value, if gpu { 4096u32 } else { 64 }),   // MEMORY_WIDTH
            0xA008 => put(value, 1600u32),                          // MEMORY_MAX_FREQUENCY
            0xA009 => put_chars::<64>(
                value,
                if gpu {
                    "ditto CPU runtime (gfx90a on host)"
                } else {
                    "ditto CPU runtime host"
                },
            ),
            0xA00A => put(value, if gpu { MAX_WAVES_PER_CU } else { 0 }), // MAX_WAVES_PER_CU
            0xA00B => put(value, if gpu { 4u32 } else { 0 }),             // NUM_SIMDS_PER_CU
            0xA00C => put(value, if gpu { 8u32 } else { 0 }),             // NUM_SHADER_ENGINES
            0xA00D => put(value, 1u32),        // NUM_SHADER_ARRAYS_PER_SE
            0xA00E => put(value, [0usize; 2]), // HDP_FLUSH: no registers
            0xA00F => put(value, 0u32),        // DOMAIN
            // COOPERATIVE_QUEUES: a cooperative queue runs every group at
            // once (dispatch.rs), so grid-wide syncs work.
            0xA010 => put(value, gpu),
            0xA011 => put_chars::<21>(
                value,
                &if gpu {
                    format!("GPU-d177000000000{n:x}")
                } else {
                    "CPU-XX".to_string()
                },
            ),
            0xA012 => put(value, 0u32), // ASIC_REVISION
            0xA013 => put(value, true), // SVM_DIRECT_HOST_ACCESS
            0xA014 => put(value, if gpu { COMPUTE_UNITS } else { 0 }), // COOPERATIVE_COMPUTE_UNIT_COUNT
            0xA015 => put(value, if gpu { 64u64 << 30 } else { 0 }),   // MEMORY_AVAIL
            // TIMESTAMP_FREQUENCY: the system's (dispatch times are in its ticks).
            0xA016 => put(value, 1_000_000_000u64),
            0xA107 => put(value, if gpu { 141u32 } else { 0 }), // ASIC_FAMILY_ID (AI: gfx9)
            0xA108 | 0xA109 => put(value, 0u32),                // UCODE_VERSION, SDMA_UCODE_VERSION
            // NUM_SDMA_ENG (HIP 6.4 creates no device without it), NUM_SDMA_XGMI_ENG.
            0xA10A => put(value, if gpu { SDMA_ENGINES.count_ones() } else { 0 }),
            0xA10B => put(value, 0u32),
            0xA110 => put(value, 0u32), // IOMMU_SUPPORT: HSA_IOMMU_SUPPORT_NONE
            0xA111 => put(value, if gpu { 1u32 } else { 0 }), // NUM_XCC
            0xA112 => put(value, if gpu { 1 + n } else { 0 }), // DRIVER_UID
            0xA113 => put(value, CPU_AGENT), // NEAREST_CPU
            // MEMORY_PROPERTIES (no AGENT_IS_APU bit: a discrete GPU), AQL_EXTENSIONS.
            0xA114 | 0xA115 => put(value, [0u8; 8]),
            // SCRATCH_LIMIT_MAX, SCRATCH_LIMIT_CURRENT.
            0xA116 | 0xA117 => put(value, if gpu { 4u64 << 30 } else { 0 }),
            _ => HSA_STATUS_ERROR_INVALID_ARGUMENT,
        }
    }
}

/// # Safety
/// `callback`, if any, may be called with an ISA and `data`.
pub(crate) unsafe fn agent_iterate_isas(
    agent: hsa_agent_t,
    callback: Option<unsafe extern "C" fn(hsa_isa_t, *mut c_void) -> hsa_status_t>,
    data: *mut c_void,
) -> hsa_status_t {
    if !is_agent(agent) {
        return HSA_STATUS_ERROR_INVALID_AGENT;
    }
    let Some(cb) = callback else {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    };
    if is_gpu(agent) {
        // SAFETY: calling the application's callback as the API requires.
        return unsafe { cb(GFX90A_ISA, data) };
    }
    HSA_STATUS_SUCCESS
}

/// # Safety
/// `value` is null or valid for writes of the attribute's type; for
/// NAME, of NAME_LENGTH bytes (hsa.h).
pub(crate) unsafe fn isa_get_info_alt(
    isa: hsa_isa_t,
    attribute: hsa_isa_info_t,
    value: *mut c_void,
) -> hsa_status_t {
    if isa != GFX90A_ISA {
        return HSA_STATUS_ERROR_INVALID_ISA;
    }
    if value.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    match attribute {
        // As ROCr: the length counts the terminating NUL, and NAME writes it.
        // SAFETY: NAME_LENGTH is a uint32_t.
        HSA_ISA_INFO_NAME_LENGTH => unsafe { put(value, GFX90A_ISA_NAME.len() as u32 + 1) },
        HSA_ISA_INFO_NAME => {
            // SAFETY: the caller provides NAME_LENGTH bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    GFX90A_ISA_NAME.as_ptr(),
                    value as *mut u8,
                    GFX90A_ISA_NAME.len(),
                );
                *(value as *mut u8).add(GFX90A_ISA_NAME.len()) = 0;
            }
            HSA_STATUS_SUCCESS
        }
        _ => HSA_STATUS_ERROR_INVALID_ARGUMENT,
    }
}

/// # Safety
/// `callback`, if any, may be called with each pool and `data`.
pub(crate) unsafe fn iterate_memory_pools(
    agent: hsa_agent_t,
    callback: Option<unsafe extern "C" fn(hsa_amd_memory_pool_t, *mut c_void) -> hsa_status_t>,
    data: *mut c_void,
) -> hsa_status_t {
    if !is_agent(agent) {
        return HSA_STATUS_ERROR_INVALID_AGENT;
    }
    let Some(cb) = callback else {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    };
    // SAFETY: `cb` may be called with each pool and `data` (our contract).
    unsafe { visit(pools_of(agent), cb, data) }
}

/// # Safety
/// `value` is null or valid for writes of the attribute's type
/// (hsa_ext_amd.h).
pub(crate) unsafe fn memory_pool_get_info(
    pool: hsa_amd_memory_pool_t,
    attribute: hsa_amd_memory_pool_info_t,
    value: *mut c_void,
) -> hsa_status_t {
    let Some((owner, flags)) = pool_info(pool) else {
        return HSA_STATUS_ERROR_INVALID_MEMORY_POOL;
    };
    if value.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let group = is_group_pool(pool);
    let gpu_local = is_gpu(owner) && !group;
    // SAFETY: value is non-null; each arm writes the attribute's documented type.
    unsafe {
        match attribute {
            HSA_AMD_MEMORY_POOL_INFO_SEGMENT if group => put(value, HSA_AMD_SEGMENT_GROUP),
            HSA_AMD_MEMORY_POOL_INFO_SIZE if group => put(value, GROUP_SEGMENT_SIZE),
            HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED if group => put(value, false),
            HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE
            | HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALIGNMENT
            | HSA_AMD_MEMORY_POOL_INFO_ALLOC_MAX_SIZE
                if group =>
            {
                put(value, 0usize)
            }
            HSA_AMD_MEMORY_POOL_INFO_SEGMENT => put(value, HSA_AMD_SEGMENT_GLOBAL),
            HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS => put(value, flags),
            HSA_AMD_MEMORY_POOL_INFO_SIZE => put(value, physical_memory()),
            HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED => put(value, true),
            HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE => put(value, ALLOC_GRANULE),
            HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALIGNMENT => put(value, ALLOC_GRANULE),
            HSA_AMD_MEMORY_POOL_INFO_ACCESSIBLE_BY_ALL => put(value, !gpu_local),
            HSA_AMD_MEMORY_POOL_INFO_ALLOC_MAX_SIZE => put(value, physical_memory()),
            _ => HSA_STATUS_ERROR_INVALID_ARGUMENT,
        }
    }
}

/// # Safety
/// `value` is null or valid for writes of the attribute's type
/// (hsa_ext_amd.h).
pub(crate) unsafe fn agent_memory_pool_get_info(
    agent: hsa_agent_t,
    pool: hsa_amd_memory_pool_t,
    attribute: hsa_amd_agent_memory_pool_info_t,
    value: *mut c_void,
) -> hsa_status_t {
    if !is_agent(agent) {
        return HSA_STATUS_ERROR_INVALID_AGENT;
    }
    let Some((owner, _)) = pool_info(pool) else {
        return HSA_STATUS_ERROR_INVALID_MEMORY_POOL;
    };
    if value.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: value is non-null; each arm writes the attribute's documented type.
    unsafe {
        match attribute {
            HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS => {
                // As ROCr: system memory is open to every agent; a GPU's
                // memory to another GPU only after hsa_amd_agents_allow_access;
                // to the CPU never, but on a large-BAR system
                // (`device_access::cpu_access`).
                let access = if owner == agent || owner == CPU_AGENT {
                    HSA_AMD_MEMORY_POOL_ACCESS_ALLOWED_BY_DEFAULT
                } else if agent == CPU_AGENT {
                    crate::memory::device_access::cpu_access()
                } else {
                    HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT
                };
                put(value, access)
            }
            1 => put(value, 0u32), // NUM_LINK_HOPS
            _ => HSA_STATUS_ERROR_INVALID_ARGUMENT,
        }
    }
}

/// Static descriptions for `hsa_status_string`.
///
/// # Safety
/// `out` is null or valid for writes of one pointer.
pub(crate) unsafe fn status_string(status: hsa_status_t, out: *mut *const c_char) -> hsa_status_t {
    if out.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let s: &'static std::ffi::CStr = match status {
        HSA_STATUS_SUCCESS => c"HSA_STATUS_SUCCESS: The function has been executed successfully.",
        HSA_STATUS_INFO_BREAK => c"HSA_STATUS_INFO_BREAK: A traversal over a list of elements has been interrupted by the application before completing.",
        HSA_STATUS_ERROR => c"HSA_STATUS_ERROR: A generic error has occurred.",
        HSA_STATUS_ERROR_INVALID_ARGUMENT => c"HSA_STATUS_ERROR_INVALID_ARGUMENT: One of the actual arguments does not meet a precondition stated in the documentation of the corresponding formal argument.",
        HSA_STATUS_ERROR_INVALID_QUEUE_CREATION => c"HSA_STATUS_ERROR_INVALID_QUEUE_CREATION: The requested queue creation is not valid.",
        HSA_STATUS_ERROR_INVALID_ALLOCATION => c"HSA_STATUS_ERROR_INVALID_ALLOCATION: The requested allocation is not valid.",
        HSA_STATUS_ERROR_INVALID_AGENT => c"HSA_STATUS_ERROR_INVALID_AGENT: The agent is invalid.",
        HSA_STATUS_ERROR_INVALID_SIGNAL => c"HSA_STATUS_ERROR_INVALID_SIGNAL: The signal is invalid.",
        HSA_STATUS_ERROR_INVALID_QUEUE => c"HSA_STATUS_ERROR_INVALID_QUEUE: The queue is invalid.",
        HSA_STATUS_ERROR_OUT_OF_RESOURCES => c"HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary resources.",
        HSA_STATUS_ERROR_INVALID_PACKET_FORMAT => c"HSA_STATUS_ERROR_INVALID_PACKET_FORMAT: The AQL packet is malformed.",
        HSA_STATUS_ERROR_NOT_INITIALIZED => c"HSA_STATUS_ERROR_NOT_INITIALIZED: An API other than hsa_init has been invoked while the reference count of the HSA runtime is zero.",
        HSA_STATUS_ERROR_INVALID_ISA => c"HSA_STATUS_ERROR_INVALID_ISA: The instruction set architecture is invalid.",
        HSA_STATUS_ERROR_INVALID_CODE_OBJECT => c"HSA_STATUS_ERROR_INVALID_CODE_OBJECT: The code object is invalid (the CPU runtime runs host code objects, and AMDGPU code objects whose kernels have host builds or are CLR blit kernels; see ditto_hsa_cpu.h).",
        HSA_STATUS_ERROR_INVALID_EXECUTABLE => c"HSA_STATUS_ERROR_INVALID_EXECUTABLE: The executable is invalid.",
        HSA_STATUS_ERROR_FROZEN_EXECUTABLE => c"HSA_STATUS_ERROR_FROZEN_EXECUTABLE: The executable is frozen.",
        HSA_STATUS_ERROR_INVALID_SYMBOL_NAME => c"HSA_STATUS_ERROR_INVALID_SYMBOL_NAME: There is no symbol with the given name.",
        HSA_STATUS_ERROR_EXCEPTION => c"HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception.",
        HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL => c"HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL: The executable symbol is invalid.",
        HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER => c"HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER: The code object reader is invalid.",
        HSA_STATUS_ERROR_INVALID_RUNTIME_STATE => c"HSA_STATUS_ERROR_INVALID_RUNTIME_STATE: The runtime is in an invalid state for this operation.",
        HSA_STATUS_ERROR_INVALID_MEMORY_POOL => c"HSA_STATUS_ERROR_INVALID_MEMORY_POOL: The memory pool is invalid.",
        _ => return HSA_STATUS_ERROR_INVALID_ARGUMENT,
    };
    // SAFETY: out is non-null; the string is 'static.
    unsafe { out.write(s.as_ptr()) };
    HSA_STATUS_SUCCESS
}

/// `hsa_amd_memory_copy_engine_status` (ROCm 5.6+): the engines available
/// between two agents. The same agent on both sides is a shader copy, not
/// an SDMA one (HSA_STATUS_ERROR_INVALID_AGENT, as the header says).
///
/// # Safety
/// `engine_ids_mask` is null or valid for writes of a u32.
pub(crate) unsafe fn copy_engine_status(
    dst_agent: hsa_agent_t,
    src_agent: hsa_agent_t,
    engine_ids_mask: *mut u32,
) -> hsa_status_t {
    if !is_agent(dst_agent) || !is_agent(src_agent) || dst_agent.handle == src_agent.handle {
        return HSA_STATUS_ERROR_INVALID_AGENT;
    }
    if engine_ids_mask.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: non-null, the caller's out-parameter.
    unsafe { engine_ids_mask.write(SDMA_ENGINES) };
    HSA_STATUS_SUCCESS
}

/// `hsa_amd_agent_set_async_scratch_limit` (ROCm 6.1+): accepted for the
/// GPU agent; the host has no scratch to reclaim.
pub(crate) fn set_async_scratch_limit(agent: hsa_agent_t, _threshold: usize) -> hsa_status_t {
    if !is_gpu(agent) {
        return HSA_STATUS_ERROR_INVALID_AGENT;
    }
    HSA_STATUS_SUCCESS
}

/// `hsa_amd_memory_get_preferred_copy_engine` (ROCm 7.0+): no preference
/// between our engines (0, which the header allows), for any two agents.
///
/// # Safety
/// `recommended_ids_mask` is null or valid for writes of a u32.
pub(crate) unsafe fn preferred_copy_engine(
    dst_agent: hsa_agent_t,
    src_agent: hsa_agent_t,
    recommended_ids_mask: *mut u32,
) -> hsa_status_t {
    if !is_agent(dst_agent) || !is_agent(src_agent) {
        return HSA_STATUS_ERROR_INVALID_AGENT;
    }
    if recommended_ids_mask.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: non-null, the caller's out-parameter.
    unsafe { recommended_ids_mask.write(0) };
    HSA_STATUS_SUCCESS
}
