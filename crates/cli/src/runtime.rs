//! The HSA runtime inside the collector: which libhsa-runtime64.so.1 to use
//! (ditto's CPU runtime or the system's), loading it with dlopen, hsa_init,
//! the GPU agent, and the IPC attach/copy/detach entry points behind
//! [`HsaBufferSource`].
//!
//! Owns the collector's only contact with HSA. It never keeps a mapping
//! beyond one `detach` call, never dlcloses the runtime (threads it started
//! may still run), and declares no HSA type of its own (crates/hsa does).

use crate::collector::{BufferSource, Mapping};
use cuda_abi::dlerror_text;
use hsa::{
    HSA_AGENT_INFO_NODE, HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS,
    HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED,
    HSA_DEVICE_TYPE_CPU, HSA_DEVICE_TYPE_GPU, HSA_STATUS_SUCCESS, HsaAgentGetInfoFn,
    HsaAmdAgentIterateMemoryPoolsFn, HsaAmdAgentMemoryPoolGetInfoFn, HsaAmdIpcMemoryAttachFn,
    HsaAmdIpcMemoryDetachFn, HsaAmdMemoryPoolGetInfoFn, HsaInitFn, HsaIterateAgentsFn,
    HsaMemoryCopyFn, HsaShutDownFn, HsaStatusStringFn, hsa_agent_t, hsa_amd_ipc_memory_t,
    hsa_status_t,
};
use std::ffi::{CStr, CString, c_void};
use std::path::{Path, PathBuf};

/// File name (SONAME) of the HSA runtime.
pub const HSA_RUNTIME_SONAME: &str = "libhsa-runtime64.so.1";

/// `--hsa-runtime`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RuntimeChoice {
    /// ditto's CPU HSA runtime (no GPU needed).
    Cpu,
    /// The system's ROCm runtime (an AMD GPU and /dev/kfd).
    System,
    /// system when /dev/kfd exists, else cpu.
    Auto,
}

/// The runtime chosen for this invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolvedRuntime {
    /// ditto's CPU runtime in `dir` (holding libhsa-runtime64.so.1).
    Cpu {
        dir: PathBuf,
    },
    System,
}

impl ResolvedRuntime {
    /// What dlopen gets: an absolute path for the CPU runtime, the SONAME
    /// (searched the usual way) for the system's.
    pub fn library(&self) -> PathBuf {
        match self {
            ResolvedRuntime::Cpu { dir } => dir.join(HSA_RUNTIME_SONAME),
            ResolvedRuntime::System => PathBuf::from(HSA_RUNTIME_SONAME),
        }
    }
    /// Directory to put first in the application's LD_LIBRARY_PATH.
    pub fn library_dir(&self) -> Option<&Path> {
        match self {
            ResolvedRuntime::Cpu { dir } => Some(dir),
            ResolvedRuntime::System => None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(
        "ditto's CPU HSA runtime was not found at {0}: build it with `cargo build --workspace` \
         (it lands in target/<profile>/hsa-cpu/) or set DITTO_CPU_RUNTIME_DIR"
    )]
    CpuRuntimeMissing(PathBuf),
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
    #[error("cannot find the ditto executable's directory: {0}")]
    NoExecutable(std::io::Error),
}

/// Where ditto's CPU runtime lives: `$DITTO_CPU_RUNTIME_DIR`, else
/// `<dir of the ditto executable>/hsa-cpu`.
pub fn cpu_runtime_dir() -> Result<PathBuf, RuntimeError> {
    if let Some(dir) = std::env::var_os("DITTO_CPU_RUNTIME_DIR") {
        return Ok(PathBuf::from(dir));
    }
    Ok(crate::executable_dir()
        .map_err(RuntimeError::NoExecutable)?
        .join("hsa-cpu"))
}

/// What `auto` says when it picked the CPU runtime, once an HSA
/// application connects ([`cpu_notice`]).
const CPU_NOTICE: &str = "ditto: no AMD GPU found (/dev/kfd is absent): the HSA application \
                          runs on ditto's CPU HSA runtime (--hsa-runtime cpu)";

/// The line to say when an HSA application connects: where `auto` picked
/// the CPU runtime, that it did. Said then, not at start: a CUDA
/// application never meets an HSA runtime and hears nothing of one.
pub fn cpu_notice(choice: RuntimeChoice, runtime: &ResolvedRuntime) -> Option<&'static str> {
    (choice == RuntimeChoice::Auto && matches!(runtime, ResolvedRuntime::Cpu { .. }))
        .then_some(CPU_NOTICE)
}

/// Resolves `--hsa-runtime`: `auto` picks the system runtime when
/// `/dev/kfd` exists, else the CPU runtime ([`cpu_notice`] is what to say
/// of it). The CPU runtime must exist.
pub fn resolve(choice: RuntimeChoice) -> Result<ResolvedRuntime, RuntimeError> {
    let cpu = || -> Result<ResolvedRuntime, RuntimeError> {
        let dir = cpu_runtime_dir()?;
        if !dir.join(HSA_RUNTIME_SONAME).exists() {
            return Err(RuntimeError::CpuRuntimeMissing(
                dir.join(HSA_RUNTIME_SONAME),
            ));
        }
        Ok(ResolvedRuntime::Cpu { dir })
    };
    match choice {
        RuntimeChoice::Cpu => cpu(),
        RuntimeChoice::System => Ok(ResolvedRuntime::System),
        RuntimeChoice::Auto if Path::new("/dev/kfd").exists() => Ok(ResolvedRuntime::System),
        RuntimeChoice::Auto => cpu(),
    }
}

/// A loaded and initialised HSA runtime. hsa_shut_down runs on drop (HSA
/// reference-counts hsa_init, so several may coexist in one process).
pub struct HsaRuntime {
    library: String,
    handle: *mut c_void,
    shut_down: HsaShutDownFn,
    status_string: Option<HsaStatusStringFn>,
    attach: HsaAmdIpcMemoryAttachFn,
    detach: HsaAmdIpcMemoryDetachFn,
    memory_copy: HsaMemoryCopyFn,
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
    pub fn load(library: &Path) -> Result<HsaRuntime, RuntimeError> {
        let name = library.display().to_string();
        let c_name = CString::new(library.as_os_str().as_encoded_bytes()).map_err(|_| {
            RuntimeError::Load {
                library: name.clone(),
                reason: "path contains NUL".into(),
            }
        })?;
        // SAFETY: c_name is a valid C string; dlopen has no other precondition.
        let handle = unsafe { libc::dlopen(c_name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(RuntimeError::Load {
                library: name,
                reason: dlerror_text(),
            });
        }
        let sym = |symbol: &'static str| -> Result<*mut c_void, RuntimeError> {
            let c = CString::new(symbol).expect("symbol names have no NUL");
            // SAFETY: handle is a live dlopen handle; c is a valid C string.
            let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
            if p.is_null() {
                Err(RuntimeError::MissingSymbol {
                    library: name.clone(),
                    symbol,
                    reason: dlerror_text(),
                })
            } else {
                Ok(p)
            }
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
            handle,
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
            return Err(RuntimeError::Call {
                library: library.display().to_string(),
                call: "hsa_init",
                status,
            });
        }
        // SAFETY: the runtime is initialised; get_info is its own.
        let agents =
            unsafe { hsa::discover::agents(iterate) }.map_err(|st| RuntimeError::Call {
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
    pub unsafe fn symbol<T: Copy>(&self, symbol: &'static str) -> Result<T, RuntimeError> {
        assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<*mut c_void>());
        let c = CString::new(symbol).expect("symbol names have no NUL");
        // SAFETY: handle is a live dlopen handle.
        let p = unsafe { libc::dlsym(self.handle, c.as_ptr()) };
        if p.is_null() {
            return Err(RuntimeError::MissingSymbol {
                library: self.library.clone(),
                symbol,
                reason: dlerror_text(),
            });
        }
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

/// Parses the 32 bytes of an `hsa_amd_ipc_memory_t` (native byte order, as
/// the tool copied them out of its own struct).
pub fn ipc_handle_from_bytes(bytes: &[u8]) -> Result<hsa_amd_ipc_memory_t, String> {
    if bytes.len() != std::mem::size_of::<hsa_amd_ipc_memory_t>() {
        return Err(format!(
            "IPC handle has {} bytes; hsa_amd_ipc_memory_t has {}",
            bytes.len(),
            std::mem::size_of::<hsa_amd_ipc_memory_t>()
        ));
    }
    let mut h = hsa_amd_ipc_memory_t::default();
    for (word, chunk) in h.handle.iter_mut().zip(bytes.chunks_exact(4)) {
        *word = u32::from_ne_bytes(chunk.try_into().expect("4 bytes"));
    }
    Ok(h)
}

/// Maps IPC handles with hsa_amd_ipc_memory_attach, copies with
/// hsa_memory_copy (device memory need not be CPU-readable), and unmaps
/// with hsa_amd_ipc_memory_detach. With ditto's CPU runtime, whose
/// attachments are shared mappings of host memory, a mapping is also read
/// in place ([`BufferSource::host_bytes`]).
#[derive(Debug)]
pub struct HsaBufferSource {
    runtime: std::sync::Arc<HsaRuntime>,
    host_mapped: bool,
}

impl HsaBufferSource {
    /// A source that copies every byte out with hsa_memory_copy.
    pub fn new(runtime: std::sync::Arc<HsaRuntime>) -> Self {
        HsaBufferSource {
            runtime,
            host_mapped: false,
        }
    }

    /// Whether attached memory is host memory the collector may read in
    /// place: for ditto's CPU runtime in its large-BAR mode only (ROCr maps
    /// device memory, which need not be CPU-readable, and so does the CPU
    /// runtime by default: its GPU memory faults on a CPU access).
    pub fn reading_in_place(mut self, host_mapped: bool) -> Self {
        self.host_mapped = host_mapped;
        self
    }
}

impl BufferSource for HsaBufferSource {
    /// On the GPU agent of the owner's node (its first GPU agent when the
    /// node is unknown or not one of its agents).
    fn attach(
        &self,
        handle: &[u8],
        alloc_size: u64,
        owner_node: Option<u32>,
    ) -> Result<Mapping, String> {
        let h = ipc_handle_from_bytes(handle)?;
        let rt = &self.runtime;
        let chosen = rt.gpu_agent_of_node(owner_node);
        let node = chosen.map(|(_, n)| n);
        let agents: Vec<hsa_agent_t> = chosen.map(|(a, _)| a).into_iter().collect();
        let mut mapped: *mut c_void = std::ptr::null_mut();
        // SAFETY: h and agents live across the call; mapped receives the address.
        let st = unsafe {
            (rt.attach)(
                &h,
                alloc_size as usize,
                agents.len() as u32,
                agents.as_ptr(),
                &mut mapped,
            )
        };
        if st != HSA_STATUS_SUCCESS {
            return Err(format!(
                "hsa_amd_ipc_memory_attach failed: {}",
                rt.describe(st)
            ));
        }
        if mapped.is_null() {
            return Err("hsa_amd_ipc_memory_attach returned success and a null address".into());
        }
        Ok(Mapping {
            address: mapped as usize,
            len: alloc_size,
            gpu: node,
        })
    }

    fn copy(&self, mapping: &Mapping, offset: u64, dst: &mut [u8]) -> Result<(), String> {
        if offset
            .checked_add(dst.len() as u64)
            .is_none_or(|end| end > mapping.len)
        {
            return Err(format!(
                "{} bytes at offset {offset} lie outside the {}-byte mapping",
                dst.len(),
                mapping.len
            ));
        }
        if dst.is_empty() {
            return Ok(());
        }
        let rt = &self.runtime;
        let src = (mapping.address + offset as usize) as *const c_void;
        // SAFETY: offset + dst.len() <= mapping.len (checked above); the
        // mapping is live until detach; dst is a writable host buffer.
        let st = unsafe { (rt.memory_copy)(dst.as_mut_ptr().cast(), src, dst.len()) };
        if st != HSA_STATUS_SUCCESS {
            return Err(format!(
                "hsa_memory_copy from the mapped buffer failed: {}",
                rt.describe(st)
            ));
        }
        Ok(())
    }

    fn host_bytes<'m>(&self, mapping: &'m Mapping, offset: u64, len: u64) -> Option<&'m [u8]> {
        if !self.host_mapped || offset.checked_add(len).is_none_or(|end| end > mapping.len) {
            return None;
        }
        // SAFETY: offset + len <= mapping.len (checked above): inside the
        // attachment, which ditto's CPU runtime maps readable (PROT_READ,
        // MAP_SHARED) and which stays mapped while `mapping` is borrowed
        // (detach consumes it); the held application does not write it.
        Some(unsafe {
            std::slice::from_raw_parts(
                (mapping.address + offset as usize) as *const u8,
                len as usize,
            )
        })
    }

    fn detach(&self, mapping: Mapping) -> Result<(), String> {
        let rt = &self.runtime;
        // SAFETY: mapping.address came from a successful attach and is detached once.
        let st = unsafe { (rt.detach)(mapping.address as *mut c_void) };
        if st != HSA_STATUS_SUCCESS {
            return Err(format!(
                "hsa_amd_ipc_memory_detach failed: {}",
                rt.describe(st)
            ));
        }
        Ok(())
    }
}

/// The collector's HSA source, the runtime loaded when the first HSA IPC
/// buffer arrives (or at once, [`LazyHsaSource::new`]): a CUDA run never
/// starts an HSA runtime. The load's error is kept and given to every
/// buffer that needs it.
pub struct LazyHsaSource {
    library: PathBuf,
    host_mapped: bool,
    source: std::sync::OnceLock<Result<HsaBufferSource, String>>,
}

impl LazyHsaSource {
    /// A source over the HSA runtime `library`; `host_mapped` as in
    /// [`HsaBufferSource::reading_in_place`]. With `now`, the runtime is
    /// loaded here and its error returned.
    pub fn new(library: PathBuf, host_mapped: bool, now: bool) -> Result<Self, RuntimeError> {
        let lazy = LazyHsaSource {
            library,
            host_mapped,
            source: std::sync::OnceLock::new(),
        };
        if now {
            let _ = lazy.source.set(Ok(lazy.load()?));
        }
        Ok(lazy)
    }

    /// Loads the runtime (the debug log says when).
    fn load(&self) -> Result<HsaBufferSource, RuntimeError> {
        crate::log::debug(&format!(
            "collector: loading the HSA runtime {}",
            self.library.display()
        ));
        let runtime = HsaRuntime::load(&self.library)?;
        // The CPU runtime's attachments are host mappings, readable in place
        // only where its GPU memory is host-accessible (large BAR).
        let in_place = self.host_mapped && runtime.cpu_reads_gpu_memory();
        Ok(HsaBufferSource::new(std::sync::Arc::new(runtime)).reading_in_place(in_place))
    }

    fn loaded(&self) -> Result<&HsaBufferSource, String> {
        self.source
            .get_or_init(|| {
                self.load().map_err(|e| {
                    format!("the collector needs the HSA runtime to map the buffer: {e}")
                })
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

impl BufferSource for LazyHsaSource {
    fn attach(
        &self,
        handle: &[u8],
        alloc_size: u64,
        owner_node: Option<u32>,
    ) -> Result<Mapping, String> {
        self.loaded()?.attach(handle, alloc_size, owner_node)
    }
    fn copy(&self, mapping: &Mapping, offset: u64, dst: &mut [u8]) -> Result<(), String> {
        self.loaded()?.copy(mapping, offset, dst)
    }
    fn host_bytes<'m>(&self, mapping: &'m Mapping, offset: u64, len: u64) -> Option<&'m [u8]> {
        self.loaded().ok()?.host_bytes(mapping, offset, len)
    }
    fn detach(&self, mapping: Mapping) -> Result<(), String> {
        self.loaded()?.detach(mapping)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_automatic_choice_of_the_cpu_runtime_is_announced() {
        let cpu = ResolvedRuntime::Cpu {
            dir: PathBuf::from("/x"),
        };
        assert_eq!(cpu_notice(RuntimeChoice::Auto, &cpu), Some(CPU_NOTICE));
        assert_eq!(cpu_notice(RuntimeChoice::Cpu, &cpu), None);
        assert_eq!(
            cpu_notice(RuntimeChoice::Auto, &ResolvedRuntime::System),
            None
        );
    }

    #[test]
    fn ipc_handle_bytes_round_trip_in_native_order() {
        let h = hsa_amd_ipc_memory_t {
            handle: [1, 2, 3, 0xdead_beef, 5, 6, 7, 8],
        };
        let bytes: Vec<u8> = h.handle.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(ipc_handle_from_bytes(&bytes).unwrap(), h);
        assert!(
            ipc_handle_from_bytes(&bytes[..31])
                .unwrap_err()
                .contains("31 bytes")
        );
    }

    #[test]
    fn system_runtime_is_searched_by_soname_and_cpu_by_absolute_path() {
        assert_eq!(
            ResolvedRuntime::System.library(),
            PathBuf::from("libhsa-runtime64.so.1")
        );
        let cpu = ResolvedRuntime::Cpu {
            dir: "/opt/x/hsa-cpu".into(),
        };
        assert_eq!(
            cpu.library(),
            PathBuf::from("/opt/x/hsa-cpu/libhsa-runtime64.so.1")
        );
        assert_eq!(cpu.library_dir(), Some(Path::new("/opt/x/hsa-cpu")));
    }

    #[test]
    fn missing_library_is_a_load_error_naming_it() {
        let err = HsaRuntime::load(Path::new("/nonexistent/libhsa-runtime64.so.1")).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("/nonexistent/libhsa-runtime64.so.1"), "{msg}");
    }
}
