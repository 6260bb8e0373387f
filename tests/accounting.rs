//! Accounting (issue 6, item 8): every dispatch of the matched kernel ends
//! up in the manifest, captured or listed under "missing" with its reason:
//! `selection` (not chosen by --dispatch), `timeout` (the collector did not
//! acknowledge within DITTO_TIMEOUT_MS and the tool released it), `error`
//! (the tool or the collector could not capture it, with the detail).
//! Nothing is dropped silently: captured + missing == dispatched, and
//! `ditto compare` names a dispatch missing on one side with its reason.

use crate::common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The storm_fill dispatches of `dispatch_storm COUNT` (one warm-up + COUNT).
const STORM: &str = "_Z10storm_fill";

fn ditto_run_out(
    args: &[&str],
    snap: &Path,
    app_args: &[&str],
    app_name: &str,
) -> std::process::Output {
    let mut c = Command::new(ditto_bin());
    c.args(["run", "--hsa-runtime", "cpu"])
        .args(args)
        .arg("--out")
        .arg(snap)
        .arg("--")
        .arg(app(app_name))
        .args(app_args);
    output_within(&mut c, Duration::from_secs(120), "ditto run")
}

/// Captured dispatch indices of rank 0, in order.
fn captured_indices(m: &serde_json::Value) -> Vec<u64> {
    let mut v: Vec<u64> = m["dispatches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["index"].as_u64().unwrap())
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn unselected_dispatches_are_listed_missing_by_selection_with_their_indices() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let out = ditto_run_out(
        &["--kernel", "storm_fill", "--dispatch", "2,5..6"],
        &snap,
        &["9", "--sync-every", "1"],
        "dispatch_storm",
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let m = snapshot_manifest(&snap);
    assert_eq!(dispatched_count(&m, STORM), 10, "warm-up + 9");
    assert_eq!(captured_indices(&m), vec![2, 5, 6]);
    assert_eq!(
        missing_indices(&m, "selection"),
        vec![0, 1, 3, 4, 7, 8, 9],
        "{}",
        m["missing"]
    );
    // Consecutive ones are one record (a run), with the process's pid.
    let records = m["missing"].as_array().unwrap();
    assert_eq!(records.len(), 3, "{}", m["missing"]);
    assert_eq!(
        (records[2]["index"].as_u64(), records[2]["count"].as_u64()),
        (Some(7), Some(3))
    );
    assert_eq!(records[0]["pid"], m["runs"][0]["pid"]);
    // The captured ones hold their own dispatch's values: index k wrote
    // out[j] = (k - 1) + j (index 0 is the warm-up, -1 + j).
    for d in m["dispatches"].as_array().unwrap() {
        let k = d["index"].as_i64().unwrap();
        let values = f32_tensor(&snap, d["file"].as_str().unwrap(), "arg0");
        assert_eq!(values.len(), 1024);
        for (j, v) in values.iter().enumerate() {
            assert_eq!(*v, (k - 1 + j as i64) as f32, "dispatch {k}, element {j}");
        }
    }
    let inspected = ditto(&["inspect", snap.to_str().unwrap()]);
    assert!(
        stdout(&inspected).contains("rank 0 dispatch 7..9: not captured (selection)"),
        "{}",
        stdout(&inspected)
    );
}

#[test]
fn captured_plus_missing_is_every_matched_dispatch_for_each_selection() {
    let dir = tempfile::tempdir().unwrap();
    for (i, selection) in ["all", "0", "3..", "1,4,7..8", "100"].iter().enumerate() {
        let snap = dir.path().join(format!("snap-{i}"));
        let out = ditto_run_out(
            &["--kernel", "storm_fill", "--dispatch", selection],
            &snap,
            &["12", "--sync-every", "5"],
            "dispatch_storm",
        );
        assert!(
            stdout(&out).contains("dispatch_storm: dispatches=12"),
            "{selection}: {}",
            stderr(&out)
        );
        let m = snapshot_manifest(&snap);
        let matched = dispatched_count(&m, STORM);
        let captured = m["dispatches"].as_array().unwrap().len() as u64;
        assert_eq!(matched, 13, "{selection}");
        assert_eq!(
            captured + missing_count(&m, "selection"),
            matched,
            "--dispatch {selection}: {captured} captured + missing {} != {matched}",
            m["missing"]
        );
        assert_eq!(missing_count(&m, "timeout") + missing_count(&m, "error"), 0);
        // Every index exactly once.
        let mut all = captured_indices(&m);
        all.extend(missing_indices(&m, "selection"));
        all.sort_unstable();
        assert_eq!(all, (0..13).collect::<Vec<u64>>(), "--dispatch {selection}");
    }
}

#[test]
fn a_stalled_collector_leaves_timeouts_in_the_manifest_and_the_application_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("collector.sock");
    let out = dir.path().join("snapshots");
    let collector = Collector::start(&socket, &out);
    let journal = out.join("stalled/dispatches.jsonl");
    let mut run = ditto_run(&socket, "storm_fill", "stalled", &app("dispatch_storm"));
    // The timeout is that of an Ack: every buffer through IPC.
    run.args(["3000", "--sync-every", "1"])
        .env("DITTO_TIMEOUT_MS", "300")
        .env("DITTO_STAGING_MIB", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = run.spawn().unwrap();
    // Stop the collector once it has stored a few dispatches, for longer
    // than the tool waits for an Ack, then let it go on.
    stall_after_three_stored(&journal, collector.pid());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("dispatch_storm: dispatches=3000 items=64 sync_every=1 "),
        "the application's own check passed and its output is unchanged: {}",
        stdout(&o)
    );
    assert!(stderr(&o).contains("DITTO_TIMEOUT_MS"), "{}", stderr(&o));
    drop(collector); // SIGTERM: the manifest is written whole.
    let m = snapshot_manifest(&out.join("stalled"));
    let matched = dispatched_count(&m, STORM);
    assert_eq!(matched, 3001);
    let captured = captured_indices(&m);
    let timeouts = missing_indices(&m, "timeout");
    assert!(captured.len() >= 3, "{} captured", captured.len());
    assert_eq!(
        captured.len() as u64 + timeouts.len() as u64,
        matched,
        "every dispatch captured or timed out: {}",
        m["missing"]
    );
    // The first timed-out dispatch has its own record; the rest, released
    // because capture stopped there, say so.
    let records = m["missing"].as_array().unwrap();
    let first = &records[0];
    assert_eq!(first["count"], 1, "{}", m["missing"]);
    assert_eq!(first["index"].as_u64(), timeouts.first().copied());
    assert!(
        first["detail"].as_str().unwrap().contains("within 300 ms"),
        "{first}"
    );
    assert!(
        records[1..].iter().all(|r| r["detail"]
            .as_str()
            .unwrap()
            .contains("capture stopped at dispatch")),
        "{}",
        m["missing"]
    );
    // The timed-out dispatch's late copy (the collector read it after
    // SIGCONT) does not count as captured: the timeout wins.
    assert!(!captured.contains(&first["index"].as_u64().unwrap()));
    // Captured ones are contiguous from 0 and hold their own values.
    assert_eq!(captured, (0..captured.len() as u64).collect::<Vec<_>>());
    let snap = out.join("stalled");
    for d in m["dispatches"].as_array().unwrap() {
        let k = d["index"].as_i64().unwrap();
        let values = f32_tensor(&snap, d["file"].as_str().unwrap(), "arg0");
        assert_eq!(values[5], (k - 1 + 5) as f32, "dispatch {k}");
    }
}

#[test]
fn a_buffer_the_tool_cannot_capture_is_listed_missing_with_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    // Argument 1 is said to cover 1000 times more elements than its
    // allocation holds: the tool cannot take it; argument 0 is captured.
    let out = ditto_run_out(
        &[
            "--kernel",
            "scale_values<float>",
            "--arg-sizes",
            "arg1=arg3*1000",
        ],
        &snap,
        &["float", "256"],
        "scale_values",
    );
    // An argument --arg-sizes names was asked for: left out, the run fails
    // saying so (issue 36, item 6), and the snapshot keeps the rest.
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("1 of them left out; the first: dispatch 0 of rank 0, arg1:"),
        "{}",
        stderr(&out)
    );
    let m = snapshot_manifest(&snap);
    let d = &m["dispatches"][0];
    let tensors: Vec<&str> = d["buffers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["tensor"].as_str().unwrap())
        .collect();
    assert_eq!(tensors, vec!["arg0"]);
    let records = m["missing"].as_array().unwrap();
    assert_eq!(records.len(), 1, "{}", m["missing"]);
    let r = &records[0];
    assert_eq!(
        (&r["index"], &r["arg"], &r["phase"], &r["reason"]),
        (
            &serde_json::json!(0),
            &serde_json::json!(1),
            &serde_json::json!("after"),
            &serde_json::json!("error")
        )
    );
    assert!(
        r["detail"].as_str().unwrap().contains("256000 elements"),
        "{r}"
    );
    // Compared with a run that has argument 1, the error says why.
    let full = dir.path().join("full");
    let o = ditto_run_out(
        &["--kernel", "scale_values<float>"],
        &full,
        &["float", "256"],
        "scale_values",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let c = ditto(&["compare", full.to_str().unwrap(), snap.to_str().unwrap()]);
    assert_eq!(c.status.code(), Some(2), "{}", stdout(&c));
    assert!(
        stderr(&c).contains(
            "dispatch 0 of rank 0, argument 1 (after the kernel) was not captured in the optimized run (error:"
        ),
        "{}",
        stderr(&c)
    );
}

#[test]
fn collector_errors_are_listed_missing_with_the_fingerprint_detail() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("collector.sock");
    let out = dir.path().join("snapshots");
    let mut collector = Command::new(ditto_bin())
        .args(["collect", "--hsa-runtime", "cpu", "--socket"])
        .arg(&socket)
        .arg("--out")
        .arg(&out)
        .env("DITTO_CPU_RUNTIME_DIR", cpu_runtime_dir())
        .env("DITTO_HSA_CPU_FAULT", "stale-ipc-attach")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&socket, "ditto collect's socket");
    for i in 0..3 {
        // Stale mappings are an IPC matter: no staging.
        let o = ditto_run(
            &socket,
            "scale_values",
            &format!("run-{i}"),
            &app("scale_twice"),
        )
        .env("DITTO_STAGING_MIB", "0")
        .output()
        .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(collector.id() as i32, libc::SIGTERM) };
    collector.wait().unwrap();
    let mut errors = 0;
    for i in 0..3 {
        let m = snapshot_manifest(&out.join(format!("run-{i}")));
        let matched = dispatched_count(&m, "_Z12scale_values");
        let captured = m["dispatches"].as_array().unwrap().len() as u64;
        assert_eq!(
            captured + missing_count(&m, "error"),
            matched,
            "run-{i}: {}",
            m["missing"]
        );
        for r in m["missing"].as_array().unwrap() {
            assert_eq!(r["reason"], "error");
            assert!(
                r["detail"]
                    .as_str()
                    .unwrap()
                    .contains("fingerprint mismatch"),
                "{r}"
            );
            errors += 1;
        }
    }
    assert!(errors >= 1, "the fault switch must have fired");
}

#[test]
fn compare_names_a_dispatch_missing_on_one_side_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (all, one, one_again) = (
        dir.path().join("all"),
        dir.path().join("one"),
        dir.path().join("one-again"),
    );
    for (snap, selection) in [(&all, "all"), (&one, "1"), (&one_again, "1")] {
        let o = ditto_run_out(
            &["--kernel", "scale_values", "--dispatch", selection],
            snap,
            &[],
            "scale_twice",
        );
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    let c = ditto(&["compare", all.to_str().unwrap(), one.to_str().unwrap()]);
    assert_eq!(c.status.code(), Some(2), "{}", stdout(&c));
    assert!(
        stderr(&c).contains(
            "dispatch 0 of rank 0 was captured in one run but not in the optimized run \
             (selection: not chosen by --dispatch (DITTO_DISPATCH))"
        ),
        "{}",
        stderr(&c)
    );
    // The same selection on both sides: the selected dispatch is compared.
    let same = ditto(&[
        "compare",
        one.to_str().unwrap(),
        one_again.to_str().unwrap(),
    ]);
    assert_eq!(same.status.code(), Some(0), "{}", stderr(&same));
}

#[test]
fn ditto_run_fails_when_a_stall_left_matched_dispatches_uncaptured() {
    // Issue 21, item 3: `ditto run` exited 0 over a snapshot whose
    // dispatches timed out. Now it exits 2 and says how many and why.
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let child = Command::new(ditto_bin())
        .args(["run", "--kernel", "storm_fill", "--out"])
        .arg(&snap)
        .arg("--")
        .arg(app("dispatch_storm"))
        .args(["1000", "--sync-every", "1"])
        .env("DITTO_TIMEOUT_MS", "300")
        .env("DITTO_STAGING_MIB", "0")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let journal = snap.join("dispatches.jsonl");
    // ditto is the collector: stopping it stalls the Acks.
    stall_after_three_stored(&journal, child.id());
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    // Said either way: as dispatches not captured, or (when the copy read
    // after SIGCONT found the application gone) with the capture failure.
    assert!(
        err.contains("not captured") && err.contains("(timeout)"),
        "{err}"
    );
    let m = snapshot_manifest(&snap);
    let captured = captured_indices(&m).len() as u64;
    let timeouts = missing_indices(&m, "timeout").len() as u64;
    assert_eq!(
        captured + timeouts,
        dispatched_count(&m, STORM),
        "{}",
        m["missing"]
    );
    assert!(timeouts > 0);
}

/// Once `journal` holds 3 stored dispatches, stops the collector process
/// `pid` for 1.5 s (longer than the tests' DITTO_TIMEOUT_MS), then lets it
/// go on.
fn stall_after_three_stored(journal: &Path, pid: u32) {
    stall_after_three_stored_for(journal, pid, Duration::from_millis(1500));
}

/// As [`stall_after_three_stored`], stopped for `stall`.
fn stall_after_three_stored_for(journal: &Path, pid: u32, stall: Duration) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(journal)
        .map(|j| j.lines().count())
        .unwrap_or(0)
        < 3
    {
        assert!(std::time::Instant::now() < deadline, "no dispatch stored");
        std::thread::sleep(Duration::from_millis(2));
    }
    // SAFETY: kill(2) on a child process of this test.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    std::thread::sleep(stall);
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
}

/// `ditto run --kernel storm_fill --out SNAP -- dispatch_storm APP_ARGS`
/// (staged buffers, released at once: the socket's room is what a stalled
/// collector runs out of), started with DITTO_TIMEOUT_MS=`timeout_ms`.
fn spawn_storm_run(snap: &Path, app_args: &[&str], timeout_ms: &str) -> std::process::Child {
    Command::new(ditto_bin())
        .args(["run", "--kernel", "storm_fill", "--out"])
        .arg(snap)
        .arg("--")
        .arg(app("dispatch_storm"))
        .args(app_args)
        .env("DITTO_TIMEOUT_MS", timeout_ms)
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_collector_stalled_past_the_timeout_still_learns_the_fate_of_every_dispatch() {
    // Issue 21, item 3: SIGSTOP of ditto while a storm of staged
    // dispatches filled the socket: the tool's timeout broke the
    // connection, its misses and Goodbye were never sent, and the run
    // exited 0 with half the dispatches and `missing: []`.
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let pauses = dir.path().join("pauses");
    std::fs::create_dir(&pauses).unwrap();
    // A timeout long enough for the collector, once it runs again, to
    // catch up with the frames the tool could not send before it.
    let child = spawn_storm_run(
        &snap,
        &[
            "20000",
            "--pause-every",
            "10000",
            "--pause-dir",
            pauses.to_str().unwrap(),
        ],
        "1000",
    );
    let pid = child.id();
    // ditto stops; the tool, with more frames than the collector may leave
    // unfinished (4096) before the application pauses at dispatch 10,000,
    // times out and capture stops; the application goes on only once
    // ditto runs again.
    let journal = snap.join("dispatches.jsonl");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(&journal).map_or(0, |j| j.lines().count()) < 3 {
        assert!(std::time::Instant::now() < deadline, "no dispatch stored");
        std::thread::sleep(Duration::from_millis(2));
    }
    // SAFETY: kill(2) on a child process of this test.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    while !pauses.join("paused-1").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the application never paused"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    std::fs::write(pauses.join("resume-1"), "").unwrap();
    std::fs::write(pauses.join("resume-2"), "").unwrap();
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(stdout(&o).starts_with("dispatch_storm: dispatches=20000 "));
    assert!(
        err.contains("not captured") && err.contains("(timeout)"),
        "{err}"
    );
    let m = snapshot_manifest(&snap);
    let captured = captured_indices(&m);
    let mut all = captured.clone();
    all.extend(missing_indices(&m, "timeout"));
    all.sort_unstable();
    assert_eq!(dispatched_count(&m, STORM), 20_001);
    assert_eq!(all, (0..20_001).collect::<Vec<u64>>(), "{}", m["missing"]);
    assert!(!captured.is_empty() && captured.len() < 10_000);
    assert!(m["runs"][0].get("unaccounted").is_none(), "{}", m["runs"]);
    // The status line counts what the snapshot holds.
    assert!(
        err.contains(&format!(
            "captured {} dispatches of storm_fill",
            captured.len()
        )),
        "{err}"
    );
}

#[test]
fn an_application_that_ends_while_the_collector_is_stopped_leaves_an_incomplete_snapshot() {
    // Issue 21, item 3: the application exited (its tool unable to say
    // Goodbye) while ditto was stopped; the snapshot looked complete.
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let child = spawn_storm_run(&snap, &["20000"], "300");
    stall_after_three_stored_for(
        &snap.join("dispatches.jsonl"),
        child.id(),
        Duration::from_secs(6),
    );
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(stdout(&o).starts_with("dispatch_storm: dispatches=20000 "));
    assert!(
        err.contains("the snapshot is incomplete") && err.contains("are unaccounted"),
        "{err}"
    );
    let m = snapshot_manifest(&snap);
    let from = m["runs"][0]["unaccounted"]["from_index"]
        .as_u64()
        .unwrap_or_else(|| panic!("{}", m["runs"]));
    // Every index below it is accounted for, each once.
    let mut all = captured_indices(&m);
    for reason in ["timeout", "error", "lost"] {
        all.extend(missing_indices(&m, reason));
    }
    all.sort_unstable();
    assert_eq!(all, (0..from).collect::<Vec<u64>>(), "{}", m["missing"]);
    assert!(from > 0 && from < 20_001, "{from}");
    // Readers say so too: compare refuses it, inspect names it.
    let s = snap.to_str().unwrap();
    let compared = ditto(&["compare", s, s]);
    assert_eq!(compared.status.code(), Some(2), "{}", stderr(&compared));
    assert!(
        stderr(&compared).contains(&format!(
            "the reference run is incomplete: pid {} (rank 0): its dispatches from index {from} on are unaccounted",
            m["runs"][0]["pid"]
        )),
        "{}",
        stderr(&compared)
    );
    let inspected = ditto(&["inspect", s]);
    assert!(
        stdout(&inspected).contains(&format!("incomplete: pid {}", m["runs"][0]["pid"])),
        "{}",
        stdout(&inspected)
    );
}
