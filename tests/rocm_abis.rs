//! The tool on every ROCm ABI the CPU runtime serves (DITTO_HSA_CPU_ABI):
//! ROCm 5.2, 5.5 and 5.6 (the AMD table's two mid-table inserts), 6.4, 7.2
//! and ROCm 10's preview, where the application creates its queue through
//! `hsa_amd_queue_create` as HIP there does. Under each, `ditto run` loads
//! the tool, wraps queue creation (the entry the application used),
//! captures the dispatch with the right values, and leaves the
//! application's output as it is without the tool. On tables of a major
//! version no ROCm release has, the tool refuses with one warning naming
//! the versions it saw and knows, and the application runs on unchanged.

use crate::common::*;
use std::process::Command;

/// scale_values<float> over 256 values, plain on the runtime serving `abi`.
fn plain_output(abi: &str) -> String {
    let out = Command::new(app("scale_values"))
        .args(["float", "256"])
        .env("LD_LIBRARY_PATH", cpu_runtime_dir())
        .env("DITTO_HSA_CPU_ABI", abi)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{abi}: {}", stderr(&out));
    stdout(&out)
}

#[test]
fn the_tool_captures_under_every_rocm_abi_the_cpu_runtime_serves() {
    for (abi, queue_entry) in [
        ("5.2", "hsa_queue_create"),
        ("5.5", "hsa_queue_create"),
        ("5.6", "hsa_queue_create"),
        ("6.4", "hsa_queue_create"),
        ("7.2", "hsa_queue_create"),
        ("10", "hsa_amd_queue_create"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let snap = dir.path().join("snap");
        let out = Command::new(ditto_bin())
            .args([
                "run",
                "--hsa-runtime",
                "cpu",
                "--kernel",
                "scale_values",
                "--out",
            ])
            .arg(&snap)
            .arg("--")
            .arg(app("scale_values"))
            .args(["float", "256"])
            .env("DITTO_HSA_CPU_ABI", abi)
            .env("DITTO_LOG", "debug")
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{abi}: {err}");
        assert_eq!(stdout(&out), plain_output(abi), "{abi}: output changed");
        assert!(
            err.contains(&format!("intercepted (created through {queue_entry})")),
            "{abi}: the queue was not made through {queue_entry}:\n{err}"
        );
        let m = snapshot_manifest(&snap);
        let dispatches = m["dispatches"].as_array().unwrap();
        assert_eq!(dispatches.len(), 1, "{abi}: {m}");
        let output = f32_tensor(&snap, dispatches[0]["file"].as_str().unwrap(), "arg1");
        assert_eq!(output.len(), 256, "{abi}");
        for (i, v) in output.iter().enumerate() {
            assert_eq!(*v, 2.0 * i as f32, "{abi}: output[{i}]");
        }
    }
}

#[test]
fn tables_of_an_unknown_major_are_refused_and_the_application_runs_on_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("socket");
    let snaps = dir.path().join("snaps");
    let collector = Collector::start(&socket, &snaps);
    let out = Command::new(app("scale_values"))
        .args(["float", "256"])
        .env("LD_LIBRARY_PATH", cpu_runtime_dir())
        .env("DITTO_HSA_CPU_ABI", "next-major")
        .env("HSA_TOOLS_LIB", tool_lib())
        .env("LD_PRELOAD", tool_lib())
        .env("DITTO_KERNEL", "scale_values")
        .env("DITTO_SOCKET", &socket)
        .env("DITTO_RUN_NAME", "run")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    drop(collector);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(stdout(&out), plain_output("next-major"));
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("ROCm release")).collect();
    assert_eq!(warnings.len(), 1, "one warning:\n{err}");
    let w = warnings[0];
    for part in [
        "version 3/1016",
        "known: 1/1016 (5.2.3",
        "2/1016 or more (6.0.0",
        "nothing will be captured and the application runs on unchanged",
    ] {
        assert!(w.contains(part), "{part:?} missing from: {w}");
    }
    assert!(
        !snaps.join("run").join("manifest.json").exists()
            || snapshot_manifest(&snaps.join("run"))["dispatches"]
                .as_array()
                .unwrap()
                .is_empty(),
        "nothing captured"
    );
}
