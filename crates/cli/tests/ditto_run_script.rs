//! scripts/ditto-run: the environment it gives the command, and its errors.

use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::Command;

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/ditto-run")
}

/// A shared library that is certainly loadable: the libc this test runs on.
fn loadable_library() -> String {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("/libc.so") || p.contains("/libc-"))
        .expect("libc is mapped")
        .to_string()
}

#[test]
fn the_command_gets_the_tool_environment_for_the_cpu_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("sock");
    let _listener = UnixListener::bind(&socket).unwrap();
    let cpu = dir.path().join("hsa-cpu");
    std::fs::create_dir(&cpu).unwrap();
    std::fs::write(cpu.join("libhsa-runtime64.so.1"), "").unwrap();
    let tool = loadable_library();
    let out = Command::new(script())
        .args(["--socket", socket.to_str().unwrap(), "--kernel", "scale_values", "--arg-types", "f32*,i32"])
        .args(["--run", "ref", "--hsa-runtime", "cpu", "--"])
        .args(["sh", "-c", "echo \"$LD_PRELOAD|$DITTO_KERNEL|$DITTO_SOCKET|$DITTO_RUN_NAME|$DITTO_ARG_TYPES|$LD_LIBRARY_PATH\""])
        .env("DITTO_TOOL_LIB", &tool)
        .env("DITTO_CPU_RUNTIME_DIR", &cpu)
        .env("LD_LIBRARY_PATH", "/usr/local/lib")
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8(out.stdout).unwrap();
    let fields: Vec<&str> = line.trim_end().split('|').collect();
    assert_eq!(
        fields,
        [
            tool.as_str(),
            "scale_values",
            socket.to_str().unwrap(),
            "ref",
            "f32*,i32",
            &format!("{}:/usr/local/lib", cpu.display()),
        ]
    );
}

#[test]
fn relative_tool_and_runtime_paths_are_made_absolute() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("sock");
    let _listener = UnixListener::bind(&socket).unwrap();
    std::fs::create_dir(dir.path().join("hsa-cpu")).unwrap();
    std::fs::write(dir.path().join("hsa-cpu/libhsa-runtime64.so.1"), "").unwrap();
    // A relative DITTO_TOOL_LIB that names the real libc through a link.
    std::os::unix::fs::symlink(loadable_library(), dir.path().join("libditto.so")).unwrap();
    let out = Command::new(script())
        .current_dir(dir.path())
        .args([
            "--socket",
            "sock",
            "--kernel",
            "k",
            "--hsa-runtime",
            "cpu",
            "--",
        ])
        .args([
            "sh",
            "-c",
            "echo \"$LD_PRELOAD|$LD_LIBRARY_PATH|$DITTO_SOCKET\"",
        ])
        .env("DITTO_TOOL_LIB", "libditto.so")
        .env("DITTO_CPU_RUNTIME_DIR", "hsa-cpu")
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8(out.stdout).unwrap();
    let d = dir.path().display();
    assert_eq!(
        line.trim_end(),
        format!("{d}/libditto.so|{d}/hsa-cpu|{d}/sock")
    );
}

#[test]
fn a_missing_collector_socket_is_an_error_saying_what_to_start() {
    let out = Command::new(script())
        .args([
            "--socket",
            "/nonexistent/ditto.sock",
            "--kernel",
            "k",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("ditto collect --socket /nonexistent/ditto.sock"),
        "{e}"
    );
}

#[test]
fn the_command_exit_status_is_the_scripts() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("sock");
    let _listener = UnixListener::bind(&socket).unwrap();
    let out = Command::new(script())
        .args([
            "--socket",
            socket.to_str().unwrap(),
            "--kernel",
            "k",
            "--hsa-runtime",
            "system",
            "--",
            "sh",
            "-c",
            "exit 7",
        ])
        .env("DITTO_TOOL_LIB", loadable_library())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
