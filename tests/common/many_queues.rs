//! Running tests/apps/many_queues.cpp (threads dispatching fill_tag on
//! shared queues) under the tool with a collector, and checking that every
//! dispatch was captured exactly once with its own values. Used by
//! tests/concurrency.rs and tests/reliability.rs.

use super::*;
use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

pub const KERNEL: &str = "fill_tag";
/// Words per output buffer (many_queues' kElements).
pub const ELEMENTS: usize = 64;
/// Far beyond what a run needs; reaching it means a hang, not slowness.
pub const LIMIT: Duration = Duration::from_secs(600);

/// The application's run: what it printed and its manifest.
pub struct Captured {
    pub manifest: serde_json::Value,
    pub snapshot: std::path::PathBuf,
}

/// Runs many_queues `args` under the tool with a collector (with `env` for
/// the application only) and checks it behaves as a plain run: exit 0, the
/// same standard output.
pub fn capture(dir: &Path, args: &[&str], env: &[(&str, &Path)]) -> Captured {
    let socket = dir.join("collector.sock");
    let out = dir.join("snapshots");
    let collector = Collector::start(&socket, &out);
    let mut cmd = ditto_run(&socket, KERNEL, "many", &app("many_queues"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let traced = output_within(&mut cmd, LIMIT, "many_queues under ditto");
    drop(collector);
    let plain = run_plain(&app("many_queues"), args);
    assert_eq!(
        plain.status.code(),
        Some(0),
        "plain run: {}",
        stderr(&plain)
    );
    assert_eq!(
        traced.status.code(),
        Some(0),
        "under ditto: {}",
        stderr(&traced)
    );
    assert_eq!(
        stdout(&traced),
        stdout(&plain),
        "the output under ditto is the plain run's"
    );
    assert!(stdout(&traced).contains("wrong = 0"), "{}", stdout(&traced));
    let snapshot = out.join("many");
    let manifest = serde_json::from_slice(
        &std::fs::read(snapshot.join("manifest.json")).expect("the run's manifest.json"),
    )
    .expect("manifest.json is JSON");
    Captured { manifest, snapshot }
}

pub fn u32_tensor(dir: &Path, file: &str, name: &str) -> Vec<u32> {
    let bytes = std::fs::read(dir.join(file)).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    tensors
        .tensor(name)
        .unwrap_or_else(|e| panic!("{file}: no tensor {name}: {e:?}"))
        .data()
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Checks the manifest holds exactly dispatches 0..threads*queues*per_queue,
/// each once, each snapshot being the output of one distinct (thread,
/// queue, iteration) in its own allocation; every combination appears.
pub fn assert_every_dispatch_captured_once(
    c: &Captured,
    threads: u32,
    queues: u32,
    per_queue: u32,
) {
    let total = (threads * queues * per_queue) as usize;
    let dispatches = c.manifest["dispatches"].as_array().expect("dispatches");
    assert_eq!(dispatches.len(), total, "every dispatch captured");
    let mut indices: Vec<u64> = dispatches
        .iter()
        .map(|d| d["index"].as_u64().unwrap())
        .collect();
    indices.sort_unstable();
    assert_eq!(
        indices,
        (0..total as u64).collect::<Vec<_>>(),
        "each index once"
    );
    let mut writers = HashSet::new();
    let mut bases = HashSet::new();
    for d in dispatches {
        assert_eq!(d["kernel"]["mangled"], "_Z8fill_tagPjji", "{d}");
        let buffers = d["buffers"].as_array().unwrap();
        assert_eq!(buffers.len(), 1, "the output only: {d}");
        let b = &buffers[0];
        assert_eq!(
            (b["arg"].as_u64(), b["dtype"].as_str()),
            (Some(0), Some("uint32"))
        );
        assert_eq!(b["elements"].as_u64(), Some(ELEMENTS as u64), "{b}");
        assert!(
            bases.insert(b["alloc_base"].as_u64().unwrap()),
            "each dispatch has its own allocation: {b}"
        );
        let values = u32_tensor(&c.snapshot, d["file"].as_str().unwrap(), "arg0");
        assert_eq!(values.len(), ELEMENTS);
        let tag = values[0] & !0xff;
        let (t, q, it) = (tag >> 24, (tag >> 16) & 0xff, (tag >> 8) & 0xff);
        assert!(
            t < threads && q < queues && it < per_queue,
            "dispatch {}: {:#x} is no dispatch's tag",
            d["index"],
            values[0]
        );
        for (i, &v) in values.iter().enumerate() {
            assert_eq!(
                v,
                tag | i as u32,
                "dispatch {} ({t}, {q}, {it}), word {i}",
                d["index"]
            );
        }
        assert!(
            writers.insert((t, q, it)),
            "({t}, {q}, {it}) captured twice (dispatch {})",
            d["index"]
        );
    }
    assert_eq!(writers.len(), total, "every (thread, queue, iteration)");
}
