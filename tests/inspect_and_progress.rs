//! `ditto inspect` on a real snapshot, the progress line (only on a
//! terminal), and snapshot file names that never carry a kernel's
//! characters (`<`, `>`, `:`, `*`, spaces).

use crate::common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn run_scale_twice(out: &Path) {
    let o = ditto(&[
        "run",
        "--hsa-runtime",
        "cpu",
        "--kernel",
        "scale_values<float>",
        "--out",
        out.to_str().unwrap(),
        "--",
        app("scale_twice").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn inspect_reports_min_max_mean_and_dumps_values() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("snap");
    run_scale_twice(&out);

    let o = ditto(&["inspect", "--json", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = json(&o);
    let d = v["dispatches"].as_array().unwrap();
    assert_eq!(d.len(), 2);
    // Dispatch 1 computes output = 3 * middle, middle[i] = 2 * i, i < 1024.
    let output = &d[1]["arrays"][1];
    assert_eq!(output["arg"], 1);
    assert_eq!(output["elements"], 1024);
    assert_eq!(output["min"].as_f64(), Some(0.0));
    assert_eq!(output["max"].as_f64(), Some(6.0 * 1023.0));
    assert_eq!(output["mean"].as_f64(), Some(3.0 * 1023.0));
    assert_eq!(output["nan"], 0);
    assert_eq!(output["inf"], 0);

    let o = ditto(&["inspect", out.to_str().unwrap(), "--dump", "1"]);
    let text = stdout(&o);
    assert!(text.contains("0 2 4 6 8 10 12 14"), "{text}");
    assert!(text.contains("0 6 12 18 24"), "dispatch 1's output: {text}");
}

#[test]
fn snapshot_file_names_never_carry_kernel_characters() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("snap");
    run_scale_twice(&out);
    for entry in std::fs::read_dir(&out).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)),
            "unsafe file name {name:?}"
        );
    }
}

/// `ditto run` on scale_twice, pausing the app for `pause` after each
/// dispatch so a progress line has time to be drawn; returns ditto's stderr
/// as the terminal (or the pipe) received it.
fn ditto_run_with_pauses(on_terminal: bool, pause: Duration) -> String {
    let dir = tempfile::tempdir().unwrap();
    let pauses = dir.path().join("pauses");
    std::fs::create_dir(&pauses).unwrap();
    let out = dir.path().join("snap");
    let argv = format!(
        "{} run --hsa-runtime cpu --kernel scale_values --out {} -- {} --pause-dir {}",
        ditto_bin().display(),
        out.display(),
        app("scale_twice").display(),
        pauses.display()
    );
    let typescript = dir.path().join("typescript");
    let mut child = if on_terminal {
        // script(1) gives the command a pseudo-terminal and records it.
        Command::new("script")
            .args(["-qec", &argv])
            .arg(&typescript)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap()
    } else {
        Command::new("sh")
            .args(["-c", &format!("{argv} 2> {}", typescript.display())])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    for k in 0..2 {
        wait_for(&pauses.join(format!("synced-{k}")), "the app's pause");
        std::thread::sleep(pause);
        std::fs::write(pauses.join(format!("resume-{k}")), b"").unwrap();
    }
    assert!(child.wait().unwrap().success());
    String::from_utf8_lossy(&std::fs::read(&typescript).unwrap()).into_owned()
}

#[test]
fn progress_is_drawn_on_a_terminal_and_nowhere_else() {
    let pause = Duration::from_millis(700);
    let terminal = ditto_run_with_pauses(true, pause);
    assert!(
        terminal.contains("\r\x1b[2Kditto: captured 1 dispatch"),
        "no progress line on the terminal:\n{terminal:?}"
    );
    let piped = ditto_run_with_pauses(false, pause);
    assert!(
        !piped.contains('\x1b'),
        "escape codes in a pipe:\n{piped:?}"
    );
    assert!(
        !piped.contains("ditto: captured 1 dispatch ("),
        "progress in a pipe:\n{piped}"
    );
    assert!(
        piped.contains("captured 2 dispatches"),
        "the summary is still printed:\n{piped}"
    );
}
