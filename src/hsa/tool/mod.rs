//! The HSA tool's state, in one place with one owner: options, the
//! original API-table entries, the kernel table, the allocation map, the
//! code-object tracker, the job channel to the worker, and the process's
//! lifecycle. Lives for the whole process (`TOOL`); tests build their own
//! with fake table entries. Owns start (`new`), the dispatch index, the
//! job channel, the allocation hooks of the pool and vmem wraps, and the
//! finish. The runtime services it gives over the original entries are its
//! children's:
//! - `held_signals`  — the free list of held-barrier signal pairs and the
//!   worker's [`HeldSignals`] (wait, release, recycle, dispatch times);
//! - `ipc_cache`     — IPC export of allocations, with the handle cache;
//! - `pointer_info`  — what the runtime says of an address;
//! - `buffer_access` — the capture core's [`BufferAccess`].
//!
//! [`HeldSignals`]: super::worker::HeldSignals
//! [`BufferAccess`]: crate::capture::BufferAccess

mod buffer_access;
mod held_signals;
mod ipc_cache;
mod pointer_info;
#[cfg(test)]
mod tests;

pub use buffer_access::HsaAccessError;
pub use ipc_cache::IpcExportError;

use super::code_objects::CodeObjects;
use super::device_copy::DeviceCopier;
use super::worker::{HeldSignals, WorkerMessage};
use crate::capture::allocation_map::AllocationMap;
use crate::capture::kernel_table::KernelTable;
use crate::lifecycle::Lifecycle;
use crate::options::Options;
use crossbeam_channel::{Receiver, Sender, bounded, unbounded};
use held_signals::SignalPool;
use hsa::versions::AmdExtAdditions;
use hsa::*;
use ipc_cache::IpcHandleCache;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
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
    /// Held-barrier signal pairs no packet refers to any more.
    signals: SignalPool,
    /// IPC handles of the allocations already exported.
    ipc_handles: IpcHandleCache,
    next_index: AtomicU64,
    /// HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY: wait timeouts are in these ticks.
    timestamp_hz: u64,
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
            signals: SignalPool::new(),
            ipc_handles: IpcHandleCache::new(),
            next_index: AtomicU64::new(0),
            timestamp_hz: if timestamp_hz == 0 {
                1_000_000_000
            } else {
                timestamp_hz
            },
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
        self.ipc_handles.forget(base);
    }

    /// Forgets a freed allocation and its cached IPC handle.
    pub fn forget_allocation(&self, base: u64) {
        self.allocations.remove(base);
        self.ipc_handles.forget(base);
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
}
