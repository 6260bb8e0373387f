//! DITTO_LOG filters ditto's own status lines and, inside the application,
//! the tool library's: `off` silences both, the default keeps the summary.

use crate::common::*;
use std::process::Command;

fn run_with_log(level: Option<&str>) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Command::new(ditto_bin());
    c.args([
        "run",
        "--hsa-runtime",
        "cpu",
        "--kernel",
        "scale_values",
        "--out",
    ])
    .arg(dir.path().join("snap"))
    .arg("--")
    .arg(app("scale_twice"));
    if let Some(level) = level {
        c.env("DITTO_LOG", level);
    }
    c.output().unwrap()
}

#[test]
fn ditto_log_off_silences_status_lines_and_the_default_prints_the_summary() {
    let default = run_with_log(None);
    assert_eq!(default.status.code(), Some(0), "{}", stderr(&default));
    assert!(
        stderr(&default).contains("captured 2 dispatches"),
        "{}",
        stderr(&default)
    );

    let off = run_with_log(Some("off"));
    assert_eq!(off.status.code(), Some(0), "{}", stderr(&off));
    assert!(
        !stderr(&off).contains("ditto:"),
        "DITTO_LOG=off still logged:\n{}",
        stderr(&off)
    );
    // The application's own output is untouched either way.
    assert_eq!(stdout(&off), stdout(&default));
}
