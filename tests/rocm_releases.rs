//! The real HIP runtimes of ROCm 6.4.3 (Debian sid) and 7.2.4 (Debian
//! experimental) on the CPU runtime, each in its chroot made by
//! scripts/rocm-chroot (scripts/install-deps creates them), the binaries of
//! this build bound in at the same paths and the CPU runtime serving that
//! release's ABI (DITTO_HSA_CPU_ABI):
//! - the applications of tests/hip/, built by that release's hipcc, print
//!   the values they print under HIP 5.2;
//! - `ditto validate` gives the verdicts it gives under HIP 5.2, and
//!   `ditto replay` of a capture made there reproduces the captured
//!   kernel's outputs and judges a replacement as under HIP 5.2;
//! - a C program and a C++ tool built against that release's headers run
//!   plain, with the tool in HSA_TOOLS_LIB and with it preloaded, the tool
//!   seeing every packet through its intercept queue;
//! - a Python driver loading libamdhip64 with ctypes (every symbol bound at
//!   load) runs, here and under HIP 5.2 on the host.
//!
//! A missing chroot fails the tests, saying how to make it.

use crate::common;
use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// Far beyond what any of these runs needs; reaching it means a hang.
const LIMIT: Duration = Duration::from_secs(300);

/// A ROCm release with a chroot.
#[derive(Clone, Copy, Debug)]
struct Release {
    /// The name scripts/rocm-chroot and DITTO_HSA_CPU_ABI know it by.
    name: &'static str,
    /// Its HIP runtime's file name.
    hip: &'static str,
    /// The AMD table its runtime hands tools, "major/minor".
    amd_table: &'static str,
}

const RELEASES: [Release; 2] = [
    Release {
        name: "6.4",
        hip: "libamdhip64.so.6",
        amd_table: "2/592",
    },
    Release {
        name: "7.2",
        hip: "libamdhip64.so.7",
        amd_table: "2/624",
    },
];

fn rocm_chroot() -> PathBuf {
    repo_root().join("scripts/rocm-chroot")
}

/// Fails, saying how to make it, unless the release's chroot is complete.
fn require_chroot(r: Release) {
    let out = Command::new(rocm_chroot())
        .args(["versions", r.name])
        .output()
        .expect("run scripts/rocm-chroot");
    assert!(
        out.status.success(),
        "the ROCm {} chroot is missing: run `scripts/rocm-chroot create {}` as root (about \
         1.5 GB; scripts/install-deps does it): {}",
        r.name,
        r.name,
        stderr(&out)
    );
}

/// `cmd` inside the chroot of `r`, the repository and this build bound
/// read-only, `writable` directories bound writable, with the CPU runtime
/// serving `abi` and `env` set.
fn in_chroot(
    r: Release,
    abi: &str,
    writable: &[&Path],
    env: &[(&str, String)],
    cmd: &[&str],
) -> Output {
    require_chroot(r);
    let mut c = Command::new(rocm_chroot());
    c.args(["run", r.name, "--bind"]).arg(repo_root());
    let profile = profile_dir();
    if !profile.starts_with(repo_root()) {
        c.arg("--bind").arg(&profile);
    }
    for w in writable {
        c.arg("--bind-rw").arg(w);
    }
    let runtime = format!("LD_LIBRARY_PATH={}", cpu_runtime_dir().display());
    c.args([
        "--env",
        &runtime,
        "--env",
        &format!("DITTO_HSA_CPU_ABI={abi}"),
    ]);
    for (k, v) in env {
        c.arg("--env").arg(format!("{k}={v}"));
    }
    c.arg("--").args(cmd);
    output_within(
        &mut c,
        LIMIT,
        &format!("{cmd:?} in the ROCm {} chroot", r.name),
    )
}

/// The applications of tests/hip/, built by the release's hipcc into
/// target/<profile>/apps/hip-<release>/ (once per test process), each with
/// its host build (the same as HIP 5.2's) beside it.
fn hip_apps(r: Release) -> PathBuf {
    static BUILT: OnceLock<Mutex<Vec<&'static str>>> = OnceLock::new();
    let dir = profile_dir().join("apps").join(format!("hip-{}", r.name));
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap();
    if built.contains(&r.name) {
        return dir;
    }
    std::fs::create_dir_all(&dir).unwrap();
    let sources = repo_root().join("tests/hip");
    let mut names: Vec<String> = std::fs::read_dir(&sources)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".hip").map(str::to_string)
        })
        .collect();
    names.sort();
    for name in &names {
        let source = sources.join(format!("{name}.hip"));
        let exe = dir.join(name);
        let out = in_chroot(
            r,
            r.name,
            &[&dir],
            &[],
            &[
                "hipcc",
                "--offload-arch=gfx90a",
                "-O2",
                "-o",
                exe.to_str().unwrap(),
                source.to_str().unwrap(),
            ],
        );
        assert!(
            out.status.success(),
            "hipcc of ROCm {} could not build {name}: {}",
            r.name,
            stderr(&out)
        );
        let host_build = format!("{name}.host.so");
        std::fs::copy(hip_app(&host_build), dir.join(&host_build)).unwrap();
    }
    built.push(r.name);
    dir
}

#[test]
fn every_hip_application_prints_its_values_under_hip_6_4_and_7_2() {
    for r in RELEASES {
        let apps = hip_apps(r);
        for (name, args, expected) in common::hip_suite::HIP_SUITE {
            let exe = apps.join(name);
            let mut cmd = vec![exe.to_str().unwrap()];
            cmd.extend(args.iter());
            let out = in_chroot(r, r.name, &[], &[], &cmd);
            assert_eq!(
                (out.status.code(), stdout(&out).as_str()),
                (Some(0), *expected),
                "{name} {args:?} under HIP {}; stderr:\n{}",
                r.name,
                stderr(&out)
            );
        }
    }
}

/// `ditto validate --json` of two applications built for `r`, in its chroot.
fn validate(r: Release, reference: &str, optimized: &str) -> serde_json::Value {
    let apps = hip_apps(r);
    let (reference, optimized) = (apps.join(reference), apps.join(optimized));
    let out = in_chroot(
        r,
        r.name,
        &[],
        &[("NO_COLOR", "1".into())],
        &[
            ditto_bin().to_str().unwrap(),
            "validate",
            "--json",
            "--hsa-runtime",
            "cpu",
            "--kernel",
            "reduce_sum",
            "--ref",
            reference.to_str().unwrap(),
            "--opt",
            optimized.to_str().unwrap(),
        ],
    );
    let v = json(&out);
    let expected_exit = if v["valid"] == true { 0 } else { 1 };
    assert_eq!(out.status.code(), Some(expected_exit), "{}", stderr(&out));
    v
}

#[test]
fn ditto_validate_gives_hip_5_2_s_verdicts_under_hip_6_4_and_7_2() {
    let expected_sum: f64 = (0..65536).map(|i| (i % 7) as f64 * 0.5).sum();
    for r in RELEASES {
        let v = validate(r, "reduce_sum_baseline", "reduce_sum_optimized");
        assert_eq!(v["valid"], true, "HIP {}: {v}", r.name);
        assert_eq!(v["arrays_compared"], 1, "HIP {}: {v}", r.name);
        assert_eq!(
            v["kernel"].as_str(),
            Some("reduce_sum(float const*, float*, int)")
        );
        let v = validate(r, "reduce_sum_baseline", "reduce_sum_wrong");
        assert_eq!(v["valid"], false, "HIP {}: {v}", r.name);
        let mismatches = v["mismatches"].as_array().unwrap();
        assert_eq!(mismatches.len(), 1, "HIP {}: {v}", r.name);
        let m = &mismatches[0];
        assert_eq!(
            (m["dispatch"].as_u64(), m["arg"].as_u64()),
            (Some(0), Some(1))
        );
        assert_eq!(m["max_abs_diff"].as_f64(), Some(expected_sum));
    }
}

/// `ditto ARGS --hsa-runtime cpu` in the chroot of `r`, `writable` bound writable.
fn ditto_in_chroot(r: Release, writable: &Path, args: &[&str]) -> Output {
    let mut cmd = vec![ditto_bin().to_str().unwrap().to_string()];
    cmd.extend(args.iter().map(|a| a.to_string()));
    cmd.extend(["--hsa-runtime".to_string(), "cpu".to_string()]);
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    in_chroot(r, r.name, &[writable], &[("NO_COLOR", "1".into())], &cmd)
}

#[test]
fn ditto_replay_reproduces_and_judges_under_hip_6_4_and_7_2() {
    for r in RELEASES {
        let apps = hip_apps(r);
        let dir = tempfile::tempdir().unwrap();
        let snap = dir.path().join("snap");
        let (snap_arg, baseline) = (snap.to_str().unwrap(), apps.join("reduce_sum_baseline"));
        let out = ditto_in_chroot(
            r,
            dir.path(),
            &[
                "run",
                "--kernel",
                "reduce_sum",
                "--capture",
                "replay",
                "--out",
                snap_arg,
                "--",
                baseline.to_str().unwrap(),
            ],
        );
        assert!(out.status.success(), "HIP {}: {}", r.name, stderr(&out));
        // The captured kernel: its outputs exactly.
        let out = ditto_in_chroot(
            r,
            dir.path(),
            &["replay", snap_arg, "--json", "--atol", "0", "--rtol", "0"],
        );
        let v = json(&out);
        assert_eq!(
            (out.status.code(), &v["valid"]),
            (Some(0), &serde_json::json!(true)),
            "HIP {}: {}",
            r.name,
            stderr(&out)
        );
        // `ditto replay SNAP --json --from PROGRAM`: its exit code and report.
        let replay_from = |program: &str| {
            let program = apps.join(program);
            let out = ditto_in_chroot(
                r,
                dir.path(),
                &[
                    "replay",
                    snap_arg,
                    "--json",
                    "--from",
                    program.to_str().unwrap(),
                ],
            );
            (out.status.code(), json(&out), stderr(&out))
        };
        // The wrong program's kernel: validate's mismatch.
        let (code, v, err) = replay_from("reduce_sum_wrong");
        assert_eq!(code, Some(1), "HIP {}: {err}", r.name);
        let expected_sum: f64 = (0..65536).map(|i| (i % 7) as f64 * 0.5).sum();
        assert_eq!(
            v["mismatches"][0]["max_abs_diff"].as_f64(),
            Some(expected_sum)
        );
        // The optimized program's kernel: PASS and a speedup.
        let (code, v, err) = replay_from("reduce_sum_optimized");
        assert_eq!(code, Some(0), "HIP {}: {err}", r.name);
        assert!(
            v["replay"]["speedup"].as_f64().unwrap() > 0.0,
            "HIP {}: {v}",
            r.name
        );
        // The reproducer, built by this release's hipcc and run by its HIP.
        let emitted = dir.path().join("repro");
        let out = ditto_in_chroot(
            r,
            dir.path(),
            &["replay", snap_arg, "--emit", emitted.to_str().unwrap()],
        );
        assert!(out.status.success(), "HIP {}: {}", r.name, stderr(&out));
        let script = format!(
            "cd {} && hipcc --offload-arch=gfx90a -O2 replay.cpp -o replay 2>&1 && ./replay 3",
            emitted.display()
        );
        let out = in_chroot(r, r.name, &[dir.path()], &[], &["sh", "-c", &script]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "HIP {}: {}{}",
            r.name,
            stdout(&out),
            stderr(&out)
        );
        assert!(
            stdout(&out).contains("PASS reduce_sum(float const*, float*, int)"),
            "HIP {}: {}",
            r.name,
            stdout(&out)
        );
    }
}

/// tests/rocm/packet_app.c and packet_tool.cpp built against the headers of
/// `r` (None: the host's, ROCm 5.2.3) into `dir`.
fn build_packet_programs(r: Option<Release>, dir: &Path) -> (PathBuf, PathBuf) {
    let sources = repo_root().join("tests/rocm");
    let app = dir.join("packet_app");
    let tool = dir.join("libpacket_tool.so");
    let script = format!(
        "gcc -O1 -o {app} {src}/packet_app.c -lhsa-runtime64 && \
         g++ -O1 -shared -fPIC -DAMD_INTERNAL_BUILD -o {tool} {src}/packet_tool.cpp",
        app = app.display(),
        tool = tool.display(),
        src = sources.display()
    );
    let out = match r {
        Some(r) => in_chroot(r, r.name, &[dir], &[], &["sh", "-c", &script]),
        None => Command::new("sh").args(["-c", &script]).output().unwrap(),
    };
    assert!(out.status.success(), "{r:?}: {}", stderr(&out));
    (app, tool)
}

const APP_LINE: &str = "packet_app: 3 of 3 packets completed\n";

#[test]
fn a_c_program_and_a_tool_built_against_each_release_s_headers_see_every_packet() {
    for r in RELEASES {
        let dir = tempfile::tempdir().unwrap();
        let (app, tool) = build_packet_programs(Some(r), dir.path());
        let run = |abi: &str, how: Option<&str>| {
            let env: Vec<(&str, String)> = how
                .map(|var| vec![(var, tool.display().to_string())])
                .unwrap_or_default();
            let out = in_chroot(r, abi, &[dir.path()], &env, &[app.to_str().unwrap()]);
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
            stdout(&out)
        };
        assert_eq!(run(r.name, None), APP_LINE, "plain, ROCm {}", r.name);
        let loaded = format!(
            "packet_tool: OnLoad runtime=3 core=2/1016 amd={}\n{APP_LINE}\
             packet_tool: 1 intercept queue(s), 3 packet(s) seen\n",
            r.amd_table
        );
        for how in ["HSA_TOOLS_LIB", "LD_PRELOAD"] {
            assert_eq!(run(r.name, Some(how)), loaded, "{how}, ROCm {}", r.name);
        }
        // The same tool on a runtime of ROCm 5.2's tables: it checks their
        // major and declines (preloaded, 5.2 does not even look for it).
        assert_eq!(
            run("5.2", Some("HSA_TOOLS_LIB")),
            format!(
                "packet_tool: OnLoad runtime=1 core=1/1016 amd=1/400\n\
                 packet_tool: tables of another ROCm; not loading\n{APP_LINE}"
            ),
            "ROCm {} tool on 5.2 tables",
            r.name
        );
        assert_eq!(run("5.2", Some("LD_PRELOAD")), APP_LINE);
    }
}

#[test]
fn the_same_programs_built_against_rocm_5_2_s_headers_run_on_5_2_s_tables() {
    let dir = tempfile::tempdir().unwrap();
    let (app, tool) = build_packet_programs(None, dir.path());
    let run = |how: Option<&str>| {
        let mut cmd = Command::new(&app);
        cmd.env("LD_LIBRARY_PATH", cpu_runtime_dir())
            .env("DITTO_HSA_CPU_ABI", "5.2")
            .env_remove("LD_PRELOAD")
            .env_remove("HSA_TOOLS_LIB");
        if let Some(var) = how {
            cmd.env(var, &tool);
        }
        let out = output_within(&mut cmd, LIMIT, "packet_app");
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        stdout(&out)
    };
    assert_eq!(run(None), APP_LINE);
    assert_eq!(
        run(Some("HSA_TOOLS_LIB")),
        format!(
            "packet_tool: OnLoad runtime=1 core=1/1016 amd=1/400\n{APP_LINE}\
             packet_tool: 1 intercept queue(s), 3 packet(s) seen\n"
        )
    );
    // ROCr 5.2.3 never discovers a preloaded tool.
    assert_eq!(run(Some("LD_PRELOAD")), APP_LINE);
}

const CTYPES_LINE: &str = "hip_ctypes: devices = 1, back[255] = 127.5, wrong = 0\n";

#[test]
fn python_loads_libamdhip64_binding_every_symbol_under_hip_5_2_6_4_and_7_2() {
    let script = repo_root().join("tests/rocm/hip_ctypes.py");
    let mut cmd = Command::new("python3");
    cmd.arg(&script)
        .arg("libamdhip64.so.5")
        .env("LD_LIBRARY_PATH", cpu_runtime_dir())
        .env("LD_BIND_NOW", "1");
    let out = output_within(&mut cmd, LIMIT, "hip_ctypes.py under HIP 5.2");
    assert_eq!(
        (out.status.code(), stdout(&out).as_str()),
        (Some(0), CTYPES_LINE),
        "HIP 5.2: {}",
        stderr(&out)
    );
    for r in RELEASES {
        let out = in_chroot(
            r,
            r.name,
            &[],
            &[("LD_BIND_NOW", "1".into())],
            &["python3", script.to_str().unwrap(), r.hip],
        );
        assert_eq!(
            (out.status.code(), stdout(&out).as_str()),
            (Some(0), CTYPES_LINE),
            "HIP {}: {}",
            r.name,
            stderr(&out)
        );
    }
}
