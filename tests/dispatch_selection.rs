//! `--dispatch` on real applications: only the selected dispatches are
//! captured, under their real indices; a malformed selection is refused
//! before anything runs.

use crate::common::*;
use std::path::Path;

fn run_scale_twice(dispatch: &str, snap: &Path) -> std::process::Output {
    std::process::Command::new(ditto_bin())
        .args(["run", "--hsa-runtime", "cpu", "--kernel", "scale_values"])
        .args(["--dispatch", dispatch, "--out"])
        .arg(snap)
        .arg("--")
        .arg(app("scale_twice"))
        .output()
        .unwrap()
}

#[test]
fn dispatch_one_of_scale_twice_is_the_only_capture_and_keeps_index_one() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let out = run_scale_twice("1", &snap);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(snap.join("manifest.json")).unwrap()).unwrap();
    let dispatches = m["dispatches"].as_array().unwrap();
    assert_eq!(dispatches.len(), 1, "{m}");
    assert_eq!(dispatches[0]["index"], 1);
    assert_eq!(
        m["dispatched_kernels"][0]["count"], 2,
        "both dispatches ran"
    );
    let file = dispatches[0]["file"].as_str().unwrap();
    assert!(file.ends_with("-00001.safetensors"), "{file}");
    let (middle, output) = (
        f32_tensor(&snap, file, "arg0"),
        f32_tensor(&snap, file, "arg1"),
    );
    assert_eq!(output.len(), 1024);
    for i in 0..1024 {
        assert_eq!(middle[i], 2.0 * i as f32, "middle[{i}]");
        assert_eq!(output[i], 3.0 * middle[i], "output[{i}]");
    }
}

#[test]
fn dispatch_zero_only_captures_the_first_dispatch() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let out = run_scale_twice("0", &snap);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(snap.join("manifest.json")).unwrap()).unwrap();
    let indices: Vec<u64> = m["dispatches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["index"].as_u64().unwrap())
        .collect();
    assert_eq!(indices, vec![0]);
    let file = m["dispatches"][0]["file"].as_str().unwrap();
    let output = f32_tensor(&snap, file, "arg1");
    assert_eq!(output[5], 10.0, "first dispatch: output = 2 * input");
}

#[test]
fn a_malformed_dispatch_selection_is_refused_before_the_application_runs() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let out = run_scale_twice("3..1", &snap);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("ends before it starts"),
        "{}",
        stderr(&out)
    );
    assert!(!snap.exists(), "nothing ran, nothing was written");
}

#[test]
fn ditto_run_script_passes_dispatch_and_capture_to_the_tool() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("socket");
    let snaps = dir.path().join("snaps");
    let collector = Collector::start(&socket, &snaps);
    let out = std::process::Command::new(repo_root().join("scripts/ditto-run"))
        .arg("--socket")
        .arg(&socket)
        .args(["--kernel", "scale_values", "--hsa-runtime", "cpu"])
        .args([
            "--run",
            "sel",
            "--dispatch",
            "1..",
            "--capture",
            "all",
            "--",
        ])
        .arg(app("scale_twice"))
        .env("DITTO_TOOL_LIB", tool_lib())
        .env("DITTO_CPU_RUNTIME_DIR", cpu_runtime_dir())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    drop(collector);
    let run = snaps.join("sel");
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("manifest.json")).unwrap()).unwrap();
    let dispatches = m["dispatches"].as_array().unwrap();
    assert_eq!(dispatches.len(), 1, "{m}");
    assert_eq!(dispatches[0]["index"], 1);
    let file = dispatches[0]["file"].as_str().unwrap();
    let middle_before = f32_tensor(&run, file, "arg0.before");
    assert_eq!(
        middle_before[100], 200.0,
        "dispatch 0's result, before dispatch 1"
    );
}

#[test]
fn a_name_selecting_several_kernels_says_which_it_captured_and_how_often() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let program = app("scale_values");
    let p = program.display();
    // scale_values<float> twice and scale_values<double> once, one process each.
    let out = std::process::Command::new(ditto_bin())
        .args([
            "run",
            "--hsa-runtime",
            "cpu",
            "--kernel",
            "scale_values",
            "--out",
        ])
        .arg(&snap)
        .args(["--", "sh", "-c"])
        .arg(format!("{p} float 64 && {p} double 64 && {p} float 64"))
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let se = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{se}");
    assert!(
        se.contains(
            "captured 3 dispatches of 2 kernels named `scale_values` [void \
             scale_values<float>(float*, float*, float, int) ×2; void \
             scale_values<double>(double*, double*, double, int) ×1]"
        ),
        "{se}"
    );
}
