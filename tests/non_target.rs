//! A non-target dispatch reaches the hardware queue exactly as the
//! application wrote it: no signal swapped, no barrier added, no signal
//! created and no wait made by the tool. The CPU runtime's trace
//! (DITTO_HSA_CPU_TRACE) records every packet the application wrote into an
//! intercept queue (`app`) and every packet passed on to the hardware ring
//! (`ring`), and every signal creation and wait made through the API.

use crate::common::*;
use std::path::Path;

struct Trace {
    app: Vec<String>,
    ring: Vec<String>,
    signal_creates: usize,
    signal_waits: usize,
}

fn read_trace(path: &Path) -> Trace {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let packets = |stage: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix(stage).map(|p| p.trim().to_string()))
            .collect()
    };
    Trace {
        app: packets("app "),
        ring: packets("ring "),
        signal_creates: text.lines().filter(|l| *l == "signal-create").count(),
        signal_waits: text.lines().filter(|l| *l == "signal-wait").count(),
    }
}

/// AQL packet type: the low byte of the little-endian header.
fn packet_type(hex: &str) -> u8 {
    u8::from_str_radix(&hex[0..2], 16).unwrap()
}

#[test]
fn non_target_dispatch_reaches_the_queue_unchanged_with_no_signal_and_no_wait() {
    let dir = tempfile::tempdir().unwrap();

    // The application alone: its own signal creations and waits.
    let plain_trace = dir.path().join("plain.trace");
    let plain = std::process::Command::new(app("no_dispatch"))
        .env("LD_LIBRARY_PATH", cpu_runtime_dir())
        .env("DITTO_HSA_CPU_TRACE", &plain_trace)
        .output()
        .unwrap();
    assert!(plain.status.success(), "{}", stderr(&plain));
    let plain = read_trace(&plain_trace);

    // Under the tool, capturing reduce_sum, which no_dispatch loads but never
    // launches: its one dispatch (vector_add) is not a target.
    let socket = dir.path().join("collector.sock");
    let _collector = Collector::start(&socket, &dir.path().join("snapshots"));
    let tool_trace = dir.path().join("tool.trace");
    let out = ditto_run(&socket, "reduce_sum", "non-target", &app("no_dispatch"))
        .env("DITTO_HSA_CPU_TRACE", &tool_trace)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let traced = read_trace(&tool_trace);

    let dispatches = traced.app.iter().filter(|p| packet_type(p) == 2).count();
    assert_eq!(dispatches, 1, "no_dispatch launches vector_add once");
    assert!(!traced.app.is_empty());
    assert_eq!(
        traced.ring, traced.app,
        "every packet reaches the ring byte for byte, in order, nothing added"
    );
    assert_eq!(
        traced.signal_creates, plain.signal_creates,
        "the tool created signals"
    );
    assert_eq!(
        traced.signal_waits, plain.signal_waits,
        "the tool waited on a signal"
    );
}

#[test]
fn target_dispatch_is_rewritten_into_dispatch_and_held_barrier() {
    // The contrast that shows the trace can see a rewrite: a target
    // dispatch reaches the ring as the dispatch with a swapped completion
    // signal followed by a barrier-AND; being the kernel's first, whose
    // outputs the tool has not seen yet (interior pointers of a larger
    // allocation get their before-image), two barriers go in front of it.
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("collector.sock");
    let _collector = Collector::start(&socket, &dir.path().join("snapshots"));
    let trace_path = dir.path().join("tool.trace");
    let out = ditto_run(&socket, "vector_add", "target", &app("no_dispatch"))
        .env("DITTO_HSA_CPU_TRACE", &trace_path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let t = read_trace(&trace_path);
    assert_eq!(
        t.ring.len(),
        t.app.len() + 3,
        "drain and gate barriers before the kernel's first dispatch, the hold after it"
    );
    let at = t.ring.iter().position(|p| packet_type(p) == 2).unwrap();
    assert_eq!(
        (packet_type(&t.ring[at - 2]), packet_type(&t.ring[at - 1])),
        (3, 3),
        "two barrier-ANDs in front of the first target dispatch"
    );
    assert_eq!(
        packet_type(&t.ring[at + 1]),
        3,
        "a barrier-AND follows the target dispatch"
    );
    let app_dispatch = t.app.iter().find(|p| packet_type(p) == 2).unwrap();
    // Completion signal: bytes 56..64 (hex 112..128).
    assert_ne!(
        t.ring[at][112..128],
        app_dispatch[112..128],
        "completion signal swapped"
    );
    assert_eq!(
        t.ring[at][..112],
        app_dispatch[..112],
        "the rest of the dispatch is unchanged"
    );
}
