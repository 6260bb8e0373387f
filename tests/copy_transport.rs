//! Memory IPC cannot export, on a real application: host_output's output
//! is malloc'd host memory registered with hsa_amd_memory_lock (what
//! hipHostRegister does). The runtime refuses its IPC export, so the tool
//! copies it into shared memory passed over the socket; the plain
//! `ditto run --kernel NAME -- APP` captures it, the manifest says which
//! transport each buffer used, and nobody keeps a copy after the ack.

use crate::common::*;
use std::path::Path;
use std::process::{Command, Stdio};

const KERNEL: &str = "square_into_host";
const N: usize = 3000;

/// What host_output computes: output[i] = input[i]^2 + 1, input[i] = (i % 17) / 4.
fn expected_output() -> Vec<f32> {
    (0..N)
        .map(|i| {
            let x = (i % 17) as f32 * 0.25;
            x * x + 1.0
        })
        .collect()
}

/// `ditto run --kernel square_into_host [EXTRA] -- host_output` in `dir`
/// (so the snapshot lands in dir/ditto-snapshot). On a machine with a GPU
/// the CPU runtime is asked for explicitly; elsewhere it is the default.
fn ditto_run_in(dir: &Path, extra: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(ditto_bin());
    cmd.current_dir(dir).args(["run", "--kernel", KERNEL]);
    if Path::new("/dev/kfd").exists() {
        cmd.args(["--hsa-runtime", "cpu"]);
    }
    cmd.args(extra)
        .arg("--")
        .arg(app("host_output"))
        .env("NO_COLOR", "1")
        // The transports under test are IPC and the shared-memory copy.
        .env("DITTO_STAGING_MIB", "0")
        .output()
        .expect("run ditto")
}

/// The value after `key = ` in the app's output line.
fn printed(line: &str, key: &str) -> f64 {
    let at = line
        .find(&format!("{key} = "))
        .unwrap_or_else(|| panic!("{key} in {line}"));
    line[at + key.len() + 3..]
        .split([',', '\n'])
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn the_default_run_captures_a_locked_host_output_through_shared_memory() {
    let plain = run_plain(&app("host_output"), &[]);
    assert_eq!(plain.status.code(), Some(0), "{}", stderr(&plain));
    let dir = tempfile::tempdir().unwrap();
    let run = ditto_run_in(dir.path(), &[]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    assert_eq!(
        stdout(&run),
        stdout(&plain),
        "the application's output is unchanged"
    );

    let snap = dir.path().join("ditto-snapshot");
    let m = snapshot_manifest(&snap);
    let d = &m["dispatches"][0];
    assert_eq!(m["dispatches"].as_array().unwrap().len(), 1);
    let buffers = d["buffers"].as_array().unwrap();
    assert_eq!(buffers.len(), 1, "the output only: {buffers:?}");
    let b = &buffers[0];
    assert_eq!(b["arg"], 1);
    assert_eq!(b["transport"], "shared-memory");
    assert!(b.get("handle").is_none(), "a copy has no IPC handle: {b}");
    assert_eq!(b["extent"], (N * 4) as u64);
    assert_eq!(b["alloc_size"], (N * 4) as u64, "the whole locked range");

    let captured = f32_tensor(&snap, d["file"].as_str().unwrap(), "arg1");
    assert_eq!(captured, expected_output());
    // ...which is what the application itself printed.
    let line = stdout(&plain);
    assert_eq!(captured[1] as f64, printed(&line, "output[1]"));
    assert_eq!(captured[16] as f64, printed(&line, "output[16]"));
    assert_eq!(
        captured[N - 1] as f64,
        printed(&line, &format!("output[{}]", N - 1))
    );
    let sum: f64 = captured.iter().map(|&v| v as f64).sum();
    assert_eq!(format!("{sum:.2}"), format!("{:.2}", printed(&line, "sum")));
}

#[test]
fn with_capture_all_pool_buffers_use_ipc_and_the_host_buffer_shared_memory() {
    let dir = tempfile::tempdir().unwrap();
    let run = ditto_run_in(dir.path(), &["--capture", "all"]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let snap = dir.path().join("ditto-snapshot");
    let m = snapshot_manifest(&snap);
    let d = &m["dispatches"][0];
    let mut seen: Vec<(String, String, bool)> = d["buffers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["tensor"].as_str().unwrap().to_string(),
                b["transport"].as_str().unwrap().to_string(),
                b.get("handle").is_some(),
            )
        })
        .collect();
    seen.sort();
    let row = |t: &str, tr: &str, h: bool| (t.to_string(), tr.to_string(), h);
    assert_eq!(
        seen,
        vec![
            row("arg0", "ipc", true),
            row("arg0.before", "ipc", true),
            row("arg1", "shared-memory", false),
            row("arg1.before", "shared-memory", false),
        ]
    );
    let file = d["file"].as_str().unwrap();
    assert_eq!(
        f32_tensor(&snap, file, "arg1.before"),
        vec![-1.0; N],
        "the host output before the kernel ran"
    );
    assert_eq!(f32_tensor(&snap, file, "arg1"), expected_output());
    let input: Vec<f32> = (0..N).map(|i| (i % 17) as f32 * 0.25).collect();
    assert_eq!(f32_tensor(&snap, file, "arg0.before"), input);
}

/// Fds and mappings of process `pid` that refer to the tool's copies.
fn copies_held(pid: u32) -> (usize, usize) {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("read /proc/<pid>/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|t| t.to_string_lossy().starts_with("/memfd:ditto-copy"))
        .count();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .expect("read /proc/<pid>/maps")
        .lines()
        .filter(|l| l.contains("/memfd:ditto-copy"))
        .count();
    (fds, maps)
}

#[test]
fn no_process_keeps_a_copy_or_a_mapping_after_the_ack() {
    // The probe sees a copy where one exists.
    let probe = [1u8; 64];
    let copy =
        ditto::capture::shared_memory::copy_to_sealed_memfd(probe.as_ptr() as u64, 64).unwrap();
    assert_eq!(copies_held(std::process::id()), (1, 0));
    drop(copy);

    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("collector.sock");
    let out = dir.path().join("snapshots");
    let pauses = dir.path().join("pauses");
    std::fs::create_dir(&pauses).unwrap();
    let collector = Collector::start(&socket, &out);
    let mut app = ditto_run(&socket, KERNEL, "paused", &app("host_output"))
        .env("DITTO_STAGING_MIB", "0")
        .arg("--pause-dir")
        .arg(&pauses)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(
        &pauses.join("synced-0"),
        "host_output's pause after its dispatch",
    );
    // Acknowledged: the snapshot has it, through shared memory...
    let m = snapshot_manifest(&out.join("paused"));
    assert_eq!(
        m["dispatches"][0]["buffers"][0]["transport"],
        "shared-memory"
    );
    // ...and neither side holds the copy any more.
    assert_eq!(
        copies_held(collector.pid()),
        (0, 0),
        "the collector, after the ack"
    );
    assert_eq!(pool_mappings(collector.pid()), 0);
    assert_eq!(
        copies_held(app.id()),
        (0, 0),
        "the application, after the send"
    );
    std::fs::write(pauses.join("resume-0"), b"").unwrap();
    let status = app.wait().unwrap();
    assert!(status.success(), "host_output under the tool: {status:?}");
}
