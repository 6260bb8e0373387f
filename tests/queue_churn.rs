//! Queues created and destroyed under the tool, as HIP and PyTorch create
//! and destroy their streams' queues: tests/apps/queue_churn.cpp runs 2,000
//! cycles of create, one target dispatch, wait, destroy. Every dispatch is
//! captured with its own values, and the bytes malloc holds in the process
//! (the application's, the runtime's and the tool's) grow no more from the
//! 200th cycle to the last under the tool than without it: the tool frees
//! each destroyed queue's context and recycles its held-barrier signals.

mod common;
use common::*;

const CYCLES: &str = "2000";
const WARMUP: &str = "200";
/// Far less than what one queue's context and signals per cycle would add
/// over 1,800 cycles (at least 32 bytes each: 57 KiB); more than the
/// run-to-run scatter of the tool's own buffers (about 10 KiB seen).
const GROWTH_LIMIT: i64 = 32 << 10;

/// "warm N" and "end N" of queue_churn's output: bytes in use after the
/// warm-up and at the end.
fn heap_growth(out: &std::process::Output) -> i64 {
    let text = stdout(out);
    let value = |key: &str| -> i64 {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no `{key}` line in queue_churn's output:\n{text}"))
    };
    assert!(text.contains("wrong 0"), "{text}");
    value("end ") - value("warm ")
}

#[test]
fn a_thousand_queues_created_and_destroyed_leave_the_tool_no_bigger() {
    let plain = run_plain(&app("queue_churn"), &[CYCLES, WARMUP]);
    assert_eq!(plain.status.code(), Some(0), "{}", stderr(&plain));
    let plain_growth = heap_growth(&plain);

    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("socket");
    let snaps = dir.path().join("snaps");
    let collector = Collector::start(&socket, &snaps);
    let out = ditto_run(&socket, "fill_tag", "churn", &app("queue_churn"))
        .args([CYCLES, WARMUP])
        .output()
        .unwrap();
    drop(collector);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let tool_growth = heap_growth(&out);
    assert!(
        tool_growth - plain_growth <= GROWTH_LIMIT,
        "the heap grew by {tool_growth} bytes under the tool and {plain_growth} without it \
         over the last 1,800 cycles"
    );

    let m = snapshot_manifest(&snaps.join("churn"));
    let dispatches = m["dispatches"].as_array().unwrap();
    assert_eq!(dispatches.len(), 2000, "every dispatch captured");
    assert_eq!(m["missing"].as_array().unwrap().len(), 0);
    // Cycle c wrote (c << 8) | i: each snapshot holds its own cycle's words.
    for d in dispatches.iter().step_by(250) {
        let index = d["index"].as_u64().unwrap() as u32;
        let file = d["file"].as_str().unwrap();
        let words: Vec<u32> = f32_tensor(&snaps.join("churn"), file, "arg0")
            .into_iter()
            .map(f32::to_bits)
            .collect();
        let expected: Vec<u32> = (0..64).map(|i| (index << 8) | i).collect();
        assert_eq!(words, expected, "dispatch {index}");
    }
}
