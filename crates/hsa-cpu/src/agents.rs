//! Agents, their ISA and memory pools, and system information. Owns the
//! topology: one CPU agent (fine-grained, kernarg and coarse-grained pools)
//! and one or more GPU-type agents "gfx90a" (each with its own
//! coarse-grained pool and group segment) whose kernels run on the host.
//! The GPU count is DITTO_HSA_CPU_GPUS (1 to `MAX_GPUS`, default 1), read
//! once; the topology never changes afterwards.
//! Holds no mutable state but that count; never allocates memory (see
//! `memory::allocations`). What the CPU may do with a GPU's memory is
//! `memory::device_access`'s.

use hsa::*;
use std::ffi::{c_char, c_void};

pub const CPU_AGENT: hsa_agent_t = hsa_agent_t {
    handle: 0xD170_A6E0_0001,
};
/// The first GPU agent (the only one unless DITTO_HSA_CPU_GPUS says more).
pub const GPU_AGENT: hsa_agent_t = gpu_agent(0);

/// Environment variable: how many GPU agents the runtime reports.
pub const GPUS_ENV: &str = "DITTO_HSA_CPU_GPUS";
/// Largest accepted DITTO_HSA_CPU_GPUS (the GPUs of one MI300X node).
pub const MAX_GPUS: usize = 8;

/// Handles of GPU `i` and of its pools step by these from GPU 0's.
const GPU_HANDLE_STEP: u64 = 0x10;
const GPU_POOL_STEP: u64 = 0x100;

/// GPU agent `i` (0-based, in iteration order).
pub const fn gpu_agent(i: usize) -> hsa_agent_t {
    hsa_agent_t {
        handle: 0xD170_A6E0_0002 + GPU_HANDLE_STEP * i as u64,
    }
}

/// GPU `i`'s coarse-grained pool (what hipMalloc allocates from).
pub const fn gpu_coarse_pool(i: usize) -> hsa_amd_memory_pool_t {
    hsa_amd_memory_pool_t {
        handle: GPU_COARSE_POOL.handle + GPU_POOL_STEP * i as u64,
    }
}

/// GPU `i`'s group (LDS) segment.
pub const fn gpu_group_pool(i: usize) -> hsa_amd_memory_pool_t {
    hsa_amd_memory_pool_t {
        handle: GPU_GROUP_POOL.handle + GPU_POOL_STEP * i as u64,
    }
}

/// GPU agents reported: DITTO_HSA_CPU_GPUS, read once.
pub fn gpu_count() -> usize {
    static COUNT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *COUNT.get_or_init(|| {
        let value = std::env::var_os(GPUS_ENV);
        match parse_gpu_count(value.as_deref().map(|v| v.to_string_lossy()).as_deref()) {
            Ok(n) => n,
            Err(text) => {
                eprintln!(
                    "hsa-cpu: {GPUS_ENV}={text:?} is not a GPU count from 1 to {MAX_GPUS}; \
                     using 1 GPU agent"
                );
                1
            }
        }
    })
}

/// 1 when unset or empty; the offending text when invalid.
fn parse_gpu_count(value: Option<&str>) -> Result<usize, String> {
    let Some(text) = value.map(str::trim).filter(|t| !t.is_empty()) else {
        return Ok(1);
    };
    match text.parse::<usize>() {
        Ok(n) if (1..=MAX_GPUS).contains(&n) => Ok(n),
        _ => Err(text.to_string()),
    }
}

/// Every agent, in iteration order: the CPU agent, then the GPU agents.
pub fn all() -> &'static [hsa_agent_t] {
    static ALL: std::sync::OnceLock<Vec<hsa_agent_t>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        std::iter::once(CPU_AGENT)
            .chain((0..gpu_count()).map(gpu_agent))
            .collect()
    })
}

/// `i` where `handle` is `first + step * i` for a GPU this runtime reports.
fn gpu_step(handle: u64, first: u64, step: u64) -> Option<usize> {
    let offset = handle.checked_sub(first)?;
    let i = (offset / step) as usize;
    (offset % step == 0 && i < gpu_count()).then_some(i)
}

/// The index of a GPU agent this runtime reports.
pub(crate) fn gpu_index(agent: hsa_agent_t) -> Option<usize> {
    gpu_step(agent.handle, GPU_AGENT.handle, GPU_HANDLE_STEP)
}

pub(crate) fn is_gpu(agent: hsa_agent_t) -> bool {
    gpu_index(agent).is_some()
}

/// The GPU pool's owner index and whether it is the group segment.
fn gpu_pool_index(pool: hsa_amd_memory_pool_t) -> Option<(usize, bool)> {
    let index_from =
        |first: hsa_amd_memory_pool_t| gpu_step(pool.handle, first.handle, GPU_POOL_STEP);
    index_from(GPU_COARSE_POOL)
        .map(|i| (i, false))
        .or_else(|| index_from(GPU_GROUP_POOL).map(|i| (i, true)))
}

/// The GPU whose memory `pool` is (its coarse-grained pool): memory CPU
/// threads may not touch (`device_access`).
pub(crate) fn gpu_memory_index(pool: hsa_amd_memory_pool_t) -> Option<usize> {
    gpu_pool_index(pool)
        .filter(|(_, group)| !group)
        .map(|(i, _)| i)
}

/// Whether `pool` is a GPU's memory.
pub(crate) fn is_gpu_memory(pool: hsa_amd_memory_pool_t) -> bool {
    gpu_memory_index(pool).is_some()
}

/// Who reaches memory of GPU `owner` that `granted` was given access to:
/// the owner alone, or every GPU once another GPU is among them.
pub(crate) fn reach_of(
    owner: usize,
    granted: impl IntoIterator<Item = hsa_agent_t>,
) -> crate::memory::device_access::Reach {
    if granted
        .into_iter()
        .any(|a| gpu_index(a).is_some_and(|i| i != owner))
    {
        crate::memory::device_access::Reach::Peers
    } else {
        crate::memory::device_access::Reach::Gpu(owner)
    }
}

/// Whether `pool` is a GPU's group segment (not allocatable).
pub(crate) fn is_group_pool(pool: hsa_amd_memory_pool_t) -> bool {
    gpu_pool_index(pool).is_some_and(|(_, group)| group)
}

/// GPU 0's coarse-grained pool.
pub const GPU_COARSE_POOL: hsa_amd_memory_pool_t = hsa_amd_memory_pool_t {
    handle: 0xD170_9001_0001,
};
pub const CPU_FINE_POOL: hsa_amd_memory_pool_t = hsa_amd_memory_pool_t {
    handle: 0xD170_9001_0002,
};
pub const CPU_KERNARG_POOL: hsa_amd_memory_pool_t = hsa_amd_memory_pool_t {
    handle: 0xD170_9001_0003,
};
/// The GPU agent's group (LDS) segment: not allocatable, as in ROCr; the
/// real HIP runtime requires one and reads its SIZE as the LDS size.
pub const GPU_GROUP_POOL: hsa_amd_memory_pool_t = hsa_amd_memory_pool_t {
    handle: 0xD170_9001_0005,
};
/// Bytes of group memory per work-group (gfx90a's 64 KiB).
pub const GROUP_SEGMENT_SIZE: usize = 64 << 10;
/// System memory, coarse-grained: ROCr reports one on every CPU agent, and
/// the real HIP runtime queries it (it fails device creation without one).
pub const CPU_COARSE_POOL: hsa_amd_memory_pool_t = hsa_amd_memory_pool_t {
    handle: 0xD170_9001_0004,
};

pub const GFX90A_ISA: hsa_isa_t = hsa_isa_t {
    handle: 0xD170_15A0_0001,
};
pub const GFX90A_ISA_NAME: &str = "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-";

/// Compute units of each GPU agent (an MI210's 104 would do as well; CLR
/// reports COOPERATIVE_COMPUTE_UNIT_COUNT as the device's CU count).
pub const COMPUTE_UNITS: u32 = 110;
/// Wavefronts one compute unit keeps resident (gfx90a: 8 per SIMD, 4 SIMDs).
pub const MAX_WAVES_PER_CU: u32 = 32;

/// Ours, not gfx90a's 64: see the queue size rules in `queues`.
pub const QUEUE_MIN_SIZE: u32 = 4;
pub const QUEUE_MAX_SIZE: u32 = 131072;
pub const ALLOC_GRANULE: usize = 4096;

pub(crate) fn is_agent(agent: hsa_agent_t) -> bool {
    agent == CPU_AGENT || is_gpu(agent)
}

/// Pool's owning agent and global flags.
pub(crate) fn pool_info(pool: hsa_amd_memory_pool_t) -> Option<(hsa_agent_t, u32)> {
    if let Some((i, group)) = gpu_pool_index(pool) {
        let flags = if group {
            0
        } else {
            HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED
        };
        return Some((gpu_agent(i), flags));
    }
    match pool {
        CPU_FINE_POOL => Some((CPU_AGENT, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED)),
        CPU_KERNARG_POOL => Some((
            CPU_AGENT,
            HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT
                | HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED,
        )),
        CPU_COARSE_POOL => Some((CPU_AGENT, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED)),
        _ => None,
    }
}

fn pools_of(agent: hsa_agent_t) -> Vec<hsa_amd_memory_pool_t> {
    match gpu_index(agent) {
        Some(i) => vec![gpu_coarse_pool(i), gpu_group_pool(i)],
        None if agent == CPU_AGENT => vec![CPU_FINE_POOL, CPU_KERNARG_POOL, CPU_COARSE_POOL],
        None => Vec::new(),
    }
}

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

/// Nanoseconds of CLOCK_MONOTONIC: the system timestamp (frequency 1 GHz).
pub(crate) fn timestamp_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
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

/// SDMA engines our GPU agent reports (`hsa_amd_sdma_engine_id_t` bits
/// 0 and 1): two, as an MI200-class GCD. Copies run on the host whichever
/// is named.
pub const SDMA_ENGINES: u32 = 0x1 | 0x2;

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

/// Whether `engine_id` names exactly one engine this agent has.
pub(crate) fn is_sdma_engine(engine_id: u32) -> bool {
    engine_id.count_ones() == 1 && engine_id & SDMA_ENGINES != 0
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
