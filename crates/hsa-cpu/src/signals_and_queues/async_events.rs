//! The runtime's ONE async-events thread (ROCr's `Runtime::AsyncEventsLoop`),
//! started on the first registration: it runs the handlers of
//! `hsa_amd_signal_async_handler` one at a time, in registration order
//! among those whose condition holds, each with the value that satisfied
//! it; a handler returning true stays registered, false removes it; a
//! handler whose signal is destroyed is dropped uncalled. Intercept queues
//! register their async doorbell here too (as ROCr's InterceptQueue does),
//! so overflow retries and deferred doorbells run on this same thread,
//! serially with the application's handlers. The thread waits as a
//! permanent `wait_any` waiter on the process-wide condvar of `signals`.
//! The last `hsa_shut_down` stops it as ROCr's `Runtime::Unload` does
//! (`AsyncEventsControl::Shutdown`): the thread finishes the handler it is
//! running and ends; handlers still registered are dropped uncalled.
//! At process exit it is stopped the same way, before the libraries'
//! static destructors run (an `atexit` handler registered at the first
//! registration, after those destructors were, so it runs before them): a
//! handler still pending when the application exits is dropped rather
//! than run into objects its library is freeing. ROCr's thread, woken by
//! interrupts, has long run such a handler by then; ours, sharing the CPUs
//! with the kernels, sometimes had not: HIP 7.2.4's handler crashed at
//! exit in about one run in 30 of dispatch_storm under ditto's tool. The
//! wait for a handler in flight at exit is bounded (1 s): exit never
//! hangs on it.
//!
//! Owns the registered handlers and the thread; over `signals`.

use crate::signals_and_queues::signals::{self, Signal};
use hsa::*;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

/// What runs when an async handler's condition holds.
pub(crate) enum AsyncCallback {
    /// `hsa_amd_signal_handler` with its argument.
    App(unsafe extern "C" fn(i64, *mut c_void) -> bool, usize),
    /// A runtime-internal handler (intercept queues' async doorbell).
    Internal(Box<dyn FnMut(i64) -> bool + Send>),
}

struct AsyncHandler {
    signal: Arc<Signal>,
    condition: hsa_signal_condition_t,
    compare: i64,
    callback: AsyncCallback,
}

struct AsyncState {
    handlers: Vec<AsyncHandler>,
    /// The running thread, None before the first registration and after a
    /// shutdown.
    thread: Option<std::thread::JoinHandle<()>>,
    /// Which thread is the current one: `shut_down` moves it on, and a
    /// thread of an earlier generation ends at its next look.
    generation: u64,
}

static ASYNC: Mutex<AsyncState> = Mutex::new(AsyncState {
    handlers: Vec::new(),
    thread: None,
    generation: 0,
});

fn async_state() -> std::sync::MutexGuard<'static, AsyncState> {
    ASYNC.lock().unwrap_or_else(|e| e.into_inner())
}

/// Registers a handler on the async thread (started on first use).
pub(crate) fn register_async(
    signal: Arc<Signal>,
    condition: hsa_signal_condition_t,
    compare: i64,
    callback: AsyncCallback,
) -> hsa_status_t {
    {
        let mut st = async_state();
        if st.thread.is_none() {
            let generation = st.generation;
            let spawned = std::thread::Builder::new()
                .name("hsa-cpu-async".into())
                .spawn(move || async_events_loop(generation));
            match spawned {
                Ok(thread) => st.thread = Some(thread),
                Err(_) => return HSA_STATUS_ERROR_OUT_OF_RESOURCES,
            }
            static AT_EXIT: std::sync::Once = std::sync::Once::new();
            // SAFETY: registers a function taking nothing; it catches
            // every panic.
            AT_EXIT.call_once(|| unsafe {
                libc::atexit(stop_at_exit);
            });
        }
        signal.watch_any();
        st.handlers.push(AsyncHandler {
            signal,
            condition,
            compare,
            callback,
        });
    }
    signals::wake_any_waiters();
    HSA_STATUS_SUCCESS
}

/// Stops the async-events thread (the last `hsa_shut_down`): it ends after
/// the handler it may be running, and the handlers still registered are
/// dropped uncalled. Waits for it, unless called from a handler on that
/// thread (which then ends once the handler returns). A later
/// registration starts a new thread.
pub(crate) fn shut_down() {
    let Some(thread) = retire() else {
        return;
    };
    signals::wake_any_waiters();
    if !on_async_thread() {
        let _ = thread.join();
    }
}

/// The thread of the current generation, moved on: it ends at its next
/// look; the handlers still registered are dropped uncalled.
fn retire() -> Option<std::thread::JoinHandle<()>> {
    let mut st = async_state();
    let thread = st.thread.take()?;
    st.generation += 1;
    for gone in st.handlers.drain(..) {
        gone.signal.unwatch_any();
    }
    Some(thread)
}

/// At process exit: the thread retired, and waited for at most 1 s.
extern "C" fn stop_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let Some(thread) = retire() else {
            return;
        };
        signals::wake_any_waiters();
        if on_async_thread() {
            return;
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while !thread.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        if thread.is_finished() {
            let _ = thread.join();
        }
    });
}

/// Whether the current thread is the runtime's async-events thread.
pub fn on_async_thread() -> bool {
    std::thread::current().name() == Some("hsa-cpu-async")
}

fn async_events_loop(generation: u64) {
    // A registered handler counts in its signal's `any_watchers` (from
    // registration until it is removed to run or dropped), so a change of
    // that signal notifies ANY_CV; a kept handler is counted again before
    // the next scan, which reads the value the callback may have missed.
    loop {
        let ready: Vec<(AsyncHandler, i64)> = {
            let mut guard = signals::lock_any();
            loop {
                let ready = {
                    let mut st = async_state();
                    if st.generation != generation {
                        return;
                    }
                    let mut ready = Vec::new();
                    let mut i = 0;
                    while i < st.handlers.len() {
                        let h = &st.handlers[i];
                        if h.signal.is_destroyed() {
                            let gone = st.handlers.remove(i);
                            gone.signal.unwatch_any();
                            continue;
                        }
                        let v = h.signal.value_now();
                        if signals::condition_holds(h.condition, v, h.compare) {
                            let due = st.handlers.remove(i);
                            due.signal.unwatch_any();
                            ready.push((due, v));
                        } else {
                            i += 1;
                        }
                    }
                    ready
                };
                if !ready.is_empty() {
                    break ready;
                }
                guard = signals::sleep_any(guard);
            }
        };
        // Serially, outside every lock (a handler may register handlers,
        // store signals, ring doorbells).
        for (mut h, value) in ready {
            if async_state().generation != generation {
                // Shut down meanwhile: the rest is dropped uncalled (each
                // already left its signal's watchers when it became due).
                continue;
            }
            let keep = match &mut h.callback {
                // SAFETY: the application's handler with its own argument, as
                // `async_handler`'s caller vouched for them.
                AsyncCallback::App(f, arg) => unsafe { f(value, *arg as *mut c_void) },
                // A panic stops only this handler, never the thread.
                AsyncCallback::Internal(f) => {
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(value)))
                        .unwrap_or(false)
                }
            };
            let mut st = async_state();
            if keep && st.generation == generation {
                h.signal.watch_any();
                st.handlers.push(h);
            }
        }
    }
}

/// # Safety
/// `handler`, if any, may be called with a signal value and `arg` on
/// the async-events thread until it returns false.
pub(crate) unsafe fn async_handler(
    signal: hsa_signal_t,
    condition: hsa_signal_condition_t,
    value: i64,
    handler: SignalHandler,
    arg: *mut c_void,
) -> hsa_status_t {
    let Some(f) = handler else {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    };
    if condition > HSA_SIGNAL_CONDITION_GTE {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    let Some(s) = signals::lookup(signal) else {
        return HSA_STATUS_ERROR_INVALID_SIGNAL;
    };
    register_async(s, condition, value, AsyncCallback::App(f, arg as usize))
}
