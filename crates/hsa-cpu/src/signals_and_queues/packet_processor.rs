//! The packet processor: one thread per hardware queue, woken by stores on
//! the ring's doorbell signal (never polling). Owns that thread and what
//! it does with each packet.
//!
//! The processor takes packets in order at the read index: kernel dispatch
//! (KERNEL_OBJECT looked up in `executables`' registry of live kernels,
//! then run by `dispatch`), barrier-AND, barrier-OR, AMD's barrier-value.
//! It is sequential, so the barrier bit holds trivially. After each packet
//! it records timestamps into the completion signal the packet carries (a
//! dispatch: around the run; a barrier: from when the processor took it to
//! when its condition held), sets the header back to INVALID, advances the
//! read index and then decrements the completion signal by 1. The
//! processor sleeps whenever it waits (doorbell, barrier dependencies): no
//! periodic wake-up; a queue destroy sets the stop flag and wakes whatever
//! it sleeps on.
//!
//! A kernel that faults (`kernel_faults`) never returns, so its queue's
//! thread stops at that packet for good: the queue is suspended, its
//! dispatch never completes and no later packet is taken. The fault is
//! reported once per queue, on the runtime's faults thread, as ROCr's
//! `AqlQueue::ExceptionHandler` and `Runtime::VMFaultHandler` do: a page
//! fault to the system event handlers (`system_events`: with none that
//! returns SUCCESS, ROCr's message and abort), never to the queue's
//! callback; an illegal instruction to the queue's error callback as
//! HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION, an arithmetic exception as
//! HSA_STATUS_ERROR_EXCEPTION (no callback: nothing is called, nothing
//! aborts). Destroying a faulted queue does not wait for its thread.

use crate::agents;
use crate::code_objects::executables;
use crate::execution::dispatch;
use crate::execution::kernel_faults::{self, FaultKind, KernelFault};
use crate::memory::visibility;
use crate::signals_and_queues::aql_rings::Ring;
use crate::signals_and_queues::signals::{self, Order, Rmw, Signal};
use crate::system_events;
use hsa::*;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};

/// Every live hardware queue by its id, for the reports of its kernels'
/// faults (the id is what `dispatch` marks kernel threads with).
static BY_ID: LazyLock<Mutex<HashMap<u64, Weak<HwQueue>>>> = LazyLock::new(Default::default);

fn by_id() -> std::sync::MutexGuard<'static, HashMap<u64, Weak<HwQueue>>> {
    BY_ID.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reports a fault of a kernel of queue `fault.queue` (on the faults
/// thread), once per queue; see the module header.
fn report_kernel_fault(fault: KernelFault) {
    let queue = by_id().get(&fault.queue).and_then(Weak::upgrade);
    let Some(q) = queue else {
        eprintln!(
            "hsa-cpu: a kernel of queue {} faulted after the queue was destroyed: {fault:?}",
            fault.queue
        );
        return;
    };
    if q.faulted.swap(true, Ordering::SeqCst) {
        return; // the queue is suspended already: its first fault was reported
    }
    match fault.kind() {
        FaultKind::Memory => {
            system_events::memory_fault(q.gpu, fault.address, fault.memory_reason())
        }
        FaultKind::IllegalInstruction => q.report(HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION),
        FaultKind::Arithmetic => q.report(HSA_STATUS_ERROR_EXCEPTION),
    }
}

/// `HSA_AMD_PACKET_TYPE_BARRIER_VALUE`: the vendor format byte of AMD's
/// barrier-value packet (hsa_ext_amd.h).
const AMD_PACKET_BARRIER_VALUE: u8 = 2;

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
    /// A kernel of this queue faulted: its thread never returns.
    faulted: AtomicBool,
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
            faulted: AtomicBool::new(false),
            waiting_on: Mutex::new(None),
            thread: Mutex::new(None),
        });
        kernel_faults::set_reporter(report_kernel_fault);
        by_id().insert(q.ring.id(), Arc::downgrade(&q));
        let worker = q.clone();
        let handle = std::thread::Builder::new()
            .name(format!("hsa-cpu-queue-{}", q.ring.id()))
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
            // SAFETY: the application's error callback with its own data, as
            // `create`'s caller vouched for them.
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
        by_id().remove(&self.ring.id());
        let handle = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        // Destroyed from its own error callback: the thread exits by itself.
        let Some(h) = handle else { return };
        if h.thread().id() == std::thread::current().id() {
            return;
        }
        // A faulted kernel never returns: its thread is left parked. Until
        // a fault is reported (it may be on its way) the thread is polled.
        while !h.is_finished() {
            if self.faulted.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let _ = h.join();
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
                            // SAFETY: the application published the packet
                            // (hsa.h): its kernarg holds the kernel's
                            // arguments and what they point at.
                            unsafe {
                                dispatch::run(&d, kernel, ring.cooperative(), self.gpu, ring.id())
                            }
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
