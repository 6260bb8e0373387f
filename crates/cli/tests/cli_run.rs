//! `ditto run` and `ditto collect` around applications that never talk to
//! the collector: exit status reporting, the never-connected error, and
//! `collect` serving a socket until SIGTERM. They load ditto's CPU HSA
//! runtime in the collector (target/<profile>/hsa-cpu or
//! DITTO_CPU_RUNTIME_DIR: run `cargo build --workspace` first).

mod support;

use ditto_protocol::{Goodbye, ToolMessage};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

fn cpu_runtime_dir() -> PathBuf {
    let dir = match std::env::var_os("DITTO_CPU_RUNTIME_DIR") {
        Some(d) => PathBuf::from(d),
        None => std::env::current_exe()
            .unwrap()
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .join("hsa-cpu"),
    };
    assert!(
        dir.join("libhsa-runtime64.so.1").exists(),
        "ditto's CPU HSA runtime is missing in {}: run `cargo build --workspace` first (or set DITTO_CPU_RUNTIME_DIR)",
        dir.display()
    );
    dir
}

/// A loadable stand-in for libditto.so: the libc this test runs on.
fn harmless_tool() -> String {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("/libc.so") || p.contains("/libc-"))
        .expect("libc is mapped")
        .to_string()
}

fn ditto() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ditto"));
    c.env("DITTO_CPU_RUNTIME_DIR", cpu_runtime_dir())
        .env("DITTO_TOOL_LIB", harmless_tool());
    c
}

#[test]
fn run_reports_the_application_exit_status_as_an_error() {
    let out_dir = tempfile::tempdir().unwrap();
    let out = ditto()
        .args([
            "run",
            "--kernel",
            "reduce_sum",
            "--hsa-runtime",
            "cpu",
            "--out",
        ])
        .arg(out_dir.path().join("snap"))
        .args(["--", "sh", "-c", "echo app-output; exit 3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "app-output\n",
        "the app's stdout passes through"
    );
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("ditto: error: ") && e.contains("ended with exit status 3"),
        "{e}"
    );
}

#[test]
fn run_reports_a_signal() {
    let out_dir = tempfile::tempdir().unwrap();
    let out = ditto()
        .args([
            "run",
            "--kernel",
            "reduce_sum",
            "--hsa-runtime",
            "cpu",
            "--out",
        ])
        .arg(out_dir.path().join("snap"))
        .args(["--", "sh", "-c", "kill -KILL $$"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("killed by signal 9"), "{e}");
}

#[test]
fn run_says_when_the_tool_never_connected() {
    let out_dir = tempfile::tempdir().unwrap();
    let out = ditto()
        .args([
            "run",
            "--kernel",
            "reduce_sum",
            "--hsa-runtime",
            "cpu",
            "--out",
        ])
        .arg(out_dir.path().join("snap"))
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("never connected"), "{e}");
}

#[test]
fn validate_stops_at_a_failing_reference_run() {
    let out = ditto()
        .args([
            "validate",
            "--kernel",
            "reduce_sum",
            "--hsa-runtime",
            "cpu",
            "--json",
        ])
        .args(["--ref", "sh -c 'exit 4'", "--opt", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("reference run (sh -c exit 4) ended with exit status 4"),
        "{e}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], false);
}

#[test]
fn collect_serves_runs_into_their_directories_until_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("ditto.sock");
    let out = dir.path().join("snaps");
    let child = ditto()
        .args(["collect", "--hsa-runtime", "cpu", "--socket"])
        .arg(&socket)
        .arg("--out")
        .arg(&out)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !socket.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "collect never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut tool = Tool::greet(&socket, "baseline");
    // Its dispatches are counted, none as matched: nothing to account for.
    tool.send(&ToolMessage::Goodbye(Goodbye {
        dispatched: vec![(kernel(), 2)],
        matched: 0,
    }));
    drop(tool);
    let manifest = out.join("baseline/manifest.json");
    while !std::fs::read_to_string(&manifest).is_ok_and(|m| m.contains("\"count\": 2")) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the run's manifest never appeared"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let output = child.wait_with_output().unwrap();
    let e = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{e}");
    assert!(
        e.contains("run 'baseline' (pid 4242, rank 0): 0 dispatch(es) captured"),
        "{e}"
    );
    assert!(!socket.exists(), "socket removed at exit");
}

#[test]
fn sigterm_to_ditto_run_ends_the_application_and_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("app-started");
    let mut child = ditto()
        .args([
            "run",
            "--kernel",
            "reduce_sum",
            "--hsa-runtime",
            "cpu",
            "--out",
        ])
        .arg(dir.path().join("snap"))
        .arg("--")
        .args(["sh", "-c", "touch \"$0\"; exec sleep 60"])
        .arg(&started)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !started.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the application never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: signalling our own child (ditto only, not the application).
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let signalled = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if signalled.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("ditto kept waiting for an application it never told to stop");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    let e = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{e}");
    assert!(e.contains("killed by signal 15"), "{e}");
}
