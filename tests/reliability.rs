//! Reliability under load (issue 6): many consecutive captures through one
//! collector leak nothing (item 2), and target dispatches in flight from
//! several threads on tiny queues are all captured without a deadlock
//! (item 7). CI runs the light variants; `DITTO_HEAVY=1` the full ones
//! (10,000 captures; 1,600 dispatches on 4-slot queues).

use crate::common::many_queues::{self, assert_every_dispatch_captured_once};
use crate::common::*;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

fn heavy() -> bool {
    std::env::var("DITTO_HEAVY").is_ok_and(|v| v == "1")
}

/// What a process holds: mappings (/proc/PID/maps lines), open file
/// descriptors (/proc/PID/fd entries) and resident memory (VmRSS, KiB).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Footprint {
    maps: usize,
    fds: usize,
    rss_kib: u64,
}

/// [`footprint`] once its fds and mappings have held still for 5 reads
/// 10 ms apart (at most 2 s): descriptors that are only passing through
/// (a shared-memory copy being closed after its send, the collector's
/// spare tensor files being made again after use) are not counted; one
/// that stays is.
fn settled_footprint(pid: u32) -> Footprint {
    let started = Instant::now();
    let mut last = footprint(pid);
    let mut same = 0;
    while same < 5 && started.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(10));
        let now = footprint(pid);
        if (now.fds, now.maps) == (last.fds, last.maps) {
            same += 1;
        } else {
            same = 0;
        }
        last = now;
    }
    last
}

fn footprint(pid: u32) -> Footprint {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/maps: {e}"))
        .lines()
        .count();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/fd: {e}"))
        .count();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status");
    Footprint { maps, fds, rss_kib }
}

/// Waits (bounded) until `path` exists; the message says which checkpoint.
fn wait_for_checkpoint(path: &Path, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} did not appear within {} s: the application or the collector is stuck",
            path.display(),
            limit.as_secs()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Allowed growth between the sample after the warm-up and the last one.
/// Mappings and fds: a handful (a thread's stack, an allocator arena);
/// one leaked per capture would show hundreds. Resident memory: 2 MiB for
/// the application; the collector keeps the manifest (one record per
/// dispatch) in memory by design, so it may also grow by twice what the
/// journal grew (the same records as JSON lines; in memory they take about
/// as much). A leaked 4 KiB copy per capture would exceed either bound.
const MAPS_SLACK: usize = 4;
const FDS_SLACK: usize = 0;
const APP_RSS_SLACK_KIB: u64 = 2048;
const COLLECTOR_RSS_SLACK_KIB: u64 = 2048;

#[test]
fn consecutive_captures_leave_mappings_fds_and_memory_of_collector_and_application_at_baseline() {
    let (captures, pause_every) = if heavy() {
        (10_000, 1_000)
    } else {
        (1_000, 100)
    };
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("collector.sock");
    let out = dir.path().join("snapshots");
    let pauses = dir.path().join("pauses");
    std::fs::create_dir(&pauses).unwrap();
    let collector = Collector::start(&socket, &out);
    let mut run = ditto_run(&socket, "storm_fill", "leak", &app("dispatch_storm"));
    // Mappings are what leaked in the seed: every buffer through IPC (the
    // many-runs test below goes through the staging file).
    run.env("DITTO_STAGING_MIB", "0");
    run.arg(captures.to_string())
        .args(["--sync-every", "1", "--pause-every"])
        .arg(pause_every.to_string())
        .arg("--pause-dir")
        .arg(&pauses)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let child = run.spawn().unwrap();
    let app_pid = child.id(); // scripts/ditto-run execs the application
    let journal = out.join("leak/dispatches.jsonl");
    let mut samples = Vec::new();
    for n in 1..=captures / pause_every {
        wait_for_checkpoint(
            &pauses.join(format!("paused-{n}")),
            Duration::from_secs(300),
        );
        // Synchronised: every dispatch so far is acknowledged, both idle.
        let c = settled_footprint(collector.pid());
        let a = settled_footprint(app_pid);
        let journal_bytes = std::fs::metadata(&journal).map(|m| m.len()).unwrap_or(0);
        samples.push((n * pause_every, c, a, journal_bytes));
        std::fs::write(pauses.join(format!("resume-{n}")), b"").unwrap();
    }
    let o = child.wait_with_output().unwrap();
    let elapsed = started.elapsed();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!("dispatches={captures} ")),
        "{}",
        stdout(&o)
    );
    drop(collector);
    let m = snapshot_manifest(&out.join("leak"));
    assert_eq!(
        m["dispatches"].as_array().unwrap().len() as u64,
        captures + 1,
        "every capture stored (the warm-up too)"
    );
    for (done, c, a, journal_bytes) in &samples {
        eprintln!(
            "after {done} captures: collector maps {} fds {} rss {} KiB; \
             application maps {} fds {} rss {} KiB; journal {} KiB",
            c.maps,
            c.fds,
            c.rss_kib,
            a.maps,
            a.fds,
            a.rss_kib,
            journal_bytes / 1024
        );
    }
    eprintln!("{captures} captures in {:.1} s", elapsed.as_secs_f64());
    let (_, c0, a0, m0) = samples[0];
    let (_, c1, a1, m1) = *samples.last().unwrap();
    let records_growth_kib = (m1.saturating_sub(m0)) / 1024;
    for (who, base, end, rss_slack) in [
        (
            "collector",
            c0,
            c1,
            COLLECTOR_RSS_SLACK_KIB + 2 * records_growth_kib,
        ),
        ("application", a0, a1, APP_RSS_SLACK_KIB),
    ] {
        assert!(
            end.maps <= base.maps + MAPS_SLACK,
            "{who}: {} mappings after warm-up, {} at the end",
            base.maps,
            end.maps
        );
        assert!(
            end.fds <= base.fds + FDS_SLACK,
            "{who}: {} open fds after warm-up, {} at the end",
            base.fds,
            end.fds
        );
        assert!(
            end.rss_kib <= base.rss_kib + rss_slack,
            "{who}: resident {} KiB after warm-up, {} KiB at the end (allowed +{rss_slack} KiB)",
            base.rss_kib,
            end.rss_kib
        );
    }
}

#[test]
fn many_threads_overflowing_four_slot_queues_get_every_dispatch_captured_without_deadlock() {
    // 8 threads on 2 queues of 4 slots: a held dispatch and its barrier
    // fill a queue, so almost every submission waits for room while
    // others are held for capture.
    let per_queue: u32 = if heavy() { 100 } else { 20 };
    let per_queue_arg = per_queue.to_string();
    let args = [
        "--queue-size",
        "4",
        "--threads",
        "8",
        "--queues",
        "2",
        "--per-queue",
        &per_queue_arg,
    ];
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    // Bounded by many_queues::LIMIT: a deadlock fails with the output so far.
    let c = many_queues::capture(dir.path(), &args, &[]);
    eprintln!(
        "{} dispatches on 4-slot queues in {:.1} s",
        8 * 2 * per_queue,
        started.elapsed().as_secs_f64()
    );
    assert_every_dispatch_captured_once(&c, 8, 2, per_queue);
    assert_eq!(
        c.manifest["dispatched_kernels"][0]["count"],
        8 * 2 * per_queue,
        "{}",
        c.manifest["dispatched_kernels"]
    );
    assert_eq!(
        c.manifest["missing"],
        serde_json::json!([]),
        "nothing missed"
    );
}

#[test]
fn many_runs_through_one_collector_leave_its_threads_mappings_and_fds_at_baseline() {
    // Each run is its own connection and snapshot directory. Finished
    // connection threads must be given back (their stacks are mappings),
    // and a directory no process writes to any more must not keep the
    // thread and the files its writer made ahead.
    let runs = if heavy() { 300 } else { 40 };
    let warm_up = 10;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("collector.sock");
    let out = dir.path().join("snapshots");
    let collector = Collector::start(&socket, &out);
    let threads = |pid: u32| {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .count()
    };
    let mut base = None;
    for n in 1..=runs {
        let o = ditto_run(
            &socket,
            "storm_fill",
            &format!("run-{n}"),
            &app("dispatch_storm"),
        )
        .arg("3")
        .output()
        .unwrap();
        assert_eq!(o.status.code(), Some(0), "run {n}: {}", stderr(&o));
        // The connection's end is handled after the application exits.
        let settled = Instant::now();
        while threads(collector.pid()) > 2 && settled.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        if n == warm_up {
            base = Some((settled_footprint(collector.pid()), threads(collector.pid())));
        }
    }
    let (b, b_threads) = base.unwrap();
    let (e, e_threads) = (settled_footprint(collector.pid()), threads(collector.pid()));
    eprintln!(
        "after {warm_up} runs: maps {} fds {} threads {b_threads}; after {runs}: maps {} fds {} threads {e_threads}",
        b.maps, b.fds, e.maps, e.fds
    );
    drop(collector);
    for n in [1, runs] {
        let m = snapshot_manifest(&out.join(format!("run-{n}")));
        assert_eq!(m["dispatches"].as_array().unwrap().len(), 4, "run {n}");
    }
    assert!(e_threads <= b_threads, "threads {b_threads} → {e_threads}");
    assert!(e.fds <= b.fds + FDS_SLACK, "fds {} → {}", b.fds, e.fds);
    assert!(
        e.maps <= b.maps + MAPS_SLACK,
        "maps {} → {}",
        b.maps,
        e.maps
    );
}
