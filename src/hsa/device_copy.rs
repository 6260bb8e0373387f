//! The tool's reads of GPU memory. A discrete GPU's memory (a GPU pool's
//! coarse-grained memory: what hipMalloc returns) is not the CPU's to read:
//! mapped PROT_NONE unless the BAR is large, and even then a host read may
//! miss what the GPU's caches hold. The tool therefore reads it only
//! through the runtime's copy engine, `hsa_amd_memory_async_copy` (SDMA on
//! an Instinct GPU), into host memory the runtime knows: a bounce buffer
//! allocated from the CPU agent's fine-grained system pool. The copy is
//! correct because the target dispatch released its writes at SYSTEM scope
//! (`packet`) before `done` fired.
//!
//! Owns the decision of which memory needs it ([`Placement`]: from pointer
//! info's owning agent, never from `hostBaseAddress`, which ROCr fills in
//! for memory the CPU cannot reach), the bounce buffer, its completion
//! signal and the copy. Host memory (system pools, locked ranges, memory
//! the runtime does not know) is read in place by the caller. Every runtime
//! call goes through the original table entries it is given.

use crate::capture::staging::MAX_STAGED_BUFFER;
use hsa::*;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Why GPU memory could not be copied to the host.
#[derive(Debug, thiserror::Error)]
pub enum DeviceCopyError {
    #[error("{total} bytes are more than one device-to-host copy takes ({BOUNCE_BYTES})")]
    TooLarge { total: u64 },
    #[error("the runtime has no {0}")]
    MissingEntry(&'static str),
    #[error("hsa_amd_agents_allow_access for the tool's host buffer failed (status 0x{status:x})")]
    AllowAccess { status: hsa_status_t },
    #[error(
        "hsa_amd_memory_async_copy of {len} bytes at 0x{address:x} to the host failed \
         (status 0x{status:x})"
    )]
    Copy {
        len: u64,
        address: u64,
        status: hsa_status_t,
    },
    #[error("a device-to-host copy of 0x{src:x} did not finish in {seconds} s")]
    Unfinished { src: u64, seconds: u64 },
    #[error("cannot allocate the tool's {BOUNCE_BYTES}-byte host buffer (status 0x{status:x})")]
    BounceAllocation { status: hsa_status_t },
    #[error("cannot create the tool's copy signal (status 0x{status:x})")]
    CopySignal { status: hsa_status_t },
    #[error("the runtime has no CPU agent with a fine-grained system pool to copy GPU memory into")]
    NoHostPool,
}

/// Where a buffer lives, for the tool's reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Host memory: the CPU reads it in place.
    Host,
    /// A GPU's memory, owned by this agent: read through a copy.
    Device { owner: hsa_agent_t },
}

/// Bytes the bounce buffer holds: the largest staged buffer.
pub const BOUNCE_BYTES: usize = MAX_STAGED_BUFFER as usize;

/// How long a device-to-host copy may take before the tool gives up on it
/// (and on its bounce buffer, which the copy may still write).
const COPY_TIMEOUT: Duration = Duration::from_secs(30);

/// The original entries the copies use.
#[derive(Clone, Copy)]
pub struct CopyEntries<'t> {
    pub core: &'t CoreApiTable,
    pub amd: &'t AmdExtTable,
}

struct Bounce {
    ptr: *mut u8,
    signal: hsa_signal_t,
    cpu: hsa_agent_t,
    /// Owners granted access to the buffer (hsa_amd_agents_allow_access).
    allowed: Vec<u64>,
}

// SAFETY: the buffer is used only under the copier's mutex.
unsafe impl Send for Bounce {}

/// The bounce buffer and what the tool learnt of the agents.
#[derive(Default)]
pub struct DeviceCopier {
    bounce: Mutex<Option<Bounce>>,
    /// agent handle → whether it is a GPU.
    gpu_agents: Mutex<HashMap<u64, bool>>,
}

impl DeviceCopier {
    pub fn new() -> Self {
        Self::default()
    }

    /// Where the memory at `address` lives, from pointer info `info` of it
    /// (None: the runtime does not know the address, so it is host memory).
    pub fn placement(
        &self,
        rt: CopyEntries<'_>,
        info: Option<&hsa_amd_pointer_info_t>,
    ) -> Placement {
        let Some(info) = info else {
            return Placement::Host;
        };
        if info.type_ == HSA_EXT_POINTER_TYPE_LOCKED || info.agentOwner.handle == 0 {
            return Placement::Host;
        }
        if self.is_gpu(rt, info.agentOwner) {
            Placement::Device {
                owner: info.agentOwner,
            }
        } else {
            Placement::Host
        }
    }

    fn is_gpu(&self, rt: CopyEntries<'_>, agent: hsa_agent_t) -> bool {
        let mut known = self.gpu_agents.lock().unwrap_or_else(|e| e.into_inner());
        *known.entry(agent.handle).or_insert_with(|| {
            let Some(get_info) = rt.core.hsa_agent_get_info_fn else {
                return true;
            };
            // An agent the runtime cannot describe is taken for a GPU: a
            // copy is right for any memory, a CPU read is not.
            // SAFETY: the original hsa_agent_get_info.
            let device = unsafe { hsa::discover::device_type(get_info, agent) };
            device != Some(HSA_DEVICE_TYPE_CPU)
        })
    }

    /// Copies the ranges `windows` (offset from `src`, length) of `owner`'s
    /// memory at `src` into the bounce buffer, back to back, and hands
    /// those bytes to `use_bytes`. At most [`BOUNCE_BYTES`] in all.
    pub fn with_copy<R>(
        &self,
        rt: CopyEntries<'_>,
        src: u64,
        owner: hsa_agent_t,
        windows: &[(u64, u64)],
        use_bytes: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, DeviceCopyError> {
        let total: u64 = windows.iter().map(|(_, n)| n).sum();
        if total > BOUNCE_BYTES as u64 {
            return Err(DeviceCopyError::TooLarge { total });
        }
        let mut guard = self.bounce.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            *guard = Some(make_bounce(rt)?);
        }
        let bounce = guard.as_mut().expect("set above");
        if !bounce.allowed.contains(&owner.handle) {
            if let Some(allow) = rt.amd.hsa_amd_agents_allow_access_fn {
                // SAFETY: original allow_access of our own buffer for one agent.
                let st = unsafe { allow(1, &owner, std::ptr::null(), bounce.ptr as *const c_void) };
                if st != HSA_STATUS_SUCCESS {
                    return Err(DeviceCopyError::AllowAccess { status: st });
                }
            }
            bounce.allowed.push(owner.handle);
        }
        match copy_windows(rt, bounce, src, owner, windows) {
            Ok(()) => {}
            Err(CopyFailure::Refused(why)) => return Err(why),
            Err(CopyFailure::Unfinished(why)) => {
                // The engine may still write the buffer: never reuse it.
                *guard = None;
                return Err(why);
            }
        }
        // SAFETY: `total` bytes of our buffer, just written by completed
        // copies and read only under the lock.
        let bytes = unsafe { std::slice::from_raw_parts(bounce.ptr, total as usize) };
        Ok(use_bytes(bytes))
    }

    /// Copies `len` bytes of `owner`'s memory at `src` to the host a bounce
    /// buffer at a time, handing each chunk and its offset to `each`;
    /// `each`'s error comes back as it is.
    pub fn copy_in_chunks<E: From<DeviceCopyError>>(
        &self,
        rt: CopyEntries<'_>,
        src: u64,
        owner: hsa_agent_t,
        len: u64,
        mut each: impl FnMut(u64, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut at = 0u64;
        while at < len {
            let n = (len - at).min(BOUNCE_BYTES as u64);
            self.with_copy(rt, src + at, owner, &[(0, n)], |bytes| each(at, bytes))??;
            at += n;
        }
        Ok(())
    }
}

/// A table entry the copies need, or an error naming it.
fn required<T>(entry: Option<T>, name: &'static str) -> Result<T, DeviceCopyError> {
    entry.ok_or(DeviceCopyError::MissingEntry(name))
}

enum CopyFailure {
    /// No copy is in flight.
    Refused(DeviceCopyError),
    /// A copy may still be in flight.
    Unfinished(DeviceCopyError),
}

fn copy_windows(
    rt: CopyEntries<'_>,
    bounce: &Bounce,
    src: u64,
    owner: hsa_agent_t,
    windows: &[(u64, u64)],
) -> Result<(), CopyFailure> {
    let refused = CopyFailure::Refused;
    let copy = required(
        rt.amd.hsa_amd_memory_async_copy_fn,
        "hsa_amd_memory_async_copy",
    )
    .map_err(refused)?;
    let store = required(
        rt.core.hsa_signal_store_relaxed_fn,
        "hsa_signal_store_relaxed",
    )
    .map_err(refused)?;
    let subtract = required(
        rt.core.hsa_signal_subtract_relaxed_fn,
        "hsa_signal_subtract_relaxed",
    )
    .map_err(refused)?;
    let wait = required(
        rt.core.hsa_signal_wait_scacquire_fn,
        "hsa_signal_wait_scacquire",
    )
    .map_err(refused)?;
    let issued: Vec<&(u64, u64)> = windows.iter().filter(|(_, n)| *n > 0).collect();
    if issued.is_empty() {
        return Ok(());
    }
    // SAFETY: original store on our own signal, idle (no copy in flight).
    unsafe { store(bounce.signal, issued.len() as hsa_signal_value_t) };
    let mut at = 0usize;
    let mut failed = None;
    for (i, (offset, len)) in issued.iter().enumerate() {
        // SAFETY: original async copy of `len` bytes of the owner's memory
        // (inside the allocation the caller resolved) into our buffer
        // (at + len <= BOUNCE_BYTES, checked by the caller); the completion
        // signal counts the copies down.
        let st = unsafe {
            copy(
                bounce.ptr.add(at) as *mut c_void,
                bounce.cpu,
                (src + offset) as *const c_void,
                owner,
                *len as usize,
                0,
                std::ptr::null(),
                bounce.signal,
            )
        };
        if st != HSA_STATUS_SUCCESS {
            // The copies not issued will not count down: do it for them.
            // SAFETY: original subtract on our own signal.
            unsafe { subtract(bounce.signal, (issued.len() - i) as hsa_signal_value_t) };
            failed = Some(DeviceCopyError::Copy {
                len: *len,
                address: src + offset,
                status: st,
            });
            break;
        }
        at += *len as usize;
    }
    let started = Instant::now();
    loop {
        // SAFETY: original wait on our own signal; the timeout is a hint.
        let left = unsafe {
            wait(
                bounce.signal,
                HSA_SIGNAL_CONDITION_EQ,
                0,
                u64::MAX,
                HSA_WAIT_STATE_BLOCKED,
            )
        };
        if left == 0 {
            break;
        }
        if started.elapsed() > COPY_TIMEOUT {
            return Err(CopyFailure::Unfinished(DeviceCopyError::Unfinished {
                src,
                seconds: COPY_TIMEOUT.as_secs(),
            }));
        }
    }
    match failed {
        Some(why) => Err(CopyFailure::Refused(why)),
        None => Ok(()),
    }
}

/// The CPU agent's fine-grained system pool, a buffer of [`BOUNCE_BYTES`]
/// from it and a completion signal.
fn make_bounce(rt: CopyEntries<'_>) -> Result<Bounce, DeviceCopyError> {
    let (cpu, pool) = host_pool(rt)?;
    let allocate = required(
        rt.amd.hsa_amd_memory_pool_allocate_fn,
        "hsa_amd_memory_pool_allocate",
    )?;
    let create = required(rt.core.hsa_signal_create_fn, "hsa_signal_create")?;
    let mut ptr: *mut c_void = std::ptr::null_mut();
    // SAFETY: original allocate (not the tool's wrap: the buffer is never
    // a captured allocation) with a valid out-pointer.
    let st = unsafe { allocate(pool, BOUNCE_BYTES, 0, &mut ptr) };
    if st != HSA_STATUS_SUCCESS || ptr.is_null() {
        return Err(DeviceCopyError::BounceAllocation { status: st });
    }
    let mut signal = hsa_signal_t::default();
    // SAFETY: original signal create with no consumers and a valid out-pointer.
    let st = unsafe { create(0, 0, std::ptr::null(), &mut signal) };
    if st != HSA_STATUS_SUCCESS {
        if let Some(free) = rt.amd.hsa_amd_memory_pool_free_fn {
            // SAFETY: the buffer allocated above, used by nobody.
            unsafe { free(ptr) };
        }
        return Err(DeviceCopyError::CopySignal { status: st });
    }
    Ok(Bounce {
        ptr: ptr.cast(),
        signal,
        cpu,
        allowed: Vec::new(),
    })
}

/// The CPU agent and its fine-grained, runtime-allocatable global pool.
fn host_pool(rt: CopyEntries<'_>) -> Result<(hsa_agent_t, hsa_amd_memory_pool_t), DeviceCopyError> {
    let iterate_agents = required(rt.core.hsa_iterate_agents_fn, "hsa_iterate_agents")?;
    let iterate_pools = required(
        rt.amd.hsa_amd_agent_iterate_memory_pools_fn,
        "hsa_amd_agent_iterate_memory_pools",
    )?;
    let get_info = required(rt.core.hsa_agent_get_info_fn, "hsa_agent_get_info")?;
    let pool_info = required(
        rt.amd.hsa_amd_memory_pool_get_info_fn,
        "hsa_amd_memory_pool_get_info",
    )?;
    // SAFETY (all calls below): the original entries of an initialised runtime.
    let agents = unsafe { hsa::discover::agents(iterate_agents) }.unwrap_or_default();
    for agent in agents {
        let device = unsafe { hsa::discover::device_type(get_info, agent) };
        if device != Some(HSA_DEVICE_TYPE_CPU) {
            continue;
        }
        let pools =
            unsafe { hsa::discover::memory_pools(iterate_pools, agent) }.unwrap_or_default();
        let fine = pools.into_iter().find(|p| {
            unsafe { hsa::discover::allocatable_global_flags(pool_info, *p) }
                .is_some_and(|flags| flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED != 0)
        });
        if let Some(pool) = fine {
            return Ok((agent, pool));
        }
    }
    Err(DeviceCopyError::NoHostPool)
}
