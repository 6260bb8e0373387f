//! `ditto replay` stopped from outside: its replay process (`ditto
//! replay-dispatch`) never outlives it, and its work directory, private
//! to the user (0700) while it runs, is removed when it is stopped by
//! SIGTERM, and by the next ditto when it was killed (SIGKILL).

use crate::common::*;
use crate::replay::capture;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The replay process (`ditto replay-dispatch`) whose parent is `parent`.
fn replay_process_of(parent: u32) -> Option<u32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces, so after the last ')'.
        let Some(ppid) = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if ppid == parent && arguments(pid).iter().any(|a| a == "replay-dispatch") {
            return Some(pid);
        }
    }
    None
}

/// The command line of `pid`, one argument each (empty once it is gone).
fn arguments(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// Whether `pid` still runs (a zombie nobody reaped has ended).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

/// Waits up to `limit` for `pid` to end; whether it did.
fn ends_within(pid: u32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while running(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// The `ditto-replay-*` directories under `temp`.
fn replay_dirs(temp: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(temp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("ditto-replay-"))
        })
        .collect();
    dirs.sort();
    dirs
}

/// A replay process left running by a failed assertion is killed (by
/// its pid, once it is known to be a replay process).
struct KillOnDrop(Option<u32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = self.0
            && arguments(pid).iter().any(|a| a == "replay-dispatch")
        {
            // SAFETY: plain kill(2) of the replay process this test started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    }
}

/// A long `ditto replay` of `snap` with its temporary directory `temp`,
/// started; with its replay process's pid and work directory once that runs.
fn start_long_replay(snap: &Path, temp: &Path) -> (Child, u32, PathBuf) {
    let mut ditto = Command::new(ditto_bin())
        .arg("replay")
        .arg(snap)
        .args(["--hsa-runtime", "cpu", "--iterations", "100000"])
        .args(["--timeout", "600"])
        .env("TMPDIR", temp)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ditto replay");
    let deadline = Instant::now() + Duration::from_secs(60);
    let child = loop {
        if let Some(pid) = replay_process_of(ditto.id()) {
            break pid;
        }
        if let Ok(Some(status)) = ditto.try_wait() {
            panic!("ditto replay ended ({status}) before its replay process was seen");
        }
        if Instant::now() > deadline {
            // SAFETY: plain kill(2) of the ditto this test started.
            unsafe { libc::kill(ditto.id() as i32, libc::SIGKILL) };
            panic!("no replay process of ditto replay appeared within 60 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let args = arguments(child);
    let work = args
        .iter()
        .position(|a| a == "--work")
        .and_then(|at| args.get(at + 1))
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("the replay process has no --work: {args:?}"));
    // `<temp>/ditto-replay-XXXX/replay`: the run's directory is its parent.
    let dir = work.parent().unwrap().to_path_buf();
    (ditto, child, dir)
}

/// Captures reduce_sum for replay into `dir`/snap.
fn replay_capture(dir: &Path) -> PathBuf {
    let snap = dir.join("snap");
    capture("reduce_sum_baseline", "reduce_sum", "replay", &snap);
    snap
}

#[test]
fn a_stopped_replay_takes_its_replay_process_and_work_directory_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let snap = replay_capture(dir.path());
    let temp = dir.path().join("tmp");
    std::fs::create_dir(&temp).unwrap();
    let (mut ditto, child, work) = start_long_replay(&snap, &temp);
    let _guard = KillOnDrop(Some(child));
    assert_eq!(work.parent(), Some(temp.as_path()), "{}", work.display());
    let mode = std::fs::metadata(&work).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "{} is {mode:o}", work.display());

    // SAFETY: plain kill(2) of the ditto this test started.
    unsafe { libc::kill(ditto.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = ditto.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        ends_within(child, Duration::from_secs(5)),
        "the replay process {child} still runs after ditto replay was stopped ({status:?})"
    );
    let Some(status) = status else {
        panic!("ditto replay did not end within 10 s of SIGTERM");
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut ditto.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(2), "{status}; stderr:\n{err}");
    assert!(err.contains("interrupted"), "{err}");
    assert_eq!(replay_dirs(&temp), Vec::<PathBuf>::new(), "left behind");
}

#[test]
fn a_killed_replay_takes_its_replay_process_with_it_and_the_next_ditto_removes_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let snap = replay_capture(dir.path());
    let temp = dir.path().join("tmp");
    std::fs::create_dir(&temp).unwrap();
    let (mut ditto, child, work) = start_long_replay(&snap, &temp);
    let _guard = KillOnDrop(Some(child));
    // SAFETY: plain kill(2) of the ditto this test started.
    unsafe { libc::kill(ditto.id() as i32, libc::SIGKILL) };
    ditto.wait().unwrap();
    assert!(
        ends_within(child, Duration::from_secs(5)),
        "the replay process {child} still runs after ditto replay was killed"
    );
    // Killed, it removed nothing: the next ditto does.
    assert_eq!(replay_dirs(&temp), vec![work.clone()]);
    let mut next = Command::new(ditto_bin());
    next.arg("replay")
        .arg(&snap)
        .args(["--hsa-runtime", "cpu", "--json"])
        .env("TMPDIR", &temp);
    let out = output_within(&mut next, Duration::from_secs(300), "the next ditto replay");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(replay_dirs(&temp), Vec::<PathBuf>::new(), "left behind");
}
