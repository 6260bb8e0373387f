//! The seeds' failure, injected: the CPU runtime's fault switch
//! (DITTO_HSA_CPU_FAULT=stale-ipc-attach, in the collector's process) makes
//! IPC attach serve a stale mapping of an earlier export instead of the
//! buffer asked for — what Accordo's never-closed handles did. Every stale
//! mapping must be caught by the fingerprint check and reported for its
//! dispatch and argument, and no stale byte may reach a snapshot.

use crate::common::*;
use std::process::{Command, Stdio};

#[test]
fn every_stale_mapping_is_detected_and_none_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("collector.sock");
    let out = dir.path().join("snapshots");
    let collector_log = dir.path().join("collector.log");
    let mut collector = Command::new(ditto_bin())
        .args(["collect", "--hsa-runtime", "cpu", "--socket"])
        .arg(&socket)
        .arg("--out")
        .arg(&out)
        .env("DITTO_CPU_RUNTIME_DIR", cpu_runtime_dir())
        .env("DITTO_HSA_CPU_FAULT", "stale-ipc-attach")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&collector_log).unwrap())
        .spawn()
        .unwrap();
    wait_for(&socket, "ditto collect's socket");

    // Consecutive attaches of one length always hold different bytes here,
    // so a stale mapping can never pass for the right one by coincidence.
    let runs: [(&str, &[&str]); 4] = [
        ("scale_twice", &[]),
        ("scale_values", &["float"]),
        ("scale_values", &["double"]),
        ("scale_twice", &[]),
    ];
    let mut reported = 0;
    for (i, (name, args)) in runs.iter().enumerate() {
        // Stale mappings are an IPC matter: no staging.
        let o = ditto_run(&socket, "scale_values", &format!("run-{i}"), &app(name))
            .env("DITTO_STAGING_MIB", "0")
            .args(*args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{name} must run on unchanged: {}",
            stderr(&o)
        );
        reported += stderr(&o).matches("fingerprint mismatch").count();
    }
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(collector.id() as i32, libc::SIGTERM) };
    collector.wait().unwrap();

    let log = std::fs::read_to_string(&collector_log).unwrap();
    let injected = log.matches("served a stale mapping").count();
    assert!(
        injected >= 4,
        "the fault switch must have fired; collector log:\n{log}"
    );
    assert_eq!(
        reported, injected,
        "every stale mapping is reported; collector log:\n{log}"
    );

    // Whatever was stored is right: scale_values' output is twice its input.
    for i in 0..runs.len() {
        let manifest = out.join(format!("run-{i}/manifest.json"));
        let Ok(bytes) = std::fs::read(&manifest) else {
            continue;
        };
        let m: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        for d in m["dispatches"].as_array().unwrap() {
            let file = out
                .join(format!("run-{i}"))
                .join(d["file"].as_str().unwrap());
            let data = std::fs::read(file).unwrap();
            let t = safetensors::SafeTensors::deserialize(&data).unwrap();
            let values = |n: &str| -> Vec<f64> {
                let v = t.tensor(n).unwrap();
                match v.dtype() {
                    safetensors::Dtype::F32 => v
                        .data()
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
                        .collect(),
                    _ => v
                        .data()
                        .chunks_exact(8)
                        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                        .collect(),
                }
            };
            let (input, output) = (values("arg0"), values("arg1"));
            let factor = output[1] / input[1];
            assert!(
                factor == 2.0 || factor == 3.0,
                "run {i}: stored data is not a scaling"
            );
            for (x, y) in input.iter().zip(&output) {
                assert_eq!(
                    *y,
                    x * factor,
                    "run {i}: a stored buffer holds foreign bytes"
                );
            }
        }
    }
}
