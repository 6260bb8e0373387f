//! How the runtime finds the tool: named in HSA_TOOLS_LIB alone (all that
//! ROCm 5.2's runtime reads), or named there and preloaded too (what
//! `ditto run` sets): either way the tool starts once and the target's
//! dispatches are captured once.

mod common;
use common::*;
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
