//! Fail-open: with no collector listening, the tool logs once, releases every
//! held dispatch and the application runs on with its normal output.

mod common;
use common::*;
use std::process::Command;

#[test]
fn application_without_collector_prints_what_it_prints_without_the_tool() {
    let plain = run_plain(&app("scale_twice"), &[]);
    assert!(
        plain.status.success(),
        "plain run failed: {}",
        stderr(&plain)
    );

    let dir = tempfile::tempdir().unwrap();
    let under_tool = Command::new(app("scale_twice"))
        .env("LD_LIBRARY_PATH", cpu_runtime_dir())
        .env("LD_PRELOAD", tool_lib())
        .env("DITTO_KERNEL", "scale_values")
        .env("DITTO_SOCKET", dir.path().join("nobody-listens.sock"))
        .env("DITTO_TIMEOUT_MS", "2000")
        .output()
        .unwrap();
    assert_eq!(
        under_tool.status.code(),
        Some(0),
        "stderr:\n{}",
        stderr(&under_tool)
    );
    assert_eq!(
        stdout(&under_tool),
        stdout(&plain),
        "the tool changed the application's output"
    );
    let log = stderr(&under_tool);
    assert_eq!(log.matches("ditto:").count(), 1, "logs once, got:\n{log}");
}

#[test]
fn held_inputs_are_released_too_when_no_collector_listens() {
    let plain = run_plain(&app("scale_twice"), &[]);
    let dir = tempfile::tempdir().unwrap();
    let under_tool = Command::new(app("scale_twice"))
        .env("LD_LIBRARY_PATH", cpu_runtime_dir())
        .env("LD_PRELOAD", tool_lib())
        .env("DITTO_KERNEL", "scale_values")
        .env("DITTO_CAPTURE", "all")
        .env("DITTO_SOCKET", dir.path().join("nobody-listens.sock"))
        .env("DITTO_TIMEOUT_MS", "2000")
        .output()
        .unwrap();
    assert_eq!(under_tool.status.code(), Some(0), "{}", stderr(&under_tool));
    assert_eq!(stdout(&under_tool), stdout(&plain));
}
