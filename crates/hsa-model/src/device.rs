//! One model GPU: the aperture through which it sees GPU memory, the
//! allocations the thunk told it of, and how it sets one of the thunk's
//! events (which wakes ROCr's waiters).
//!
//! GPU virtual address `va` is at host address aperture + `va`: the thunk
//! maps each allocation there (from its memfd) when it is mapped to this
//! GPU. The model touches memory only through [`Shared::at`], which
//! refuses a range outside every allocation the thunk announced, so a
//! packet naming a wild address is reported, never a segmentation fault
//! in the application.

use crate::interface::{QueueInfo, SetEventFn};
use crate::packet_processor::QueueProcessor;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The thunk's "set event" function and its data.
#[derive(Clone, Copy)]
struct EventSetter {
    f: SetEventFn,
    data: usize,
}

/// One model GPU, shared by the thunk's calls and the queue threads.
pub struct ModelGpu {
    inner: Arc<Shared>,
}

/// What the queue threads hold of their GPU.
pub struct Shared {
    /// The GPU's node in the topology (ROCr's "GPU node-N").
    node: u32,
    aperture: AtomicUsize,
    aperture_size: AtomicU64,
    /// GPU allocations by start address: (size, KFD allocation flags).
    allocations: Mutex<BTreeMap<u64, (u64, u32)>>,
    set_event: Mutex<Option<EventSetter>>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ModelGpu {
    /// The GPU of topology node `node`.
    pub fn new(node: u32) -> ModelGpu {
        ModelGpu {
            inner: Arc::new(Shared {
                node,
                aperture: AtomicUsize::new(0),
                aperture_size: AtomicU64::new(0),
                allocations: Mutex::new(BTreeMap::new()),
                set_event: Mutex::new(None),
            }),
        }
    }

    pub fn set_aperture(&self, base: usize, size: u64) {
        self.inner.aperture.store(base, Ordering::Release);
        self.inner.aperture_size.store(size, Ordering::Release);
    }

    pub fn allocated(&self, va: u64, size: u64, flags: u32) {
        locked(&self.inner.allocations).insert(va, (size, flags));
    }

    pub fn freed(&self, va: u64, _size: u64) {
        locked(&self.inner.allocations).remove(&va);
    }

    pub fn set_event_callback(&self, f: Option<SetEventFn>, data: *mut c_void) {
        *locked(&self.inner.set_event) = f.map(|f| EventSetter {
            f,
            data: data as usize,
        });
    }

    /// Starts executing the queue `info` describes.
    pub fn register_queue(&self, info: QueueInfo) -> Result<QueueProcessor, String> {
        QueueProcessor::start(self.inner.clone(), info)
    }
}

impl Shared {
    /// The GPU's node in the topology.
    pub fn node(&self) -> u32 {
        self.node
    }

    /// The host address of GPU address `va`, when `va .. va + len` lies in
    /// one allocation the thunk announced and inside the aperture.
    pub fn at(&self, va: u64, len: u64) -> Option<*mut u8> {
        let base = self.aperture.load(Ordering::Acquire);
        let size = self.aperture_size.load(Ordering::Acquire);
        let end = va.checked_add(len)?;
        if base == 0 || end > size {
            return None;
        }
        let allocations = locked(&self.allocations);
        let (&start, &(alloc_size, _)) = allocations.range(..=va).next_back()?;
        if end > start.checked_add(alloc_size)? {
            return None;
        }
        Some((base + va as usize) as *mut u8)
    }

    /// Sets the thunk's event `event_id` (waking whoever waits on it).
    pub fn set_event(&self, event_id: u32) {
        let setter = *locked(&self.set_event);
        if let Some(s) = setter {
            // SAFETY: the thunk's function, called as its interface says,
            // from any thread (it takes its own lock).
            unsafe { (s.f)(s.data as *mut c_void, event_id) };
        }
    }
}
