//! Intercept queues, as ROCr 5.2's InterceptQueue behaves.
//! Owns the proxy ring the application sees, the chain of registered packet
//! interceptors, the overflow buffer and the queue's two async signals (the
//! async doorbell and the retry point). Never blocks in the doorbell path
//! except on the queue lock, and allocates nothing per packet there (the
//! chain is a shared snapshot, the proxy slot handed to the outermost
//! interceptor lives on the stack) while the hardware ring has room.
//! While no packet waits in the overflow buffer and no interceptor is being
//! registered, a packet costs the queue lock and no other lock: the chain
//! snapshot is kept under the queue lock and taken again only when a
//! registration changed it, and an empty overflow buffer is seen by a flag.
//! Built on `aql_rings` (the proxy ring), `packet_processor` (the hardware
//! queue) and `queues` (the registry, which holds an intercept queue as a
//! `queues::ProxyQueue`).
//!
//! - A store on the proxy doorbell runs, on the storing thread and under the
//!   queue's non-recursive lock, the outermost interceptor (the LAST
//!   registered) once per new packet, with ONE packet (a copy of the proxy
//!   slot, dead once the call returns).
//! - Its writer hands packets to the next interceptor inward; it may be
//!   called any number of times with any count (0 drops), and only on the
//!   callback's thread while the callback runs: a writer call from another
//!   thread, or after the callback returned, is ignored.
//! - The innermost writer submits the packets of ONE call to the hardware
//!   ring all-or-nothing, always leaving one slot free (ROCr keeps it for
//!   the retry barrier). If they do not fit they go to the overflow buffer
//!   (as do the packets of every later writer call while it is non-empty,
//!   so order is preserved; ROCr asserts instead), and a barrier-AND whose
//!   completion signal is the queue's retry signal is put in the free slot.
//! - When the hardware reaches that barrier, the retry signal's async
//!   handler (the runtime's one async thread, `signals`) resubmits the
//!   overflow and then processes the proxy packets that arrived meanwhile:
//!   while the overflow is non-empty a doorbell store only tries to flush
//!   it and, failing, leaves new packets in the proxy ring, so their
//!   interceptor calls run later on the async thread, as in ROCr.
//! - A doorbell rung from inside an interceptor (any intercept queue, same
//!   thread) is stored to the async doorbell and processed on the async
//!   thread, as in ROCr.
//!
//! A rewrite larger than the ring minus one slot can never be submitted
//! whole; it is split into ring-sized batches, in order (ROCr would wait
//! forever).

use crate::signals_and_queues::aql_rings::Ring;
use crate::signals_and_queues::async_events::{self, AsyncCallback};
use crate::signals_and_queues::packet_processor::HwQueue;
use crate::signals_and_queues::queues::{self, ProxyQueue, QueueRecord};
use crate::signals_and_queues::signals::{self, Order, Signal};
use hsa::*;
use std::any::Any;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::MutexGuard;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

type Handler = unsafe extern "C" fn(*const c_void, u64, u64, *mut c_void, InterceptPacketWriter);
/// (handler, user data) in registration order; the last is outermost.
type Chain = Arc<[(Handler, usize)]>;

/// Value of an idle async doorbell (ROCr's DOORBELL_MAX).
const DOORBELL_IDLE: i64 = i64::MAX;

/// Writer calls whose packets went to the overflow buffer, since start-up.
static OVERFLOWED_BATCHES: AtomicU64 = AtomicU64::new(0);

/// How many writer calls overflowed the hardware ring in this process.
pub fn overflowed_batches() -> u64 {
    OVERFLOWED_BATCHES.load(Ordering::SeqCst)
}

#[derive(Default)]
struct Overflow {
    batches: VecDeque<Vec<AqlPacket>>,
    /// A retry barrier sits in the hardware ring.
    retry_pending: bool,
}

pub struct InterceptQueue {
    pub proxy: Arc<Ring>,
    pub(crate) hardware: Arc<HwQueue>,
    /// Replaced whole on registration, so a drain takes it with an Arc clone.
    interceptors: Mutex<Chain>,
    /// Registrations so far: bumped after `interceptors` changed.
    chain_version: AtomicU64,
    /// The per-queue, non-recursive lock held while interceptors run, and
    /// the chain snapshot drains use.
    lock: Mutex<DrainState>,
    overflow: Mutex<Overflow>,
    /// `overflow.batches` is non-empty. Changed under both the queue lock
    /// and the overflow lock; read under the queue lock, so a doorbell with
    /// nothing overflowed takes no overflow lock.
    overflowing: AtomicBool,
    /// Deferred doorbell stores (idle at DOORBELL_IDLE).
    async_doorbell: (hsa_signal_t, Arc<Signal>),
    /// Completion signal of the retry barrier (1, the barrier makes it 0).
    retry: (hsa_signal_t, Arc<Signal>),
    active: AtomicBool,
}

/// What the queue lock guards: the chain as of registration `version`.
struct DrainState {
    version: u64,
    chain: Chain,
}

/// One interceptor call in progress on this thread.
#[derive(Clone, Copy)]
struct Frame {
    queue: *const InterceptQueue,
    /// The chain the outermost call was made with (kept alive by `drain`).
    chain: *const [(Handler, usize)],
    /// Index of the interceptor running (its writer goes to `level - 1`).
    level: usize,
    user_index: u64,
}

thread_local! {
    static FRAMES: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
}

impl InterceptQueue {
    /// Processes every published packet of the proxy ring, under the queue
    /// lock (`state`); `frames` is this thread's interceptor-call stack.
    fn drain(&self, state: &mut DrainState, frames: &RefCell<Vec<Frame>>) {
        loop {
            let r = self.proxy.read_index.load(Ordering::Acquire);
            if r >= self.proxy.write_index.load(Ordering::Acquire) {
                return;
            }
            let src = self.proxy.slot(r);
            // SAFETY: a live slot of the proxy ring.
            let header = unsafe { packet::load_header(src) };
            if packet::packet_type(header) == HSA_PACKET_TYPE_INVALID {
                return; // reserved but not yet published
            }
            // SAFETY: published with release. The copy on this stack frame is
            // what the outermost interceptor gets; it is dead once the call
            // returns, as ROCr's reused proxy slot is.
            let slot: AqlPacket = unsafe { *src };
            crate::tools::trace::packet("app", &slot);
            // Each packet sees every registration completed before it.
            let version = self.chain_version.load(Ordering::Acquire);
            if version != state.version {
                let chain = self.interceptors.lock().unwrap_or_else(|e| e.into_inner());
                state.chain = chain.clone();
                state.version = self.chain_version.load(Ordering::Acquire);
            }
            let chain = &*state.chain;
            if let Some(&(handler, data)) = chain.last() {
                crate::tools::trace::interceptor_call(async_events::on_async_thread);
                let frame = Frame {
                    queue: self,
                    chain,
                    level: chain.len() - 1,
                    user_index: r,
                };
                frames.borrow_mut().push(frame);
                // SAFETY: the tool's handler, called as ROCr does.
                unsafe {
                    handler(
                        &slot as *const AqlPacket as *const c_void,
                        1,
                        r,
                        data as *mut c_void,
                        Some(packet_writer),
                    )
                };
                frames.borrow_mut().pop();
            } else {
                self.submit(std::slice::from_ref(&slot));
            }
            self.proxy.invalidate(r);
            self.proxy.read_index.store(r + 1, Ordering::Release);
        }
    }

    /// The innermost writer: all-or-nothing to the hardware ring (one slot
    /// kept free), else to the overflow buffer behind a retry barrier.
    fn submit(&self, packets: &[AqlPacket]) {
        if packets.is_empty() {
            return;
        }
        for p in packets {
            crate::tools::trace::packet("ring", p);
        }
        // Every producer of the hardware ring holds the queue lock, as we
        // do: with nothing overflowed, no other lock is needed.
        if !self.overflowing.load(Ordering::Acquire) && self.hardware.ring.try_submit(packets, 1) {
            return;
        }
        let mut overflow = self.overflow.lock().unwrap_or_else(|e| e.into_inner());
        if overflow.batches.is_empty() && self.hardware.ring.try_submit(packets, 1) {
            return;
        }
        OVERFLOWED_BATCHES.fetch_add(1, Ordering::SeqCst);
        crate::tools::trace::event("overflow");
        let batch = (self.hardware.ring.size as usize - 1).max(1);
        for chunk in packets.chunks(batch) {
            overflow.batches.push_back(chunk.to_vec());
        }
        self.overflowing.store(true, Ordering::Release);
        self.arm_retry(&mut overflow);
    }

    /// Puts the retry barrier in the hardware ring unless one is there.
    fn arm_retry(&self, overflow: &mut Overflow) {
        if overflow.retry_pending {
            return;
        }
        let b = hsa_barrier_and_packet_t {
            header: packet::header(HSA_PACKET_TYPE_BARRIER_AND, true),
            completion_signal: self.retry.0,
            ..Default::default()
        };
        if self
            .hardware
            .ring
            .try_submit(&[AqlPacket::from_barrier(&b)], 0)
        {
            overflow.retry_pending = true;
        } else {
            // Cannot happen while every submit keeps a slot free; retry
            // from the async thread rather than lose the packets.
            self.async_doorbell.1.store(0, Order::Release);
        }
    }

    /// Resubmits overflowed batches in order; true when none is left.
    /// Caller holds the queue lock.
    fn flush_overflow(&self) -> bool {
        if !self.overflowing.load(Ordering::Acquire) {
            return true;
        }
        let mut overflow = self.overflow.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(batch) = overflow.batches.front() {
            if !self.hardware.ring.try_submit(batch, 1) {
                self.arm_retry(&mut overflow);
                return false;
            }
            overflow.batches.pop_front();
        }
        self.overflowing.store(false, Ordering::Release);
        true
    }

    /// ROCr's `InterceptQueue::StoreRelaxed`.
    fn doorbell(&self) {
        if !self.active.load(Ordering::SeqCst) {
            return;
        }
        FRAMES.with(|frames| {
            if !frames.borrow().is_empty() {
                // Rung from inside an interceptor: defer to the async thread.
                self.async_doorbell.1.store(0, Order::Release);
                return;
            }
            let mut state: MutexGuard<'_, DrainState> =
                self.lock.lock().unwrap_or_else(|e| e.into_inner());
            if !self.flush_overflow() {
                return; // the retry handler processes the new packets later
            }
            self.drain(&mut state, frames);
        })
    }
}

impl ProxyQueue for InterceptQueue {
    fn proxy(&self) -> &Arc<Ring> {
        &self.proxy
    }

    fn shut_down(&self) {
        self.active.store(false, Ordering::SeqCst);
        self.hardware.shut_down();
        self.overflow
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .batches
            .clear();
        self.overflowing.store(false, Ordering::Release);
        // Their async handlers are dropped with them.
        signals::destroy(self.async_doorbell.0);
        signals::destroy(self.retry.0);
    }
}

/// `hsa_amd_queue_intercept_packet_writer`: valid only on the thread of the
/// interceptor call that received it, before that call returns; ignored
/// anywhere else.
unsafe extern "C" fn packet_writer(pkts: *const c_void, count: u64) {
    let Some(frame) = FRAMES.with(|f| f.borrow().last().copied()) else {
        return;
    };
    if count > 0 && pkts.is_null() {
        return;
    }
    // SAFETY: the frame's queue is alive: its lock is held by this thread
    // for the whole interceptor call.
    let queue = unsafe { &*frame.queue };
    if frame.level == 0 {
        let packets = if count == 0 {
            &[][..]
        } else {
            // SAFETY: the interceptor passes `count` packets.
            unsafe { std::slice::from_raw_parts(pkts as *const AqlPacket, count as usize) }
        };
        queue.submit(packets);
        return;
    }
    // SAFETY: the queue lock, held by this thread for the whole outermost
    // call, keeps the Arc of this chain (`DrainState`) until it returns.
    let chain = unsafe { &*frame.chain };
    let Some(&(handler, data)) = chain.get(frame.level - 1) else {
        return;
    };
    FRAMES.with(|f| {
        f.borrow_mut().push(Frame {
            level: frame.level - 1,
            ..frame
        })
    });
    // SAFETY: the next interceptor inward, called as ROCr does.
    unsafe {
        handler(
            pkts,
            count,
            frame.user_index,
            data as *mut c_void,
            Some(packet_writer),
        )
    };
    FRAMES.with(|f| f.borrow_mut().pop());
}

/// The queue's handlers on the runtime's async thread.
fn register_async_handlers(q: &Arc<InterceptQueue>) -> hsa_status_t {
    let weak: Weak<InterceptQueue> = Arc::downgrade(q);
    let status = async_events::register_async(
        q.async_doorbell.1.clone(),
        HSA_SIGNAL_CONDITION_NE,
        DOORBELL_IDLE,
        AsyncCallback::Internal(Box::new(move |_| {
            let Some(q) = weak.upgrade() else {
                return false;
            };
            q.async_doorbell.1.store(DOORBELL_IDLE, Order::Relaxed);
            q.doorbell();
            q.active.load(Ordering::SeqCst)
        })),
    );
    if status != HSA_STATUS_SUCCESS {
        return status;
    }
    let weak: Weak<InterceptQueue> = Arc::downgrade(q);
    async_events::register_async(
        q.retry.1.clone(),
        HSA_SIGNAL_CONDITION_EQ,
        0,
        AsyncCallback::Internal(Box::new(move |_| {
            let Some(q) = weak.upgrade() else {
                return false;
            };
            q.retry.1.store(1, Order::Relaxed);
            q.overflow
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retry_pending = false;
            q.doorbell();
            q.active.load(Ordering::SeqCst)
        })),
    )
}

// --- API entries (table only: not exported, as in ROCr) -------------------

/// # Safety
/// `queue` is null or valid for writes of one pointer; `callback`, if
/// any, may be called with a status, the queue and `data` while the
/// queue lives.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn create(
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
    let size = match queues::checked_size(agent, size, type_) {
        Ok(s) => s,
        Err(e) => return e,
    };
    // SAFETY: `callback` and `data` as our own contract says.
    let Some(hardware) = (unsafe { HwQueue::create(agent, size, type_, callback, data) }) else {
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    };
    let Some(proxy) = Ring::new(size, type_) else {
        hardware.shut_down();
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    };
    let proxy = Arc::new(proxy);
    let public = proxy.hsa_queue();
    hardware.set_public_queue(public);
    let iq = Arc::new(InterceptQueue {
        proxy,
        hardware,
        interceptors: Mutex::new(Arc::from([])),
        chain_version: AtomicU64::new(0),
        lock: Mutex::new(DrainState {
            version: 0,
            chain: Arc::from([]),
        }),
        overflow: Mutex::new(Overflow::default()),
        overflowing: AtomicBool::new(false),
        async_doorbell: signals::create(DOORBELL_IDLE),
        retry: signals::create(1),
        active: AtomicBool::new(true),
    });
    if register_async_handlers(&iq) != HSA_STATUS_SUCCESS {
        iq.shut_down();
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    let weak = Arc::downgrade(&iq);
    iq.proxy.doorbell.set_doorbell_hook(Box::new(move || {
        if let Some(q) = weak.upgrade() {
            q.doorbell();
        }
    }));
    queues::register(public, QueueRecord::Intercept(iq));
    // SAFETY: queue is a non-null out pointer supplied by the caller.
    unsafe { queue.write(public) };
    HSA_STATUS_SUCCESS
}

/// # Safety
/// `callback`, if any, may be called with packets, their count and
/// index, `user_data` and a writer, while the queue lives.
pub(crate) unsafe fn register(
    queue: *mut hsa_queue_t,
    callback: InterceptHandler,
    user_data: *mut c_void,
) -> hsa_status_t {
    let Some(QueueRecord::Intercept(q)) = queues::lookup(queue) else {
        return HSA_STATUS_ERROR_INVALID_QUEUE;
    };
    let Ok(q) = (q as Arc<dyn Any + Send + Sync>).downcast::<InterceptQueue>() else {
        return HSA_STATUS_ERROR_INVALID_QUEUE;
    };
    let Some(handler) = callback else {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    };
    let mut chain = q.interceptors.lock().unwrap_or_else(|e| e.into_inner());
    let mut grown = chain.to_vec();
    grown.push((handler, user_data as usize));
    *chain = grown.into();
    // Under the lock: a drain that sees the new version takes the new chain.
    q.chain_version.fetch_add(1, Ordering::AcqRel);
    HSA_STATUS_SUCCESS
}
