//! Application killed (issue 6, item 4): 50 trials in which the application
//! of a `ditto run` capture (dispatch_storm) is killed with SIGKILL at a
//! varying point. Every time `ditto run` notices, reports the signal and
//! what was saved, exits with status 2 within a bounded wait, and leaves a
//! snapshot directory with no temporary file whose manifest lists exactly
//! the dispatch files there, each whole and holding the values that
//! dispatch wrote.
//!
//! Kill points come from a fixed pseudo-random sequence (seed printed in
//! every failure; set DITTO_TRIAL_SEED to replay another): wait until the
//! journal holds k dispatches, then sleep a few hundred µs.
//!
//! `ditto run`'s collector lives in the `ditto` process, gone once it has
//! reported: its attachments are checked on a separate `ditto collect`
//! instead (fewer trials, same kill points): it reports the connection
//! lost, holds no mapping of the application's pool memory afterwards, and
//! the snapshot it leaves is whole.

use crate::common::*;
use crate::kill_trials::*;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TRIALS: u32 = 50;
/// Trials against a separate `ditto collect`.
const COLLECT_TRIALS: u32 = 50;
/// storm_fill dispatches asked for: far more than the kill points reach.
const STORM_DISPATCHES: u64 = 2000;
/// The kill comes once the journal holds fewer than this many dispatches.
const LAST_KILL_POINT: u64 = 24;
const LIMIT: Duration = Duration::from_secs(30);

/// The pid of `parent`'s child process, once it has one.
fn child_of(parent: u32) -> Option<u32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid …: comm may hold spaces, so split after ')'.
        let after = &stat[stat.rfind(')')? + 2..];
        let ppid: u32 = after.split(' ').nth(1)?.parse().ok()?;
        if ppid == parent {
            return Some(pid);
        }
    }
    None
}

fn journal_lines(snap: &Path) -> u64 {
    std::fs::read_to_string(snap.join("dispatches.jsonl"))
        .map(|s| s.lines().count() as u64)
        .unwrap_or(0)
}

struct Trial {
    saved: usize,
}

fn trial(n: u32, seed: u64, stored_before_kill: u64, extra_us: u64) -> Trial {
    let what =
        format!("seed {seed} trial {n} (kill after {stored_before_kill} stored + {extra_us} µs)");
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let mut ditto = Command::new(ditto_bin())
        .args([
            "run",
            "--hsa-runtime",
            "cpu",
            "--kernel",
            "storm_fill",
            "--out",
        ])
        .arg(&snap)
        .arg("--")
        .arg(app("dispatch_storm"))
        .arg(STORM_DISPATCHES.to_string())
        .env("DITTO_CPU_RUNTIME_DIR", cpu_runtime_dir())
        .env("NO_COLOR", "1")
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start ditto run: {e}"));
    let deadline = Instant::now() + LIMIT;
    let give_up = |ditto: &mut std::process::Child, why: &str| -> ! {
        // SAFETY: plain kill(2) of the process group our child leads.
        unsafe { libc::kill(-(ditto.id() as i32), libc::SIGKILL) };
        let out = ditto.wait_with_output_ref();
        panic!("{what}: {why}; ditto's stderr:\n{out}");
    };
    let app_pid = loop {
        if let Some(pid) = child_of(ditto.id()) {
            break pid;
        }
        if Instant::now() > deadline || ditto.try_wait().unwrap().is_some() {
            give_up(&mut ditto, "dispatch_storm never started");
        }
        std::thread::sleep(Duration::from_micros(200));
    };
    while journal_lines(&snap) < stored_before_kill {
        if Instant::now() > deadline {
            give_up(&mut ditto, "the kill point never came");
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    std::thread::sleep(Duration::from_micros(extra_us));
    // SAFETY: plain kill(2) of ditto's child, which ditto has not reaped:
    // ditto only reaps it once it has ended, and this kill is what ends it.
    assert_eq!(
        unsafe { libc::kill(app_pid as i32, libc::SIGKILL) },
        0,
        "{what}: kill dispatch_storm"
    );
    while ditto.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            give_up(
                &mut ditto,
                "ditto run did not exit after the application was killed",
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let out = ditto.wait_with_output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{what}: ditto's stderr:\n{err}");
    assert!(
        err.contains("ended with killed by signal 9"),
        "{what}: the error names the signal; stderr:\n{err}"
    );

    // The snapshot: no temporary file, and the manifest (written whole at
    // the end) lists exactly the dispatch files there, all whole.
    let names = names_in(&snap);
    assert!(
        names.iter().all(|n| !n.starts_with(".ditto-tmp-")),
        "{what}: temporary files left: {names:?}"
    );
    let mut files = check_dispatch_files(&snap, &what);
    files.sort_unstable();
    if snap.join("manifest.json").exists() {
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(snap.join("manifest.json")).unwrap())
                .unwrap_or_else(|e| panic!("{what}: manifest.json: {e}"));
        assert_eq!(
            manifest_keys(&manifest),
            files,
            "{what}: manifest.json lists the dispatch files there"
        );
    } else {
        // Killed before it connected: the collector never started a snapshot.
        assert!(
            names.is_empty(),
            "{what}: files but no manifest.json: {names:?}; stderr:\n{err}"
        );
    }
    assert!(
        files.len() as u64 >= stored_before_kill,
        "{what}: {} stored, but the journal held {stored_before_kill} before the kill",
        files.len()
    );
    // The error says what was saved.
    let said = if files.is_empty() {
        "nothing was saved".to_string()
    } else {
        format!(
            "saved {} {}",
            files.len(),
            if files.len() == 1 {
                "dispatch"
            } else {
                "dispatches"
            }
        )
    };
    assert!(
        err.contains(&said),
        "{what}: the error says \"{said}\"; stderr:\n{err}"
    );
    Trial { saved: files.len() }
}

trait WaitWithOutputRef {
    fn wait_with_output_ref(&mut self) -> String;
}

impl WaitWithOutputRef for std::process::Child {
    /// Reaps the child and returns its standard error.
    fn wait_with_output_ref(&mut self) -> String {
        use std::io::Read;
        let _ = self.wait();
        let mut s = String::new();
        if let Some(e) = self.stderr.as_mut() {
            let _ = e.read_to_string(&mut s);
        }
        s
    }
}

/// Collector trials: `ditto collect` serving dispatch_storm run through
/// scripts/ditto-run, the application killed after `stored_before_kill`
/// stored dispatches and `extra_us` µs.
fn collect_trial(n: u32, seed: u64, stored_before_kill: u64, extra_us: u64) -> Trial {
    let what = format!(
        "ditto collect, seed {seed} trial {n} (kill after {stored_before_kill} stored + {extra_us} µs)"
    );
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("collector.sock");
    let out = dir.path().join("snapshots");
    let log_path = dir.path().join("collector.log");
    let mut collector = Command::new(ditto_bin())
        .args(["collect", "--hsa-runtime", "cpu", "--socket"])
        .arg(&socket)
        .arg("--out")
        .arg(&out)
        .env("DITTO_CPU_RUNTIME_DIR", cpu_runtime_dir())
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .expect("start ditto collect");
    wait_for(&socket, "ditto collect's socket");
    let snap = out.join("storm");
    let mut app_cmd = ditto_run(&socket, "storm_fill", "storm", &app("dispatch_storm"));
    let mut application = app_cmd
        .arg(STORM_DISPATCHES.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start dispatch_storm: {e}"));
    let deadline = Instant::now() + LIMIT;
    let stop = |c: &mut std::process::Child, a: &mut std::process::Child| {
        let _ = a.kill();
        let _ = a.wait();
        let _ = c.kill();
        let _ = c.wait();
    };
    while journal_lines(&snap) < stored_before_kill {
        if Instant::now() > deadline {
            stop(&mut collector, &mut application);
            panic!("{what}: the kill point never came");
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    std::thread::sleep(Duration::from_micros(extra_us));
    let app_pid = application.id();
    application.kill().expect("SIGKILL dispatch_storm");
    application.wait().unwrap();
    // The collector reports the lost connection (a connection that never
    // said Hello has no run to report) and then holds no attachment.
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let reported = format!("run 'storm' (pid {app_pid}");
    loop {
        let said = log().contains(&reported) || !snap.exists();
        let mapped = pool_mappings(collector.id());
        if said && mapped == 0 {
            break;
        }
        if Instant::now() > deadline {
            stop(&mut collector, &mut application);
            panic!(
                "{what}: after the application was killed the collector still holds {mapped} \
                 mapping(s) of pool memory or never reported it (\"{reported}\"); log:\n{}",
                log()
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    if snap.exists() {
        let line = log();
        let line = line.lines().find(|l| l.contains(&reported)).unwrap();
        assert!(
            line.to_lowercase().contains("connection"),
            "{what}: the report says the connection was lost: {line}"
        );
    }
    // SAFETY: plain kill(2) on our own child, not yet reaped.
    unsafe { libc::kill(collector.id() as i32, libc::SIGTERM) };
    collector.wait().unwrap();
    let names = names_in(&snap);
    assert!(
        names.iter().all(|n| !n.starts_with(".ditto-tmp-")),
        "{what}: temporary files left: {names:?}"
    );
    let mut files = check_dispatch_files(&snap, &what);
    files.sort_unstable();
    if snap.exists() {
        assert_eq!(
            manifest_keys(&snapshot_manifest(&snap)),
            files,
            "{what}: the manifest and journal list the dispatch files there"
        );
    }
    Trial { saved: files.len() }
}

#[test]
fn an_application_killed_mid_capture_leaves_ditto_collect_with_no_attachment() {
    let mut points = KillPoints::new(0x5eed_0014);
    let seed = points.seed;
    let started = Instant::now();
    let mut saved = 0;
    for n in 0..COLLECT_TRIALS {
        let k = points.below(LAST_KILL_POINT);
        let extra = points.below(800);
        saved += collect_trial(n, seed, k, extra).saved;
    }
    eprintln!(
        "application_killed (ditto collect): seed {seed}: {COLLECT_TRIALS} trials in {:.1} s, \
         {saved} dispatches saved in all",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn an_application_killed_at_any_point_is_reported_and_leaves_a_whole_snapshot() {
    let mut points = KillPoints::new(0x5eed_0004);
    let seed = points.seed;
    let started = Instant::now();
    let mut saved = 0;
    for n in 0..TRIALS {
        let k = points.below(LAST_KILL_POINT);
        let extra = points.below(800);
        saved += trial(n, seed, k, extra).saved;
    }
    eprintln!(
        "application_killed: seed {seed}: {TRIALS} trials in {:.1} s, {saved} dispatches saved in all",
        started.elapsed().as_secs_f64()
    );
}
