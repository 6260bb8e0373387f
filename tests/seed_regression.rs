//! The seed as a regression (issue 6, item 1): Accordo's first snapshot
//! sometimes held garbage because state (an IPC mapping) outlived a
//! snapshot. Here one collector process serves 200 cycles of a
//! scale_values<float> self-compare then a scale_values<double> one (800
//! captures, 400 comparisons; the element size changes at every capture, so
//! a mapping or buffer kept from the previous one would be caught); every
//! one must be valid, and the collector must hold no mapping of application
//! memory after each cycle. 33 s in a debug build on a 2-CPU machine.

use crate::common::*;
use std::path::Path;

/// Runs scale_values under the tool through scripts/ditto-run.
fn capture(socket: &Path, run: &str, dtype: &str) {
    // The seed's hazard is the IPC path (attach, copy, detach): no staging.
    let out = ditto_run(socket, "scale_values", run, &app("scale_values"))
        .env("DITTO_STAGING_MIB", "0")
        .arg(dtype)
        .output()
        .expect("run scripts/ditto-run");
    assert!(
        out.status.success(),
        "{run}: scale_values {dtype} failed: {:?}\n{}",
        out.status,
        stderr(&out)
    );
}

/// Cycles of (float, double) self-compares.
const CYCLES: usize = 200;

#[test]
fn two_hundred_cycles_of_float_then_double_self_compares_through_one_collector_are_all_valid() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("collector.sock");
    let out = dir.path().join("snapshots");
    let collector = Collector::start(&socket, &out);

    for i in 0..CYCLES {
        for dtype in ["float", "double"] {
            let (r, o) = (format!("{dtype}-ref-{i}"), format!("{dtype}-opt-{i}"));
            capture(&socket, &r, dtype);
            capture(&socket, &o, dtype);
            let (v, cmp) = compare_json(&out.join(&r), &out.join(&o));
            assert_eq!(
                v["valid"],
                true,
                "{dtype} self-compare {i}: {}",
                stdout(&cmp)
            );
            assert_eq!(
                v["arrays_compared"], 2,
                "input and output are both non-const pointers"
            );
            assert_eq!(cmp.status.code(), Some(0));
        }
        assert_eq!(
            pool_mappings(collector.pid()),
            0,
            "cycle {i}: the collector still maps application memory"
        );
    }

    // The snapshots hold the right values, not merely equal ones.
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("double-ref-0/manifest.json")).unwrap())
            .unwrap();
    let buffers = manifest["dispatches"][0]["buffers"].as_array().unwrap();
    assert_eq!(buffers.len(), 2);
    assert!(buffers.iter().all(|b| b["dtype"] == "float64"));
    let file = manifest["dispatches"][0]["file"].as_str().unwrap();
    let bytes = std::fs::read(out.join("double-ref-0").join(file)).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let values = |name: &str| -> Vec<f64> {
        tensors
            .tensor(name)
            .unwrap()
            .data()
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let (input, output) = (values("arg0"), values("arg1"));
    assert_eq!(input.len(), 1024);
    for i in 0..1024 {
        assert_eq!(input[i], i as f64, "input[{i}]");
        assert_eq!(output[i], 2.0 * i as f64, "output[{i}]");
    }
}
