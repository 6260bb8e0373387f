//! Locating what `cargo build --workspace` produced, and running it: the
//! `ditto` binary, the tool library, the CPU runtime and the test apps, all
//! under the same target/<profile>/ directory as this test executable.
#![allow(dead_code)]

pub mod cpu_features;
pub mod hip_suite;
pub mod many_queues;
pub mod model_gpu;
pub mod module_graph;

pub use cpu_features::cpu_has_protection_keys;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

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

/// A hipcc-built application of tests/hip/ (its host build beside it).
pub fn hip_app(name: &str) -> PathBuf {
    built(profile_dir().join("apps").join("hip").join(name))
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

/// A Triton cache under `dir` holding `kernel` as the installed Triton
/// compiles it for `target` (`cuda`: sm_90, `hip`: gfx942), without a GPU:
/// real metadata, Triton IR and binary (tests/triton/compile_to_cache.py;
/// scripts/install-deps installs Triton).
pub fn real_triton_cache(dir: &Path, target: &str, kernel: &str) -> PathBuf {
    let cache = dir.join(format!("real-triton-{target}-{kernel}"));
    let o = Command::new("python3")
        .arg(repo_root().join("tests/triton/compile_to_cache.py"))
        .arg(&cache)
        .arg(target)
        .arg(kernel)
        .output()
        .expect("run python3");
    assert!(
        o.status.success(),
        "compiling {kernel} for {target} with Triton: {}",
        stderr(&o)
    );
    cache
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

/// A `ditto collect` process serving one socket; stopped (SIGTERM) on drop.
pub struct Collector {
    child: Child,
}

impl Collector {
    pub fn start(socket: &Path, out: &Path) -> Collector {
        Self::start_with(socket, out, |c| c.stderr(Stdio::inherit()))
    }

    /// [`Collector::start`] of one node's collector of several writing
    /// `out` (`--node NAME`).
    pub fn start_node(socket: &Path, out: &Path, node: &str) -> Collector {
        Self::start_with(socket, out, |c| {
            c.args(["--node", node])
                .env_remove("SLURM_JOB_ID")
                .env_remove("PMIX_NAMESPACE")
                .stderr(Stdio::inherit())
        })
    }

    /// [`Collector::start_node`] in Slurm job `job` (`SLURM_JOB_ID`).
    pub fn start_node_in_job(socket: &Path, out: &Path, node: &str, job: &str) -> Collector {
        Self::start_with(socket, out, |c| {
            c.args(["--node", node])
                .env("SLURM_JOB_ID", job)
                .stderr(Stdio::inherit())
        })
    }

    /// [`Collector::start`] with `DITTO_LOG=debug`, its standard error
    /// written into the file `log`.
    pub fn start_logging(socket: &Path, out: &Path, log: &Path) -> Collector {
        let file = std::fs::File::create(log)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", log.display()));
        Self::start_with(socket, out, |c| c.env("DITTO_LOG", "debug").stderr(file))
    }

    /// [`Collector::start_logging`] with extra environment variables.
    pub fn start_logging_with(
        socket: &Path,
        out: &Path,
        log: &Path,
        envs: &[(&str, &str)],
    ) -> Collector {
        let file = std::fs::File::create(log)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", log.display()));
        Self::start_with(socket, out, |c| {
            c.env("DITTO_LOG", "debug")
                .envs(envs.iter().copied())
                .stderr(file)
        })
    }

    fn start_with(
        socket: &Path,
        out: &Path,
        configure: impl FnOnce(&mut Command) -> &mut Command,
    ) -> Collector {
        let mut cmd = Command::new(ditto_bin());
        cmd.args(["collect", "--hsa-runtime", "cpu", "--socket"])
            .arg(socket)
            .arg("--out")
            .arg(out)
            .env("DITTO_CPU_RUNTIME_DIR", cpu_runtime_dir())
            .stdout(Stdio::null());
        let child = configure(&mut cmd).spawn().expect("start ditto collect");
        wait_for(socket, "ditto collect's socket");
        Collector { child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the collector with SIGKILL (no chance to clean up) and reaps it.
    pub fn kill_now(&mut self) {
        self.child.kill().expect("SIGKILL ditto collect");
        self.child.wait().expect("reap ditto collect");
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: plain kill(2) on our own child, not yet reaped.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        }
        let _ = self.child.wait();
    }
}

/// Runs `cmd` to its end, failing the test with `what` if it has not ended
/// within `limit` (then it and every process it started are killed: it
/// runs in a process group of its own). Standard output and error are
/// captured.
pub fn output_within(cmd: &mut Command, limit: Duration, what: &str) -> Output {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let mut child = cmd
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    // Both pipes are drained while the child runs: a child that writes more
    // than a pipe holds (64 KiB) must not block on it and look hung.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let out_reader = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err_reader = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break status;
        }
        if Instant::now() > deadline {
            // SAFETY: plain kill(2) of the process group our child leads.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let status = child.wait().expect("reap the child");
            let out = Output {
                status,
                stdout: out_reader.join().unwrap_or_default(),
                stderr: err_reader.join().unwrap_or_default(),
            };
            panic!(
                "{what} did not end within {} s (killed); stdout:\n{}\nstderr:\n{}",
                limit.as_secs(),
                stdout(&out),
                stderr(&out)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: out_reader.join().expect("read the child's stdout"),
        stderr: err_reader.join().expect("read the child's stderr"),
    }
}

/// Waits (20 s at most) until `path` exists.
pub fn wait_for(path: &Path, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{what} ({}) never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Mappings of the CPU runtime's pool memory (memfd "hsa-cpu-pool") held by
/// process `pid`: every IPC attachment shows up as one.
pub fn pool_mappings(pid: u32) -> usize {
    maps_naming(pid, "hsa-cpu-pool")
}

/// Lines of `pid`'s /proc maps that contain `needle`.
pub fn maps_naming(pid: u32, needle: &str) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .expect("read /proc/<pid>/maps")
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}

/// The collector's debug lines of attachments made for `rank`.
pub fn attach_lines(log: &str, rank: u32) -> Vec<&str> {
    log.lines()
        .filter(|l| l.starts_with("ditto: debug: attach at "))
        .filter(|l| l.contains(&format!(", rank {rank})")))
        .collect()
}

/// `scripts/ditto-run` preloading this profile's tool, on the CPU runtime.
pub fn ditto_run(socket: &Path, kernel: &str, run: &str, cmd: &Path) -> Command {
    let mut c = Command::new(repo_root().join("scripts/ditto-run"));
    c.arg("--socket")
        .arg(socket)
        .args([
            "--kernel",
            kernel,
            "--hsa-runtime",
            "cpu",
            "--run",
            run,
            "--",
        ])
        .arg(cmd)
        .env("DITTO_TOOL_LIB", tool_lib())
        .env("DITTO_CPU_RUNTIME_DIR", cpu_runtime_dir());
    c
}

/// `ditto compare --json REFERENCE OPTIMIZED`: its JSON report (the
/// output for messages).
pub fn compare_json(reference: &Path, optimized: &Path) -> (serde_json::Value, Output) {
    let out = ditto(&[
        "compare",
        "--json",
        reference.to_str().unwrap(),
        optimized.to_str().unwrap(),
    ]);
    (json(&out), out)
}

/// A manifest dispatch's buffers as (tensor, phase), in manifest order.
pub fn buffer_phases(d: &serde_json::Value) -> Vec<(String, String)> {
    d["buffers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["tensor"].as_str().unwrap().to_string(),
                b["phase"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// (dispatch, arg, mismatched, total, max abs diff, its index) of each
/// mismatch of a JSON report of `compare`, `validate` or `replay`.
pub fn mismatch_fields(v: &serde_json::Value) -> Vec<serde_json::Value> {
    v["mismatches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            serde_json::json!([
                m["dispatch"],
                m["arg"],
                m["mismatched_elements"],
                m["total_elements"],
                m["max_abs_diff"],
                m["max_abs_diff_index"]
            ])
        })
        .collect()
}

/// A snapshot's manifest.json with the dispatches that so far only its
/// journal (dispatches.jsonl) holds, as `ditto compare` reads it: the
/// collector rewrites the manifest at most once a second while dispatches
/// arrive, and whole at the end.
pub fn snapshot_manifest(snap: &Path) -> serde_json::Value {
    let path = snap.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let journal = std::fs::read_to_string(snap.join("dispatches.jsonl")).unwrap_or_default();
    let known: Vec<(u64, u64)> = m["dispatches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["rank"].as_u64().unwrap(), d["index"].as_u64().unwrap()))
        .collect();
    if m.get("missing").is_none() {
        m["missing"] = serde_json::json!([]);
    }
    for line in journal.lines() {
        let Ok(d) = serde_json::from_str::<serde_json::Value>(line) else {
            continue; // a last line cut short
        };
        if let Some(missing) = d.get("missing") {
            // A later record for one whole dispatch replaces an earlier one.
            let list = m["missing"].as_array_mut().unwrap();
            if !list.contains(missing) {
                if missing["arg"].is_null() && missing["count"] == 1 {
                    list.retain(|r| {
                        !(r["arg"].is_null()
                            && r["count"] == 1
                            && r["rank"] == missing["rank"]
                            && r["index"] == missing["index"])
                    });
                }
                list.push(missing.clone());
                list.sort_by_key(|r| (r["rank"].as_u64(), r["index"].as_u64(), r["arg"].as_u64()));
            }
            continue;
        }
        let key = (d["rank"].as_u64().unwrap(), d["index"].as_u64().unwrap());
        if !known.contains(&key) {
            m["dispatches"].as_array_mut().unwrap().push(d);
        }
    }
    // A whole-dispatch missing record wins over a stored dispatch.
    let missing = m["missing"].as_array().unwrap().clone();
    m["dispatches"].as_array_mut().unwrap().retain(|d| {
        !missing.iter().any(|r| {
            let (first, count) = (r["index"].as_u64().unwrap(), r["count"].as_u64().unwrap());
            let index = d["index"].as_u64().unwrap();
            r["arg"].is_null() && r["rank"] == d["rank"] && index >= first && index - first < count
        })
    });
    m
}

/// Whole dispatches a manifest (as [`snapshot_manifest`] reads it) lists as
/// missing with `reason`, counted (runs expanded).
pub fn missing_count(m: &serde_json::Value, reason: &str) -> u64 {
    m["missing"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter(|r| r["arg"].is_null() && r["reason"] == reason)
                .map(|r| r["count"].as_u64().unwrap())
                .sum()
        })
        .unwrap_or(0)
}

/// The dispatch indices of rank 0 a manifest lists as missing with
/// `reason` (runs expanded), in order.
pub fn missing_indices(m: &serde_json::Value, reason: &str) -> Vec<u64> {
    let mut v: Vec<u64> = m["missing"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["arg"].is_null() && r["reason"] == reason)
        .flat_map(|r| {
            let first = r["index"].as_u64().unwrap();
            first..first + r["count"].as_u64().unwrap()
        })
        .collect();
    v.sort_unstable();
    v
}

/// How often the application dispatched kernels whose mangled name starts
/// with `prefix` (the manifest's `dispatched_kernels`, from the Goodbye).
pub fn dispatched_count(m: &serde_json::Value, prefix: &str) -> u64 {
    m["dispatched_kernels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["mangled"].as_str().unwrap().starts_with(prefix))
        .map(|k| k["count"].as_u64().unwrap())
        .sum()
}

/// The float32 values of tensor `name` in the safetensors file `file` of
/// snapshot directory `dir`.
pub fn f32_tensor(dir: &Path, file: &str, name: &str) -> Vec<f32> {
    let bytes = std::fs::read(dir.join(file))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join(file).display()));
    let tensors = safetensors::SafeTensors::deserialize(&bytes)
        .unwrap_or_else(|e| panic!("{file}: not a safetensors file: {e:?}"));
    tensors
        .tensor(name)
        .unwrap_or_else(|e| panic!("{file}: no tensor {name}: {e:?}"))
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// `ditto run --kernel KERNEL -- APP ARGS` with nothing else, in a fresh
/// directory (the snapshot goes to its default place there; no tool or
/// runtime location given); returns the output and the manifest if one was
/// written.
pub fn zero_configuration_run(
    app: &Path,
    args: &[&str],
    kernel: &str,
) -> (Output, Option<serde_json::Value>) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(ditto_bin());
    cmd.args(["run", "--kernel", kernel, "--"])
        .arg(app)
        .args(args)
        .current_dir(dir.path())
        .env("DITTO_LOG", "warn")
        .env_remove("DITTO_TOOL_LIB")
        .env_remove("DITTO_CPU_RUNTIME_DIR");
    let out = output_within(
        &mut cmd,
        Duration::from_secs(300),
        &format!(
            "ditto run --kernel {kernel} -- {} {}",
            app.display(),
            args.join(" ")
        ),
    );
    let manifest = std::fs::read(dir.path().join("ditto-snapshot/manifest.json"))
        .ok()
        .map(|bytes| serde_json::from_slice(&bytes).expect("manifest.json is JSON"));
    (out, manifest)
}

/// Builds the fake CUDA driver of tests/cuda/fake/ (one library serving as
/// libcuda and libcupti) and the fake application `app` (`app`.c there,
/// linked against it) into `dir` with the C compiler ($CC or cc), with
/// `defines` (`-DNAME`); returns the library and the application.
pub fn build_fake_cuda_with(dir: &Path, app: &str, defines: &[&str]) -> (PathBuf, PathBuf) {
    let src = repo_root().join("tests/cuda/fake");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let lib = dir.join("libfakecuda.so");
    let exe = dir.join(format!("{app}{}", defines.concat()));
    let run = |cmd: &mut Command| {
        let o = cmd.output().expect("run the C compiler");
        assert!(
            o.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    if !lib.exists() {
        run(Command::new(&cc)
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(&lib)
            .arg(src.join("fake_cuda.c"))
            .arg("-ldl"));
    }
    run(Command::new(&cc)
        .args(["-O1", "-o"])
        .arg(&exe)
        .args(defines)
        .arg(src.join(format!("{app}.c")))
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .arg("-ldl"));
    (lib, exe)
}

/// [`build_fake_cuda_with`] without defines.
pub fn build_fake_cuda(dir: &Path, app: &str) -> (PathBuf, PathBuf) {
    build_fake_cuda_with(dir, app, &[])
}

#[test]
fn output_within_drains_a_child_that_writes_more_than_a_pipe_holds() {
    // 1 MiB to stderr and 1 MiB to stdout: with undrained pipes the child
    // blocks on its first 64 KiB and the limit kills it.
    let out = output_within(
        Command::new("sh").args([
            "-c",
            "head -c 1048576 /dev/zero >&2; head -c 1048576 /dev/zero; exit 3",
        ]),
        Duration::from_secs(20),
        "a child writing 2 MiB",
    );
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(out.stdout.len(), 1 << 20);
    assert_eq!(out.stderr.len(), 1 << 20);
}
