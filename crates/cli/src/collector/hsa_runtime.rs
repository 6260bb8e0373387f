//! The HSA runtime as the collector uses it, loaded at run time: dlopen of
//! the library `--hsa-runtime` chose (`crate::runtime_choice`), hsa_init,
//! the GPU agents with their NODEs and the CPU agent, whether the CPU may
//! read GPU memory in place, and the IPC entry points the buffer source
//! (`hsa`) calls. The twin of `cuda_driver`.
//!
//! Owns loading the runtime and knowing its agents; declares
//! no HSA type of its own (crates/hsa does). The runtime is shut down on
//! drop but never dlclosed (threads it started may still run).

use cuda_abi::{Library, dlerror_text};
use hsa::{
    HSA_AGENT_INFO_NODE, HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS,
    HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED,
    HSA_DEVICE_TYPE_CPU, HSA_DEVICE_TYPE_GPU, HSA_STATUS_SUCCESS, HsaAgentGetInfoFn,
    HsaAmdAgentIterateMemoryPoolsFn, HsaAmdAgentMemoryPoolGetInfoFn, HsaAmdIpcMemoryAttachFn,
    HsaAmdIpcMemoryDetachFn, HsaAmdMemoryPoolGetInfoFn, HsaInitFn, HsaIterateAgentsFn,
    HsaMemoryCopyFn, HsaShutDownFn, HsaStatusStringFn, hsa_agent_t, hsa_status_t,
};
use std::ffi::{CStr, c_void};
use std::path::Path;

/// Why the HSA runtime did not load or initialise.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot load the HSA runtime {library}: {reason}")]
    Load { library: String, reason: String },
    #[error("the HSA runtime {library} lacks {symbol}: {reason}")]
    MissingSymbol {
        library: String,
        symbol: &'static str,
        reason: String,
    },
    #[error("{call} failed in {library}: {status}")]
    Call {
        library: String,
        call: &'static str,
        status: String,
    },
}

/// A loaded and initialised HSA runtime. hsa_shut_down runs on drop (HSA
/// reference-counts hsa_init, so several may coexist in one process).
pub struct HsaRuntime {
    library: String,
    lib: Library,
    shut_down: HsaShutDownFn,
    status_string: Option<HsaStatusStringFn>,
    pub(super) attach: HsaAmdIpcMemoryAttachFn,
    pub(super) detach: HsaAmdIpcMemoryDetachFn,
    pub(super) memory_copy: HsaMemoryCopyFn,
    /// Every GPU agent and its NODE, in iteration order.
    gpu_agents: Vec<(hsa_agent_t, u32)>,
    /// The first CPU agent.
    cpu_agent: Option<hsa_agent_t>,
}

// SAFETY: the handle and function pointers are process-global; HSA's API is thread-safe.
unsafe impl Send for HsaRuntime {}
// SAFETY: as above; HsaRuntime has no interior mutability.
unsafe impl Sync for HsaRuntime {}

impl std::fmt::Debug for HsaRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HsaRuntime")
            .field("library", &self.library)
            .field("gpu_agents", &self.gpu_agents)
            .finish()
    }
}

impl HsaRuntime {
    /// dlopens `library` (a path, or a SONAME searched the usual way),
    /// runs hsa_init and finds the GPU agents.
    pub fn load(library: &Path) -> Result<HsaRuntime, LoadError> {
        let name = library.display().to_string();
        let lib = Library::open(library).map_err(|e| LoadError::Load {
            library: name.clone(),
            reason: e.to_string(),
        })?;
        let sym = |symbol: &'static str| -> Result<*mut c_void, LoadError> {
            lib.symbol(symbol).ok_or_else(|| LoadError::MissingSymbol {
                library: name.clone(),
                symbol,
                reason: dlerror_text(),
            })
        };
        // SAFETY (all transmutes below): each symbol is the HSA function of that name,
        // whose C signature is the one crates/hsa declares for it.
        let init: HsaInitFn = unsafe { std::mem::transmute(sym("hsa_init")?) };
        let shut_down: HsaShutDownFn = unsafe { std::mem::transmute(sym("hsa_shut_down")?) };
        let iterate: HsaIterateAgentsFn =
            unsafe { std::mem::transmute(sym("hsa_iterate_agents")?) };
        let get_info: HsaAgentGetInfoFn =
            unsafe { std::mem::transmute(sym("hsa_agent_get_info")?) };
        let attach: HsaAmdIpcMemoryAttachFn =
            unsafe { std::mem::transmute(sym("hsa_amd_ipc_memory_attach")?) };
        let detach: HsaAmdIpcMemoryDetachFn =
            unsafe { std::mem::transmute(sym("hsa_amd_ipc_memory_detach")?) };
        let memory_copy: HsaMemoryCopyFn = unsafe { std::mem::transmute(sym("hsa_memory_copy")?) };
        let status_string: Option<HsaStatusStringFn> = sym("hsa_status_string")
            .ok()
            .map(|p| unsafe { std::mem::transmute(p) });
        let mut rt = HsaRuntime {
            library: name,
            lib,
            shut_down,
            status_string,
            attach,
            detach,
            memory_copy,
            gpu_agents: Vec::new(),
            cpu_agent: None,
        };
        // SAFETY: hsa_init takes no arguments.
        let st = unsafe { init() };
        if st != HSA_STATUS_SUCCESS {
            let status = rt.describe(st);
            // Not initialised: do not shut down on drop.
            std::mem::forget(rt);
            return Err(LoadError::Call {
                library: library.display().to_string(),
                call: "hsa_init",
                status,
            });
        }
        // SAFETY: the runtime is initialised; get_info is its own.
        let agents = unsafe { hsa::discover::agents(iterate) }.map_err(|st| LoadError::Call {
            library: rt.library.clone(),
            call: "hsa_iterate_agents",
            status: rt.describe(st),
        })?;
        for agent in agents {
            // SAFETY: as above.
            match unsafe { hsa::discover::device_type(get_info, agent) } {
                Some(HSA_DEVICE_TYPE_GPU) => {
                    let mut node = u32::MAX;
                    // SAFETY: NODE writes one uint32_t.
                    let st = unsafe {
                        get_info(agent, HSA_AGENT_INFO_NODE, (&mut node as *mut u32).cast())
                    };
                    let node = if st == HSA_STATUS_SUCCESS {
                        node
                    } else {
                        u32::MAX
                    };
                    rt.gpu_agents.push((agent, node));
                }
                Some(HSA_DEVICE_TYPE_CPU) if rt.cpu_agent.is_none() => rt.cpu_agent = Some(agent),
                _ => {}
            }
        }
        Ok(rt)
    }

    pub fn library(&self) -> &str {
        &self.library
    }

    /// The first GPU agent.
    pub fn gpu_agent(&self) -> Option<hsa_agent_t> {
        self.gpu_agents.first().map(|(agent, _)| *agent)
    }

    /// The GPU agent whose NODE is `node`, else the first GPU agent, with
    /// its NODE.
    pub fn gpu_agent_of_node(&self, node: Option<u32>) -> Option<(hsa_agent_t, u32)> {
        node.and_then(|n| self.gpu_agents.iter().find(|(_, at)| *at == n))
            .or_else(|| self.gpu_agents.first())
            .copied()
    }

    /// Whether the CPU may read a GPU's memory in place: the CPU agent's
    /// ACCESS to the first GPU's coarse-grained pool is not NEVER_ALLOWED
    /// (CLR's large-BAR test). False when anything is unknown: a copy is
    /// right for any memory, a CPU read is not.
    pub fn cpu_reads_gpu_memory(&self) -> bool {
        // SAFETY: each symbol has the crates/hsa type it is read as.
        let entries = unsafe {
            (
                self.symbol::<HsaAmdAgentIterateMemoryPoolsFn>(
                    "hsa_amd_agent_iterate_memory_pools",
                ),
                self.symbol::<HsaAmdMemoryPoolGetInfoFn>("hsa_amd_memory_pool_get_info"),
                self.symbol::<HsaAmdAgentMemoryPoolGetInfoFn>("hsa_amd_agent_memory_pool_get_info"),
            )
        };
        let (Ok(iterate_pools), Ok(pool_info), Ok(access_info)) = entries else {
            return false;
        };
        let (Some(cpu), Some(gpu)) = (self.cpu_agent, self.gpu_agent()) else {
            return false;
        };
        // SAFETY: the runtime is initialised; the entries are its own.
        let pools = unsafe { hsa::discover::memory_pools(iterate_pools, gpu) }.unwrap_or_default();
        let coarse = pools.into_iter().find(|p| {
            // SAFETY: as above.
            unsafe { hsa::discover::allocatable_global_flags(pool_info, *p) }
                .is_some_and(|flags| flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED != 0)
        });
        let Some(coarse) = coarse else {
            return false;
        };
        let mut access = HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED;
        // SAFETY: ACCESS writes one hsa_amd_memory_pool_access_t (u32).
        let st = unsafe {
            access_info(
                cpu,
                coarse,
                HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS,
                (&mut access as *mut u32).cast(),
            )
        };
        st == HSA_STATUS_SUCCESS && access != HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED
    }

    /// Looks up any other HSA function (tests allocate and export memory
    /// through the same runtime).
    ///
    /// # Safety
    /// `T` must be the `unsafe extern "C" fn` type of `symbol`.
    pub unsafe fn symbol<T: Copy>(&self, symbol: &'static str) -> Result<T, LoadError> {
        assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<*mut c_void>());
        let Some(p) = self.lib.symbol(symbol) else {
            return Err(LoadError::MissingSymbol {
                library: self.library.clone(),
                symbol,
                reason: dlerror_text(),
            });
        };
        // SAFETY: the caller promises T is this symbol's function-pointer type.
        Ok(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
    }

    /// "HSA_STATUS_ERROR_INVALID_ARGUMENT: ..." or the hex code.
    pub fn describe(&self, status: hsa_status_t) -> String {
        if let Some(f) = self.status_string {
            let mut s: *const std::ffi::c_char = std::ptr::null();
            // SAFETY: hsa_status_string writes a static string pointer.
            if unsafe { f(status, &mut s) } == HSA_STATUS_SUCCESS && !s.is_null() {
                // SAFETY: the runtime returns a NUL-terminated static string.
                let text = unsafe { CStr::from_ptr(s) }.to_string_lossy();
                return format!("{text} (0x{status:x})");
            }
        }
        format!("HSA status 0x{status:x}")
    }
}

impl Drop for HsaRuntime {
    fn drop(&mut self) {
        // SAFETY: balanced with the successful hsa_init in `load`.
        unsafe { (self.shut_down)() };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_is_a_load_error_naming_it() {
        let err = HsaRuntime::load(Path::new("/nonexistent/libhsa-runtime64.so.1")).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("/nonexistent/libhsa-runtime64.so.1"), "{msg}");
    }
}
