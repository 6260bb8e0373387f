//! The command line never panics on what a user types or does with its
//! output (issue 21, items 6 and 8): a timeout too long for the clock is
//! refused when it is parsed, a reader that closes the output early ends
//! the command quietly with exit 0, tolerances that would make the
//! comparison NaN are refused with a reason, and `ditto kernels` reads
//! regular files only (item 10: a device is never read without end, a FIFO
//! never waited on).

use crate::common::*;
use std::process::{Command, Stdio};

/// A snapshot of scale_values<float> 4096, in `dir`.
fn snapshot(dir: &std::path::Path) -> std::path::PathBuf {
    let snap = dir.join("snap");
    let out = ditto(&[
        "run",
        "--kernel",
        "scale_values<float>",
        "--out",
        snap.to_str().unwrap(),
        "--",
        app("scale_values").to_str().unwrap(),
        "float",
        "4096",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    snap
}

#[test]
fn a_timeout_past_what_the_clock_holds_is_refused_when_parsed() {
    for timeout in ["1e20", "1e19"] {
        let out = ditto(&[
            "run",
            "--timeout",
            timeout,
            "--kernel",
            "k",
            "--",
            "/bin/true",
        ]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "--timeout {timeout}: {err}");
        assert!(
            err.contains(&format!("`{timeout}`")) && err.contains("ten years"),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn a_reader_that_leaves_early_ends_the_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let snap = snapshot(dir.path());
    let s = snap.to_str().unwrap();
    for args in [vec!["inspect", s, "--dump", "1"], vec!["compare", s, s]] {
        let mut child = Command::new(ditto_bin())
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The reader leaves before ditto has written anything.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert_eq!(err, "", "{args:?}: nothing on stderr");
    }
}

#[test]
fn tolerances_that_make_the_comparison_nan_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let snap = snapshot(dir.path());
    let s = snap.to_str().unwrap();
    let out = ditto(&["compare", s, s, "--atol", "0", "--rtol", "inf"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("tolerances must be finite, non-negative numbers"),
        "{err}"
    );
    // Finite ones compare identical data as equal.
    assert_eq!(
        ditto(&["compare", s, s, "--atol", "0", "--rtol", "0"])
            .status
            .code(),
        Some(0)
    );
}

#[test]
fn ditto_kernels_refuses_a_device_and_a_fifo_without_reading_or_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a path of our own temporary directory.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for file in [std::path::PathBuf::from("/dev/zero"), fifo] {
        let mut cmd = Command::new(ditto_bin());
        cmd.arg("kernels").arg(&file);
        let out = output_within(
            &mut cmd,
            std::time::Duration::from_secs(60),
            &format!("ditto kernels {}", file.display()),
        );
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{}: {err}", file.display());
        assert!(err.contains("is not a regular file"), "{err}");
    }
}

/// Appends `line` to the snapshot's journal.
fn journal_line(snap: &std::path::Path, line: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(snap.join("dispatches.jsonl"))
        .unwrap();
    writeln!(f, "{line}").unwrap();
}

/// `ditto compare SNAP SNAP`, bounded to a minute (more is a hang).
fn compare_with_itself(snap: &std::path::Path) -> std::process::Output {
    let s = snap.to_str().unwrap();
    let mut cmd = Command::new(ditto_bin());
    cmd.args(["compare", s, s]).env("NO_COLOR", "1");
    output_within(
        &mut cmd,
        std::time::Duration::from_secs(60),
        "ditto compare",
    )
}

fn missing_line(index: u64, count: u64) -> String {
    format!(
        r#"{{"missing":{{"rank":0,"pid":1,"index":{index},"count":{count},"reason":"selection","detail":"crafted"}}}}"#
    )
}

#[test]
fn a_missing_record_of_any_length_is_compared_at_once() {
    // Issue 21, item 7: a record of 2^40 unselected dispatches made
    // `ditto compare` walk every index.
    let dir = tempfile::tempdir().unwrap();
    let snap = snapshot(dir.path());
    journal_line(&snap, &missing_line(1, 1 << 40));
    let out = compare_with_itself(&snap);
    // Both sides left the same dispatches unselected: dispatch 0 is
    // compared, and passes.
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("PASS"), "{}", stdout(&out));
}

#[test]
fn a_missing_record_past_the_largest_index_is_refused_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let snap = snapshot(dir.path());
    journal_line(&snap, &missing_line(1, u64::MAX));
    let out = compare_with_itself(&snap);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("dispatches.jsonl") && err.contains("runs past the largest index"),
        "{err}"
    );
}

/// `ditto run ARGS --out OUT -- sh -c 'touch RAN; scale_values float 64'`:
/// its output and whether the application started.
fn run_into(
    dir: &std::path::Path,
    args: &[&str],
    out: &std::path::Path,
) -> (std::process::Output, bool) {
    let ran = dir.join("ran");
    let script = format!(
        "touch {}; exec {} float 64",
        ran.display(),
        app("scale_values").display()
    );
    let output = Command::new(ditto_bin())
        .arg("run")
        .args(args)
        .arg("--out")
        .arg(out)
        .args(["--", "sh", "-c", &script])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (output, ran.exists())
}

#[test]
fn a_foreign_out_directory_is_refused_before_the_application_starts() {
    // Issue 21, item 4: a directory holding any manifest.json was taken for
    // an old snapshot and replaced.
    let dir = tempfile::tempdir().unwrap();
    let kernel = ["--kernel", "scale_values"];
    let foreign = dir.path().join("w");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("manifest.json"), "{}").unwrap();
    std::fs::write(foreign.join("dispatches.jsonl"), "mine\n").unwrap();
    let (out, ran) = run_into(dir.path(), &kernel, &foreign);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(!ran, "the application must not start");
    assert!(
        stderr(&out).contains("is not a place for a ditto snapshot: it holds a manifest.json that is not a ditto snapshot's"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_to_string(foreign.join("manifest.json")).unwrap(),
        "{}"
    );
    assert_eq!(
        std::fs::read_to_string(foreign.join("dispatches.jsonl")).unwrap(),
        "mine\n"
    );
    // A file, and a symbolic link to a directory.
    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let link = dir.path().join("link");
    std::fs::create_dir(dir.path().join("target")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("target"), &link).unwrap();
    for (place, why) in [(&file, "it is a file"), (&link, "it is a symbolic link")] {
        let (out, ran) = run_into(dir.path(), &kernel, place);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(!ran && stderr(&out).contains(why), "{}", stderr(&out));
    }
    assert_eq!(
        std::fs::read_dir(dir.path().join("target"))
            .unwrap()
            .count(),
        0
    );
    // An empty --kernel.
    let (out, ran) = run_into(dir.path(), &["--kernel", " "], &dir.path().join("new"));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        !ran && stderr(&out).contains("--kernel is empty"),
        "{}",
        stderr(&out)
    );
    // A ditto snapshot there is still replaced.
    let snap = snapshot(dir.path());
    let (out, ran) = run_into(dir.path(), &kernel, &snap);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(ran);
    assert_eq!(
        snapshot_manifest(&snap)["dispatches"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn a_second_run_into_a_snapshot_being_written_is_refused_naming_the_writer() {
    // Issue 21, item 5: two runs into one --out at once left a manifest
    // naming files that were not there.
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let script = format!("{} float 64 && sleep 3", app("scale_values").display());
    let first = Command::new(ditto_bin())
        .args(["run", "--kernel", "scale_values", "--out"])
        .arg(&snap)
        .args(["--", "sh", "-c", &script])
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let writer = first.id();
    // The first run's collector writes the snapshot once its application
    // connected: wait for its journal.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !snap.join("dispatches.jsonl").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the first run never wrote"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (second, ran) = run_into(dir.path(), &["--kernel", "scale_values"], &snap);
    assert_eq!(second.status.code(), Some(2), "{}", stderr(&second));
    assert!(!ran, "the second application must not start");
    assert!(
        stderr(&second).contains(&format!("is being written by another ditto (pid {writer})")),
        "{}",
        stderr(&second)
    );
    let first = first.wait_with_output().unwrap();
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let m = snapshot_manifest(&snap);
    let dispatches = m["dispatches"].as_array().unwrap();
    assert_eq!(dispatches.len(), 1, "{m}");
    assert!(snap.join(dispatches[0]["file"].as_str().unwrap()).exists());
}

#[test]
fn a_directory_other_users_may_write_in_is_never_written() {
    // Issue 21, item 1: in a directory another user made world-writable,
    // a link planted under the journal's name sent the journal into a
    // file of root's.
    // SAFETY: geteuid cannot fail.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test hands a directory to another uid, which needs root (CI runs as root)"
    );
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "root's file\n").unwrap();
    let theirs = dir.path().join("theirs");
    let open = dir.path().join("open");
    for d in [&theirs, &open] {
        std::fs::create_dir(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::os::unix::fs::symlink(&victim, d.join("dispatches.jsonl")).unwrap();
    }
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    for (place, why) in [
        (&theirs, "it belongs to uid 65534, not to this user (uid 0)"),
        (&open, "every user may write in it (mode 777)"),
    ] {
        let (out, ran) = run_into(dir.path(), &["--kernel", "scale_values"], place);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(!ran, "the application must not start");
        assert!(stderr(&out).contains(why), "{}", stderr(&out));
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's file\n");
}

/// `ditto run` of a shell that writes its pid to `pid_file` and then
/// sleeps 30 s (as an application that would outlive ditto's patience).
fn long_application(dir: &std::path::Path, pid_file: &std::path::Path) -> std::process::Child {
    long_application_in(dir, pid_file, &std::env::temp_dir())
}

/// [`long_application`] with TMPDIR=`tmp` for ditto.
fn long_application_in(
    dir: &std::path::Path,
    pid_file: &std::path::Path,
    tmp: &std::path::Path,
) -> std::process::Child {
    Command::new(ditto_bin())
        .env("TMPDIR", tmp)
        .args(["run", "--kernel", "scale_values", "--out"])
        .arg(dir.join("snap"))
        .args([
            "--",
            "sh",
            "-c",
            &format!("echo $$ > {}; exec sleep 30", pid_file.display()),
        ])
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_for_pid(pid_file: &std::path::Path) -> i32 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Some(pid) = std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the application never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn gone_within(pid: i32, limit: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        // A zombie counts as gone: it no longer runs.
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if state.is_empty() || state.split(") ").nth(1).is_some_and(|s| s.starts_with('Z')) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}

#[test]
fn a_sigint_sent_to_ditto_alone_reaches_the_application() {
    // Issue 21, item 11: only the terminal's Ctrl-C (to the whole group)
    // reached the application; `kill -INT <ditto>` left ditto waiting.
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let ditto = long_application(dir.path(), &pid_file);
    let app = wait_for_pid(&pid_file);
    // SAFETY: plain kill(2) of our child.
    unsafe { libc::kill(ditto.id() as i32, libc::SIGINT) };
    assert!(
        gone_within(app, std::time::Duration::from_secs(10)),
        "the application still runs 10 s after ditto got SIGINT"
    );
    let out = ditto.wait_with_output().unwrap();
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn an_application_does_not_outlive_a_killed_ditto() {
    // Issue 21, item 11: SIGKILL of ditto left the application running.
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let mut ditto = long_application(dir.path(), &pid_file);
    let app = wait_for_pid(&pid_file);
    ditto.kill().unwrap();
    ditto.wait().unwrap();
    assert!(
        gone_within(app, std::time::Duration::from_secs(10)),
        "the application still runs 10 s after ditto was killed"
    );
}

/// How often `needle` occurs in `haystack`.
fn occurrences(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

#[test]
fn an_error_says_its_cause_once() {
    // Issue 21, item 11: an error printed with its causes repeated them
    // ("X: Y: X: Y"): the message already said its cause, and the chain
    // said it again.
    let dir = tempfile::tempdir().unwrap();
    let not_a_snapshot = dir.path().join("snap");
    std::fs::create_dir_all(not_a_snapshot.join("manifest.json")).unwrap();
    let snap = not_a_snapshot.to_str().unwrap();
    let missing_socket_dir = dir.path().join("absent/collector.sock");
    let (collect_out, run_out) = (dir.path().join("out"), dir.path().join("r"));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        // A manifest.json that is a directory is not opened as a file.
        (vec!["compare", snap, snap], "it is a directory"),
        (vec!["inspect", snap], "it is a directory"),
        (
            vec![
                "collect",
                "--socket",
                missing_socket_dir.to_str().unwrap(),
                "--out",
                collect_out.to_str().unwrap(),
            ],
            "No such file or directory",
        ),
        (
            vec![
                "run",
                "--kernel",
                "k",
                "--out",
                run_out.to_str().unwrap(),
                "--",
                "/absent/app",
            ],
            "No such file or directory",
        ),
    ];
    for (args, cause) in cases {
        let out = ditto(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(occurrences(&err, cause), 1, "{args:?}: {err}");
        assert_eq!(occurrences(&err, "ditto: error:"), 1, "{args:?}: {err}");
    }
}

#[test]
fn the_temporary_directories_of_a_killed_ditto_are_removed_by_the_next_one() {
    // Issue 21, item 11: SIGKILL of ditto left its temporary directories
    // behind for good.
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let scratch_dirs = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&tmp)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("ditto-"))
            .collect();
        names.sort();
        names
    };
    let pid_file = dir.path().join("pid");
    let mut killed = Command::new(ditto_bin())
        .args(["validate", "--kernel", "scale_values", "--ref"])
        .arg(format!(
            "sh -c 'echo $$ > {}; exec sleep 30'",
            pid_file.display()
        ))
        .args(["--opt", "true"])
        .env("TMPDIR", &tmp)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_pid(&pid_file);
    let left = scratch_dirs();
    assert!(
        left.iter().any(|n| n.starts_with("ditto-validate-"))
            && left.iter().any(|n| n.starts_with("ditto-collector-")),
        "{left:?}"
    );
    killed.kill().unwrap();
    killed.wait().unwrap();
    assert_eq!(scratch_dirs(), left, "nothing removes them at once");
    // A directory of another ditto that still runs is kept.
    let running = long_application_in(dir.path(), &dir.path().join("pid2"), &tmp);
    wait_for_pid(&dir.path().join("pid2"));
    let kept: Vec<String> = scratch_dirs()
        .into_iter()
        .filter(|n| !left.contains(n))
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    // The next ditto, of any kind that makes such directories, sweeps.
    let snap = dir.path().join("next");
    let out = Command::new(ditto_bin())
        .args(["run", "--kernel", "scale_values<float>", "--out"])
        .arg(&snap)
        .arg("--")
        .arg(app("scale_values"))
        .args(["float", "64"])
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        scratch_dirs(),
        kept,
        "the dead ditto's directories are gone, the live one's kept"
    );
    let mut running = running;
    running.kill().unwrap();
    running.wait().unwrap();
}
