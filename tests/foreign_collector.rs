//! The tool sends nothing to a collector of another uid (issue 21, item
//! 2). A listener run as uid 65534 at the socket path receives not one
//! byte (not even the Hello, which carries the command line), the tool
//! warns once and the application runs on with its own output;
//! DITTO_COLLECTOR_UID=65534 trusts that listener (it then gets the
//! Hello). Needs root, to run the listener as another uid: CI runs as root.

use crate::common::*;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

const OTHER_UID: u32 = 65534;

/// Accepts one connection and prints how many bytes it sent before it
/// closed or went quiet for 3 s.
const LISTENER: &str = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(1)
print("listening", flush=True)
s.settimeout(60)
c, _ = s.accept()
c.settimeout(3)
n = 0
try:
    while True:
        b = c.recv(65536)
        if not b:
            break
        n += len(b)
except socket.timeout:
    pass
print(n, flush=True)
"#;

/// scale_values under the tool, its collector a listener of uid 65534;
/// (the application's stdout and stderr, the bytes the listener got).
fn run_against_foreign_listener(extra_env: &[(&str, String)]) -> (String, String, u64) {
    // SAFETY: getuid cannot fail.
    assert_eq!(
        unsafe { libc::getuid() },
        0,
        "this test runs a listener as another uid, which needs root (CI runs as root)"
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let socket = dir.path().join("collector.sock");
    let mut listener = Command::new("python3")
        .args(["-c", LISTENER])
        .arg(&socket)
        .uid(OTHER_UID)
        .gid(OTHER_UID)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(listener.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "listening");
    let mut cmd = Command::new(app("scale_values"));
    cmd.args(["float", "256"])
        .env("LD_LIBRARY_PATH", cpu_runtime_dir())
        .env("HSA_TOOLS_LIB", tool_lib())
        .env("DITTO_KERNEL", "scale_values<float>")
        .env("DITTO_SOCKET", &socket)
        .env("DITTO_TIMEOUT_MS", "500")
        .env("NO_COLOR", "1")
        .env_remove("LD_PRELOAD");
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let got: u64 = lines.next().unwrap().unwrap().trim().parse().unwrap();
    listener.wait().unwrap();
    (stdout(&out), stderr(&out), got)
}

#[test]
fn the_tool_sends_nothing_to_a_collector_of_another_uid() {
    let plain = run_plain(&app("scale_values"), &["float", "256"]);
    let (out, err, got) = run_against_foreign_listener(&[]);
    assert_eq!(got, 0, "bytes sent to the foreign listener; stderr:\n{err}");
    assert_eq!(out, stdout(&plain), "the application's output is its own");
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("runs as uid")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains(&format!(
            "runs as uid {OTHER_UID}, not as uid 0: nothing is sent to it"
        )) && warnings[0].contains(&format!("DITTO_COLLECTOR_UID={OTHER_UID}")),
        "{}",
        warnings[0]
    );
}

#[test]
fn ditto_collector_uid_trusts_a_collector_of_that_uid() {
    let (_, err, got) =
        run_against_foreign_listener(&[("DITTO_COLLECTOR_UID", OTHER_UID.to_string())]);
    assert!(
        got > 0,
        "the trusted listener got the Hello; stderr:\n{err}"
    );
    assert!(!err.contains("runs as uid"), "{err}");
}
