//! `ditto replay` of a snapshot whose manifest was changed after ditto
//! wrote it: numbers no capture can hold (an output's extent or offset
//! past its allocation, a kernel-argument segment shorter than the
//! kernel's arguments, a grid of 0) are a "corrupt snapshot" error that
//! names the manifest and the field, exit 2, before anything runs: never
//! a panic, a fault blamed on the kernel, or a verdict.

use crate::common::*;
use crate::replay::{capture, replay};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// reduce_sum captured for replay once (`in`, `out`, `n`: the output is
/// one float), copied into `dir` for each test to change.
fn captured_copy(dir: &Path) -> PathBuf {
    static CAPTURED: OnceLock<tempfile::TempDir> = OnceLock::new();
    let original = CAPTURED.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        capture(
            "reduce_sum_baseline",
            "reduce_sum",
            "replay",
            &dir.path().join("snap"),
        );
        dir
    });
    let snap = dir.join("snap");
    std::fs::create_dir(&snap).unwrap();
    for entry in std::fs::read_dir(original.path().join("snap")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), snap.join(entry.file_name())).unwrap();
    }
    snap
}

/// The snapshot's manifest changed by `edit` (of its first dispatch).
fn edit_dispatch(snap: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = snap.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut m["dispatches"][0]);
    std::fs::write(&path, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
}

/// The first dispatch's output (its `after` buffer).
fn output(d: &mut serde_json::Value) -> &mut serde_json::Value {
    d["buffers"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|b| b["phase"] == "after")
        .expect("an output")
}

/// Replays the snapshot changed by `edit`: its error, checked to be a
/// corrupt snapshot's (exit 2, no panic), naming the manifest and `field`.
fn corrupt_snapshot_error(edit: impl FnOnce(&mut serde_json::Value), field: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let snap = captured_copy(dir.path());
    edit_dispatch(&snap, edit);
    let out = replay(&snap, &[]);
    let err = stderr(&out);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(
        out.status.code(),
        Some(2),
        "stdout:\n{}\nstderr:\n{err}",
        stdout(&out)
    );
    let e = json(&out)["error"].as_str().unwrap().to_string();
    assert!(
        e.contains("corrupt snapshot")
            && e.contains(&snap.join("manifest.json").display().to_string())
            && e.contains(field),
        "{e}"
    );
    e
}

#[test]
fn an_output_extent_of_2_64_minus_1_is_a_corrupt_snapshot_not_a_panic() {
    let e = corrupt_snapshot_error(|d| output(d)["extent"] = u64::MAX.into(), "extent");
    assert!(e.contains("18446744073709551615"), "{e}");
}

#[test]
fn an_output_extent_of_2_46_is_a_corrupt_snapshot_not_a_fault_of_the_kernel() {
    let e = corrupt_snapshot_error(|d| output(d)["extent"] = (1u64 << 46).into(), "extent");
    assert!(!e.contains("replay-all") && !e.contains("fault"), "{e}");
}

#[test]
fn an_output_offset_of_2_64_minus_1_is_a_corrupt_snapshot_not_a_verdict() {
    corrupt_snapshot_error(|d| output(d)["offset"] = u64::MAX.into(), "offset");
}

#[test]
fn an_empty_kernel_argument_segment_is_a_corrupt_snapshot_not_a_verdict() {
    let e = corrupt_snapshot_error(|d| d["launch"]["kernarg"] = "".into(), "kernarg");
    // reduce_sum(const float*, float*, int) takes 20 bytes of arguments.
    assert!(e.contains("0 bytes") && e.contains("20"), "{e}");
}

#[test]
fn a_truncated_kernel_argument_segment_is_a_corrupt_snapshot_not_a_verdict() {
    let e = corrupt_snapshot_error(
        |d| {
            let hex = d["launch"]["kernarg"].as_str().unwrap()[..32].to_string();
            d["launch"]["kernarg"] = hex.into();
        },
        "kernarg",
    );
    assert!(e.contains("16 bytes") && e.contains("20"), "{e}");
}

#[test]
fn a_grid_of_0_is_a_corrupt_snapshot_not_a_verdict() {
    corrupt_snapshot_error(|d| d["grid"][0] = 0.into(), "grid");
}

#[test]
fn the_unchanged_capture_replays_and_passes() {
    let dir = tempfile::tempdir().unwrap();
    let snap = captured_copy(dir.path());
    let out = replay(&snap, &["--atol", "0", "--rtol", "0"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json(&out)["valid"], true);
}
