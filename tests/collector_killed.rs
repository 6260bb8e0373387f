//! Collector killed (issue 6, item 3): 50 trials in which `ditto collect` is
//! killed with SIGKILL at a varying point of a capture of dispatch_storm run
//! through scripts/ditto-run. Every time the application ends on its own
//! (no barrier stays held) with its normal status and output, and the
//! snapshot directory holds every dispatch the tool logged as acknowledged,
//! each file whole and holding the values that dispatch wrote.
//!
//! Kill points come from a fixed pseudo-random sequence (seed printed in
//! every failure; set DITTO_TRIAL_SEED to replay another): wait for the
//! tool to log k acknowledged dispatches, then sleep a few hundred µs.
//! A kill in the middle of a file write may leave a `.ditto-tmp-*` file:
//! it is never read (readers go by manifest and journal) and is removed
//! when the directory is next written (SnapshotWriter::create); the trials
//! count them and check they are the only other files.

use crate::common::*;
use crate::kill_trials::*;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TRIALS: u32 = 50;
/// storm_fill dispatches per run (the tool sees one more: the warm-up).
const STORM_DISPATCHES: u64 = 24;
/// How long the application may take once the collector is gone.
const LIMIT: Duration = Duration::from_secs(30);

/// dispatch_storm's stdout without its timings (elapsed_s=…, cpu_s=…).
fn without_timings(out: &str) -> String {
    out.split_whitespace()
        .filter(|w| !w.contains("_s=") && !w.starts_with("per_dispatch_us="))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The matched-dispatch indices the tool logged as acknowledged
/// ("ditto: dispatch N of `…` captured").
fn acknowledged(log: &str) -> Vec<u64> {
    log.lines()
        .filter_map(|l| l.strip_prefix("ditto: dispatch "))
        .filter(|l| l.ends_with(" captured"))
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect()
}

struct Trial {
    acked: usize,
    stored: usize,
    leftovers: usize,
}

fn trial(n: u32, seed: u64, acks_before_kill: u64, extra_us: u64, plain: &str) -> Trial {
    let what =
        format!("seed {seed} trial {n} (kill after {acks_before_kill} acks + {extra_us} µs)");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("collector.sock");
    let out = dir.path().join("snapshots");
    let mut collector = Collector::start(&socket, &out);
    let storm = STORM_DISPATCHES.to_string();
    let mut cmd = ditto_run(&socket, "storm_fill", "storm", &app("dispatch_storm"));
    let mut child = cmd
        .arg(&storm)
        .env("DITTO_LOG", "debug")
        .env("DITTO_TIMEOUT_MS", "20000")
        // Acknowledged dispatches: every buffer through IPC.
        .env("DITTO_STAGING_MIB", "0")
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start dispatch_storm: {e}"));
    // The tool's log, read as it comes: acks are counted to time the kill.
    let acks = Arc::new(AtomicU64::new(0));
    let log = Arc::new(Mutex::new(String::new()));
    let reader = {
        let (acks, log) = (acks.clone(), log.clone());
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let line = line.unwrap_or_default();
                if !acknowledged(&line).is_empty() {
                    acks.fetch_add(1, Ordering::SeqCst);
                }
                let mut l = log.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        })
    };
    let mut stdout_pipe = child.stdout.take().unwrap();
    let stdout_thread = std::thread::spawn(move || {
        let mut s = String::new();
        stdout_pipe.read_to_string(&mut s).unwrap();
        s
    });
    let deadline = Instant::now() + LIMIT;
    while acks.load(Ordering::SeqCst) < acks_before_kill
        && child.try_wait().unwrap().is_none()
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_micros(100));
    }
    std::thread::sleep(Duration::from_micros(extra_us));
    collector.kill_now();
    // The application must end on its own: no barrier stays held.
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            // SAFETY: plain kill(2) of the process group our child leads.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            panic!(
                "{what}: dispatch_storm did not end within {} s of the kill: a barrier stayed held; log:\n{}",
                LIMIT.as_secs(),
                log.lock().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    reader.join().unwrap();
    let app_out = stdout_thread.join().unwrap();
    let log = log.lock().unwrap().clone();
    assert_eq!(status.code(), Some(0), "{what}: exit status; log:\n{log}");
    assert_eq!(
        without_timings(&app_out),
        plain,
        "{what}: the output differs from a plain run's; log:\n{log}"
    );

    // Every acknowledged dispatch is stored, whole, with its values.
    let snap = out.join("storm");
    let acked = acknowledged(&log);
    let files = check_dispatch_files(&snap, &what);
    for i in &acked {
        assert!(
            files.contains(&(0, *i)),
            "{what}: dispatch {i} was acknowledged but dispatch-0-{i:05}.safetensors \
             is not stored; files: {:?}",
            names_in(&snap)
        );
    }
    if !acked.is_empty() {
        let manifest = snapshot_manifest(&snap);
        let listed = manifest_keys(&manifest);
        for i in &acked {
            assert!(
                listed.contains(&(0, *i)),
                "{what}: acknowledged dispatch {i} is in neither manifest.json nor the journal: {listed:?}"
            );
        }
        for d in manifest["dispatches"].as_array().unwrap() {
            let file = d["file"].as_str().unwrap();
            assert!(
                snap.join(file).exists(),
                "{what}: the manifest lists {file}, which is missing"
            );
        }
    }
    // Nothing else: manifest, journal, dispatch files, the room kept for
    // the manifest (`.ditto-tmp-room`, a leftover like the others: removed
    // when the directory is next written), and at most the one temporary
    // file of a write the kill cut.
    let leftovers: Vec<String> = names_in(&snap)
        .into_iter()
        .filter(|n| n.starts_with(".ditto-tmp-") && n != ".ditto-tmp-room")
        .collect();
    let others: Vec<String> = names_in(&snap)
        .into_iter()
        .filter(|n| {
            !n.starts_with("dispatch-")
                && !n.starts_with(".ditto-tmp-")
                && n != "manifest.json"
                && n != "dispatches.jsonl"
        })
        .collect();
    assert!(others.is_empty(), "{what}: unexpected files {others:?}");
    assert!(
        leftovers.len() <= 1,
        "{what}: temporary files {leftovers:?}"
    );
    Trial {
        acked: acked.len(),
        stored: files.len(),
        leftovers: leftovers.len(),
    }
}

#[test]
fn a_collector_killed_at_any_point_loses_no_acknowledged_dispatch_and_leaves_the_application_unchanged()
 {
    let plain = run_plain(&app("dispatch_storm"), &[&STORM_DISPATCHES.to_string()]);
    assert_eq!(
        plain.status.code(),
        Some(0),
        "plain run: {}",
        stderr(&plain)
    );
    let plain = without_timings(&stdout(&plain));
    let mut points = KillPoints::new(0x5eed_0003);
    let seed = points.seed;
    let started = Instant::now();
    let (mut acked, mut stored, mut leftovers, mut mid_capture) = (0, 0, 0, 0);
    for n in 0..TRIALS {
        // Up to every matched dispatch acknowledged (the warm-up too).
        let k = points.below(STORM_DISPATCHES + 2);
        let extra = points.below(800);
        let t = trial(n, seed, k, extra, &plain);
        acked += t.acked;
        stored += t.stored;
        leftovers += t.leftovers;
        if t.acked > 0 && t.acked < STORM_DISPATCHES as usize + 1 {
            mid_capture += 1;
        }
    }
    eprintln!(
        "collector_killed: seed {seed}: {TRIALS} trials in {:.1} s, {mid_capture} killed mid-capture, \
         {acked} dispatches acknowledged, {stored} stored, {leftovers} temporary files left by a cut write",
        started.elapsed().as_secs_f64()
    );
    // The kill points did land inside captures, not only before or after.
    assert!(
        mid_capture >= TRIALS / 4,
        "seed {seed}: only {mid_capture} of {TRIALS} trials killed the collector mid-capture"
    );
}
