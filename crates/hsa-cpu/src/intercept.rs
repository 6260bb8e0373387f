//! Intercept queues, as ROCr's InterceptQueue behaves.
//! Owns the proxy ring the application sees, the chain of registered packet
//! interceptors, the overflow buffer, and the runtime's single async thread.
//!
//! A store on the proxy doorbell runs, on the storing thread and under the
//! queue's non-recursive lock, the outermost interceptor (the LAST
//! registered) once per new packet. Its writer hands packets to the next
//! interceptor inward; the innermost writer submits them to the hardware ring
//! all-or-nothing per call, or appends them to the overflow buffer that the
//! async thread retries as the hardware queue drains. A doorbell rung from
//! inside an interceptor (same thread) is deferred to the async thread, as in
//! ROCr. Never blocks in the doorbell path except on the queue lock, and
//! allocates nothing per packet there (the chain is a shared snapshot, the
//! proxy slot handed to the outermost interceptor lives on the stack).

use crate::queues::{self, HwQueue, QueueRecord, Ring};
use hsa::*;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex, Weak};
use std::time::Duration;

type Handler = unsafe extern "C" fn(*const c_void, u64, u64, *mut c_void, InterceptPacketWriter);
/// (handler, user data) in registration order; the last is outermost.
type Chain = Arc<[(Handler, usize)]>;

pub struct InterceptQueue {
    pub proxy: Arc<Ring>,
    hardware: Arc<HwQueue>,
    /// Replaced whole on registration, so a drain takes it with an Arc clone.
    interceptors: Mutex<Chain>,
    /// The per-queue, non-recursive lock held while interceptors run.
    lock: Mutex<()>,
    /// Writer calls that did not fit the hardware ring, in order.
    overflow: Mutex<VecDeque<Vec<AqlPacket>>>,
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
    /// Intercept queues whose lock this thread holds.
    static HOLDING: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

impl InterceptQueue {
    /// Processes every published packet of the proxy ring. Caller holds `lock`.
    fn drain(&self) {
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
            crate::trace::packet("app", &slot);
            let chain: Chain = self
                .interceptors
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            if let Some(&(handler, data)) = chain.last() {
                let frame = Frame {
                    queue: self,
                    chain: &*chain,
                    level: chain.len() - 1,
                    user_index: r,
                };
                FRAMES.with(|f| f.borrow_mut().push(frame));
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
                FRAMES.with(|f| f.borrow_mut().pop());
            } else {
                self.submit(std::slice::from_ref(&slot));
            }
            drop(chain);
            self.proxy.invalidate(r);
            self.proxy.read_index.store(r + 1, Ordering::Release);
        }
    }

    /// All-or-nothing submit to the hardware ring, or to the overflow buffer.
    fn submit(&self, packets: &[AqlPacket]) {
        if packets.is_empty() {
            return;
        }
        for p in packets {
            crate::trace::packet("ring", p);
        }
        let mut overflow = self.overflow.lock().unwrap_or_else(|e| e.into_inner());
        if overflow.is_empty() && self.hardware.ring.try_submit(packets) {
            return;
        }
        // A batch larger than the ring could never fit: split it to ring size.
        for chunk in packets.chunks(self.hardware.ring.size as usize) {
            overflow.push_back(chunk.to_vec());
        }
        drop(overflow);
        schedule(Job::Retry(self.weak()));
    }

    /// Submits overflowed batches in order while they fit; true when empty.
    fn retry_overflow(&self) -> bool {
        let mut overflow = self.overflow.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(batch) = overflow.front() {
            if !self.hardware.ring.try_submit(batch) {
                return false;
            }
            overflow.pop_front();
        }
        true
    }

    fn weak(&self) -> Weak<InterceptQueue> {
        // The queue always lives in an Arc (created by `create`).
        match queues::lookup(self.proxy.hsa_queue()) {
            Some(QueueRecord::Intercept(q)) => Arc::downgrade(&q),
            _ => Weak::new(),
        }
    }

    /// Doorbell store on the proxy ring.
    fn on_doorbell(self: &Arc<Self>) {
        let me = Arc::as_ptr(self) as usize;
        if HOLDING.with(|h| h.borrow().contains(&me)) {
            schedule(Job::Drain(Arc::downgrade(self)));
            return;
        }
        self.locked_drain();
    }

    fn locked_drain(&self) {
        let me = self as *const InterceptQueue as usize;
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        HOLDING.with(|h| h.borrow_mut().push(me));
        self.drain();
        HOLDING.with(|h| h.borrow_mut().retain(|x| *x != me));
    }

    pub fn shut_down(&self) {
        self.hardware.shut_down();
        self.overflow
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

/// `hsa_amd_queue_intercept_packet_writer`: valid only on the thread of the
/// interceptor call that received it, before that call returns.
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
    // SAFETY: `drain` holds the Arc of this chain until the outermost call returns.
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

// --- the runtime's async thread ------------------------------------------

enum Job {
    Retry(Weak<InterceptQueue>),
    Drain(Weak<InterceptQueue>),
}

struct AsyncState {
    jobs: VecDeque<Job>,
    started: bool,
}

static ASYNC: LazyLock<(Mutex<AsyncState>, Condvar)> = LazyLock::new(|| {
    (
        Mutex::new(AsyncState {
            jobs: VecDeque::new(),
            started: false,
        }),
        Condvar::new(),
    )
});
/// Queues with packets in overflow; the processors wake the async thread
/// after each packet while this is non-zero.
static OVERFLOWING: AtomicUsize = AtomicUsize::new(0);

fn schedule(job: Job) {
    let (m, cv) = &*ASYNC;
    let mut st = m.lock().unwrap_or_else(|e| e.into_inner());
    if matches!(job, Job::Retry(_)) {
        OVERFLOWING.fetch_add(1, Ordering::SeqCst);
    }
    st.jobs.push_back(job);
    if !st.started {
        st.started = true;
        std::thread::Builder::new()
            .name("hsa-cpu-async".into())
            .spawn(async_thread)
            .ok();
    }
    cv.notify_all();
}

/// Called by packet processors after they free a slot.
pub(crate) fn hardware_progressed() {
    if OVERFLOWING.load(Ordering::SeqCst) > 0 {
        let (m, cv) = &*ASYNC;
        drop(m.lock().unwrap_or_else(|e| e.into_inner()));
        cv.notify_all();
    }
}

fn async_thread() {
    let (m, cv) = &*ASYNC;
    let mut pending: Vec<Weak<InterceptQueue>> = Vec::new();
    loop {
        let jobs: Vec<Job> = {
            let mut st = m.lock().unwrap_or_else(|e| e.into_inner());
            if st.jobs.is_empty() {
                st = if pending.is_empty() {
                    cv.wait(st).unwrap_or_else(|e| e.into_inner())
                } else {
                    // Woken by hardware progress; the timeout is a safety net.
                    cv.wait_timeout(st, Duration::from_millis(20))
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                };
            }
            st.jobs.drain(..).collect()
        };
        for job in jobs {
            match job {
                Job::Retry(q) => pending.push(q),
                Job::Drain(q) => {
                    if let Some(q) = q.upgrade() {
                        q.locked_drain();
                    }
                }
            }
        }
        pending.retain(|q| {
            let keep = q.upgrade().is_some_and(|q| !q.retry_overflow());
            if !keep {
                OVERFLOWING.fetch_sub(1, Ordering::SeqCst);
            }
            keep
        });
    }
}

// --- API entries (table only: not exported, as in ROCr) -------------------

#[allow(clippy::too_many_arguments)]
pub(crate) fn create(
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
    let Some(hardware) = HwQueue::create(size, type_, callback, data) else {
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
        lock: Mutex::new(()),
        overflow: Mutex::new(VecDeque::new()),
    });
    let weak = Arc::downgrade(&iq);
    iq.proxy.doorbell.set_doorbell_hook(Box::new(move || {
        if let Some(q) = weak.upgrade() {
            q.on_doorbell();
        }
    }));
    queues::register(public, QueueRecord::Intercept(iq));
    // SAFETY: queue is a non-null out pointer supplied by the caller.
    unsafe { queue.write(public) };
    HSA_STATUS_SUCCESS
}

pub(crate) fn register(
    queue: *mut hsa_queue_t,
    callback: InterceptHandler,
    user_data: *mut c_void,
) -> hsa_status_t {
    let Some(QueueRecord::Intercept(q)) = queues::lookup(queue) else {
        return HSA_STATUS_ERROR_INVALID_QUEUE;
    };
    let Some(handler) = callback else {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    };
    let mut chain = q.interceptors.lock().unwrap_or_else(|e| e.into_inner());
    let mut grown = chain.to_vec();
    grown.push((handler, user_data as usize));
    *chain = grown.into();
    HSA_STATUS_SUCCESS
}
