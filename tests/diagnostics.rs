//! What ditto says when a run goes wrong, end to end on the CPU runtime, and
//! that none of it hangs: a kernel never dispatched, an application killed
//! in the middle of a capture, an application past `--timeout`.

use crate::common::*;
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

#[test]
fn a_tool_that_gave_up_before_the_welcome_is_a_failed_capture_not_a_kernel_never_dispatched() {
    // Issue 36, item 6: DITTO_TIMEOUT_MS shorter than the collector's
    // answer to Hello ended in "never dispatched a kernel matching".
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("collector.sock");
    let out = dir.path().join("snapshots");
    let log = dir.path().join("collector.log");
    let collector = Collector::start_logging(&socket, &out, &log);
    // SAFETY: plain kill(2) of our own child.
    unsafe { libc::kill(collector.pid() as i32, libc::SIGSTOP) };
    let mut run = ditto_run(
        &socket,
        "scale_values<float>",
        "early",
        &app("scale_values"),
    );
    run.env("DITTO_TIMEOUT_MS", "200").args(["float", "64"]);
    let o = output_within(&mut run, Duration::from_secs(60), "the application");
    // SAFETY: as above.
    unsafe { libc::kill(collector.pid() as i32, libc::SIGCONT) };
    assert_eq!(
        o.status.code(),
        Some(0),
        "runs on uncaptured: {}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("no Welcome from the collector within 200 ms"),
        "{}",
        stderr(&o)
    );
    // The collector reads the Hello once continued and finds the tool gone.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log)
        .unwrap()
        .contains("run 'early'")
    {
        assert!(
            Instant::now() < deadline,
            "{}",
            std::fs::read_to_string(&log).unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: as above.
    unsafe { libc::kill(collector.pid() as i32, libc::SIGTERM) };
    drop(collector);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("1 connection failed")
            && text.contains(
                "the tool stopped waiting for the collector's Welcome before it was sent"
            )
            && text.contains("raise DITTO_TIMEOUT_MS"),
        "{text}"
    );
    assert!(!text.contains("never dispatched"), "{text}");
}

#[test]
fn an_argument_arg_sizes_sizes_that_is_left_out_fails_the_run_naming_it() {
    // Issue 36, item 6: an --arg-sizes expression that overflows warned,
    // then the run exited 0 as if the capture were whole.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("snap");
    let o = ditto(&[
        "run",
        "--kernel",
        "scale_values<float>",
        "--arg-sizes",
        "arg1=18446744073709551615*18446744073709551615",
        "--out",
        out.to_str().unwrap(),
        "--",
        app("scale_values").to_str().unwrap(),
        "float",
        "64",
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "but not the argument --arg-sizes \"arg1=18446744073709551615*18446744073709551615\" \
             sizes: 1 of them left out; the first: dispatch 0 of rank 0, arg1:"
        ) && err.contains("the size of arg1 overflows"),
        "{err}"
    );
    // The snapshot keeps what was captured, and says what was left out.
    let m = snapshot_manifest(&out);
    assert_eq!(m["missing"][0]["arg"].as_u64(), Some(1), "{m}");
}
