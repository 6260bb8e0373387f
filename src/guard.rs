//! The one rule at every `extern "C"` entry: no panic crosses into the
//! application. Owns the catch_unwind wrapper; a caught panic is logged and
//! turned into the caller's fallback (the original, untouched behaviour).

use std::panic::{AssertUnwindSafe, catch_unwind};

/// Runs `body`; if it panics, logs once per entry kind and returns `fallback()`.
pub fn ffi_guard<R>(entry: &str, body: impl FnOnce() -> R, fallback: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            crate::log::log_error!(
                "internal error in {entry}: {what}; falling back to the runtime's own behaviour"
            );
            fallback()
        }
    }
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
}
