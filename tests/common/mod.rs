//! Locating what `cargo build --workspace` produced, and running it: the
//! `ditto` binary, the tool library, the CPU runtime and the test apps, all
//! under the same target/<profile>/ directory as this test executable.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// target/<profile>/ — the test executable lives in target/<profile>/deps/.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("test executable is under target/<profile>/deps")
        .to_path_buf()
}

fn built(path: PathBuf) -> PathBuf {
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace` (or scripts/test) first",
        path.display()
    );
    path
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn ditto_bin() -> PathBuf {
    built(profile_dir().join("ditto"))
}

pub fn tool_lib() -> PathBuf {
    built(profile_dir().join("libditto.so"))
}

pub fn cpu_runtime_dir() -> PathBuf {
    let dir = profile_dir().join("hsa-cpu");
    built(dir.join("libhsa-runtime64.so.1"));
    dir
}

pub fn app(name: &str) -> PathBuf {
    built(profile_dir().join("apps").join(name))
}

/// `ditto ARGS` on the CPU runtime.
pub fn ditto(args: &[&str]) -> Output {
    Command::new(ditto_bin())
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run ditto")
}

/// Runs `cmd` directly on the CPU runtime, without the tool.
pub fn run_plain(cmd: &Path, args: &[&str]) -> Output {
    Command::new(cmd)
        .args(args)
        .env("LD_LIBRARY_PATH", cpu_runtime_dir())
        .output()
        .expect("run app")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "ditto --json printed no JSON ({e}); stdout:\n{}\nstderr:\n{}",
            stdout(o),
            stderr(o)
        )
    })
}
