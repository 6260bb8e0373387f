//! What ditto says when a run goes wrong, end to end on the CPU runtime, and
//! that none of it hangs: a kernel never dispatched, an application killed
//! in the middle of a capture, an application past `--timeout`.

mod common;
use common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn a_kernel_never_dispatched_lists_what_ran_with_counts_and_the_closest_name() {
    let dir = tempfile::tempdir().unwrap();
    let out = ditto(&[
        "run",
        "--hsa-runtime",
        "cpu",
        "--kernel",
        "vector_ad",
        "--out",
        dir.path().join("snap").to_str().unwrap(),
        "--",
        app("no_dispatch").to_str().unwrap(),
    ]);
    let e = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert!(
        e.contains("never dispatched a kernel matching \"vector_ad\""),
        "{e}"
    );
    assert!(
        e.contains("vector_add(float const*, float const*, float*, int) ×1"),
        "the dispatched kernel with its count: {e}"
    );
    assert!(
        e.contains("closest to \"vector_ad\": \"vector_add\""),
        "{e}"
    );
}

fn wait_for_file(path: &std::path::Path) {
    wait_for(path, "the application's pause marker");
}

#[test]
fn a_killed_application_reports_its_signal_what_was_in_flight_and_what_was_saved() {
    let dir = tempfile::tempdir().unwrap();
    let pause = dir.path().join("pause");
    std::fs::create_dir(&pause).unwrap();
    let snap = dir.path().join("snap");
    let child = Command::new(ditto_bin())
        .args([
            "run",
            "--hsa-runtime",
            "cpu",
            "--kernel",
            "scale_values",
            "--out",
        ])
        .arg(&snap)
        .arg("--")
        .arg(app("scale_twice"))
        .arg("--pause-dir")
        .arg(&pause)
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Dispatch 0 is acknowledged (and stored) before the app says synced-0.
    wait_for_file(&pause.join("synced-0"));
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(snap.join("manifest.json")).unwrap()).unwrap();
    let app_pid = manifest["runs"][0]["pid"].as_i64().unwrap() as i32;
    // SAFETY: plain kill(2) of the application ditto started for this test.
    assert_eq!(unsafe { libc::kill(app_pid, libc::SIGKILL) }, 0);
    let out = child.wait_with_output().unwrap();
    let e = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert!(e.contains("ended with killed by signal 9"), "{e}");
    assert!(e.contains("no dispatch was in flight"), "{e}");
    assert!(
        e.contains(&format!(
            "saved 1 dispatch (rank 0: dispatch 0) in {}",
            snap.display()
        )),
        "{e}"
    );
}

#[test]
fn a_timeout_stops_the_application_and_says_what_was_pending() {
    let dir = tempfile::tempdir().unwrap();
    let pause = dir.path().join("pause");
    std::fs::create_dir(&pause).unwrap();
    let started = Instant::now();
    // The application waits for resume-0, which never comes.
    let out = ditto(&[
        "run",
        "--hsa-runtime",
        "cpu",
        "--kernel",
        "scale_values",
        "--timeout",
        "2",
        "--out",
        dir.path().join("snap").to_str().unwrap(),
        "--",
        app("scale_twice").to_str().unwrap(),
        "--pause-dir",
        pause.to_str().unwrap(),
    ]);
    let e = stderr(&out);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert!(e.contains("no exit within the 2 s timeout"), "{e}");
    assert!(
        e.contains("pending at the timeout: run 'scale_twice' (pid ")
            && e.contains(", rank 0): 1 dispatch(es) captured, the last dispatch 0; waiting for its next dispatch"),
        "{e}"
    );
    assert!(e.contains("saved 1 dispatch (rank 0: dispatch 0)"), "{e}");
}
