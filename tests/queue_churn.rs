//! Queues created and destroyed under the tool, as HIP and PyTorch create
//! and destroy their streams' queues: tests/apps/queue_churn.cpp runs 2,000
//! cycles of create, one target dispatch, wait, destroy. Every dispatch is
//! captured with its own values, and the tool's own record (its debug log)
//! says after every destroy that it watches one queue (the runtime
//! library's own, destroyed last) and none at the end: each destroyed
//! queue's context is freed. (The worker's side, a destroyed queue's held-barrier pair
//! recycled and forgotten, is pinned by the worker's unit tests. The bytes
//! malloc holds are not asserted on: the connection's outbox grows with
//! how far a busy collector lags, by up to hundreds of KiB in a run.)

use crate::common::*;

const CYCLES: &str = "2000";
const WARMUP: &str = "200";

#[test]
fn two_thousand_queues_created_and_destroyed_leave_no_context_behind() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("socket");
    let snaps = dir.path().join("snaps");
    let collector = Collector::start(&socket, &snaps);
    let out = ditto_run(&socket, "fill_tag", "churn", &app("queue_churn"))
        .args([CYCLES, WARMUP])
        .env("DITTO_LOG", "debug")
        .output()
        .unwrap();
    drop(collector);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("wrong 0"), "{}", stdout(&out));

    let log = stderr(&out);
    let watched: Vec<&str> = log
        .lines()
        .filter_map(|l| {
            l.split_once(" destroyed; queues still watched: ")
                .map(|(_, n)| n)
        })
        .collect();
    // 2,000 churned queues, then the runtime library's own at its shut-down.
    assert_eq!(watched.len(), 2001, "one line per destroyed queue:\n{log}");
    assert!(
        watched[..2000].iter().all(|n| *n == "1"),
        "a destroyed queue's context was kept: {:?}",
        watched.iter().find(|n| **n != "1")
    );
    assert_eq!(watched[2000], "0", "nothing is watched at the end");

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
