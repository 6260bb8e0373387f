//! Queues and the packet processor. Owns every AQL ring (app queues and the
//! proxy rings of intercept queues), the registry from `hsa_queue_t*` to its
//! object, the read/write index operations, and one processor thread per
//! hardware queue, woken by stores on the doorbell signal (never polling).
//!
//! The processor takes packets in order at the read index: kernel dispatch
//! (KERNEL_OBJECT looked up in `executables`' registry of live kernels,
//! then run by `dispatch`), barrier-AND, barrier-OR. It is sequential, so the
//! barrier bit holds trivially. After each packet it records timestamps into
//! the completion signal the packet carries (a dispatch: around the run; a
//! barrier: from when the processor took it to when its condition held),
//! sets the header back to INVALID, advances the read index
//! and then decrements the completion signal by 1. The processor sleeps
//! whenever it waits (doorbell, barrier dependencies): no periodic wake-up;
//! a queue destroy sets the stop flag and wakes whatever it sleeps on.
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
//! `intercept_queues` builds intercept queues from the rings and hardware queues
//! here; this module never uses `intercept_queues`: the registry holds an
//! intercept queue as a `ProxyQueue`.

use crate::agents;
use crate::code_objects::executables;
use crate::execution::dispatch;
use crate::memory::visibility;
use crate::signals_and_queues::signals::{self, Order, Rmw, Signal};
use hsa::*;
use std::any::Any;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, RwLock};

/// `HSA_AMD_PACKET_TYPE_BARRIER_VALUE`: the vendor format byte of AMD's
/// barrier-value packet (hsa_ext_amd.h).
const AMD_PACKET_BARRIER_VALUE: u8 = 2;

/// A ring of AQL packets with its `hsa_queue_t`, indices and doorbell.
pub struct Ring {
    /// Boxed so the address handed to the application never moves.
    queue: Box<hsa_queue_t>,
    slots: *mut AqlPacket,
    layout: std::alloc::Layout,
    pub size: u32,
    pub read_index: AtomicU64,
    pub write_index: AtomicU64,
    pub doorbell: Arc<Signal>,
}

// SAFETY: the ring memory is shared with the application by design; all
// accesses to slots go through atomic headers (hsa::packet) and indices.
unsafe impl Send for Ring {}
// SAFETY: as above.
unsafe impl Sync for Ring {}

static NEXT_QUEUE_ID: AtomicU64 = AtomicU64::new(1);

impl Ring {
    /// Created as HSA_QUEUE_TYPE_COOPERATIVE: its dispatches run every
    /// group at once (dispatch.rs).
    pub fn cooperative(&self) -> bool {
        self.queue.type_ == HSA_QUEUE_TYPE_COOPERATIVE
    }

    pub fn new(size: u32, type_: hsa_queue_type32_t) -> Option<Ring> {
        let layout = std::alloc::Layout::from_size_align(size as usize * 64, 4096).ok()?;
        // SAFETY: layout has non-zero size (size >= QUEUE_MIN_SIZE slots).
        let slots = unsafe { std::alloc::alloc_zeroed(layout) } as *mut AqlPacket;
        if slots.is_null() {
            return None;
        }
        for i in 0..size as usize {
            // SAFETY: i < size, inside the fresh allocation.
            unsafe { (*slots.add(i)).set_header(packet::header(HSA_PACKET_TYPE_INVALID, false)) };
        }
        let (doorbell_handle, doorbell) = signals::create(0);
        let queue = Box::new(hsa_queue_t {
            type_,
            features: HSA_QUEUE_FEATURE_KERNEL_DISPATCH,
            base_address: slots as *mut c_void,
            doorbell_signal: doorbell_handle,
            size,
            reserved1: 0,
            id: NEXT_QUEUE_ID.fetch_add(1, Ordering::Relaxed),
        });
        Some(Ring {
            queue,
            slots,
            layout,
            size,
            read_index: AtomicU64::new(0),
            write_index: AtomicU64::new(0),
            doorbell,
        })
    }

    pub fn hsa_queue(&self) -> *mut hsa_queue_t {
        &*self.queue as *const hsa_queue_t as *mut hsa_queue_t
    }

    pub fn slot(&self, index: u64) -> *mut AqlPacket {
        // SAFETY: the modulo keeps the slot inside the ring.
        unsafe { self.slots.add((index % self.size as u64) as usize) }
    }

    /// Marks the slot free again (header INVALID, release).
    pub fn invalidate(&self, index: u64) {
        let slot = self.slot(index);
        // SAFETY: slot is a live, aligned packet slot; the header is its first u16.
        unsafe {
            (*(slot as *const std::sync::atomic::AtomicU16)).store(
                packet::header(HSA_PACKET_TYPE_INVALID, false),
                Ordering::Release,
            )
        };
    }

    /// Slots not holding an unconsumed packet.
    pub fn free_slots(&self) -> u64 {
        let w = self.write_index.load(Ordering::Acquire);
        let r = self.read_index.load(Ordering::Acquire);
        (self.size as u64).saturating_sub(w.saturating_sub(r))
    }

    /// Writes all `packets` or none, leaving at least `keep_free` slots free
    /// (the submitter is the only producer: callers serialise on their own
    /// lock), then rings the doorbell.
    pub fn try_submit(&self, packets: &[AqlPacket], keep_free: u64) -> bool {
        let w = self.write_index.load(Ordering::Acquire);
        if packets.len() as u64 + keep_free > self.free_slots() {
            return false;
        }
        self.write_index
            .store(w + packets.len() as u64, Ordering::Release);
        for (i, p) in packets.iter().enumerate() {
            // SAFETY: slots w..w+n are reserved above and free (read index passed them).
            unsafe { packet::publish(self.slot(w + i as u64), p) };
        }
        self.doorbell
            .store((w + packets.len() as u64 - 1) as i64, Order::Release);
        true
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        signals::destroy(self.queue.doorbell_signal);
        // SAFETY: slots was allocated with this layout in Ring::new.
        unsafe { std::alloc::dealloc(self.slots as *mut u8, self.layout) };
    }
}

/// A queue with a packet processor ("hardware" queue).
pub struct HwQueue {
    pub ring: Arc<Ring>,
    /// The index of the GPU agent the queue runs on (whose release scopes
    /// `visibility` follows).
    gpu: usize,
    error_callback: QueueErrorCallback,
    error_data: usize,
    /// The queue reported to the error callback (the proxy for intercept queues).
    public_queue: std::sync::atomic::AtomicPtr<hsa_queue_t>,
    stop: AtomicBool,
    /// The barrier dependency the processor sleeps on (woken by shut_down).
    waiting_on: Mutex<Option<Arc<Signal>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl HwQueue {
    /// # Safety
    /// `callback`, if any, may be called with a status, the queue and
    /// `data` on the queue's thread while the queue lives.
    pub unsafe fn create(
        agent: hsa_agent_t,
        size: u32,
        type_: hsa_queue_type32_t,
        callback: QueueErrorCallback,
        data: *mut c_void,
    ) -> Option<Arc<HwQueue>> {
        let ring = Arc::new(Ring::new(size, type_)?);
        let q = Arc::new(HwQueue {
            gpu: agents::gpu_index(agent).unwrap_or(0),
            public_queue: std::sync::atomic::AtomicPtr::new(ring.hsa_queue()),
            ring,
            error_callback: callback,
            error_data: data as usize,
            stop: AtomicBool::new(false),
            waiting_on: Mutex::new(None),
            thread: Mutex::new(None),
        });
        let worker = q.clone();
        let handle = std::thread::Builder::new()
            .name(format!("hsa-cpu-queue-{}", q.ring.queue.id))
            .spawn(move || worker.process())
            .ok()?;
        *q.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
        Some(q)
    }

    pub fn set_public_queue(&self, q: *mut hsa_queue_t) {
        self.public_queue.store(q, Ordering::Relaxed);
    }

    fn report(&self, status: hsa_status_t) {
        if let Some(cb) = self.error_callback {
            // SAFETY: the application's error callback with its own data.
            unsafe {
                cb(
                    status,
                    self.public_queue.load(Ordering::Relaxed),
                    self.error_data as *mut c_void,
                )
            };
        }
    }

    /// Stops the processor thread (after the packet it is running).
    pub fn shut_down(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.ring.doorbell.poke();
        if let Some(s) = self
            .waiting_on
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            s.poke();
        }
        signals::wake_any_waiters();
        let handle = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        // Destroyed from its own error callback: the thread exits by itself.
        if let Some(h) = handle
            && h.thread().id() != std::thread::current().id()
        {
            let _ = h.join();
        }
    }

    /// Blocks until `signal` satisfies the condition, is destroyed (a
    /// dependency that no longer exists counts as satisfied, as a handle
    /// that never named a live signal does), or the queue stops (false).
    fn wait_signal(&self, s: &Arc<Signal>, cond: hsa_signal_condition_t, value: i64) -> bool {
        // Published before the stop flag is read: shut_down either sees this
        // signal and pokes it, or we see its stop flag.
        *self.waiting_on.lock().unwrap_or_else(|e| e.into_inner()) = Some(s.clone());
        let seen = s.wait_or_abort(cond, value, u64::MAX, Order::Acquire, &self.stop);
        *self.waiting_on.lock().unwrap_or_else(|e| e.into_inner()) = None;
        signals::condition_holds(cond, seen, value) || s.is_destroyed()
    }

    /// Waits until `(s & mask) cond value` holds, or the queue stops
    /// (false). A destroyed signal counts as satisfied, as for barriers.
    fn wait_masked(
        &self,
        s: &Arc<Signal>,
        cond: hsa_signal_condition_t,
        value: i64,
        mask: i64,
    ) -> bool {
        if mask == -1 {
            return self.wait_signal(s, cond, value);
        }
        loop {
            let seen = s.load(Order::Acquire);
            if signals::condition_holds(cond, seen & mask, value) || s.is_destroyed() {
                return true;
            }
            // Until the value changes from what was seen.
            if !self.wait_signal(s, HSA_SIGNAL_CONDITION_NE, seen) {
                return false;
            }
        }
    }

    fn process(&self) {
        let ring = &self.ring;
        loop {
            let seen = ring.doorbell.epoch();
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            let index = ring.read_index.load(Ordering::Acquire);
            let slot = ring.slot(index);
            // SAFETY: slot is a live packet slot of this ring.
            let header = unsafe { packet::load_header(slot) };
            if packet::packet_type(header) == HSA_PACKET_TYPE_INVALID
                || index >= ring.write_index.load(Ordering::Acquire)
            {
                ring.doorbell.wait_for_change(seen, None);
                continue;
            }
            // SAFETY: the header was published with release; the body is stable.
            let pkt: AqlPacket = unsafe { *slot };
            // Barrier packets are timestamped too, as the command processor
            // does for every packet with a completion signal: HIP 6.x
            // times events by its barrier-value markers.
            let taken = agents::timestamp_ns();
            let barrier_done = |completion: hsa_signal_t| {
                if let Some(s) = signals::lookup(completion) {
                    s.set_dispatch_time(taken, agents::timestamp_ns());
                }
                completion
            };
            let completion = match packet::packet_type(header) {
                HSA_PACKET_TYPE_KERNEL_DISPATCH => {
                    let d = pkt.as_dispatch();
                    let start = agents::timestamp_ns();
                    // Only a live kernel descriptor is ever run.
                    let status = match executables::lookup_kernel(d.kernel_object) {
                        Some(kernel) => {
                            if packet::release_scope(header) != HSA_FENCE_SCOPE_SYSTEM {
                                // SAFETY: a live kernel descriptor (looked up
                                // above) whose kernarg_size bytes of
                                // arguments the packet points at.
                                unsafe {
                                    let size = (*(d.kernel_object
                                        as *const executables::KernelDescriptor))
                                        .kernarg_size;
                                    visibility::before_agent_scope_dispatch(
                                        self.gpu,
                                        d.kernarg_address as *const u8,
                                        size as usize,
                                    );
                                }
                            }
                            dispatch::run(&d, kernel, ring.cooperative(), self.gpu)
                        }
                        None => HSA_STATUS_ERROR_INVALID_CODE_OBJECT,
                    };
                    let end = agents::timestamp_ns();
                    if status != HSA_STATUS_SUCCESS {
                        self.report(status);
                    }
                    if let Some(s) = signals::lookup(d.completion_signal) {
                        s.set_dispatch_time(start, end);
                    }
                    d.completion_signal
                }
                HSA_PACKET_TYPE_BARRIER_AND => {
                    let b = pkt.as_barrier();
                    for dep in b.dep_signal.iter().filter(|s| s.handle != 0) {
                        // A handle naming no live signal counts as satisfied.
                        if let Some(s) = signals::lookup(*dep)
                            && !self.wait_signal(&s, HSA_SIGNAL_CONDITION_EQ, 0)
                        {
                            return;
                        }
                    }
                    barrier_done(b.completion_signal)
                }
                HSA_PACKET_TYPE_BARRIER_OR => {
                    let b = pkt.as_barrier();
                    // Live handles first; a zero handle is no dependency.
                    let mut deps = [hsa_signal_t { handle: 0 }; 5];
                    let mut n = 0;
                    for dep in b.dep_signal.iter().filter(|s| s.handle != 0) {
                        deps[n] = *dep;
                        n += 1;
                    }
                    if n > 0 {
                        let conds = [HSA_SIGNAL_CONDITION_EQ; 5];
                        let values = [0i64; 5];
                        let hit = signals::wait_any_or_abort(
                            &deps[..n],
                            &conds[..n],
                            &values[..n],
                            u64::MAX,
                            &self.stop,
                        );
                        if hit.0 == u32::MAX {
                            return; // stopped
                        }
                    }
                    barrier_done(b.completion_signal)
                }
                // AMD's barrier-value packet (vendor format 2), which HIP 6.x
                // uses for events and stream waits: holds the queue until
                // (signal & mask) meets the condition against value.
                HSA_PACKET_TYPE_VENDOR_SPECIFIC if pkt.0[2] == AMD_PACKET_BARRIER_VALUE => {
                    let word = |at: usize| {
                        u64::from_le_bytes(pkt.0[at..at + 8].try_into().expect("8 bytes"))
                    };
                    let signal = hsa_signal_t { handle: word(8) };
                    let (value, mask) = (word(16) as i64, word(24) as i64);
                    let cond = u32::from_le_bytes(pkt.0[32..36].try_into().expect("4 bytes"));
                    if let Some(s) = signals::lookup(signal)
                        && !self.wait_masked(&s, cond as hsa_signal_condition_t, value, mask)
                    {
                        return;
                    }
                    barrier_done(hsa_signal_t { handle: word(56) })
                }
                _ => {
                    self.report(HSA_STATUS_ERROR_INVALID_PACKET_FORMAT);
                    hsa_signal_t { handle: 0 }
                }
            };
            // A SYSTEM-scope release makes every write of the GPU visible
            // everywhere before the packet completes.
            if packet::release_scope(header) == HSA_FENCE_SCOPE_SYSTEM {
                visibility::system_release(self.gpu);
            }
            // The slot is free before completion is signalled, so a waiter
            // that sees the signal also sees the read index past the packet.
            ring.invalidate(index);
            ring.read_index.store(index + 1, Ordering::Release);
            if completion.handle != 0 {
                signals::rmw(completion, Rmw::Subtract, 1, Order::Release);
            }
        }
    }
}

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
