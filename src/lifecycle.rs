//! The process's one lifecycle, shared by both backends and moved only
//! through the transitions below: start-up (`OnLoad` or
//! `InitializeInjection`), a failure (fail open), shutdown (`OnUnload`,
//! exit) and a fork without exec.
//!
//! ```text
//! Uninitialised ─begin─► Initialising ─capture─► Capturing ─finished─► Finished
//!                              │                    │
//!                              └──stay_passive──► Passive ◄── forked_child (from any)
//!                 Initialising, Capturing ─fail─► Failed
//! ```
//!
//! Independently of the stage, shutdown is claimed once ([`Lifecycle::claim_finish`]):
//! the Goodbye is said by one caller only, also after a failure (the
//! collector still learns what was missed); a forked child's claim is taken
//! in advance, as its connection is the parent's. One atomic word: readable
//! from the packet callback for the price of a load, writable from a
//! fork's child handler (no lock).

use crate::log::log_warn;
use std::sync::atomic::{AtomicU8, Ordering};

/// Where the process stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Stage {
    /// No backend has started.
    Uninitialised = 0,
    /// A backend's start-up is under way.
    Initialising = 1,
    /// Target dispatches are held and captured.
    Capturing = 2,
    /// Nothing is captured, on purpose (no kernel asked, a check failed at
    /// start-up, a forked child): every dispatch passes untouched.
    Passive = 3,
    /// Capture stopped because something failed; the application runs on.
    Failed = 4,
    /// Capture stopped at shutdown.
    Finished = 5,
}

const STAGE_BITS: u8 = 0x7;
/// Set once shutdown has been claimed.
const FINISH_CLAIMED: u8 = 0x8;

impl Stage {
    fn of(word: u8) -> Stage {
        match word & STAGE_BITS {
            0 => Stage::Uninitialised,
            1 => Stage::Initialising,
            2 => Stage::Capturing,
            3 => Stage::Passive,
            4 => Stage::Failed,
            _ => Stage::Finished,
        }
    }
}

/// The lifecycle of this process (tests make their own).
pub static PROCESS: Lifecycle = Lifecycle::new();

#[derive(Debug)]
pub struct Lifecycle {
    word: AtomicU8,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle::new()
    }
}

impl Lifecycle {
    pub const fn new() -> Lifecycle {
        Lifecycle {
            word: AtomicU8::new(Stage::Uninitialised as u8),
        }
    }

    /// A lifecycle already capturing (tests, and tools built outside start-up).
    pub const fn capturing() -> Lifecycle {
        Lifecycle {
            word: AtomicU8::new(Stage::Capturing as u8),
        }
    }

    pub fn stage(&self) -> Stage {
        Stage::of(self.word.load(Ordering::Acquire))
    }

    /// Moves `from` → `to` (keeping the claim bit); false if the stage was another.
    fn advance(&self, from: &[Stage], to: Stage) -> bool {
        self.word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                from.contains(&Stage::of(w))
                    .then_some((w & FINISH_CLAIMED) | to as u8)
            })
            .is_ok()
    }

    /// Start-up begins; false when a start-up already began (a second
    /// `OnLoad`, or the other backend's entry): that caller does nothing.
    pub fn begin(&self) -> bool {
        self.advance(&[Stage::Uninitialised], Stage::Initialising)
    }

    /// Start-up succeeded: capture. A failure during start-up (the worker
    /// could not reach the collector) is kept.
    pub fn capture(&self) {
        self.advance(&[Stage::Initialising], Stage::Capturing);
    }

    /// Start-up decided to capture nothing.
    pub fn stay_passive(&self) {
        self.advance(&[Stage::Initialising], Stage::Passive);
    }

    /// The end of a backend's start-up: [`Lifecycle::capture`] or
    /// [`Lifecycle::stay_passive`].
    pub fn start_up_ended(&self, capturing: bool) {
        if capturing {
            self.capture();
        } else {
            self.stay_passive();
        }
    }

    /// Whether target dispatches are held now.
    #[inline]
    pub fn is_capturing(&self) -> bool {
        self.word.load(Ordering::Acquire) & STAGE_BITS == Stage::Capturing as u8
    }

    /// Fails open: capture stops for `reason`, logged the first time only.
    pub fn fail(&self, reason: &str) {
        if self.advance(&[Stage::Initialising, Stage::Capturing], Stage::Failed) {
            log_warn!(
                "{reason}; capture stops, held dispatches are released and the application runs on unchanged"
            );
        }
    }

    /// Whether capture stopped because something failed.
    pub fn has_failed(&self) -> bool {
        self.stage() == Stage::Failed
    }

    /// Claims shutdown: true for the one caller that says Goodbye, while
    /// capturing or after a failure; false for every later caller, before
    /// start-up ended and in a passive process.
    pub fn claim_finish(&self) -> bool {
        self.word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                let open = matches!(Stage::of(w), Stage::Capturing | Stage::Failed);
                (open && w & FINISH_CLAIMED == 0).then_some(w | FINISH_CLAIMED)
            })
            .is_ok()
    }

    /// Capture ends at shutdown, without a warning (a failure is kept).
    pub fn finished(&self) {
        self.advance(&[Stage::Capturing], Stage::Finished);
    }

    /// In a child forked without exec: passive, with shutdown claimed (the
    /// connection is the parent's and no worker thread was copied). One
    /// atomic store: another thread may have held any lock at the fork.
    pub fn forked_child(&self) {
        self.word
            .store(Stage::Passive as u8 | FINISH_CLAIMED, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_up_begins_once_and_ends_capturing_or_passive() {
        let l = Lifecycle::new();
        assert!(l.begin());
        assert!(!l.begin(), "a second start-up does nothing");
        assert!(!l.is_capturing());
        l.capture();
        assert_eq!(l.stage(), Stage::Capturing);
        assert!(l.is_capturing());
        let p = Lifecycle::new();
        assert!(p.begin());
        p.stay_passive();
        assert_eq!(p.stage(), Stage::Passive);
        assert!(!p.claim_finish(), "a passive process says no Goodbye");
    }

    #[test]
    fn a_failure_during_start_up_survives_the_end_of_start_up() {
        let l = Lifecycle::new();
        l.begin();
        l.fail("no collector");
        l.capture();
        assert_eq!(l.stage(), Stage::Failed);
        assert!(!l.is_capturing());
    }

    #[test]
    fn shutdown_is_claimed_once_also_after_a_failure() {
        let l = Lifecycle::capturing();
        l.fail("the collector died");
        assert!(l.has_failed());
        assert!(l.claim_finish());
        assert!(!l.claim_finish());
        l.finished();
        assert_eq!(l.stage(), Stage::Failed, "the failure is kept");
        let ok = Lifecycle::capturing();
        assert!(ok.claim_finish());
        assert!(ok.is_capturing(), "claiming does not stop capture");
        ok.finished();
        assert_eq!(ok.stage(), Stage::Finished);
        ok.fail("late");
        assert!(!ok.has_failed(), "nothing fails after the end");
    }

    #[test]
    fn a_forked_child_is_passive_with_shutdown_already_claimed() {
        let l = Lifecycle::capturing();
        l.forked_child();
        assert_eq!(l.stage(), Stage::Passive);
        assert!(!l.is_capturing());
        assert!(!l.claim_finish());
        l.fail("anything");
        assert_eq!(l.stage(), Stage::Passive);
    }
}
