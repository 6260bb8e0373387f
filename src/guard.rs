//! The one rule at every `extern "C"` entry and thread body: no panic
//! crosses into the application. Owns every catch_unwind of the tool:
//! [`ffi_guard`] (a caught panic is logged once per entry kind and turned
//! into the caller's fallback, the original, untouched behaviour),
//! [`quietly`] (for a fork's child handler, which must not take the stderr
//! lock) and [`caught`] (a panic as its message, for the worker thread's
//! own accounting).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

pub use ditto_types::panic_message;

/// Entries whose panic has been logged already.
static REPORTED: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

/// Runs `body`; if it panics, logs once per entry kind and returns `fallback()`.
pub fn ffi_guard<R>(
    entry: &'static str,
    body: impl FnOnce() -> R,
    fallback: impl FnOnce() -> R,
) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(payload) => {
            if first_panic_in(entry) {
                crate::log::log_error!(
                    "internal error in {entry}: {}; falling back to the runtime's own behaviour",
                    panic_message(payload.as_ref())
                );
            }
            fallback()
        }
    }
}

/// Runs `body` and drops a panic without a word: for code that runs where
/// no lock may be taken (a forked child's handler).
pub fn quietly(body: impl FnOnce()) {
    let _ = catch_unwind(AssertUnwindSafe(body));
}

/// A panic caught by [`caught`]: its message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Panicked(pub String);

/// Runs `body`; a panic comes back as its message, for the caller to
/// account for (a held dispatch released, capture failed open).
pub fn caught<R>(body: impl FnOnce() -> R) -> Result<R, Panicked> {
    catch_unwind(AssertUnwindSafe(body))
        .map_err(|payload| Panicked(panic_message(payload.as_ref())))
}

/// True the first time `entry` reports a panic (a panic in the packet
/// callback would otherwise log once per packet).
fn first_panic_in(entry: &'static str) -> bool {
    let mut reported = REPORTED.lock().unwrap_or_else(|e| e.into_inner());
    if reported.contains(&entry) {
        return false;
    }
    reported.push(entry);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_turns_into_the_fallback_value() {
        let r = ffi_guard("test", || -> u32 { panic!("boom") }, || 7);
        assert_eq!(r, 7);
        assert_eq!(ffi_guard("test", || 3, || 7), 3);
    }

    #[test]
    fn a_panic_is_reported_once_per_entry() {
        assert!(first_panic_in("guard test entry a"));
        assert!(!first_panic_in("guard test entry a"));
        assert!(first_panic_in("guard test entry b"));
    }

    #[test]
    fn caught_gives_the_panic_message_and_quietly_swallows_it() {
        assert_eq!(caught(|| 5), Ok(5));
        assert_eq!(
            caught(|| -> u8 { panic!("worker {}", 3) }),
            Err(Panicked("worker 3".into()))
        );
        quietly(|| panic!("in a forked child"));
    }
}
