//! One IPC export per allocation, end to end on the CPU runtime
//! (tests/apps/address_reuse.cpp): two dispatches on one allocation share
//! one export; after the allocation is freed and its address handed out
//! again, the new allocation gets a new export, never the old handle.

use crate::common::*;
use std::time::Duration;

/// The buffer's IPC handle (hex): `"handle"` next to `"transport": "ipc"`,
/// or inside a `"transport"` object.
fn ipc_handle(buffer: &serde_json::Value) -> String {
    let transport = &buffer["transport"];
    if let Some(kind) = transport.as_str() {
        assert_eq!(kind, "ipc", "{buffer}");
    }
    if let Some(kind) = transport.get("kind").and_then(|k| k.as_str()) {
        assert_eq!(kind, "ipc", "{buffer}");
    }
    buffer["handle"]
        .as_str()
        .or_else(|| transport["handle"].as_str())
        .unwrap_or_else(|| panic!("no IPC handle in {buffer}"))
        .to_string()
}

#[test]
fn an_address_reused_by_a_new_allocation_gets_a_new_export_and_each_allocation_one_export() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("collector.sock");
    let out = dir.path().join("snapshots");
    let trace = dir.path().join("hsa-cpu.trace");
    let collector = Collector::start(&socket, &out);
    let mut cmd = ditto_run(&socket, "stamp", "reuse", &app("address_reuse"));
    cmd.env("DITTO_HSA_CPU_TRACE", &trace)
        // Exports are what this counts: every buffer through IPC.
        .env("DITTO_STAGING_MIB", "0");
    let traced = output_within(
        &mut cmd,
        Duration::from_secs(120),
        "address_reuse under ditto",
    );
    drop(collector);
    let plain = run_plain(&app("address_reuse"), &[]);
    assert_eq!(traced.status.code(), Some(0), "{}", stderr(&traced));
    assert_eq!(
        stdout(&traced),
        stdout(&plain),
        "the app's output is unchanged"
    );
    assert!(
        stdout(&traced).contains("same address = yes"),
        "the runtime handed the freed address out again: {}",
        stdout(&traced)
    );

    let snapshot = out.join("reuse");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(snapshot.join("manifest.json")).unwrap()).unwrap();
    let mut dispatches = manifest["dispatches"].as_array().unwrap().clone();
    dispatches.sort_by_key(|d| d["index"].as_u64().unwrap());
    assert_eq!(dispatches.len(), 3, "{manifest}");
    let buffers: Vec<&serde_json::Value> = dispatches
        .iter()
        .map(|d| {
            let b = d["buffers"].as_array().unwrap();
            assert_eq!(b.len(), 1, "{d}");
            &b[0]
        })
        .collect();
    let base = buffers[0]["alloc_base"].as_u64().unwrap();
    for b in &buffers {
        assert_eq!(b["alloc_base"].as_u64(), Some(base), "same address: {b}");
        assert_eq!(b["alloc_size"].as_u64(), Some(256 * 4), "{b}");
    }
    let handles: Vec<String> = buffers.iter().map(|b| ipc_handle(b)).collect();
    assert_eq!(
        handles[0], handles[1],
        "two dispatches on one allocation: one export"
    );
    assert_ne!(
        handles[2], handles[0],
        "the new allocation at the old address never gets the old handle"
    );

    for (d, value) in dispatches.iter().zip([100.0f32, 200.0, 300.0]) {
        let data = f32_tensor(&snapshot, d["file"].as_str().unwrap(), "arg0");
        assert_eq!(data.len(), 256);
        for (i, &v) in data.iter().enumerate() {
            assert_eq!(v, value + i as f32, "dispatch {} word {i}", d["index"]);
        }
    }

    let trace = std::fs::read_to_string(&trace).expect("the CPU runtime's trace");
    let exports = trace.lines().filter(|l| *l == "ipc-create").count();
    assert_eq!(exports, 2, "one hsa_amd_ipc_memory_create per allocation");
}
