//! A status of a CUDA library in words (`cuGetErrorString`, and CUPTI's
//! `cuptiGetResultString`, which has the same shape), and the error of a
//! failed driver call: "cuMemcpyDtoH failed: CUDA error 1 (invalid
//! argument)", the same text in the tool and in the collector.

use crate::entries::CuGetErrorStringFn;
use crate::types::{CUDA_SUCCESS, CuResult};
use std::ffi::{CStr, c_char, c_int};

/// What a CUDA library calls status `result`, through its string entry
/// (`cuGetErrorString`, `cuptiGetResultString`: status in, pointer to a
/// static string out); "unknown error" when it has none or does not know it.
pub fn status_name(
    lookup: Option<unsafe extern "C" fn(c_int, *mut *const c_char) -> c_int>,
    result: c_int,
) -> String {
    let mut text: *const c_char = std::ptr::null();
    let known = lookup.is_some_and(|f| {
        // SAFETY: out-pointer to a static string of the library.
        unsafe { f(result, &mut text) == 0 && !text.is_null() }
    });
    if known {
        // SAFETY: non-null static NUL-terminated string.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    } else {
        "unknown error".into()
    }
}

/// A driver call that did not return `CUDA_SUCCESS`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call} failed: CUDA error {result} ({name})")]
pub struct CallFailed {
    /// The call, as the caller names it ("cuMemcpyDtoH").
    pub call: String,
    pub result: CuResult,
    /// The driver's name of `result` ([`status_name`]).
    pub name: String,
}

/// `Ok` for `CUDA_SUCCESS`, else `call` with the driver's name of `result`
/// (through `get_error_string`, where the driver has it).
pub fn check(
    get_error_string: Option<CuGetErrorStringFn>,
    result: CuResult,
    call: &str,
) -> Result<(), CallFailed> {
    if result == CUDA_SUCCESS {
        return Ok(());
    }
    Err(CallFailed {
        call: call.to_string(),
        result,
        name: status_name(get_error_string, result),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" fn names_one(result: c_int, text: *mut *const c_char) -> c_int {
        if result != 1 {
            return 1;
        }
        // SAFETY: the out-pointer of the call.
        unsafe { *text = c"invalid argument".as_ptr() };
        0
    }

    #[test]
    fn a_failed_call_says_which_and_the_status_in_words() {
        assert_eq!(check(Some(names_one), 0, "cuInit"), Ok(()));
        assert_eq!(
            check(Some(names_one), 1, "cuMemcpyDtoH")
                .unwrap_err()
                .to_string(),
            "cuMemcpyDtoH failed: CUDA error 1 (invalid argument)"
        );
        assert_eq!(
            check(Some(names_one), 2, "cuInit").unwrap_err().to_string(),
            "cuInit failed: CUDA error 2 (unknown error)"
        );
        assert_eq!(
            check(None, 1, "cuInit").unwrap_err().to_string(),
            "cuInit failed: CUDA error 1 (unknown error)"
        );
    }
}
