//! Queues: owns the registry from `hsa_queue_t*` to its object (a hardware
//! queue with its packet processor, or an intercept queue as a
//! `ProxyQueue`), the queue size rules, queue creation and destruction, and
//! the read/write index operations of the API.
//!
//! Queue sizes (decided from ROCm 5.2.3's `hsa_queue_create` and
//! `GpuAgent::QueueCreate`): a size that is 0 or not a power of two, or a
//! type above COOPERATIVE, is HSA_STATUS_ERROR_INVALID_ARGUMENT; above the
//! agent's HSA_AGENT_INFO_QUEUE_MAX_SIZE it is
//! HSA_STATUS_ERROR_OUT_OF_RESOURCES; below HSA_AGENT_INFO_QUEUE_MIN_SIZE it
//! is HSA_STATUS_ERROR_INVALID_ARGUMENT. ROCr never rounds a request up at
//! that level, and the ring it creates has exactly the size requested
//! (`hsa_queue_t.size`); an intercept queue's proxy ring has the size of
//! the hardware ring it wraps. What differs is only the agent's reported
//! minimum: gfx90a under ROCr 5.2 reports 64 (`minAqlSize_ = 0x40`); our
//! GPU-type agent reports `agents::QUEUE_MIN_SIZE` (4), so tests can fill a
//! ring with a handful of packets (the intercept overflow path). HIP never
//! queries the minimum and asks for 4096 slots, so nothing it does changes.
//!
//! `intercept_queues` builds intercept queues from the rings (`aql_rings`)
//! and hardware queues (`packet_processor`); this module never uses
//! `intercept_queues`: the registry holds an intercept queue as a
//! `ProxyQueue`.

use crate::agents;
use crate::signals_and_queues::aql_rings::Ring;
use crate::signals_and_queues::packet_processor::HwQueue;
use hsa::*;
use std::any::Any;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock, RwLock};

/// A queue whose ring the application writes is not the ring a processor
/// runs (an intercept queue, `intercept_queues::InterceptQueue`, the only kind):
/// what the registry needs of it. Its owner gets its own type back by
/// downcasting (`Arc<dyn Any>`).
pub trait ProxyQueue: Any + Send + Sync {
    /// The ring the application sees.
    fn proxy(&self) -> &Arc<Ring>;
    /// Stops the queue (hsa_queue_destroy).
    fn shut_down(&self);
}

/// What a public `hsa_queue_t*` names.
#[derive(Clone)]
pub enum QueueRecord {
    Hardware(Arc<HwQueue>),
    Intercept(Arc<dyn ProxyQueue>),
}

impl QueueRecord {
    pub fn ring(&self) -> &Arc<Ring> {
        match self {
            QueueRecord::Hardware(q) => &q.ring,
            QueueRecord::Intercept(q) => q.proxy(),
        }
    }
}

static REGISTRY: LazyLock<RwLock<HashMap<usize, QueueRecord>>> = LazyLock::new(Default::default);

pub(crate) fn register(q: *mut hsa_queue_t, record: QueueRecord) {
    REGISTRY
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(q as usize, record);
}

pub(crate) fn lookup(q: *const hsa_queue_t) -> Option<QueueRecord> {
    REGISTRY
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&(q as usize))
        .cloned()
}

/// The size rules of ROCm 5.2.3 (see the module header): the ring gets
/// exactly the size requested.
pub(crate) fn checked_size(
    agent: hsa_agent_t,
    size: u32,
    type_: hsa_queue_type32_t,
) -> Result<u32, hsa_status_t> {
    if size == 0 || !size.is_power_of_two() || type_ > HSA_QUEUE_TYPE_COOPERATIVE {
        return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    if !agents::is_agent(agent) {
        return Err(HSA_STATUS_ERROR_INVALID_AGENT);
    }
    if !agents::is_gpu(agent) {
        return Err(HSA_STATUS_ERROR_INVALID_AGENT);
    }
    if size > agents::QUEUE_MAX_SIZE {
        return Err(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    }
    if size < agents::QUEUE_MIN_SIZE {
        return Err(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    Ok(size)
}

// --- API entries ----------------------------------------------------------

/// # Safety
/// `queue` is null or valid for writes of one pointer; `callback`, if
/// any, may be called with a status, the queue and `data` while the
/// queue lives.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn queue_create(
    agent: hsa_agent_t,
    size: u32,
    type_: hsa_queue_type32_t,
    callback: QueueErrorCallback,
    data: *mut c_void,
    _private_segment_size: u32,
    _group_segment_size: u32,
    queue: *mut *mut hsa_queue_t,
) -> hsa_status_t {
    if queue.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let size = match checked_size(agent, size, type_) {
        Ok(s) => s,
        Err(e) => return e,
    };
    // SAFETY: `callback` and `data` as our own contract says.
    let Some(q) = (unsafe { HwQueue::create(agent, size, type_, callback, data) }) else {
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    };
    let public = q.ring.hsa_queue();
    register(public, QueueRecord::Hardware(q));
    // SAFETY: queue is a non-null out pointer supplied by the caller.
    unsafe { queue.write(public) };
    HSA_STATUS_SUCCESS
}

/// `hsa_amd_queue_create` (ROCm 10): one queue per descriptor, in order.
/// A well-formed compute descriptor gets an AQL queue of
/// `queue_size_bytes / 64` packets, as `hsa_queue_create` makes it; SDMA
/// queues are not modelled (the agent supports no user-mode SDMA queue:
/// HSA_STATUS_ERROR_INVALID_QUEUE_CREATION, as for AIE); a malformed
/// descriptor is HSA_STATUS_ERROR_INVALID_ARGUMENT. As the header says, a
/// failed descriptor's `queue` is NULL, the others stay created, and the
/// first error is returned.
///
/// # Safety
/// `descs` holds `num_descs` descriptors (or is null).
pub(crate) unsafe fn amd_queue_create(
    agent: hsa_agent_t,
    descs: *mut hsa_amd_queue_create_desc_t,
    num_descs: u32,
) -> hsa_status_t {
    if descs.is_null() || num_descs == 0 {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    if !agents::is_agent(agent) {
        return HSA_STATUS_ERROR_INVALID_AGENT;
    }
    let mut first_error = HSA_STATUS_SUCCESS;
    for i in 0..num_descs as usize {
        // SAFETY: the caller passes num_descs descriptors.
        let d = unsafe { &mut *descs.add(i) };
        let status = match (d.compute(), d.engine_type) {
            // SAFETY: the descriptor's own queue field, and its callback
            // with its data as the caller passed them (hsa_ext_amd.h).
            (Some(c), _) => unsafe {
                queue_create(
                    agent,
                    d.queue_size_bytes / 64,
                    c.type_,
                    d.callback,
                    d.callback_data,
                    c.private_segment_size,
                    u32::MAX,
                    &mut d.queue,
                )
            },
            (None, HSA_AMD_QUEUE_ENGINE_SDMA | HSA_AMD_QUEUE_ENGINE_AIE)
                if d.version == HSA_AMD_QUEUE_CREATE_DESC_VERSION =>
            {
                HSA_STATUS_ERROR_INVALID_QUEUE_CREATION
            }
            (None, _) => HSA_STATUS_ERROR_INVALID_ARGUMENT,
        };
        if status != HSA_STATUS_SUCCESS {
            d.queue = std::ptr::null_mut();
            if first_error == HSA_STATUS_SUCCESS {
                first_error = status;
            }
        }
    }
    first_error
}

pub(crate) fn queue_destroy(queue: *mut hsa_queue_t) -> hsa_status_t {
    let removed = REGISTRY
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&(queue as usize));
    match removed {
        Some(QueueRecord::Hardware(q)) => {
            q.shut_down();
            HSA_STATUS_SUCCESS
        }
        Some(QueueRecord::Intercept(q)) => {
            q.shut_down();
            HSA_STATUS_SUCCESS
        }
        None => HSA_STATUS_ERROR_INVALID_QUEUE,
    }
}

/// `f` on the ring of `queue`, under the registry's read lock (no record
/// is cloned: the index operations of every dispatch come here).
#[inline]
fn with_ring<T: Default>(queue: *const hsa_queue_t, f: impl FnOnce(&Ring) -> T) -> T {
    REGISTRY
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&(queue as usize))
        .map_or_else(T::default, |r| f(r.ring()))
}

pub(crate) fn load_read_index(q: *const hsa_queue_t, o: Ordering) -> u64 {
    with_ring(q, |r| r.read_index.load(o))
}
pub(crate) fn load_write_index(q: *const hsa_queue_t, o: Ordering) -> u64 {
    with_ring(q, |r| r.write_index.load(o))
}
pub(crate) fn store_write_index(q: *const hsa_queue_t, v: u64, o: Ordering) {
    with_ring(q, |r| r.write_index.store(v, o))
}
pub(crate) fn store_read_index(q: *const hsa_queue_t, v: u64, o: Ordering) {
    with_ring(q, |r| r.read_index.store(v, o))
}
pub(crate) fn add_write_index(q: *const hsa_queue_t, v: u64, o: Ordering) -> u64 {
    with_ring(q, |r| r.write_index.fetch_add(v, o))
}
pub(crate) fn cas_write_index(q: *const hsa_queue_t, expected: u64, v: u64, o: Ordering) -> u64 {
    let failure = match o {
        Ordering::Release | Ordering::Relaxed => Ordering::Relaxed,
        _ => Ordering::Acquire,
    };
    with_ring(q, |r| {
        match r.write_index.compare_exchange(expected, v, o, failure) {
            Ok(x) | Err(x) => x,
        }
    })
}
