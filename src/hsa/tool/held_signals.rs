//! The held-barrier signals: the free list of `done`/`hold` pairs (a
//! pair goes back to it once no packet refers to it, so a target dispatch
//! seldom creates a signal) and the worker's [`HeldSignals`] over the
//! original entries: waiting for `done`, releasing `hold` (and the 1 an
//! application's signal was raised by), recycling, and the dispatch's times
//! as the runtime recorded them on its completion signal.

use super::HsaTool;
use crate::hsa::worker::{HeldBarrier, HeldSignals, PreHold};
use crate::log::{log_debug, log_warn};
use crossbeam_channel::{Receiver, Sender, unbounded};
use hsa::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Signal pairs no packet refers to any more, each signal back at 1.
pub(super) struct SignalPool {
    free: (Sender<HeldBarrier>, Receiver<HeldBarrier>),
    /// Set once the runtime refused to create signals (said once).
    failure_logged: AtomicBool,
}

impl SignalPool {
    pub(super) fn new() -> SignalPool {
        SignalPool {
            free: unbounded(),
            failure_logged: AtomicBool::new(false),
        }
    }
}

impl HsaTool {
    /// A `done`/`hold` pair, both at 1: from the free list, else new.
    /// `None` when the runtime cannot create signals (logged once).
    pub fn take_pair(&self) -> Option<HeldBarrier> {
        if let Ok(pair) = self.signals.free.1.try_recv() {
            return Some(pair);
        }
        let create = self.core.hsa_signal_create_fn?;
        let mut done = hsa_signal_t::default();
        let mut hold = hsa_signal_t::default();
        // SAFETY: original hsa_signal_create with no consumers and valid out-pointers.
        let st = unsafe { create(1, 0, std::ptr::null(), &mut done) };
        if st == HSA_STATUS_SUCCESS {
            // SAFETY: as above.
            let st2 = unsafe { create(1, 0, std::ptr::null(), &mut hold) };
            if st2 == HSA_STATUS_SUCCESS {
                return Some(HeldBarrier {
                    done: done.handle,
                    hold: hold.handle,
                    pre: None,
                    app: 0,
                });
            }
            if let Some(destroy) = self.core.hsa_signal_destroy_fn {
                // SAFETY: `done` was created above and is used by nothing.
                unsafe { destroy(done) };
            }
        }
        if !self.signals.failure_logged.swap(true, Ordering::Relaxed) {
            log_warn!(
                "cannot create signals (status 0x{st:x}); target dispatches pass through uncaptured"
            );
        }
        None
    }
}

impl HeldSignals for HsaTool {
    fn wait_zero(&self, signal: u64, timeout: Duration) -> bool {
        let Some(wait) = self.core.hsa_signal_wait_scacquire_fn else {
            return true;
        };
        let ticks = (timeout.as_nanos() * self.timestamp_hz as u128 / 1_000_000_000) as u64;
        // SAFETY: original wait on a signal we created; the timeout is only a hint,
        // the caller loops.
        let value = unsafe {
            wait(
                hsa_signal_t { handle: signal },
                HSA_SIGNAL_CONDITION_EQ,
                0,
                ticks.max(1),
                HSA_WAIT_STATE_BLOCKED,
            )
        };
        value == 0
    }

    /// `hold_pre`, `hold`, then the 1 the application's signal was raised
    /// by: it reaches its completion value once its kernel has completed
    /// AND the capture let it go, whichever comes last.
    fn release(&self, held: &HeldBarrier) {
        if let Some(pre) = &held.pre {
            self.release_pre(pre);
        }
        if let Some(store) = self.core.hsa_signal_store_screlease_fn {
            // SAFETY: original store on our own `hold` signal.
            unsafe { store(hsa_signal_t { handle: held.hold }, 0) };
        }
        if held.app != 0
            && let Some(subtract) = self.core.hsa_signal_subtract_screlease_fn
        {
            // SAFETY: the application's signal, which cannot have completed
            // (and been destroyed) while it still carries our 1.
            unsafe { subtract(hsa_signal_t { handle: held.app }, 1) };
        }
    }

    fn release_pre(&self, pre: &PreHold) {
        if let Some(store) = self.core.hsa_signal_store_screlease_fn {
            // SAFETY: original store on our own `hold_pre` signal.
            unsafe {
                store(
                    hsa_signal_t {
                        handle: pre.hold_pre,
                    },
                    0,
                )
            };
        }
    }

    /// The `pre` pair, if any, goes back to the free list as a pair of its own.
    fn recycle(&self, held: HeldBarrier) {
        let Some(store) = self.core.hsa_signal_store_relaxed_fn else {
            return;
        };
        let pairs = [
            Some((held.done, held.hold)),
            held.pre.map(|p| (p.pre, p.hold_pre)),
        ];
        for (done, hold) in pairs.into_iter().flatten() {
            // SAFETY: both signals are ours and no packet refers to them any more.
            unsafe {
                store(hsa_signal_t { handle: done }, 1);
                store(hsa_signal_t { handle: hold }, 1);
            }
            let _ = self.signals.free.0.send(HeldBarrier {
                done,
                hold,
                pre: None,
                app: 0,
            });
        }
    }

    /// Start and end of the dispatch as the runtime recorded them on its
    /// completion signal (the application's, else our `done`), through the
    /// ORIGINAL hsa_amd_profiling_get_dispatch_time.
    /// ROCr fills these only on queues with profiling enabled, which
    /// `queues::create` turns on for every intercept queue; where that
    /// failed the times read 0 and this is `None`. The agent is the queue's
    /// (ROCr, and the CPU runtime with it, refuse any other than a GPU).
    fn dispatch_duration_ns(&self, held: &HeldBarrier, agent: u64) -> Option<u64> {
        let Some(get) = self.amd.hsa_amd_profiling_get_dispatch_time_fn else {
            log_debug!(
                "the runtime has no hsa_amd_profiling_get_dispatch_time: no kernel durations"
            );
            return None;
        };
        let signal = if held.app != 0 { held.app } else { held.done };
        let mut time = hsa_amd_profiling_dispatch_time_t::default();
        // SAFETY: original entry on the completion signal of a completed
        // dispatch (the application's is still raised by our 1, so alive),
        // with a valid out-pointer.
        let st = unsafe {
            get(
                hsa_agent_t { handle: agent },
                hsa_signal_t { handle: signal },
                &mut time,
            )
        };
        // A dispatch takes time: an end at its start is no time (ROCr in
        // model mode translates every timestamp to one value, its thunk's
        // clock counters reading 0).
        if st != HSA_STATUS_SUCCESS || time.end == 0 || time.end <= time.start {
            log_debug!(
                "no dispatch time on signal 0x{:x} (status 0x{st:x}, start {}, end {})",
                signal,
                time.start,
                time.end
            );
            return None;
        }
        let ticks = (time.end - time.start) as u128;
        Some((ticks * 1_000_000_000 / self.timestamp_hz as u128) as u64)
    }
}
