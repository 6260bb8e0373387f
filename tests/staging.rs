//! The staging file end to end (small buffers copied by the tool into its
//! connection's staging file, their dispatch released before the collector
//! has read them): a storm of such dispatches is stored whole, each with its
//! own values, although the application exits long before the collector has
//! finished and the collector is stopped right after; and a staged capture
//! stores exactly the bytes an IPC capture of the same program stores.

use crate::common::*;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(600);

fn buffer_field<'a>(d: &'a serde_json::Value, field: &str) -> &'a serde_json::Value {
    &d["buffers"][0][field]
}

#[test]
fn a_storm_released_through_the_staging_file_is_stored_whole_with_each_dispatchs_own_values() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("collector.sock");
    let out = dir.path().join("snapshots");
    let collector = Collector::start(&socket, &out);
    let storm = 1500u64;
    let o = output_within(
        ditto_run(&socket, "storm_fill", "storm", &app("dispatch_storm"))
            .arg(storm.to_string())
            .args(["--sync-every", "500"]),
        LIMIT,
        "dispatch_storm under ditto",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Stopped as soon as the application is gone: the frames it sent are
    // still read to the end.
    drop(collector);
    let snap = out.join("storm");
    let m = snapshot_manifest(&snap);
    let dispatches = m["dispatches"].as_array().expect("dispatches");
    assert_eq!(
        dispatches.len() as u64,
        storm + 1,
        "the warm-up and every dispatch of the loop"
    );
    assert_eq!(
        missing_count(&m, "error") + missing_count(&m, "timeout"),
        0,
        "{m}"
    );
    for d in dispatches {
        let index = d["index"].as_u64().unwrap();
        assert_eq!(buffer_field(d, "transport"), "staged", "dispatch {index}");
        assert!(buffer_field(d, "handle").is_null(), "dispatch {index}");
        let values = f32_tensor(&snap, d["file"].as_str().unwrap(), "arg0");
        // Dispatch i of the loop (index i + 1; the warm-up writes with -1)
        // wrote out[j] = i + j.
        let i = index as f32 - 1.0;
        assert_eq!(values.len(), 1024);
        for j in [0usize, 1, 511, 1023] {
            assert_eq!(values[j], i + j as f32, "dispatch {index}, element {j}");
        }
    }
}

#[test]
fn staged_and_ipc_captures_of_one_program_store_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("collector.sock");
    let out = dir.path().join("snapshots");
    let collector = Collector::start(&socket, &out);
    for (run, staging) in [("staged", "64"), ("ipc", "0")] {
        let o = output_within(
            ditto_run(&socket, "scale_values", run, &app("scale_values"))
                .arg("float")
                .env("DITTO_STAGING_MIB", staging),
            LIMIT,
            "scale_values under ditto",
        );
        assert_eq!(o.status.code(), Some(0), "{run}: {}", stderr(&o));
    }
    drop(collector);
    let staged = snapshot_manifest(&out.join("staged"));
    let ipc = snapshot_manifest(&out.join("ipc"));
    let pairs: Vec<_> = staged["dispatches"]
        .as_array()
        .unwrap()
        .iter()
        .zip(ipc["dispatches"].as_array().unwrap())
        .collect();
    assert!(!pairs.is_empty());
    assert_eq!(
        staged["dispatches"].as_array().unwrap().len(),
        ipc["dispatches"].as_array().unwrap().len()
    );
    for (s, i) in pairs {
        assert_eq!(buffer_field(s, "transport"), "staged");
        assert_eq!(buffer_field(i, "transport"), "ipc");
        assert_eq!(
            buffer_field(s, "fingerprint"),
            buffer_field(i, "fingerprint")
        );
        let bytes = |snap: &str, d: &serde_json::Value| {
            std::fs::read(out.join(snap).join(d["file"].as_str().unwrap())).unwrap()
        };
        assert_eq!(
            bytes("staged", s),
            bytes("ipc", i),
            "dispatch {}",
            s["index"]
        );
    }
    let compared = ditto(&[
        "compare",
        out.join("staged").to_str().unwrap(),
        out.join("ipc").to_str().unwrap(),
    ]);
    assert_eq!(compared.status.code(), Some(0), "{}", stdout(&compared));
}
