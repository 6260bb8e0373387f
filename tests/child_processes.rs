//! Processes the application starts (issue 4, item 9). A child that execs
//! inherits LD_PRELOAD and the DITTO_* variables, loads the tool afresh and
//! is captured on its own connection, its run labelled with its pid. A
//! child forked without exec has the tool's state but no worker thread:
//! the tool goes passive there and the child's exit waits for nothing.

use crate::common::*;
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

/// The run of `m` whose command line ends with `last_arg`.
fn run_ending_with<'a>(m: &'a Value, last_arg: &str) -> &'a Value {
    m["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["command_line"].as_array().unwrap().last().unwrap() == last_arg)
        .unwrap_or_else(|| panic!("no run ending with `{last_arg}` in {}", m["runs"]))
}

#[test]
fn an_execed_child_is_captured_on_its_own_connection_labelled_by_its_pid() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let mut cmd = Command::new(ditto_bin());
    cmd.args(["run", "--hsa-runtime", "cpu", "--kernel", "scale_values"])
        .arg("--out")
        .arg(&snap)
        .arg("--")
        .arg(app("spawns_children"))
        .arg("fork-exec")
        .env("NO_COLOR", "1");
    let out = output_within(
        &mut cmd,
        Duration::from_secs(60),
        "ditto run spawns_children",
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("parent: child exited with 0"),
        "{}",
        stdout(&out)
    );

    let m = snapshot_manifest(&snap);
    assert_eq!(m["runs"].as_array().unwrap().len(), 2, "{}", m["runs"]);
    let parent = run_ending_with(&m, "fork-exec");
    let child = run_ending_with(&m, "child");
    assert_ne!(parent["pid"], child["pid"]);
    assert_ne!(parent["rank"], child["rank"]);
    let dispatches = m["dispatches"].as_array().unwrap();
    assert_eq!(dispatches.len(), 2, "one dispatch per process");
    // (run, elements, factor) per process: each dispatch is labelled with
    // its own process's pid and rank, and holds that process's values.
    for (run, n, factor) in [(parent, 1024usize, 2.0f32), (child, 512, 3.0)] {
        let d = dispatches
            .iter()
            .find(|d| d["pid"] == run["pid"])
            .unwrap_or_else(|| panic!("no dispatch of pid {}", run["pid"]));
        assert_eq!(d["rank"], run["rank"]);
        assert_eq!(d["index"], 0, "indices count per process");
        let output = d["buffers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["arg"] == 1)
            .expect("the output buffer (arg 1)");
        let values = f32_tensor(
            &snap,
            d["file"].as_str().unwrap(),
            output["tensor"].as_str().unwrap(),
        );
        assert!(values.len() >= n, "{} < {n}", values.len());
        for (i, v) in values[..n].iter().enumerate() {
            assert_eq!(*v, i as f32 * factor, "pid {} output[{i}]", run["pid"]);
        }
    }
}

#[test]
fn a_child_forked_without_exec_exits_at_once_and_the_parent_is_still_captured() {
    let plain = run_plain(&app("spawns_children"), &["fork"]);
    assert_eq!(plain.status.code(), Some(0), "{}", stderr(&plain));

    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("socket");
    let snap = dir.path().join("snap");
    let collector = Collector::start(&socket, &snap);
    let mut cmd = Command::new(app("spawns_children"));
    cmd.arg("fork")
        .env("LD_LIBRARY_PATH", cpu_runtime_dir())
        .env("LD_PRELOAD", tool_lib())
        .env("DITTO_KERNEL", "scale_values")
        .env("DITTO_SOCKET", &socket)
        .env("DITTO_RUN_NAME", "forks")
        // A child that waited for the worker would take a minute.
        .env("DITTO_TIMEOUT_MS", "60000");
    let out = output_within(
        &mut cmd,
        Duration::from_secs(20),
        "spawns_children fork under the tool",
    );
    drop(collector);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), stdout(&plain));
    assert!(
        !stderr(&out).contains("ditto:"),
        "no warning: {}",
        stderr(&out)
    );

    // The parent kept capturing after the fork: both of its dispatches,
    // and nothing from the child.
    let m = snapshot_manifest(&snap.join("forks"));
    assert_eq!(m["runs"].as_array().unwrap().len(), 1, "{}", m["runs"]);
    let pid = &m["runs"][0]["pid"];
    let dispatches = m["dispatches"].as_array().unwrap();
    let indices: Vec<&Value> = dispatches.iter().map(|d| &d["index"]).collect();
    assert_eq!(indices, [0, 1], "{}", m["dispatches"]);
    assert!(dispatches.iter().all(|d| d["pid"] == *pid));
}
