//! `--capture` on real applications: inputs are taken after all earlier
//! work in the queue completed and before the kernel ran, stored next to
//! the outputs as `arg<N>.before`.

use crate::common::*;
use std::path::Path;

fn capture(app_name: &str, args: &[&str], snap: &Path) -> serde_json::Value {
    let out = std::process::Command::new(ditto_bin())
        .args(["run", "--hsa-runtime", "cpu"])
        .args(args)
        .arg("--out")
        .arg(snap)
        .arg("--")
        .arg(app(app_name))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_slice(&std::fs::read(snap.join("manifest.json")).unwrap()).unwrap()
}

#[test]
fn reduce_sum_inputs_are_captured_before_and_the_output_after() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let m = capture(
        "reduce_sum_baseline",
        &["--kernel", "reduce_sum", "--capture", "inputs,outputs"],
        &snap,
    );
    let d = &m["dispatches"][0];
    assert_eq!(m["dispatches"].as_array().unwrap().len(), 1);
    assert_eq!(
        buffer_phases(d),
        vec![
            ("arg0.before".to_string(), "before".to_string()),
            ("arg1".to_string(), "after".to_string())
        ]
    );
    let file = d["file"].as_str().unwrap();
    let input = f32_tensor(&snap, file, "arg0.before");
    assert_eq!(input.len(), 65536);
    for (i, v) in input.iter().enumerate() {
        assert_eq!(*v, (i % 7) as f32 * 0.5, "input[{i}]");
    }
    let output = f32_tensor(&snap, file, "arg1");
    // 9362 full cycles of 0 + 0.5 + ... + 3 = 10.5, then 0 and 0.5.
    assert_eq!(output[0], 98301.5);
}

#[test]
fn capture_all_sees_the_previous_dispatch_completed_and_this_one_not_started() {
    // scale_twice queues its two dispatches without synchronising: the
    // inputs of dispatch 1 must hold dispatch 0's result (middle = 2i).
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let m = capture(
        "scale_twice",
        &[
            "--kernel",
            "scale_values",
            "--capture",
            "all",
            "--dispatch",
            "1",
        ],
        &snap,
    );
    let d = &m["dispatches"][0];
    assert_eq!(d["index"], 1);
    assert_eq!(
        buffer_phases(d),
        vec![
            ("arg0.before".to_string(), "before".to_string()),
            ("arg1.before".to_string(), "before".to_string()),
            ("arg0".to_string(), "after".to_string()),
            ("arg1".to_string(), "after".to_string())
        ]
    );
    let file = d["file"].as_str().unwrap();
    let middle_before = f32_tensor(&snap, file, "arg0.before");
    let output_before = f32_tensor(&snap, file, "arg1.before");
    let output = f32_tensor(&snap, file, "arg1");
    assert_eq!(middle_before.len(), 1024);
    for i in 0..1024 {
        assert_eq!(middle_before[i], 2.0 * i as f32, "middle[{i}] before");
        assert_eq!(output[i], 6.0 * i as f32, "output[{i}] after");
    }
    assert!(
        (1..1024).any(|i| output_before[i] != output[i]),
        "the output was snapshotted before the kernel wrote it"
    );
}

#[test]
fn default_capture_has_only_after_buffers() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let m = capture("reduce_sum_baseline", &["--kernel", "reduce_sum"], &snap);
    assert_eq!(
        buffer_phases(&m["dispatches"][0]),
        vec![("arg1".to_string(), "after".to_string())]
    );
}

#[test]
fn validate_with_inputs_compares_inputs_and_outputs_and_flags_only_the_wrong_output() {
    let reference = app("reduce_sum_baseline");
    let wrong = app("reduce_sum_wrong");
    let out = ditto(&[
        "validate",
        "--json",
        "--hsa-runtime",
        "cpu",
        "--kernel",
        "reduce_sum",
        "--capture",
        "inputs,outputs",
        "--ref",
        reference.to_str().unwrap(),
        "--opt",
        wrong.to_str().unwrap(),
    ]);
    let v = json(&out);
    assert_eq!(out.status.code(), Some(1), "stderr:\n{}", stderr(&out));
    assert_eq!(v["arrays_compared"], 2, "input before and output after");
    let mismatches = v["mismatches"].as_array().unwrap();
    assert_eq!(mismatches.len(), 1, "{v}");
    assert_eq!(
        (
            mismatches[0]["arg"].as_u64(),
            mismatches[0]["phase"].as_str()
        ),
        (Some(1), Some("after"))
    );
}
