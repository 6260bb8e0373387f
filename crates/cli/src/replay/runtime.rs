//! The HSA runtime as the replayer drives it, loaded at run time: the
//! entries a replay calls (agents and pools, virtual-memory reservations,
//! code-object loading, a queue with profiling, signals, copies), resolved
//! by name from the library `--hsa-runtime` chose. Owns loading and
//! initialising it and the agents and pools a replay uses; declares no HSA
//! type of its own (crates/hsa does) and never dlcloses it.

use cuda_abi::{Library, dlerror_text};
use hsa::*;
use std::ffi::c_void;
use std::path::Path;
use std::time::{Duration, Instant};

/// Why the runtime did not load, or a call failed.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("cannot load the HSA runtime {library}: {reason}")]
    Load { library: String, reason: String },
    #[error("the HSA runtime {library} lacks {symbol}: {reason}")]
    MissingSymbol {
        library: String,
        symbol: &'static str,
        reason: String,
    },
    #[error("{call} failed: {status}")]
    Call { call: &'static str, status: String },
    #[error("{0}")]
    Missing(String),
}

/// The entries a replay calls.
pub struct ReplayRuntime {
    pub status_string: Option<HsaStatusStringFn>,
    pub system_get_info: HsaSystemGetInfoFn,
    pub agent_get_info: HsaAgentGetInfoFn,
    pub pool_get_info: HsaAmdMemoryPoolGetInfoFn,
    pub iterate_pools: HsaAmdAgentIterateMemoryPoolsFn,
    pub pool_allocate: HsaAmdMemoryPoolAllocateFn,
    pub allow_access: HsaAmdAgentsAllowAccessFn,
    pub memory_copy: HsaMemoryCopyFn,
    pub async_copy: HsaAmdMemoryAsyncCopyFn,
    pub reserve: HsaAmdVmemAddressReserveFn,
    pub handle_create: HsaAmdVmemHandleCreateFn,
    pub map: HsaAmdVmemMapFn,
    pub set_access: HsaAmdVmemSetAccessFn,
    pub reader_from_memory: HsaCodeObjectReaderCreateFromMemoryFn,
    pub executable_create: HsaExecutableCreateAltFn,
    pub load_code_object: HsaExecutableLoadAgentCodeObjectFn,
    pub freeze: HsaExecutableFreezeFn,
    pub symbol_by_name: HsaExecutableGetSymbolByNameFn,
    pub symbol_info: HsaExecutableSymbolGetInfoFn,
    pub queue_create: HsaQueueCreateFn,
    pub add_write_index: HsaQueueAddWriteIndexScacqScrelFn,
    pub signal_create: HsaSignalCreateFn,
    pub signal_store: HsaSignalStoreScreleaseFn,
    pub signal_wait: HsaSignalWaitScacquireFn,
    pub profiling_enable: HsaAmdProfilingSetProfilerEnabledFn,
    pub dispatch_time: HsaAmdProfilingGetDispatchTimeFn,
    /// Every GPU agent, in the runtime's order, and the first CPU agent.
    pub gpus: Vec<hsa_agent_t>,
    pub cpu: hsa_agent_t,
}

/// Host memory of the runtime's, for copies between host and device
/// ([`ReplayRuntime::staging`]).
pub struct Staging {
    at: u64,
    len: usize,
    gpu: hsa_agent_t,
    done: hsa_signal_t,
    /// How long one copy may take (the replay's `--timeout`).
    limit: Duration,
}

impl ReplayRuntime {
    /// dlopens `library`, runs hsa_init and finds the agents.
    pub fn load(library: &Path) -> Result<ReplayRuntime, RuntimeError> {
        let name = library.display().to_string();
        let lib = Library::open(library).map_err(|e| RuntimeError::Load {
            library: name.clone(),
            reason: e.to_string(),
        })?;
        let sym = |symbol: &'static str| -> Result<*mut c_void, RuntimeError> {
            match lib.symbol(symbol) {
                Some(p) => Ok(p),
                None if symbol.starts_with("hsa_amd_vmem_") => Err(RuntimeError::Missing(format!(
                    "the HSA runtime {name} has no {symbol}: replay restores memory at its \
                     captured addresses with the virtual-memory API of ROCm 6.0 and later"
                ))),
                None => Err(RuntimeError::MissingSymbol {
                    library: name.clone(),
                    symbol,
                    reason: dlerror_text(),
                }),
            }
        };
        macro_rules! entry {
            ($name:literal, $ty:ty) => {
                // SAFETY: the symbol is the HSA function of that name, whose
                // C signature is the one crates/hsa declares as `$ty`.
                unsafe { std::mem::transmute::<*mut c_void, $ty>(sym($name)?) }
            };
        }
        let init = entry!("hsa_init", HsaInitFn);
        let iterate_agents = entry!("hsa_iterate_agents", HsaIterateAgentsFn);
        let mut rt = ReplayRuntime {
            status_string: sym("hsa_status_string").ok().map(|p| {
                // SAFETY: as in `entry!`.
                unsafe { std::mem::transmute::<*mut c_void, HsaStatusStringFn>(p) }
            }),
            system_get_info: entry!("hsa_system_get_info", HsaSystemGetInfoFn),
            agent_get_info: entry!("hsa_agent_get_info", HsaAgentGetInfoFn),
            pool_get_info: entry!("hsa_amd_memory_pool_get_info", HsaAmdMemoryPoolGetInfoFn),
            iterate_pools: entry!(
                "hsa_amd_agent_iterate_memory_pools",
                HsaAmdAgentIterateMemoryPoolsFn
            ),
            pool_allocate: entry!("hsa_amd_memory_pool_allocate", HsaAmdMemoryPoolAllocateFn),
            allow_access: entry!("hsa_amd_agents_allow_access", HsaAmdAgentsAllowAccessFn),
            memory_copy: entry!("hsa_memory_copy", HsaMemoryCopyFn),
            async_copy: entry!("hsa_amd_memory_async_copy", HsaAmdMemoryAsyncCopyFn),
            reserve: entry!("hsa_amd_vmem_address_reserve", HsaAmdVmemAddressReserveFn),
            handle_create: entry!("hsa_amd_vmem_handle_create", HsaAmdVmemHandleCreateFn),
            map: entry!("hsa_amd_vmem_map", HsaAmdVmemMapFn),
            set_access: entry!("hsa_amd_vmem_set_access", HsaAmdVmemSetAccessFn),
            reader_from_memory: entry!(
                "hsa_code_object_reader_create_from_memory",
                HsaCodeObjectReaderCreateFromMemoryFn
            ),
            executable_create: entry!("hsa_executable_create_alt", HsaExecutableCreateAltFn),
            load_code_object: entry!(
                "hsa_executable_load_agent_code_object",
                HsaExecutableLoadAgentCodeObjectFn
            ),
            freeze: entry!("hsa_executable_freeze", HsaExecutableFreezeFn),
            symbol_by_name: entry!(
                "hsa_executable_get_symbol_by_name",
                HsaExecutableGetSymbolByNameFn
            ),
            symbol_info: entry!(
                "hsa_executable_symbol_get_info",
                HsaExecutableSymbolGetInfoFn
            ),
            queue_create: entry!("hsa_queue_create", HsaQueueCreateFn),
            add_write_index: entry!(
                "hsa_queue_add_write_index_scacq_screl",
                HsaQueueAddWriteIndexScacqScrelFn
            ),
            signal_create: entry!("hsa_signal_create", HsaSignalCreateFn),
            signal_store: entry!("hsa_signal_store_screlease", HsaSignalStoreScreleaseFn),
            signal_wait: entry!("hsa_signal_wait_scacquire", HsaSignalWaitScacquireFn),
            profiling_enable: entry!(
                "hsa_amd_profiling_set_profiler_enabled",
                HsaAmdProfilingSetProfilerEnabledFn
            ),
            dispatch_time: entry!(
                "hsa_amd_profiling_get_dispatch_time",
                HsaAmdProfilingGetDispatchTimeFn
            ),
            gpus: Vec::new(),
            cpu: hsa_agent_t::default(),
        };
        // SAFETY: hsa_init takes no arguments.
        rt.check("hsa_init", unsafe { init() })?;
        // SAFETY: the runtime is initialised.
        let agents = unsafe { hsa::discover::agents(iterate_agents) }
            .map_err(|st| rt.failed("hsa_iterate_agents", st))?;
        let mut cpu = None;
        for agent in agents {
            // SAFETY: as above.
            match unsafe { hsa::discover::device_type(rt.agent_get_info, agent) } {
                Some(HSA_DEVICE_TYPE_GPU) => rt.gpus.push(agent),
                Some(HSA_DEVICE_TYPE_CPU) if cpu.is_none() => cpu = Some(agent),
                _ => {}
            }
        }
        rt.cpu = cpu.ok_or_else(|| RuntimeError::Missing("the runtime has no CPU agent".into()))?;
        Ok(rt)
    }

    /// The runtime's words for `status`.
    pub fn describe(&self, status: hsa_status_t) -> String {
        let mut text: *const std::ffi::c_char = std::ptr::null();
        if let Some(f) = self.status_string
            // SAFETY: the runtime's own entry with a valid out-pointer.
            && unsafe { f(status, &mut text) } == HSA_STATUS_SUCCESS
            && !text.is_null()
        {
            // SAFETY: the runtime returns a NUL-terminated static string.
            let words = unsafe { std::ffi::CStr::from_ptr(text) }.to_string_lossy();
            return format!("{words} (0x{status:x})");
        }
        format!("status 0x{status:x}")
    }

    pub fn failed(&self, call: &'static str, status: hsa_status_t) -> RuntimeError {
        RuntimeError::Call {
            call,
            status: self.describe(status),
        }
    }

    /// `Ok` when `status` is SUCCESS.
    pub fn check(&self, call: &'static str, status: hsa_status_t) -> Result<(), RuntimeError> {
        match status {
            HSA_STATUS_SUCCESS => Ok(()),
            st => Err(self.failed(call, st)),
        }
    }

    /// `agent`'s first runtime-allocatable global pool whose flags contain
    /// `flag`.
    pub fn pool_with(&self, agent: hsa_agent_t, flag: u32) -> Option<hsa_amd_memory_pool_t> {
        // SAFETY: the runtime is initialised; the entries are its own.
        let pools = unsafe { hsa::discover::memory_pools(self.iterate_pools, agent) }.ok()?;
        pools.into_iter().find(|&p| {
            // SAFETY: as above.
            unsafe { hsa::discover::allocatable_global_flags(self.pool_get_info, p) }
                .is_some_and(|f| f & flag != 0)
        })
    }

    /// HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY (ticks per second; 1 GHz when
    /// the runtime cannot say).
    pub fn timestamp_hz(&self) -> u64 {
        let mut hz: u64 = 0;
        // SAFETY: TIMESTAMP_FREQUENCY writes one u64.
        let st = unsafe {
            (self.system_get_info)(
                HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY,
                (&mut hz as *mut u64).cast(),
            )
        };
        if st == HSA_STATUS_SUCCESS && hz > 0 {
            hz
        } else {
            1_000_000_000
        }
    }

    /// HSA_AMD_SYSTEM_INFO_VIRTUAL_MEM_API_SUPPORTED: whether
    /// `hsa_amd_vmem_*` work. ROCr says no below KFD interface 1.15, and
    /// in its model mode (the thunk's emulated KFD reports an older
    /// interface); its `hsa_amd_vmem_address_reserve` then fails with
    /// INVALID_ARGUMENT.
    pub fn virtual_memory_api(&self) -> bool {
        const VIRTUAL_MEM_API_SUPPORTED: hsa_system_info_t = 0x205;
        let mut supported = false;
        // SAFETY: the attribute writes one bool.
        let st = unsafe {
            (self.system_get_info)(
                VIRTUAL_MEM_API_SUPPORTED,
                (&mut supported as *mut bool).cast(),
            )
        };
        st == HSA_STATUS_SUCCESS && supported
    }

    /// A staging buffer in host memory the runtime allocated (the CPU's
    /// fine-grained pool), open to `gpu`: the way host bytes reach the
    /// GPU's memory and back, by the runtime's copy engine
    /// (`hsa_amd_memory_async_copy`: SDMA on an Instinct GPU), as the tool
    /// reads GPU memory. Not `hsa_memory_copy`: from a pointer the runtime
    /// never allocated it pins that memory (a userptr registration, which
    /// ROCr's model mode lacks: its thunk aborts the process), and it runs
    /// ROCr's own blit kernels, which the model GPU cannot name.
    pub fn staging(&self, gpu: hsa_agent_t, limit: Duration) -> Result<Staging, RuntimeError> {
        const LEN: usize = 4 << 20;
        let pool = self
            .pool_with(self.cpu, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED)
            .or_else(|| self.pool_with(self.cpu, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT))
            .ok_or_else(|| {
                RuntimeError::Missing("the CPU agent has no fine-grained or kernarg pool".into())
            })?;
        let mut at: *mut c_void = std::ptr::null_mut();
        // SAFETY: the runtime's entry with a valid out-pointer.
        let st = unsafe { (self.pool_allocate)(pool, LEN, 0, &mut at) };
        self.check("hsa_amd_memory_pool_allocate (staging)", st)?;
        let agents = [gpu];
        // SAFETY: the runtime's entry on its own allocation.
        let st = unsafe { (self.allow_access)(1, agents.as_ptr(), std::ptr::null(), at) };
        self.check("hsa_amd_agents_allow_access (staging)", st)?;
        let mut done = hsa_signal_t::default();
        // SAFETY: the runtime's entry with a valid out-pointer.
        let st = unsafe { (self.signal_create)(0, 0, std::ptr::null(), &mut done) };
        self.check("hsa_signal_create (staging)", st)?;
        Ok(Staging {
            at: at as u64,
            len: LEN,
            gpu,
            done,
            limit,
        })
    }

    /// One copy by the copy engine, waited for (at most the staging's
    /// limit: a copy that never completes is an error, not a hang).
    fn engine_copy(
        &self,
        staging: &Staging,
        (dst, dst_agent): (u64, hsa_agent_t),
        (src, src_agent): (u64, hsa_agent_t),
        len: usize,
    ) -> Result<(), RuntimeError> {
        // SAFETY: our own idle signal.
        unsafe { (self.signal_store)(staging.done, 1) };
        // SAFETY: both ranges are `len` bytes of memory the runtime
        // allocated (the staging buffer, a GPU allocation of the replay's).
        let st = unsafe {
            (self.async_copy)(
                dst as *mut c_void,
                dst_agent,
                src as *const c_void,
                src_agent,
                len,
                0,
                std::ptr::null(),
                staging.done,
            )
        };
        self.check("hsa_amd_memory_async_copy", st)?;
        let deadline = Instant::now() + staging.limit;
        // SAFETY: our own signal; bounded waits.
        while unsafe {
            (self.signal_wait)(
                staging.done,
                HSA_SIGNAL_CONDITION_LT,
                1,
                self.timestamp_hz() / 10,
                HSA_WAIT_STATE_BLOCKED,
            )
        } >= 1
        {
            if Instant::now() >= deadline {
                return Err(RuntimeError::Missing(format!(
                    "a copy of {len} bytes between host and GPU did not complete within {} s \
                     (the replay's --timeout)",
                    staging.limit.as_secs()
                )));
            }
        }
        Ok(())
    }

    /// Copies `bytes` to the GPU's memory at `dst` through `staging`.
    pub fn write_from_host(
        &self,
        staging: &Staging,
        dst: u64,
        bytes: &[u8],
    ) -> Result<(), RuntimeError> {
        for (i, chunk) in bytes.chunks(staging.len).enumerate() {
            // SAFETY: the staging buffer holds `staging.len` >= chunk bytes
            // of host memory, idle between copies.
            unsafe {
                std::ptr::copy_nonoverlapping(chunk.as_ptr(), staging.at as *mut u8, chunk.len())
            };
            let at = dst + (i * staging.len) as u64;
            self.engine_copy(
                staging,
                (at, staging.gpu),
                (staging.at, self.cpu),
                chunk.len(),
            )?;
        }
        Ok(())
    }

    /// Copies the GPU's memory at `src` into `bytes` through `staging`.
    pub fn read_to_host(
        &self,
        staging: &Staging,
        bytes: &mut [u8],
        src: u64,
    ) -> Result<(), RuntimeError> {
        for (i, chunk) in bytes.chunks_mut(staging.len).enumerate() {
            let at = src + (i * staging.len) as u64;
            self.engine_copy(
                staging,
                (staging.at, self.cpu),
                (at, staging.gpu),
                chunk.len(),
            )?;
            // SAFETY: as in write_from_host; the copy has completed.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    staging.at as *const u8,
                    chunk.as_mut_ptr(),
                    chunk.len(),
                )
            };
        }
        Ok(())
    }

    /// Copies `len` bytes from `src` to `dst` (any memory the runtime knows).
    pub fn copy(&self, dst: u64, src: u64, len: usize) -> Result<(), RuntimeError> {
        // SAFETY: the callers pass ranges of memory the runtime mapped or
        // host buffers of at least `len` bytes.
        let st = unsafe { (self.memory_copy)(dst as *mut c_void, src as *const c_void, len) };
        self.check("hsa_memory_copy", st)
    }
}
