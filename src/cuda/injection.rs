//! How the CUDA driver finds and starts the tool: `ditto run` sets
//! CUDA_INJECTION64_PATH to this library, and the driver calls its exported
//! `InitializeInjection` once, inside cuInit. Owns the start-up order
//! (options, driver entry points, CUPTI, collector connection, then the
//! subscription), the CUPTI callback entry with its re-entry guard, and
//! the Goodbye at exit. Every failure fails open: one `ditto:` warning and
//! the application runs as if no tool were there.
//!
//! The same library is also preloaded for HSA applications; in a CUDA
//! application no HSA `OnLoad` comes, and in an HSA application no
//! `InitializeInjection`: each backend starts only through its own entry.

use super::cupti::{Cupti, CuptiError, candidates};
use super::driver::{Driver, DriverError};
use super::hold::CudaTool;
use super::kernel_times::KernelTimes;
use super::launch::{API_ENTER, API_EXIT, CallbackData, DOMAIN_DRIVER_API, launch_of};
use super::modules::{CBID_MODULE_LOADED, DOMAIN_RESOURCE, ResourceData};
use crate::capture::client::{ClientError, CollectorConnection};
use crate::capture::process::hello;
use crate::guard::{ffi_guard, quietly};
use crate::lifecycle::{Lifecycle, PROCESS};
use crate::log::{self, log_info, log_warn};
use crate::options::Options;
use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

static TOOL: OnceLock<CudaTool> = OnceLock::new();

thread_local! {
    /// Set while this thread runs the callback: driver calls the capture
    /// path makes are never captured themselves.
    static IN_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

/// Called by the CUDA driver (CUDA_INJECTION64_PATH) inside cuInit.
/// Returns 1: the application continues whatever happened here (a tool
/// that cannot capture says why once and stays out of the way).
#[unsafe(no_mangle)]
pub extern "C" fn InitializeInjection() -> c_int {
    if !PROCESS.begin() {
        return 1;
    }
    let capturing = ffi_guard(
        "InitializeInjection",
        || {
            let options = Options::from_env();
            log::set_level(options.log);
            start(options, &PROCESS).unwrap_or_else(|e| {
                log_warn!("{e}; nothing will be captured in this CUDA application");
                false
            })
        },
        || false,
    );
    PROCESS.start_up_ended(capturing);
    1
}

/// Why the CUDA backend did not start capturing (logged, with "nothing
/// will be captured").
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A DITTO_* variable that makes capture impossible, as options says.
    #[error("{0}")]
    Options(String),
    #[error(
        "DITTO_KERNEL is set but DITTO_SOCKET is not (run through `ditto run` or scripts/ditto-run)"
    )]
    NoSocket,
    #[error(transparent)]
    Driver(#[from] DriverError),
    #[error(transparent)]
    Cupti(#[from] CuptiError),
    #[error(transparent)]
    Collector(#[from] ClientError),
    #[error("the CUDA tool was started twice")]
    StartedTwice,
}

/// Start-up proper: whether the tool captures; `Ok(false)` when it stays
/// passive on purpose.
pub fn start(options: Options, lifecycle: &'static Lifecycle) -> Result<bool, StartError> {
    for problem in &options.problems {
        log_warn!("{problem}");
    }
    let Some(query) = options.kernel.clone() else {
        log_info!("DITTO_KERNEL is not set; the tool stays passive");
        return Ok(false);
    };
    if let Some(fatal) = &options.fatal {
        return Err(StartError::Options(fatal.clone()));
    }
    let Some(socket) = options.socket.clone() else {
        return Err(StartError::NoSocket);
    };
    let driver = Driver::load(&options.cuda_driver)?;
    let cupti = Cupti::load(&candidates(
        options.cupti_library.as_deref(),
        options.cuda_home.as_deref(),
    ))?;
    // Small buffers are staged (copied into the staging file), as on HSA.
    let connection = CollectorConnection::open(
        &socket,
        &hello(&options, &query, ditto_protocol::Api::Cuda),
        options.timeout,
        options.staging_bytes,
        options.collector_uid,
    )?;
    let mut tool = CudaTool::new(driver, options, lifecycle);
    tool.times = KernelTimes::load(&cupti.handle);
    *tool.connection.lock().unwrap_or_else(|e| e.into_inner()) = Some(connection);
    if TOOL.set(tool).is_err() {
        return Err(StartError::StartedTwice);
    }
    let replays = TOOL.get().is_some_and(|t| t.options.capture.replays());
    cupti.subscribe_launches(on_callback, replays)?;
    // SAFETY: plain extern "C" functions registered with the C library.
    unsafe {
        libc::pthread_atfork(None, None, Some(forked_child));
        libc::atexit(finish_at_exit);
    }
    log_info!(
        "capturing kernel `{query}` in a CUDA application (CUPTI from {})",
        cupti.library
    );
    Ok(true)
}

/// The CUPTI callback: every kernel launch, at its entry and at its exit.
unsafe extern "C" fn on_callback(
    _userdata: *mut c_void,
    domain: u32,
    cbid: u32,
    data: *const c_void,
) {
    if domain == DOMAIN_RESOURCE && cbid == CBID_MODULE_LOADED && !data.is_null() {
        if let Some(tool) = TOOL.get() {
            ffi_guard(
                "the CUPTI module callback",
                // SAFETY: CUPTI passes a CUpti_ResourceData for resource callbacks.
                || tool.on_module_loaded(unsafe { &*(data as *const ResourceData) }),
                || (),
            );
        }
        return;
    }
    // A thread whose thread-locals are being torn down counts as inside:
    // it launches nothing ditto captures.
    if domain != DOMAIN_DRIVER_API
        || data.is_null()
        || IN_CALLBACK.try_with(Cell::get).unwrap_or(true)
    {
        return;
    }
    let Some(tool) = TOOL.get() else { return };
    let _ = IN_CALLBACK.try_with(|c| c.set(true));
    ffi_guard(
        "the CUPTI launch callback",
        // SAFETY: CUPTI passes a CUpti_CallbackData for driver-API callbacks.
        || unsafe { on_launch(tool, cbid, &*(data as *const CallbackData)) },
        || (),
    );
    let _ = IN_CALLBACK.try_with(|c| c.set(false));
}

/// # Safety
/// `data` is the callback data of a launch callback with id `cbid`.
unsafe fn on_launch(tool: &CudaTool, cbid: u32, data: &CallbackData) {
    // SAFETY: functionParams of this callback id.
    let Some(launch) = (unsafe { launch_of(cbid, data.function_params) }) else {
        return;
    };
    let correlation = data.correlation_data;
    match data.callback_site {
        API_ENTER => {
            let index = tool.on_enter(&launch, data.symbol_name);
            if !correlation.is_null() {
                // SAFETY: CUPTI's per-call slot shared by entry and exit.
                unsafe { *correlation = index.map_or(0, |i| i + 1) };
            }
        }
        API_EXIT => {
            if correlation.is_null() {
                return;
            }
            // SAFETY: as above.
            let slot = unsafe { *correlation };
            if slot == 0 {
                return;
            }
            let result = (!data.function_return_value.is_null())
                // SAFETY: a driver call's return value is a CUresult.
                .then(|| unsafe { *(data.function_return_value as *const c_int) });
            tool.on_exit(&launch, slot - 1, result, data.correlation_id);
        }
        _ => {}
    }
}

extern "C" fn finish_at_exit() {
    ffi_guard(
        "the CUDA tool's exit handler",
        || {
            if let Some(tool) = TOOL.get() {
                tool.finish();
            }
        },
        || (),
    );
}

/// A forked child shares the parent's connection: it captures nothing and
/// says no Goodbye. Atomics only, and no log (no lock may be taken).
extern "C" fn forked_child() {
    quietly(|| PROCESS.forked_child());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Never started: these tests stop before anything captures.
    static LIFECYCLE: Lifecycle = Lifecycle::new();

    fn options(vars: &[(&str, &str)]) -> Options {
        Options::from_lookup(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn without_a_kernel_the_tool_stays_passive_and_loads_nothing() {
        // A driver that does not exist is never opened.
        let o = options(&[("DITTO_CUDA_DRIVER", "/nonexistent/libcuda.so.1")]);
        assert!(matches!(start(o, &LIFECYCLE), Ok(false)));
    }

    #[test]
    fn a_missing_driver_or_libcupti_fails_open_with_a_reason() {
        let o = |driver| {
            options(&[
                ("DITTO_KERNEL", "reduce_sum"),
                ("DITTO_SOCKET", "/nonexistent.sock"),
                ("DITTO_CUDA_DRIVER", driver),
            ])
        };
        let err = start(o("/nonexistent/libcuda.so.1"), &LIFECYCLE)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("cannot load the CUDA driver /nonexistent/libcuda.so.1"),
            "{err}"
        );
        // libc loads but is no CUDA driver.
        let err = start(o("libc.so.6"), &LIFECYCLE).unwrap_err().to_string();
        assert!(err.contains("lacks cuFuncGetParamInfo"), "{err}");
        let err = start(
            options(&[
                ("DITTO_KERNEL", "reduce_sum"),
                ("DITTO_CUDA_DRIVER", "/nonexistent/libcuda.so.1"),
            ]),
            &LIFECYCLE,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("DITTO_SOCKET is not"), "{err}");
        assert!(TOOL.get().is_none(), "nothing was started");
    }

    #[test]
    fn the_exported_entry_returns_one_even_when_nothing_can_be_captured() {
        // No DITTO_KERNEL in the test environment: passive, and 1.
        assert_eq!(InitializeInjection(), 1);
        assert_eq!(InitializeInjection(), 1, "a second call is harmless");
    }
}
