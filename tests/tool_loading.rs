//! How the runtime finds the tool: named in HSA_TOOLS_LIB alone (all that
//! ROCm 5.2's runtime reads), or named there and preloaded too (what
//! `ditto run` sets): either way the tool starts once and the target's
//! dispatches are captured once.

use crate::common::*;
use std::process::Command;

/// scale_values<float> 256 under the tool, with `preload` or not, through
/// a collector; the snapshot's manifest and the application's stderr.
fn run(preload: bool) -> (serde_json::Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("socket");
    let snaps = dir.path().join("snaps");
    let collector = Collector::start(&socket, &snaps);
    let mut cmd = Command::new(app("scale_values"));
    cmd.args(["float", "256"])
        .env("HSA_TOOLS_LIB", tool_lib())
        .env("LD_LIBRARY_PATH", cpu_runtime_dir())
        .env("DITTO_KERNEL", "scale_values<float>")
        .env("DITTO_SOCKET", &socket)
        .env("DITTO_RUN_NAME", "run")
        .env("DITTO_LOG", "info")
        .env_remove("LD_PRELOAD");
    if preload {
        cmd.env("LD_PRELOAD", tool_lib());
    }
    let out = cmd.output().unwrap();
    drop(collector);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    (snapshot_manifest(&snaps.join("run")), err)
}

#[test]
fn a_tool_named_in_hsa_tools_lib_alone_is_loaded_and_captures() {
    let (m, err) = run(false);
    assert_eq!(m["dispatches"].as_array().unwrap().len(), 1, "{err}");
    assert!(
        err.contains("capturing kernel `scale_values<float>`"),
        "{err}"
    );
}

#[test]
fn a_tool_named_and_preloaded_starts_once() {
    let (m, err) = run(true);
    assert_eq!(m["dispatches"].as_array().unwrap().len(), 1, "{err}");
    assert_eq!(err.matches("capturing kernel `").count(), 1, "{err}");
}

#[test]
fn a_process_whose_runtime_never_starts_the_tool_says_so_to_the_collector() {
    // ROCm 5.2 looks for tools in HSA_TOOLS_LIB only: preloaded alone, the
    // tool is never started.
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("socket");
    let log = dir.path().join("collector.log");
    let collector = Collector::start_logging(&socket, &dir.path().join("snaps"), &log);
    let plain = run_plain(&app("scale_values"), &["float", "256"]);
    let mut cmd = Command::new(app("scale_values"));
    cmd.args(["float", "256"])
        .env("LD_LIBRARY_PATH", cpu_runtime_dir())
        .env("DITTO_HSA_CPU_ABI", "5.2")
        .env("LD_PRELOAD", tool_lib())
        .env("DITTO_KERNEL", "scale_values<float>")
        .env("DITTO_SOCKET", &socket)
        .env("DITTO_RUN_NAME", "run")
        .env_remove("HSA_TOOLS_LIB");
    let child = cmd.stdout(std::process::Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stdout(&out),
        stdout(&plain),
        "the application's output is its own"
    );
    let expected = format!(
        "the tool was never loaded in pid {pid}: its HSA runtime ({}) never called the tool's \
         OnLoad; HSA_TOOLS_LIB does not name the tool, and ROCm 5.2 loads tools from there only",
        cpu_runtime_dir().join("libhsa-runtime64.so.1").display()
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains(&expected) || std::time::Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    drop(collector);
    assert!(
        text.contains(&expected),
        "{expected}\nnot in the collector's log:\n{text}"
    );
}

#[test]
fn ditto_run_says_plainly_when_no_process_ever_started_the_tool() {
    // The application drops HSA_TOOLS_LIB before it starts (as a wrapper
    // script might) and its runtime is ROCm 5.2's: the tool is never
    // started, and `ditto run` says why instead of "never connected".
    let out = Command::new(ditto_bin())
        .args([
            "run",
            "--hsa-runtime",
            "cpu",
            "--kernel",
            "scale_values",
            "--",
        ])
        .args(["env", "-u", "HSA_TOOLS_LIB"])
        .arg(app("scale_values"))
        .args(["float", "256"])
        .env("DITTO_HSA_CPU_ABI", "5.2")
        .env("NO_COLOR", "1")
        .current_dir(tempfile::tempdir().unwrap().path())
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("the tool was never loaded in pid ")
            && err.contains("never called the tool's OnLoad; HSA_TOOLS_LIB does not name the tool"),
        "{err}"
    );
    assert!(!err.contains("never connected"), "{err}");
}
