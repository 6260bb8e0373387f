//! No panic crosses the C boundary: every entry's implementation runs
//! under [`guard`], which turns a panic into the failure value of the
//! entry's return type ([`FailValue`]); a failing status is one trace line.
//! Knows nothing of the tables or of what the entries do.

use hsa::*;

/// What an entry returns when its implementation panicked, and whether a
/// result is a failure worth a trace line (`error <function> <status>`).
pub trait FailValue {
    fn fail() -> Self;
    fn trace_failure(&self, _function: &str) {}
}
impl FailValue for u32 {
    fn fail() -> Self {
        HSA_STATUS_ERROR
    }
    fn trace_failure(&self, function: &str) {
        // INFO_BREAK (0x1) ends an iteration early: not a failure.
        if *self != HSA_STATUS_SUCCESS && *self != HSA_STATUS_INFO_BREAK {
            crate::tools::trace::event(&format!("error {function} {self:#x}"));
        }
    }
}
impl FailValue for i64 {
    fn fail() -> Self {
        0
    }
}
impl FailValue for u64 {
    fn fail() -> Self {
        0
    }
}
impl FailValue for () {
    fn fail() -> Self {}
}

/// Runs an entry; a panic never crosses the C boundary.
pub(crate) fn guard<R: FailValue>(name: &str, f: impl FnOnce() -> R) -> R {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            eprintln!("hsa-cpu: internal error in {name}; returning an error to the caller");
            R::fail()
        }
    }
}
