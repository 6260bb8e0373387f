//! A process whose HSA runtime never started the tool. The tool library is
//! preloaded into every process `ditto run` starts, and a runtime that
//! does not look for it (ROCm 5.2 without HSA_TOOLS_LIB, ROCm 6.1 and later
//! when a rocprofiler-sdk tool is present) would leave the user with
//! nothing captured and no reason. So at load, when the process was
//! started to capture (DITTO_KERNEL and DITTO_SOCKET set), an exit handler
//! is registered; at exit, if no backend ever started (no OnLoad, no CUDA
//! injection) and an HSA runtime library is loaded in the process, it
//! connects to the collector and says so, with what the environment tells
//! about tool loading. Bounded (the connection's timeout), silent on any
//! failure, never a panic: it must not change how the application ends.

use crate::capture::client::CollectorConnection;
use crate::capture::process::hello;
use crate::guard::quietly;
use crate::lifecycle::{PROCESS, Stage};
use crate::log::log_debug;
use crate::options::Options;
use ditto_protocol::NeverLoaded;
use std::ffi::{CStr, c_int, c_void};
use std::time::Duration;

/// The longest the exit handler waits for the collector.
const EXIT_TIMEOUT: Duration = Duration::from_secs(5);

#[used]
#[unsafe(link_section = ".init_array")]
static ARM_AT_LOAD: extern "C" fn() = arm;

/// At load: registers the exit check when this process was started to
/// capture (two environment reads otherwise).
extern "C" fn arm() {
    quietly(|| {
        let set = |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty());
        if set("DITTO_KERNEL") && set("DITTO_SOCKET") {
            // SAFETY: registering a plain extern "C" function with the C library.
            unsafe { libc::atexit(check_at_exit) };
        }
    });
}

extern "C" fn check_at_exit() {
    quietly(|| {
        if PROCESS.stage() != Stage::Uninitialised {
            return;
        }
        let Some(runtime) = loaded_hsa_runtime() else {
            return;
        };
        let options = Options::from_env();
        let (Some(socket), Some(query)) = (options.socket.clone(), options.kernel.clone()) else {
            return;
        };
        let report = NeverLoaded {
            runtime,
            reason: why_not_loaded(&|k| std::env::var(k).ok(), rocprofiler_tool_visible()),
        };
        let timeout = options.timeout.min(EXIT_TIMEOUT);
        let sent = CollectorConnection::open(
            &socket,
            &hello(&options, &query, ditto_protocol::Api::Hsa),
            timeout,
            0,
            options.collector_uid,
        )
        .and_then(|mut c| c.never_loaded(&report));
        if let Err(e) = sent {
            log_debug!("cannot tell the collector the tool was never loaded: {e}");
        }
    });
}

/// The path of the HSA runtime library loaded in this process, if any.
fn loaded_hsa_runtime() -> Option<String> {
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: dl_iterate_phdr passes a valid info and our Option as data.
        unsafe {
            let found = &mut *(data as *mut Option<String>);
            let name = (*info).dlpi_name;
            if !name.is_null() {
                let name = CStr::from_ptr(name).to_string_lossy();
                if name.contains("libhsa-runtime64.so") {
                    *found = Some(name.into_owned());
                    return 1;
                }
            }
        }
        0
    }
    let mut found: Option<String> = None;
    // SAFETY: the callback only reads the info and writes `found`.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut found as *mut _ as *mut c_void) };
    found
}

/// Whether a rocprofiler-sdk tool is visible in the process (what
/// rocprofiler-register looks for).
fn rocprofiler_tool_visible() -> bool {
    // SAFETY: a lookup in the global scope.
    !unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"rocprofiler_configure".as_ptr()) }.is_null()
}

/// What the environment says about why no runtime started the tool.
fn why_not_loaded(get: &dyn Fn(&str) -> Option<String>, rocprofiler_visible: bool) -> String {
    let mut reasons = Vec::new();
    let rocprofiler = get("ROCP_TOOL_LIBRARIES").filter(|v| !v.is_empty());
    if rocprofiler.is_some() || rocprofiler_visible {
        let what = match &rocprofiler {
            Some(v) => format!("ROCP_TOOL_LIBRARIES={v}"),
            None => "a library exporting rocprofiler_configure".to_string(),
        };
        let v1 = get("HSA_TOOLS_ROCPROFILER_V1_TOOLS").unwrap_or_else(|| "unset".into());
        reasons.push(format!(
            "a rocprofiler-sdk tool is present ({what}): ROCm 6.1 and later then load no \
             other tool unless HSA_TOOLS_ROCPROFILER_V1_TOOLS=1 (it is {v1})"
        ));
    }
    match get("HSA_TOOLS_LIB").filter(|v| v.contains("libditto")) {
        None => reasons.push(
            "HSA_TOOLS_LIB does not name the tool, and ROCm 5.2 loads tools from there only \
             (`ditto run` and scripts/ditto-run set it: did something in between drop it?)"
                .into(),
        ),
        Some(_) if reasons.is_empty() => reasons.push(
            "HSA_TOOLS_LIB names the tool; did the process call hsa_init? (one that loads HIP \
             without using the GPU starts no tool)"
                .into(),
        ),
        Some(_) => {}
    }
    reasons.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn the_reason_names_what_kept_the_runtime_from_loading_the_tool() {
        let none = why_not_loaded(&env(&[]), false);
        assert!(
            none.starts_with("HSA_TOOLS_LIB does not name the tool"),
            "{none}"
        );
        let sdk = why_not_loaded(
            &env(&[
                ("ROCP_TOOL_LIBRARIES", "librocprof-tool.so"),
                ("HSA_TOOLS_LIB", "/x/libditto.so"),
            ]),
            false,
        );
        assert!(
            sdk.contains("ROCP_TOOL_LIBRARIES=librocprof-tool.so"),
            "{sdk}"
        );
        assert!(
            sdk.contains("HSA_TOOLS_ROCPROFILER_V1_TOOLS=1 (it is unset)"),
            "{sdk}"
        );
        assert!(!sdk.contains("HSA_TOOLS_LIB"), "{sdk}");
        let visible = why_not_loaded(&env(&[("HSA_TOOLS_ROCPROFILER_V1_TOOLS", "0")]), true);
        assert!(
            visible.contains("exporting rocprofiler_configure"),
            "{visible}"
        );
        assert!(
            visible.contains("(it is 0)") && visible.contains("does not name"),
            "{visible}"
        );
        let named = why_not_loaded(&env(&[("HSA_TOOLS_LIB", "/x/libditto.so")]), false);
        assert!(named.contains("did the process call hsa_init?"), "{named}");
    }
}
