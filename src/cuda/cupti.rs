//! CUPTI, loaded at run time: finding libcupti (DITTO_CUPTI_LIBRARY, else
//! the usual names and CUDA install places), subscribing one callback and
//! enabling it for the kernel-launch entry points of the driver API only
//! (every other API call runs without ditto). Owns no capture logic.

use super::launch::{DOMAIN_DRIVER_API, LAUNCH_CBIDS};
use super::modules::{CBID_MODULE_LOADED, DOMAIN_RESOURCE};
use cuda_abi::{Library, as_fn, status_name};
use std::ffi::{c_char, c_int, c_void};

/// Why CUPTI could not be loaded or subscribed to.
#[derive(Debug, thiserror::Error)]
pub enum CuptiError {
    /// No candidate opened with the callback API; `tried` says, per
    /// candidate, why not.
    #[error(
        "CUPTI (libcupti) cannot be loaded ({}); set DITTO_CUPTI_LIBRARY to the libcupti.so of \
         the CUDA toolkit (e.g. /usr/local/cuda/extras/CUPTI/lib64/libcupti.so)",
        .tried.join("; ")
    )]
    NotLoaded { tried: Vec<String> },
    #[error("{call} failed: CUPTI error {result} ({name})")]
    Call {
        call: String,
        result: c_int,
        name: String,
    },
}

/// `CUpti_CallbackFunc`.
pub type CallbackFunc = unsafe extern "C" fn(*mut c_void, u32, u32, *const c_void);

pub struct Cupti {
    subscribe: unsafe extern "C" fn(*mut *mut c_void, CallbackFunc, *mut c_void) -> c_int,
    enable_callback: unsafe extern "C" fn(u32, *mut c_void, u32, u32) -> c_int,
    get_result_string: Option<unsafe extern "C" fn(c_int, *mut *const c_char) -> c_int>,
    /// Where it was loaded from.
    pub library: String,
    /// The library itself (its activity API times kernels: `kernel_times`).
    pub handle: Library,
}

/// Where libcupti is looked for, in order: only `DITTO_CUPTI_LIBRARY` when
/// it is set; else the loader's search path, then CUDA_HOME's and
/// /usr/local/cuda's CUPTI directories.
pub fn candidates(explicit: Option<&str>, cuda_home: Option<&str>) -> Vec<String> {
    if let Some(path) = explicit {
        return vec![path.to_string()];
    }
    let mut v: Vec<String> = ["libcupti.so", "libcupti.so.13", "libcupti.so.12"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for home in cuda_home.into_iter().chain(["/usr/local/cuda"]) {
        v.push(format!("{home}/extras/CUPTI/lib64/libcupti.so"));
        v.push(format!("{home}/lib64/libcupti.so"));
    }
    v
}

impl Cupti {
    /// Loads the first of `candidates` that opens and has the callback API.
    pub fn load(candidates: &[String]) -> Result<Cupti, CuptiError> {
        let mut tried = Vec::new();
        for name in candidates {
            let handle = match Library::open(name) {
                Ok(h) => h,
                Err(e) => {
                    tried.push(format!("{name}: {e}"));
                    continue;
                }
            };
            let (Some(sub), Some(enable)) = (
                handle.symbol("cuptiSubscribe"),
                handle.symbol("cuptiEnableCallback"),
            ) else {
                tried.push(format!("{name}: no cuptiSubscribe/cuptiEnableCallback"));
                continue;
            };
            // SAFETY: the symbols have the C signatures of the CUPTI API named.
            return Ok(unsafe {
                Cupti {
                    subscribe: as_fn(sub),
                    enable_callback: as_fn(enable),
                    get_result_string: handle.symbol("cuptiGetResultString").map(|p| as_fn(p)),
                    library: name.clone(),
                    handle,
                }
            });
        }
        Err(CuptiError::NotLoaded { tried })
    }

    fn check(&self, result: c_int, call: &str) -> Result<(), CuptiError> {
        if result == 0 {
            return Ok(());
        }
        Err(CuptiError::Call {
            call: call.to_string(),
            result,
            name: status_name(self.get_result_string, result),
        })
    }

    /// Subscribes `callback` and enables it for the launch callbacks.
    pub fn subscribe_launches(
        &self,
        callback: CallbackFunc,
        modules: bool,
    ) -> Result<(), CuptiError> {
        let mut subscriber: *mut c_void = std::ptr::null_mut();
        // SAFETY: out-pointer; a plain extern "C" callback; no user data.
        let r = unsafe { (self.subscribe)(&mut subscriber, callback, std::ptr::null_mut()) };
        self.check(
            r,
            "cuptiSubscribe (is another CUPTI tool or profiler attached?)",
        )?;
        for cbid in LAUNCH_CBIDS {
            // SAFETY: a live subscriber.
            let r = unsafe { (self.enable_callback)(1, subscriber, DOMAIN_DRIVER_API, cbid) };
            self.check(
                r,
                &format!("cuptiEnableCallback(driver API, callback id {cbid})"),
            )?;
        }
        if modules {
            // SAFETY: as above.
            let r = unsafe {
                (self.enable_callback)(1, subscriber, DOMAIN_RESOURCE, CBID_MODULE_LOADED)
            };
            self.check(r, "cuptiEnableCallback(resource, module loaded)")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explicit_library_is_the_only_candidate_else_the_usual_places() {
        assert_eq!(
            candidates(Some("/x/libcupti.so"), None),
            vec!["/x/libcupti.so"]
        );
        let c = candidates(None, Some("/opt/cuda"));
        assert_eq!(c[0], "libcupti.so");
        assert!(c.contains(&"/opt/cuda/extras/CUPTI/lib64/libcupti.so".to_string()));
        assert!(c.contains(&"/usr/local/cuda/extras/CUPTI/lib64/libcupti.so".to_string()));
    }

    #[test]
    fn a_missing_libcupti_is_an_error_naming_every_try_and_the_variable() {
        let err = Cupti::load(&["/nonexistent/libcupti.so".into()])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("/nonexistent/libcupti.so"), "{err}");
        assert!(err.contains("DITTO_CUPTI_LIBRARY"), "{err}");
        // A library without the callback API is not taken for CUPTI.
        let err = Cupti::load(&["libc.so.6".into()])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("no cuptiSubscribe"), "{err}");
    }
}
