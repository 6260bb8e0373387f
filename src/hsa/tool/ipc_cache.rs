//! IPC export of HSA allocations (`hsa_amd_ipc_memory_create`, through
//! the original entry) and the cache of the handles made: allocation base →
//! (size, handle, owning node), dropped when the allocation is freed or its
//! base is allocated again. Only allocations in the allocation map, whose
//! free ditto sees, are cached.

use super::HsaTool;
use super::pointer_info::allocation_described;
use crate::capture::address_hash::AddressMap;
use crate::capture::allocation_map::Allocation;
use ditto_protocol::Transport;
use hsa::*;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Why the runtime did not export an allocation.
#[derive(Debug, thiserror::Error)]
pub enum IpcExportError {
    #[error("the runtime has no hsa_amd_ipc_memory_create")]
    NoIpcCreate,
    #[error("hsa_amd_ipc_memory_create failed with status 0x{status:x}")]
    Create { status: hsa_status_t },
    #[error(
        "ROCr runs in its model mode (HSA_MODEL_TOPOLOGY is set), whose thunk has no IPC \
         and aborts the process on an export"
    )]
    ModelMode,
}

/// Whether ROCr runs in its model mode: the variable its thunk reads
/// (libhsakmt's model_init_env_vars), read once. In model mode an IPC
/// export reaches an ioctl the thunk does not implement, and it aborts.
fn rocr_model_mode() -> bool {
    static MODEL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *MODEL.get_or_init(|| std::env::var_os("HSA_MODEL_TOPOLOGY").is_some())
}

type Handles = AddressMap<(u64, hsa_amd_ipc_memory_t, Option<u32>)>;

/// The handles exported so far, by allocation base.
pub(super) struct IpcHandleCache {
    /// allocation base → (size, handle, owning node), forgotten when the
    /// allocation is freed.
    handles: Mutex<Handles>,
    /// Set (never cleared) before the first handle is cached: until then
    /// the allocate and free wraps skip the cache and its lock (most
    /// allocations, e.g. every kernarg buffer, are never exported).
    used: AtomicBool,
}

impl IpcHandleCache {
    pub(super) fn new() -> IpcHandleCache {
        IpcHandleCache {
            handles: Mutex::new(AddressMap::default()),
            used: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Handles> {
        self.handles.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Set before an export checks the allocation map: see [`Self::forget`].
    fn mark_used(&self) {
        self.used.store(true, Ordering::SeqCst);
    }

    /// Drops the cached handle of `base`; called after the allocation map
    /// changed `base`. `export_ipc` sets `used` before it checks the
    /// allocation map, so when this reads false, that check comes after our
    /// change and will not cache a handle for the old allocation.
    #[inline]
    pub(super) fn forget(&self, base: u64) {
        if self.used.load(Ordering::SeqCst) {
            self.lock().remove(&base);
        }
    }
}

impl HsaTool {
    /// Handles are cached only for allocations in the allocation map, whose
    /// free ditto sees; one found through `pointer_info` is exported afresh
    /// every time, as its free (and a reuse of its address) goes unseen.
    pub(super) fn export_ipc(&self, allocation: &Allocation) -> Result<Transport, IpcExportError> {
        if rocr_model_mode() {
            return Err(IpcExportError::ModelMode);
        }
        let mut cache = self.ipc_handles.lock();
        let (handle, owner_node) = match cache.get(&allocation.base) {
            Some((size, h, node)) if *size == allocation.size => (*h, *node),
            _ => {
                let create = self
                    .amd
                    .hsa_amd_ipc_memory_create_fn
                    .ok_or(IpcExportError::NoIpcCreate)?;
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
                    return Err(IpcExportError::Create { status: st });
                }
                let node = info.as_ref().and_then(|i| self.owner_node(i));
                // Before the check: see IpcHandleCache::forget.
                self.ipc_handles.mark_used();
                if self.allocations.find(allocation.base) == Some(*allocation) {
                    cache.insert(allocation.base, (allocation.size, h, node));
                }
                (h, node)
            }
        };
        let handle = handle.handle.iter().flat_map(|w| w.to_le_bytes()).collect();
        Ok(Transport::Ipc { handle, owner_node })
    }
}
