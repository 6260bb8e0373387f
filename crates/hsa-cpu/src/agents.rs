//! Agents and their memory pools: owns the topology. One CPU agent
//! (fine-grained, kernarg and coarse-grained pools) and one or more
//! GPU-type agents "gfx90a" (each with its own coarse-grained pool and group
//! segment) whose kernels run on the host. The GPU count is
//! DITTO_HSA_CPU_GPUS (1 to `MAX_GPUS`, default 1), read once; the topology
//! never changes afterwards. Also the handles, the ISA, the SDMA engines
//! and the system timestamp. What the info queries answer about all this
//! is `agent_info`'s.
//! Holds no mutable state but that count; never allocates memory (see
//! `memory::allocations`). What the CPU may do with a GPU's memory is
//! `memory::device_access`'s.

use hsa::*;

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

/// Compute units and resident wavefronts of each GPU agent: the engine's
/// (gpu_engine::limits), which bounds cooperative dispatches by them.
pub use gpu_engine::limits::{COMPUTE_UNITS, MAX_WAVES_PER_CU};

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

pub(crate) fn pools_of(agent: hsa_agent_t) -> Vec<hsa_amd_memory_pool_t> {
    match gpu_index(agent) {
        Some(i) => vec![gpu_coarse_pool(i), gpu_group_pool(i)],
        None if agent == CPU_AGENT => vec![CPU_FINE_POOL, CPU_KERNARG_POOL, CPU_COARSE_POOL],
        None => Vec::new(),
    }
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

/// SDMA engines our GPU agent reports (`hsa_amd_sdma_engine_id_t` bits
/// 0 and 1): two, as an MI200-class GCD. Copies run on the host whichever
/// is named.
pub const SDMA_ENGINES: u32 = 0x1 | 0x2;

/// Whether `engine_id` names exactly one engine this agent has.
pub(crate) fn is_sdma_engine(engine_id: u32) -> bool {
    engine_id.count_ones() == 1 && engine_id & SDMA_ENGINES != 0
}
