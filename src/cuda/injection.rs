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

use super::capture::CudaTool;
use super::cupti::{Cupti, candidates};
use super::driver::Driver;
use super::launch::{API_ENTER, API_EXIT, CallbackData, DOMAIN_DRIVER_API, launch_of};
use crate::client::CollectorConnection;
use crate::guard::ffi_guard;
use crate::log::{self, log_info, log_warn};
use crate::options::Options;
use crate::worker::WorkerConfig;
use ditto_protocol::{Hello, PROTOCOL_VERSION};
use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

static TOOL: OnceLock<CudaTool> = OnceLock::new();
static STARTED: AtomicBool = AtomicBool::new(false);

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
    if STARTED.swap(true, Ordering::AcqRel) {
        return 1;
    }
    ffi_guard(
        "InitializeInjection",
        || {
            let options = Options::from_env();
            log::set_level(options.log);
            if let Err(e) = start(options, &driver_library(), &cupti_candidates()) {
                log_warn!("{e}; nothing will be captured in this CUDA application");
            }
        },
        || (),
    );
    1
}

/// `DITTO_CUDA_DRIVER`, else libcuda.so.1.
fn driver_library() -> String {
    std::env::var("DITTO_CUDA_DRIVER").unwrap_or_else(|_| "libcuda.so.1".into())
}

fn cupti_candidates() -> Vec<String> {
    candidates(
        std::env::var("DITTO_CUPTI_LIBRARY").ok().as_deref(),
        std::env::var("CUDA_HOME").ok().as_deref(),
    )
}

/// Start-up proper. `Ok` also when the tool stays passive on purpose.
pub fn start(options: Options, driver: &str, cupti: &[String]) -> Result<(), String> {
    for problem in &options.problems {
        log_warn!("{problem}");
    }
    let Some(query) = options.kernel.clone() else {
        log_info!("DITTO_KERNEL is not set; the tool stays passive");
        return Ok(());
    };
    if let Some(fatal) = &options.fatal {
        return Err(fatal.clone());
    }
    let Some(socket) = options.socket.clone() else {
        return Err(
            "DITTO_KERNEL is set but DITTO_SOCKET is not (run through `ditto run` or scripts/ditto-run)"
                .into(),
        );
    };
    let driver = Driver::load(driver)?;
    let cupti = Cupti::load(cupti)?;
    let hello = Hello {
        version: PROTOCOL_VERSION,
        pid: std::process::id(),
        run: options.run_name.clone(),
        kernel_query: query.clone(),
        command_line: crate::hsa::registration::command_line(),
        working_directory: std::env::current_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_default(),
        rank: options.rank,
    };
    let config = WorkerConfig {
        socket: Some(socket.clone()),
        hello: hello.clone(),
        timeout: options.timeout,
        capture: options.capture,
        arg_sizes: options.arg_sizes.clone(),
        dispatch: options.dispatch.clone(),
        // The CUDA path captures on the launching thread, through its own
        // transport: no staging file.
        staging_bytes: 0,
    };
    let connection = CollectorConnection::open(&socket, &hello, options.timeout, 0)
        .map_err(|e| e.to_string())?;
    let tool = CudaTool::new(driver, options, config);
    *tool.connection.lock().unwrap_or_else(|e| e.into_inner()) = Some(connection);
    if TOOL.set(tool).is_err() {
        return Err("the CUDA tool was started twice".into());
    }
    let tool = TOOL.get().expect("set above");
    if let Err(e) = cupti.subscribe_launches(on_callback) {
        tool.switch.stop();
        return Err(e);
    }
    // SAFETY: plain extern "C" functions registered with the C library.
    unsafe {
        libc::pthread_atfork(None, None, Some(forked_child));
        libc::atexit(finish_at_exit);
    }
    log_info!(
        "capturing kernel `{query}` in a CUDA application (CUPTI from {})",
        cupti.library
    );
    Ok(())
}

/// The CUPTI callback: every kernel launch, at its entry and at its exit.
unsafe extern "C" fn on_callback(
    _userdata: *mut c_void,
    domain: u32,
    cbid: u32,
    data: *const c_void,
) {
    if domain != DOMAIN_DRIVER_API || data.is_null() || IN_CALLBACK.with(Cell::get) {
        return;
    }
    let Some(tool) = TOOL.get() else { return };
    IN_CALLBACK.with(|c| c.set(true));
    ffi_guard(
        "the CUPTI launch callback",
        // SAFETY: CUPTI passes a CUpti_CallbackData for driver-API callbacks.
        || unsafe { on_launch(tool, cbid, &*(data as *const CallbackData)) },
        || (),
    );
    IN_CALLBACK.with(|c| c.set(false));
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
            tool.on_exit(&launch, slot - 1, result);
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

/// A forked child shares the parent's connection: it captures nothing.
extern "C" fn forked_child() {
    if let Some(tool) = TOOL.get() {
        tool.switch.stop();
        tool.goodbye_sent.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(
            start(options(&[]), "/nonexistent/libcuda.so.1", &[]),
            Ok(())
        );
    }

    #[test]
    fn a_missing_driver_or_libcupti_fails_open_with_a_reason() {
        let o = || {
            options(&[
                ("DITTO_KERNEL", "reduce_sum"),
                ("DITTO_SOCKET", "/nonexistent.sock"),
            ])
        };
        let err = start(o(), "/nonexistent/libcuda.so.1", &[]).unwrap_err();
        assert!(
            err.contains("cannot load the CUDA driver /nonexistent/libcuda.so.1"),
            "{err}"
        );
        // libc loads but is no CUDA driver.
        let err = start(o(), "libc.so.6", &[]).unwrap_err();
        assert!(err.contains("lacks cuFuncGetParamInfo"), "{err}");
        let err = start(
            options(&[("DITTO_KERNEL", "reduce_sum")]),
            "/nonexistent/libcuda.so.1",
            &[],
        )
        .unwrap_err();
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
