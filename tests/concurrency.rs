//! Many application threads dispatching the target at once on shared
//! queues (tests/apps/many_queues.cpp), captured end to end on the CPU
//! runtime: every dispatch captured exactly once with its own values, the
//! application unchanged. And target dispatches that overflow tiny queues,
//! so that the runtime calls ditto's packet callback later, on its async
//! thread (as ROCr does), all captured without a hang.

mod common;
use common::*;
use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

const KERNEL: &str = "fill_tag";
/// Words per output buffer (many_queues' kElements).
const ELEMENTS: usize = 64;
/// Far beyond what a run needs; reaching it means a hang, not slowness.
const LIMIT: Duration = Duration::from_secs(600);

/// The application's run: what it printed and its manifest.
struct Captured {
    manifest: serde_json::Value,
    snapshot: std::path::PathBuf,
}

/// Runs many_queues `args` under the tool with a collector (with `env` for
/// the application only) and checks it behaves as a plain run: exit 0, the
/// same standard output.
fn capture(dir: &Path, args: &[&str], env: &[(&str, &Path)]) -> Captured {
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

fn u32_tensor(dir: &Path, file: &str, name: &str) -> Vec<u32> {
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
fn assert_every_dispatch_captured_once(c: &Captured, threads: u32, queues: u32, per_queue: u32) {
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

#[test]
fn eight_threads_on_four_queues_get_all_1600_dispatches_captured_each_with_its_own_values() {
    let dir = tempfile::tempdir().unwrap();
    let c = capture(dir.path(), &[], &[]);
    assert_every_dispatch_captured_once(&c, 8, 4, 50);
    let kernels = c.manifest["dispatched_kernels"].as_array().unwrap();
    assert_eq!(kernels.len(), 1, "{kernels:?}");
    assert_eq!(kernels[0]["count"], 1600);
}

#[test]
fn target_dispatches_overflowing_tiny_queues_are_intercepted_on_the_async_thread_and_all_captured()
{
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("hsa-cpu.trace");
    // Queues of 4 slots (the runtime's minimum), one kept free: a held
    // dispatch and its barrier fill a queue, so every next one overflows.
    let args = [
        "--queue-size",
        "4",
        "--threads",
        "4",
        "--queues",
        "2",
        "--per-queue",
        "10",
    ];
    let c = capture(dir.path(), &args, &[("DITTO_HSA_CPU_TRACE", &trace)]);
    assert_every_dispatch_captured_once(&c, 4, 2, 10);
    let trace = std::fs::read_to_string(&trace).expect("the CPU runtime's trace");
    let count = |event: &str| trace.lines().filter(|l| *l == event).count();
    assert!(
        count("overflow") > 0,
        "the rewritten packets overflowed the ring"
    );
    assert!(
        count("intercept-async") > 0,
        "ditto's callback ran on the runtime's async thread (not an application thread)"
    );
}
