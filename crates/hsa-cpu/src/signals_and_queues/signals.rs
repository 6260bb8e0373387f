//! Signals: owns every signal object, its handle table, its value and its
//! waiters. Never exposes a raw pointer as a handle: a handle is an id looked
//! up in the table, so a destroyed or unknown handle is detected (stale ids
//! are never reused) and cannot dangle.
//!
//! Waiting blocks on a per-signal Mutex+Condvar; every change of value (and
//! every store, even of the same value) bumps an epoch and wakes waiters.
//! `hsa_amd_signal_wait_any` waits on one process-wide condvar that a
//! change notifies only while some wait_any or async handler watches THAT
//! signal (a per-signal count), so signals nobody watches that way (doorbells,
//! completion signals) never wake the async thread. A blocking wait first
//! watches the value for [`active_wait`] (yielding the CPU between looks),
//! as ROCr's interrupt signals hot-spin for a short window before sleeping
//! on their event; then it sleeps on the condvar. A store wakes sleepers
//! only: a value that changes within the window costs no wake-up.
//!
//! A signal also keeps the start and end of the last dispatch that
//! completed it (as ROCr's amd_signal_t does); `profiling` reads them. The
//! async-events thread that runs signal handlers is `async_events`'.

use hsa::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering, fence};
use std::sync::{Arc, Condvar, LazyLock, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

/// How long a blocking wait watches the value before it sleeps, by default.
pub const DEFAULT_ACTIVE_WAIT: Duration = Duration::from_micros(50);
/// Sets [`active_wait`] in microseconds (0: sleep at once).
pub const ACTIVE_WAIT_ENV: &str = "DITTO_HSA_CPU_ACTIVE_WAIT_US";

/// How long a blocking wait watches the value before it sleeps: read once
/// from [`ACTIVE_WAIT_ENV`], else [`DEFAULT_ACTIVE_WAIT`].
pub fn active_wait() -> Duration {
    static WAIT: LazyLock<Duration> = LazyLock::new(|| {
        std::env::var(ACTIVE_WAIT_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(DEFAULT_ACTIVE_WAIT, Duration::from_micros)
    });
    *WAIT
}

/// Memory order of a signal operation, as in the HSA function names.
#[derive(Clone, Copy, Debug)]
pub enum Order {
    Relaxed,
    Acquire,
    Release,
    AcqRel,
}

impl Order {
    fn rmw(self) -> Ordering {
        match self {
            Order::Relaxed => Ordering::Relaxed,
            Order::Acquire => Ordering::Acquire,
            Order::Release => Ordering::Release,
            Order::AcqRel => Ordering::AcqRel,
        }
    }
    fn load(self) -> Ordering {
        match self {
            Order::Relaxed => Ordering::Relaxed,
            _ => Ordering::Acquire,
        }
    }
    fn store(self) -> Ordering {
        match self {
            Order::Relaxed => Ordering::Relaxed,
            _ => Ordering::Release,
        }
    }
}

/// Read-modify-write operations of the HSA signal API.
#[derive(Clone, Copy, Debug)]
pub enum Rmw {
    Add,
    Subtract,
    And,
    Or,
    Xor,
    Exchange,
}

/// Called after a store on a queue's doorbell (intercept queues).
pub type DoorbellHook = Box<dyn Fn() + Send + Sync>;

pub struct Signal {
    value: AtomicI64,
    epoch: AtomicU64,
    waiters: AtomicU32,
    /// wait_any calls and async handlers watching this signal: a change
    /// notifies the process-wide condvar only while this is non-zero.
    any_watchers: AtomicU32,
    destroyed: AtomicBool,
    lock: Mutex<()>,
    cv: Condvar,
    /// Start and end of the last kernel that completed this signal.
    dispatch_time: Mutex<(u64, u64)>,
    doorbell_hook: OnceLock<DoorbellHook>,
}

static TABLE: LazyLock<RwLock<HashMap<u64, Arc<Signal>>>> = LazyLock::new(Default::default);
/// Handles count up from here and are never reused.
static NEXT_HANDLE: AtomicU64 = AtomicU64::new(0x5160_0000_0001);

static ANY_LOCK: Mutex<()> = Mutex::new(());
static ANY_CV: Condvar = Condvar::new();

pub(crate) fn condition_holds(condition: hsa_signal_condition_t, value: i64, compare: i64) -> bool {
    match condition {
        HSA_SIGNAL_CONDITION_EQ => value == compare,
        HSA_SIGNAL_CONDITION_NE => value != compare,
        HSA_SIGNAL_CONDITION_LT => value < compare,
        HSA_SIGNAL_CONDITION_GTE => value >= compare,
        _ => true,
    }
}

/// `timeout_hint` is in ticks of HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY (1 GHz: ns).
fn deadline(timeout_hint: u64) -> Option<Instant> {
    if timeout_hint == u64::MAX {
        return None;
    }
    Instant::now().checked_add(Duration::from_nanos(timeout_hint))
}

impl Signal {
    fn new(initial: i64) -> Self {
        Signal {
            value: AtomicI64::new(initial),
            epoch: AtomicU64::new(0),
            waiters: AtomicU32::new(0),
            any_watchers: AtomicU32::new(0),
            destroyed: AtomicBool::new(false),
            lock: Mutex::new(()),
            cv: Condvar::new(),
            dispatch_time: Mutex::new((0, 0)),
            doorbell_hook: OnceLock::new(),
        }
    }

    /// Publishes a change: bumps the epoch and wakes every waiter.
    fn changed(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        // Pairs with the waiter's SeqCst increment of `waiters` before it
        // reads the value: either we see the waiter or it sees our value.
        fence(Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            drop(self.lock.lock().unwrap_or_else(|e| e.into_inner()));
            self.cv.notify_all();
        }
        // Same pairing with a watcher's SeqCst increment of `any_watchers`
        // (made before it checks values under ANY_LOCK).
        if self.any_watchers.load(Ordering::SeqCst) > 0 {
            drop(ANY_LOCK.lock().unwrap_or_else(|e| e.into_inner()));
            ANY_CV.notify_all();
        }
    }

    pub fn load(&self, order: Order) -> i64 {
        self.value.load(order.load())
    }

    pub fn store(&self, value: i64, order: Order) {
        self.value.store(value, order.store());
        self.changed();
        if let Some(hook) = self.doorbell_hook.get() {
            hook();
        }
    }

    /// Store without waking waiters (`hsa_signal_silent_store_*`).
    pub fn silent_store(&self, value: i64, order: Order) {
        self.value.store(value, order.store());
    }

    pub fn rmw(&self, op: Rmw, operand: i64, order: Order) -> i64 {
        let o = order.rmw();
        let old = match op {
            Rmw::Add => self.value.fetch_add(operand, o),
            Rmw::Subtract => self.value.fetch_sub(operand, o),
            Rmw::And => self.value.fetch_and(operand, o),
            Rmw::Or => self.value.fetch_or(operand, o),
            Rmw::Xor => self.value.fetch_xor(operand, o),
            Rmw::Exchange => self.value.swap(operand, o),
        };
        self.changed();
        old
    }

    pub fn cas(&self, expected: i64, value: i64, order: Order) -> i64 {
        let failure = match order {
            Order::Release | Order::Relaxed => Ordering::Relaxed,
            _ => Ordering::Acquire,
        };
        let old = match self
            .value
            .compare_exchange(expected, value, order.rmw(), failure)
        {
            Ok(v) | Err(v) => v,
        };
        if old == expected {
            self.changed();
        }
        old
    }

    /// Blocks until `condition` holds, the timeout passes, or the signal is
    /// destroyed; returns the value observed last (as ROCr: the caller must
    /// re-check the condition, the return is not a success flag).
    pub fn wait(
        &self,
        condition: hsa_signal_condition_t,
        compare: i64,
        timeout_hint: u64,
        order: Order,
    ) -> i64 {
        static NEVER: AtomicBool = AtomicBool::new(false);
        self.wait_or_abort(condition, compare, timeout_hint, order, &NEVER)
    }

    /// `wait` that also returns once `abort` is set (looked at while the
    /// value is watched, and on every wake-up); whoever sets it must
    /// then `poke` this signal (a queue stopping while its processor waits
    /// on a barrier dependency).
    pub fn wait_or_abort(
        &self,
        condition: hsa_signal_condition_t,
        compare: i64,
        timeout_hint: u64,
        order: Order,
        abort: &AtomicBool,
    ) -> i64 {
        let v = self.value.load(order.load());
        if condition_holds(condition, v, compare) || timeout_hint == 0 {
            return v;
        }
        let end = deadline(timeout_hint);
        let watch_until = Instant::now() + active_wait();
        let watch_until = end.map_or(watch_until, |e| e.min(watch_until));
        loop {
            let v = self.value.load(order.load());
            if condition_holds(condition, v, compare)
                || self.destroyed.load(Ordering::SeqCst)
                || abort.load(Ordering::SeqCst)
            {
                return v;
            }
            if Instant::now() >= watch_until {
                break;
            }
            std::thread::yield_now();
        }
        if end.is_some_and(|e| Instant::now() >= e) {
            return self.value.load(order.load());
        }
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let v = {
            let mut guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                let v = self.value.load(Ordering::SeqCst);
                if condition_holds(condition, v, compare)
                    || self.destroyed.load(Ordering::SeqCst)
                    || abort.load(Ordering::SeqCst)
                {
                    break v;
                }
                match self.sleep(guard, end) {
                    Some(g) => guard = g,
                    None => break v,
                }
            }
        };
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        v
    }

    /// One sleep on the condition variable, woken by a change or bounded by
    /// `end`; None once `end` has passed (the lock is then released).
    fn sleep<'a>(
        &self,
        guard: std::sync::MutexGuard<'a, ()>,
        end: Option<Instant>,
    ) -> Option<std::sync::MutexGuard<'a, ()>> {
        let Some(end) = end else {
            return Some(self.cv.wait(guard).unwrap_or_else(|e| e.into_inner()));
        };
        let now = Instant::now();
        if now >= end {
            return None;
        }
        Some(
            self.cv
                .wait_timeout(guard, end - now)
                .unwrap_or_else(|e| e.into_inner())
                .0,
        )
    }

    /// Count of changes so far; see `wait_for_change`.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Blocks until the epoch differs from `seen` or `timeout` passes.
    pub fn wait_for_change(&self, seen: u64, timeout: Option<Duration>) {
        let end = timeout.and_then(|t| Instant::now().checked_add(t));
        self.waiters.fetch_add(1, Ordering::SeqCst);
        {
            let mut guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            while self.epoch.load(Ordering::SeqCst) == seen
                && !self.destroyed.load(Ordering::SeqCst)
            {
                match self.sleep(guard, end) {
                    Some(g) => guard = g,
                    None => break,
                }
            }
        }
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// The value now (sequentially consistent), as a waiter reads it.
    pub(crate) fn value_now(&self) -> i64 {
        self.value.load(Ordering::SeqCst)
    }

    /// One more `wait_any`-style watcher (an async handler): from now on a
    /// change of this signal notifies the process-wide condvar.
    pub(crate) fn watch_any(&self) {
        self.any_watchers.fetch_add(1, Ordering::SeqCst);
    }

    /// One watcher fewer (see `watch_any`).
    pub(crate) fn unwatch_any(&self) {
        self.any_watchers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Whether `destroy` removed this signal's handle.
    pub fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::SeqCst)
    }

    /// Wakes every waiter without changing the value (queue shutdown).
    pub fn poke(&self) {
        self.changed();
    }

    pub fn set_dispatch_time(&self, start: u64, end: u64) {
        *self.dispatch_time.lock().unwrap_or_else(|e| e.into_inner()) = (start, end);
    }

    pub fn dispatch_time(&self) -> (u64, u64) {
        *self.dispatch_time.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Installs the hook run after every store (once per signal).
    pub fn set_doorbell_hook(&self, hook: DoorbellHook) {
        let _ = self.doorbell_hook.set(hook);
    }
}

/// Creates a signal and returns its handle and object.
pub(crate) fn create(initial: i64) -> (hsa_signal_t, Arc<Signal>) {
    let handle = NEXT_HANDLE.fetch_add(1, Ordering::Relaxed);
    let signal = Arc::new(Signal::new(initial));
    TABLE
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(handle, signal.clone());
    (hsa_signal_t { handle }, signal)
}

pub(crate) fn lookup(signal: hsa_signal_t) -> Option<Arc<Signal>> {
    TABLE
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&signal.handle)
        .cloned()
}

/// Removes the handle; waiters still blocked on it return at once.
pub(crate) fn destroy(signal: hsa_signal_t) -> hsa_status_t {
    let removed = TABLE
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&signal.handle);
    match removed {
        Some(s) => {
            s.destroyed.store(true, Ordering::SeqCst);
            s.changed();
            HSA_STATUS_SUCCESS
        }
        None => HSA_STATUS_ERROR_INVALID_SIGNAL,
    }
}

/// Index of the first signal whose condition holds, or u32::MAX on timeout.
/// Handles that name no live signal read as 0, also those destroyed while
/// waited on (`destroy` wakes this wait).
pub(crate) fn wait_any(
    signals: &[hsa_signal_t],
    conditions: &[hsa_signal_condition_t],
    values: &[i64],
    timeout_hint: u64,
) -> (u32, i64) {
    static NEVER: AtomicBool = AtomicBool::new(false);
    wait_any_or_abort(signals, conditions, values, timeout_hint, &NEVER)
}

/// The lock of the process-wide condvar that `wait_any` waiters (and the
/// async-events thread) sleep on; a change of a watched signal takes it
/// before it notifies.
pub(crate) fn lock_any() -> std::sync::MutexGuard<'static, ()> {
    ANY_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sleeps on the process-wide condvar until a watched signal changes (or
/// `wake_any_waiters`); `guard` is `lock_any`'s.
pub(crate) fn sleep_any(
    guard: std::sync::MutexGuard<'static, ()>,
) -> std::sync::MutexGuard<'static, ()> {
    ANY_CV.wait(guard).unwrap_or_else(|e| e.into_inner())
}

/// Wakes every `wait_any` waiter (and the async thread) to re-check.
pub(crate) fn wake_any_waiters() {
    drop(ANY_LOCK.lock().unwrap_or_else(|e| e.into_inner()));
    ANY_CV.notify_all();
}

/// `wait_any` that also returns (u32::MAX, 0) once `abort` is set; whoever
/// sets it must then call `wake_any_waiters`.
pub(crate) fn wait_any_or_abort(
    signals: &[hsa_signal_t],
    conditions: &[hsa_signal_condition_t],
    values: &[i64],
    timeout_hint: u64,
    abort: &AtomicBool,
) -> (u32, i64) {
    let objects: Vec<Option<Arc<Signal>>> = signals.iter().map(|s| lookup(*s)).collect();
    let check = || {
        for (i, s) in objects.iter().enumerate() {
            let v = s
                .as_ref()
                .filter(|s| !s.is_destroyed())
                .map_or(0, |s| s.value.load(Ordering::SeqCst));
            if condition_holds(conditions[i], v, values[i]) {
                return Some((i as u32, v));
            }
        }
        None
    };
    if let Some(hit) = check() {
        return hit;
    }
    let end = deadline(timeout_hint);
    for s in objects.iter().flatten() {
        s.any_watchers.fetch_add(1, Ordering::SeqCst);
    }
    let mut guard = ANY_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let result = loop {
        if let Some(hit) = check() {
            break hit;
        }
        if abort.load(Ordering::SeqCst) {
            break (u32::MAX, 0);
        }
        match end {
            None => guard = ANY_CV.wait(guard).unwrap_or_else(|e| e.into_inner()),
            Some(end) => {
                let now = Instant::now();
                if now >= end {
                    break (u32::MAX, 0);
                }
                guard = ANY_CV
                    .wait_timeout(guard, end - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
    };
    drop(guard);
    for s in objects.iter().flatten() {
        s.any_watchers.fetch_sub(1, Ordering::SeqCst);
    }
    result
}

// --- API entries ----------------------------------------------------------

/// # Safety
/// `out` is null or valid for writes of one handle.
pub(crate) unsafe fn signal_create(
    initial: i64,
    num_consumers: u32,
    consumers: *const hsa_agent_t,
    out: *mut hsa_signal_t,
) -> hsa_status_t {
    if out.is_null() || (num_consumers > 0 && consumers.is_null()) {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    crate::tools::trace::event("signal-create");
    let (handle, _) = create(initial);
    // SAFETY: out is non-null and points to caller-owned storage for a handle.
    unsafe { out.write(handle) };
    HSA_STATUS_SUCCESS
}

/// # Safety
/// `out` is null or valid for writes of one handle.
pub(crate) unsafe fn amd_signal_create(
    initial: i64,
    num_consumers: u32,
    consumers: *const hsa_agent_t,
    _attributes: u64,
    out: *mut hsa_signal_t,
) -> hsa_status_t {
    // SAFETY: `out` as our own contract says.
    unsafe { signal_create(initial, num_consumers, consumers, out) }
}

pub(crate) fn load(signal: hsa_signal_t, order: Order) -> i64 {
    lookup(signal).map_or(0, |s| s.load(order))
}

pub(crate) fn store(signal: hsa_signal_t, value: i64, order: Order) {
    if let Some(s) = lookup(signal) {
        s.store(value, order)
    }
}

pub(crate) fn silent_store(signal: hsa_signal_t, value: i64, order: Order) {
    if let Some(s) = lookup(signal) {
        s.silent_store(value, order)
    }
}

pub(crate) fn rmw(signal: hsa_signal_t, op: Rmw, value: i64, order: Order) -> i64 {
    lookup(signal).map_or(0, |s| s.rmw(op, value, order))
}

pub(crate) fn cas(signal: hsa_signal_t, expected: i64, value: i64, order: Order) -> i64 {
    lookup(signal).map_or(0, |s| s.cas(expected, value, order))
}

pub(crate) fn wait(
    signal: hsa_signal_t,
    condition: hsa_signal_condition_t,
    compare: i64,
    timeout_hint: u64,
    order: Order,
) -> i64 {
    lookup(signal).map_or(0, |s| s.wait(condition, compare, timeout_hint, order))
}

/// # Safety
/// The arrays must hold `count` elements; `satisfying_value` may be null.
pub(crate) unsafe fn amd_wait_any(
    count: u32,
    signals: *mut hsa_signal_t,
    conditions: *mut hsa_signal_condition_t,
    values: *mut hsa_signal_value_t,
    timeout_hint: u64,
    _wait_hint: hsa_wait_state_t,
    satisfying_value: *mut hsa_signal_value_t,
) -> u32 {
    if count == 0 || signals.is_null() || conditions.is_null() || values.is_null() {
        return u32::MAX;
    }
    let n = count as usize;
    // SAFETY: the caller passes arrays of `count` elements each.
    let (s, c, v) = unsafe {
        (
            std::slice::from_raw_parts(signals, n),
            std::slice::from_raw_parts(conditions, n),
            std::slice::from_raw_parts(values, n),
        )
    };
    let (index, value) = wait_any(s, c, v, timeout_hint);
    if index != u32::MAX && !satisfying_value.is_null() {
        // SAFETY: non-null out pointer supplied by the caller.
        unsafe { satisfying_value.write(value) };
    }
    index
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destroyed_handle_is_invalid_and_reads_zero() {
        let (h, _) = create(5);
        assert_eq!(load(h, Order::Relaxed), 5);
        assert_eq!(destroy(h), HSA_STATUS_SUCCESS);
        assert_eq!(destroy(h), HSA_STATUS_ERROR_INVALID_SIGNAL);
        assert_eq!(load(h, Order::Acquire), 0);
        assert_eq!(
            wait(h, HSA_SIGNAL_CONDITION_EQ, 1, u64::MAX, Order::Acquire),
            0
        );
    }

    #[test]
    fn cas_returns_observed_value_and_swaps_only_on_match() {
        let (h, _) = create(3);
        assert_eq!(cas(h, 4, 9, Order::AcqRel), 3);
        assert_eq!(load(h, Order::Relaxed), 3);
        assert_eq!(cas(h, 3, 9, Order::Release), 3);
        assert_eq!(load(h, Order::Relaxed), 9);
        destroy(h);
    }
}
