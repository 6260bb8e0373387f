//! The HSA tool's state, in one place with one owner: options, the
//! original API-table entries, the kernel table, the allocation map, the
//! code-object tracker, the job channel to the worker,
//! the free list of held-barrier signals and the IPC handle cache, and the
//! process's lifecycle. Lives for the whole process (`TOOL`); tests build
//! their own with fake table entries. Implements, over the original HSA
//! entries, the worker's [`HeldSignals`] and the capture core's
//! [`BufferAccess`], and the allocation hooks of the pool wraps.

use super::code_objects::CodeObjects;
use super::device_copy::{BOUNCE_BYTES, CopyEntries, DeviceCopier, Placement};
use super::worker::{HeldBarrier, HeldSignals, PreHold, WorkerMessage};
use crate::capture::BufferAccess;
use crate::capture::access::{StagedCopy, stage_host_copy, stage_in_place};
use crate::capture::address_hash::AddressMap;
use crate::capture::allocation_map::{Allocation, AllocationMap};
use crate::capture::kernel_table::KernelTable;
use crate::capture::staging::StagingFile;
use crate::lifecycle::Lifecycle;
use crate::log::{log_debug, log_warn};
use crate::options::Options;
use crossbeam_channel::{Receiver, Sender, bounded, unbounded};
use ditto_protocol::Transport;
use hsa::versions::AmdExtAdditions;
use hsa::*;
use std::ffi::c_void;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// The process's tool, set once by a successful OnLoad.
pub static TOOL: OnceLock<HsaTool> = OnceLock::new();

pub struct HsaTool {
    pub options: Options,
    /// Original entries, saved before ditto overwrote any of them.
    pub core: CoreApiTable,
    pub amd: AmdExtTable,
    /// Original AMD entries of releases after 5.2 (unset where the
    /// runtime's table has none).
    pub amd_added: AmdExtAdditions,
    /// Fed by `code_objects`, read on every dispatch.
    pub kernels: Arc<KernelTable>,
    pub allocations: AllocationMap,
    /// The process's lifecycle (tests pass their own).
    pub lifecycle: &'static Lifecycle,
    pub code_objects: CodeObjects,
    jobs: Sender<WorkerMessage>,
    free_pairs: (Sender<HeldBarrier>, Receiver<HeldBarrier>),
    /// allocation base → (size, handle, owning node), forgotten when the
    /// allocation is freed.
    ipc_handles: Mutex<AddressMap<(u64, hsa_amd_ipc_memory_t, Option<u32>)>>,
    /// Set (never cleared) before the first handle is cached: until then
    /// the allocate and free wraps skip the cache and its lock (most
    /// allocations, e.g. every kernarg buffer, are never exported).
    ipc_handles_used: AtomicBool,
    next_index: AtomicU64,
    /// HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY: wait timeouts are in these ticks.
    timestamp_hz: u64,
    signal_failure_logged: AtomicBool,
    /// Reads of GPU memory: through the runtime's copy engine.
    copier: DeviceCopier,
}

impl HsaTool {
    /// A tool over the given original tables; the receiver is the worker's end.
    pub fn new(
        options: Options,
        core: CoreApiTable,
        amd: AmdExtTable,
        timestamp_hz: u64,
        lifecycle: &'static Lifecycle,
    ) -> (HsaTool, Receiver<WorkerMessage>) {
        let (jobs, rx) = unbounded();
        let kernels = Arc::new(KernelTable::new());
        let code_objects = CodeObjects::new(&core, &options, kernels.clone());
        let tool = HsaTool {
            options,
            core,
            amd,
            amd_added: AmdExtAdditions::default(),
            kernels,
            allocations: AllocationMap::new(),
            lifecycle,
            code_objects,
            jobs,
            free_pairs: unbounded(),
            ipc_handles: Mutex::new(AddressMap::default()),
            ipc_handles_used: AtomicBool::new(false),
            next_index: AtomicU64::new(0),
            timestamp_hz: if timestamp_hz == 0 {
                1_000_000_000
            } else {
                timestamp_hz
            },
            signal_failure_logged: AtomicBool::new(false),
            copier: DeviceCopier::new(),
        };
        (tool, rx)
    }

    /// Index of the next target dispatch.
    pub fn next_dispatch_index(&self) -> u64 {
        self.next_index.fetch_add(1, Ordering::Relaxed)
    }

    /// How many matched dispatches took an index so far.
    pub fn matched_dispatches(&self) -> u64 {
        self.next_index.load(Ordering::Relaxed)
    }

    /// Hands a job to the worker; if the worker is gone, releases it at once.
    pub fn submit(&self, message: WorkerMessage) {
        if let Err(crossbeam_channel::SendError(WorkerMessage::Job(job))) = self.jobs.send(message)
        {
            self.release(&job.held);
        }
    }

    /// A `done`/`hold` pair, both at 1: from the free list, else new.
    /// `None` when the runtime cannot create signals (logged once).
    pub fn take_pair(&self) -> Option<HeldBarrier> {
        if let Ok(pair) = self.free_pairs.1.try_recv() {
            return Some(pair);
        }
        let create = self.core.hsa_signal_create_fn?;
        let mut done = hsa_signal_t::default();
        let mut hold = hsa_signal_t::default();
        // SAFETY: original hsa_signal_create with no consumers and valid out-pointers.
        let st = unsafe { create(1, 0, std::ptr::null(), &mut done) };
        if st == HSA_STATUS_SUCCESS {
            // SAFETY: as above.
            let st2 = unsafe { create(1, 0, std::ptr::null(), &mut hold) };
            if st2 == HSA_STATUS_SUCCESS {
                return Some(HeldBarrier {
                    done: done.handle,
                    hold: hold.handle,
                    pre: None,
                    app: 0,
                });
            }
            if let Some(destroy) = self.core.hsa_signal_destroy_fn {
                // SAFETY: `done` was created above and is used by nothing.
                unsafe { destroy(done) };
            }
        }
        if !self.signal_failure_logged.swap(true, Ordering::Relaxed) {
            log_warn!(
                "cannot create signals (status 0x{st:x}); target dispatches pass through uncaptured"
            );
        }
        None
    }

    /// After `hsa_amd_memory_pool_allocate` succeeded.
    ///
    /// # Safety
    /// `ptr` is the entry's out-pointer, filled by the original.
    pub unsafe fn allocated(
        &self,
        _pool: hsa_amd_memory_pool_t,
        size: usize,
        _flags: u32,
        ptr: *mut *mut c_void,
    ) {
        if !ptr.is_null() {
            // SAFETY: a successful allocate filled `*ptr`.
            self.record_allocation(unsafe { *ptr } as u64, size as u64);
        }
    }

    /// Before `hsa_amd_memory_pool_free`.
    pub fn freeing(&self, ptr: *mut c_void) {
        self.forget_allocation(ptr as u64);
    }

    /// After `hsa_amd_vmem_map` succeeded: the mapping is an allocation.
    pub fn vmem_mapped(
        &self,
        va: *mut c_void,
        size: usize,
        _in_offset: usize,
        _handle: hsa_amd_vmem_alloc_handle_t,
        _flags: u64,
    ) {
        self.record_allocation(va as u64, size as u64);
    }

    /// Before `hsa_amd_vmem_unmap`.
    pub fn vmem_unmapping(&self, va: *mut c_void, _size: usize) {
        self.forget_allocation(va as u64);
    }

    /// Records a new allocation. A handle cached for the same base belongs
    /// to an earlier allocation whose free ditto did not see: it is dropped,
    /// never exported for the new one.
    pub fn record_allocation(&self, base: u64, size: u64) {
        self.allocations.insert(base, size);
        self.forget_ipc_handle(base);
    }

    /// Forgets a freed allocation and its cached IPC handle.
    pub fn forget_allocation(&self, base: u64) {
        self.allocations.remove(base);
        self.forget_ipc_handle(base);
    }

    /// Drops the cached handle of `base`; called after the allocation map
    /// changed `base`. `export` sets `ipc_handles_used` before it checks the
    /// allocation map, so when this reads false, that check comes after our
    /// change and will not cache a handle for the old allocation.
    #[inline]
    fn forget_ipc_handle(&self, base: u64) {
        if self.ipc_handles_used.load(Ordering::SeqCst) {
            self.forget_cached_ipc_handle(base);
        }
    }

    fn forget_cached_ipc_handle(&self, base: u64) {
        self.ipc_handles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&base);
    }

    /// Sends the Goodbye and drains the worker (every held barrier released),
    /// once per process, from OnUnload or at exit, whichever comes first.
    /// Waits at most DITTO_TIMEOUT_MS + 1 s; past that, fails open.
    pub fn finish(&self, at: &str) {
        if !self.lifecycle.claim_finish() {
            return;
        }
        let (finished, done) = bounded(1);
        let goodbye = self.kernels.goodbye(self.matched_dispatches());
        if self
            .jobs
            .send(WorkerMessage::Shutdown { goodbye, finished })
            .is_err()
        {
            return;
        }
        let bound = self.options.timeout + Duration::from_secs(1);
        if done.recv_timeout(bound).is_err() {
            self.lifecycle.fail(&format!(
                "the worker did not finish within {} ms at {at}",
                bound.as_millis()
            ));
            let _ = done.recv_timeout(Duration::from_secs(2));
        }
    }

    /// The NODE of the agent that owns the memory pointer info describes
    /// (its agentOwner), for the collector to attach on the same GPU.
    fn owner_node(&self, info: &hsa_amd_pointer_info_t) -> Option<u32> {
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
    fn pointer_info_of(&self, address: u64) -> Option<hsa_amd_pointer_info_t> {
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

    fn pointer_info(&self, address: u64) -> Option<Allocation> {
        let info = self.pointer_info_of(address)?;
        allocation_described(&info, address)
    }
}

/// The allocation holding `address` that pointer info `info` describes.
/// None for a virtual-memory mapping: ROCr gives the address asked about as
/// its base, with the whole mapping's size, so the range would reach past
/// the mapping (and a copy of it fault); mappings are known from the
/// `hsa_amd_vmem_map` wrap instead.
fn allocation_described(info: &hsa_amd_pointer_info_t, address: u64) -> Option<Allocation> {
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

impl HeldSignals for HsaTool {
    fn wait_zero(&self, signal: u64, timeout: Duration) -> bool {
        let Some(wait) = self.core.hsa_signal_wait_scacquire_fn else {
            return true;
        };
        let ticks = (timeout.as_nanos() * self.timestamp_hz as u128 / 1_000_000_000) as u64;
        // SAFETY: original wait on a signal we created; the timeout is only a hint,
        // the caller loops.
        let value = unsafe {
            wait(
                hsa_signal_t { handle: signal },
                HSA_SIGNAL_CONDITION_EQ,
                0,
                ticks.max(1),
                HSA_WAIT_STATE_BLOCKED,
            )
        };
        value == 0
    }

    /// `hold_pre`, `hold`, then the 1 the application's signal was raised
    /// by: it reaches its completion value once its kernel has completed
    /// AND the capture let it go, whichever comes last.
    fn release(&self, held: &HeldBarrier) {
        if let Some(pre) = &held.pre {
            self.release_pre(pre);
        }
        if let Some(store) = self.core.hsa_signal_store_screlease_fn {
            // SAFETY: original store on our own `hold` signal.
            unsafe { store(hsa_signal_t { handle: held.hold }, 0) };
        }
        if held.app != 0
            && let Some(subtract) = self.core.hsa_signal_subtract_screlease_fn
        {
            // SAFETY: the application's signal, which cannot have completed
            // (and been destroyed) while it still carries our 1.
            unsafe { subtract(hsa_signal_t { handle: held.app }, 1) };
        }
    }

    fn release_pre(&self, pre: &PreHold) {
        if let Some(store) = self.core.hsa_signal_store_screlease_fn {
            // SAFETY: original store on our own `hold_pre` signal.
            unsafe {
                store(
                    hsa_signal_t {
                        handle: pre.hold_pre,
                    },
                    0,
                )
            };
        }
    }

    /// The `pre` pair, if any, goes back to the free list as a pair of its own.
    fn recycle(&self, held: HeldBarrier) {
        let Some(store) = self.core.hsa_signal_store_relaxed_fn else {
            return;
        };
        let pairs = [
            Some((held.done, held.hold)),
            held.pre.map(|p| (p.pre, p.hold_pre)),
        ];
        for (done, hold) in pairs.into_iter().flatten() {
            // SAFETY: both signals are ours and no packet refers to them any more.
            unsafe {
                store(hsa_signal_t { handle: done }, 1);
                store(hsa_signal_t { handle: hold }, 1);
            }
            let _ = self.free_pairs.0.send(HeldBarrier {
                done,
                hold,
                pre: None,
                app: 0,
            });
        }
    }

    /// Start and end of the dispatch as the runtime recorded them on its
    /// completion signal (the application's, else our `done`), through the
    /// ORIGINAL hsa_amd_profiling_get_dispatch_time.
    /// ROCr fills these only on queues with profiling enabled, which
    /// `queues::create` turns on for every intercept queue; where that
    /// failed the times read 0 and this is `None`. The agent is the queue's
    /// (ROCr, and the CPU runtime with it, refuse any other than a GPU).
    fn dispatch_duration_ns(&self, held: &HeldBarrier, agent: u64) -> Option<u64> {
        let Some(get) = self.amd.hsa_amd_profiling_get_dispatch_time_fn else {
            log_debug!(
                "the runtime has no hsa_amd_profiling_get_dispatch_time: no kernel durations"
            );
            return None;
        };
        let signal = if held.app != 0 { held.app } else { held.done };
        let mut time = hsa_amd_profiling_dispatch_time_t::default();
        // SAFETY: original entry on the completion signal of a completed
        // dispatch (the application's is still raised by our 1, so alive),
        // with a valid out-pointer.
        let st = unsafe {
            get(
                hsa_agent_t { handle: agent },
                hsa_signal_t { handle: signal },
                &mut time,
            )
        };
        if st != HSA_STATUS_SUCCESS || time.end == 0 || time.end < time.start {
            log_debug!(
                "no dispatch time on signal 0x{:x} (status 0x{st:x}, start {}, end {})",
                signal,
                time.start,
                time.end
            );
            return None;
        }
        let ticks = (time.end - time.start) as u128;
        Some((ticks * 1_000_000_000 / self.timestamp_hz as u128) as u64)
    }
}

impl BufferAccess for HsaTool {
    fn containing_allocation(&self, address: u64) -> Option<Allocation> {
        self.allocations
            .find(address)
            .or_else(|| self.pointer_info(address))
    }

    /// Handles are cached only for allocations in the allocation map, whose
    /// free ditto sees; one found through `pointer_info` is exported afresh
    /// every time, as its free (and a reuse of its address) goes unseen.
    fn export(&self, allocation: &Allocation) -> Result<Transport, String> {
        let mut cache = self.ipc_handles.lock().unwrap_or_else(|e| e.into_inner());
        let (handle, owner_node) = match cache.get(&allocation.base) {
            Some((size, h, node)) if *size == allocation.size => (*h, *node),
            _ => {
                let create = self
                    .amd
                    .hsa_amd_ipc_memory_create_fn
                    .ok_or("the runtime has no hsa_amd_ipc_memory_create")?;
                let mut h = hsa_amd_ipc_memory_t::default();
                // The length the runtime itself records for the allocation:
                // ROCr 5.2 compares with the size rounded to the granule,
                // 7.x with the size asked for (see the CPU runtime's
                // ipc_length_accepted); what pointer info reports is what
                // the release's IPC create compares with.
                let info = self.pointer_info_of(allocation.base);
                let len = info
                    .as_ref()
                    .and_then(|i| allocation_described(i, allocation.base))
                    .filter(|recorded| recorded.base == allocation.base)
                    .map_or(allocation.size, |recorded| recorded.size);
                // SAFETY: original IPC export of a whole live allocation (base and size
                // as the runtime records them).
                let st = unsafe { create(allocation.base as *mut c_void, len as usize, &mut h) };
                if st != HSA_STATUS_SUCCESS {
                    return Err(format!(
                        "hsa_amd_ipc_memory_create failed with status 0x{st:x}"
                    ));
                }
                let node = info.as_ref().and_then(|i| self.owner_node(i));
                // Before the check: see forget_ipc_handle.
                self.ipc_handles_used.store(true, Ordering::SeqCst);
                if self.allocations.find(allocation.base) == Some(*allocation) {
                    cache.insert(allocation.base, (allocation.size, h, node));
                }
                (h, node)
            }
        };
        let handle = handle.handle.iter().flat_map(|w| w.to_le_bytes()).collect();
        Ok(Transport::Ipc { handle, owner_node })
    }

    /// The copy transport, for memory the runtime would not export: GPU
    /// memory through the copy engine, a bounce buffer at a time; host
    /// memory read in place (pwrite, so an unreadable range is an error).
    /// NOTE(real GPU): locked host memory is read through its agent
    /// address, which on ROCr may differ from its host address
    /// (pointer_info's hostBaseAddress); the CPU runtime's are the same.
    fn copy_to_shared_memory(&self, address: u64, len: u64) -> Result<OwnedFd, String> {
        match self.placement(address) {
            Placement::Host => crate::capture::shared_memory::copy_to_sealed_memfd(address, len),
            Placement::Device { owner } => {
                crate::capture::shared_memory::sealed_memfd_filled(|fd| {
                    self.copier.copy_in_chunks(
                        self.copy_entries(),
                        address,
                        owner,
                        len,
                        |at, bytes| {
                            crate::capture::shared_memory::copy_from_address(
                                fd,
                                bytes.as_ptr() as u64,
                                bytes.len() as u64,
                                at,
                                "shared memory",
                            )
                        },
                    )
                })
            }
        }
    }

    /// GPU memory is copied to the host once, and staged and fingerprinted
    /// from that copy; host memory is staged in place.
    fn stage(
        &self,
        address: u64,
        len: u64,
        staging: &mut StagingFile,
    ) -> Result<Option<StagedCopy>, String> {
        let owner = match self.placement(address) {
            Placement::Device { owner } => owner,
            Placement::Host => return stage_in_place(address, len, staging),
        };
        if !staging.takes(len) || len > BOUNCE_BYTES as u64 {
            return Ok(None);
        }
        self.copier
            .with_copy(self.copy_entries(), address, owner, &[(0, len)], |bytes| {
                stage_host_copy(bytes, staging)
            })?
    }

    /// Of GPU memory, the fingerprint's windows are copied to the host.
    fn fingerprint(&self, address: u64, len: u64) -> Result<u64, String> {
        if address == 0 {
            return Err("null address".into());
        }
        match self.placement(address) {
            Placement::Device { owner } => {
                let windows = ditto_protocol::fingerprint_windows(len);
                self.copier
                    .with_copy(self.copy_entries(), address, owner, &windows, |bytes| {
                        let mut at = 0usize;
                        let slices = windows.iter().map(|(_, n)| {
                            let w = &bytes[at..at + *n as usize];
                            at += *n as usize;
                            w
                        });
                        ditto_protocol::fingerprint_of_windows(len, slices)
                    })
            }
            Placement::Host => {
                // SAFETY: [address, address+len) lies inside a live
                // allocation of host memory (resolved just before) whose
                // dispatch has completed and is held: nothing writes it.
                let bytes =
                    unsafe { std::slice::from_raw_parts(address as *const u8, len as usize) };
                Ok(ditto_protocol::fingerprint(bytes))
            }
        }
    }
}

impl HsaTool {
    fn copy_entries(&self) -> CopyEntries<'_> {
        CopyEntries {
            core: &self.core,
            amd: &self.amd,
        }
    }

    /// Where the memory at `address` lives (pointer info's owner).
    fn placement(&self, address: u64) -> Placement {
        let info = self.pointer_info_of(address);
        self.copier.placement(self.copy_entries(), info.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        static IPC_EXPORTS: Cell<u32> = const { Cell::new(0) };
    }

    unsafe extern "C" fn counting_ipc_create(
        ptr: *mut c_void,
        _len: usize,
        handle: *mut hsa_amd_ipc_memory_t,
    ) -> hsa_status_t {
        IPC_EXPORTS.with(|n| n.set(n.get() + 1));
        // SAFETY: valid out-pointer from the caller.
        unsafe { (*handle).handle[0] = ptr as u32 ^ IPC_EXPORTS.with(|n| n.get()) };
        HSA_STATUS_SUCCESS
    }

    fn tool_with_ipc() -> HsaTool {
        // SAFETY: all-zero tables are valid (every entry None).
        let core: CoreApiTable = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut amd: AmdExtTable = unsafe { std::mem::zeroed() };
        amd.hsa_amd_ipc_memory_create_fn = Some(counting_ipc_create);
        IPC_EXPORTS.with(|n| n.set(0));
        static LIFECYCLE: Lifecycle = Lifecycle::capturing();
        HsaTool::new(Options::from_lookup(|_| None), core, amd, 0, &LIFECYCLE).0
    }

    unsafe extern "C" fn ignored_store(_signal: hsa_signal_t, _value: hsa_signal_value_t) {}

    #[test]
    fn recycling_a_job_that_held_inputs_returns_both_pairs_to_the_free_list() {
        let mut tool = tool_with_ipc();
        tool.core.hsa_signal_store_relaxed_fn = Some(ignored_store);
        tool.recycle(HeldBarrier {
            done: 1,
            hold: 2,
            pre: Some(PreHold {
                pre: 3,
                hold_pre: 4,
            }),
            app: 5,
        });
        let pair = |done, hold| HeldBarrier {
            done,
            hold,
            pre: None,
            app: 0,
        };
        assert_eq!(tool.take_pair(), Some(pair(1, 2)));
        assert_eq!(tool.take_pair(), Some(pair(3, 4)));
        assert_eq!(
            tool.take_pair(),
            None,
            "no more, and no signal_create entry"
        );
    }

    #[test]
    fn a_tracked_allocation_is_exported_once_and_again_after_free_and_reuse() {
        let tool = tool_with_ipc();
        let a = Allocation {
            base: 0x10_0000,
            size: 4096,
        };
        tool.record_allocation(a.base, a.size);
        let first = tool.export(&a).unwrap();
        assert_eq!(tool.export(&a).unwrap(), first);
        assert_eq!(IPC_EXPORTS.with(|n| n.get()), 1, "cached");
        tool.forget_allocation(a.base);
        tool.record_allocation(a.base, a.size);
        tool.export(&a).unwrap();
        assert_eq!(IPC_EXPORTS.with(|n| n.get()), 2);
    }

    #[test]
    fn a_base_allocated_again_without_a_seen_free_gets_a_fresh_handle() {
        let tool = tool_with_ipc();
        let a = Allocation {
            base: 0x20_0000,
            size: 4096,
        };
        tool.record_allocation(a.base, a.size);
        let old = tool.export(&a).unwrap();
        // Freed through an entry ditto does not wrap, then handed out again.
        tool.record_allocation(a.base, a.size);
        let new = tool.export(&a).unwrap();
        assert_eq!(IPC_EXPORTS.with(|n| n.get()), 2);
        assert_ne!(old, new, "the stale handle is never reused");
    }

    #[test]
    fn an_allocation_known_only_through_pointer_info_is_never_cached() {
        let tool = tool_with_ipc();
        let untracked = Allocation {
            base: 0x30_0000,
            size: 64,
        };
        tool.export(&untracked).unwrap();
        tool.export(&untracked).unwrap();
        assert_eq!(IPC_EXPORTS.with(|n| n.get()), 2);
    }

    #[test]
    fn pointer_info_of_a_virtual_memory_mapping_describes_no_allocation() {
        // ROCr: the address asked about as the base, the mapping's size.
        let mut info = hsa_amd_pointer_info_t {
            type_: HSA_EXT_POINTER_TYPE_HSA_VMEM,
            agentBaseAddress: 0x21_0000 as *mut c_void,
            sizeInBytes: 2 << 20,
            ..Default::default()
        };
        assert_eq!(allocation_described(&info, 0x21_0000), None);
        info.type_ = HSA_EXT_POINTER_TYPE_HSA;
        assert_eq!(
            allocation_described(&info, 0x21_0000),
            Some(Allocation {
                base: 0x21_0000,
                size: 2 << 20
            })
        );
    }
}
