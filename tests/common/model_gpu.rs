//! Running things beneath real ROCr 7.2.4 in its model mode on ditto's
//! model GPU: the ROCm 7.2 chroot (scripts/rocm-chroot) with the model
//! library and a topology, the tests/hip programs built by hipcc 7.2.4 for
//! gfx942, and the switched-off check (DITTO_MODEL_GPU_EXECUTE=0) every
//! model test makes to show that what completed, the model completed.

use super::hip_suite::HIP_SUITE;
use super::*;
use ditto_hsa_model::topology::Topology;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

/// Far beyond what these runs need; reaching it means a hang.
pub const LIMIT: Duration = Duration::from_secs(120);
/// How long a run with execution switched off is given before it counts as
/// waiting for ever.
pub const SWITCHED_OFF_WAIT: Duration = Duration::from_secs(15);

pub fn rocm_chroot() -> PathBuf {
    repo_root().join("scripts/rocm-chroot")
}

/// `scripts/rocm-chroot run RELEASE` with the repository and this build
/// bound read-only, `writable` bound writable and NO_COLOR set; the
/// caller adds `--env`s, then `--` and the command.
pub fn in_chroot(release: &str, writable: Option<&Path>) -> Command {
    let mut c = Command::new(rocm_chroot());
    c.args(["run", release, "--bind"]).arg(repo_root());
    if !profile_dir().starts_with(repo_root()) {
        c.arg("--bind").arg(profile_dir());
    }
    if let Some(dir) = writable {
        c.arg("--bind-rw").arg(dir);
    }
    c.args(["--env", "NO_COLOR=1"]);
    c
}

pub fn model_lib() -> PathBuf {
    let lib = profile_dir().join("libditto_hsa_model.so");
    assert!(
        lib.exists(),
        "{} is missing: run `cargo build --workspace`",
        lib.display()
    );
    lib
}

/// `cmd` in the ROCm 7.2 chroot with real ROCr in model mode on a model
/// topology of one GPU written into `dir`, plus `env`.
pub fn on_model(dir: &Path, env: &[(&str, String)], cmd: &[&str], limit: Duration) -> Output {
    let out = Command::new(rocm_chroot())
        .args(["versions", "7.2"])
        .output()
        .expect("run scripts/rocm-chroot");
    assert!(
        out.status.success(),
        "the ROCm 7.2 chroot is missing: run `scripts/rocm-chroot create 7.2` as root \
         (scripts/install-deps does it)"
    );
    let topology = dir.join("topology");
    Topology::for_this_machine(1).write(&topology).unwrap();
    let mut c = in_chroot("7.2", Some(dir));
    c.arg("--env")
        .arg(format!("HSA_MODEL_TOPOLOGY={}", topology.display()))
        .arg("--env")
        .arg(format!("HSA_MODEL_LIB={}", model_lib().display()))
        // As --hsa-runtime model sets it: signals without events (the
        // thunk aborts on an event destroyed before the model sets it).
        .arg("--env")
        .arg("HSA_ENABLE_INTERRUPT=0");
    for (k, v) in env {
        c.arg("--env").arg(format!("{k}={v}"));
    }
    c.arg("--").args(cmd);
    output_within(&mut c, limit, &format!("{cmd:?} on the model GPU"))
}

/// packet_app.c and packet_tool.cpp built against ROCm 7.2.4's headers.
pub fn packet_programs(dir: &Path) -> (PathBuf, PathBuf) {
    let src = repo_root().join("tests/rocm");
    let (app, tool) = (dir.join("packet_app"), dir.join("libpacket_tool.so"));
    let script = format!(
        "gcc -O1 -o {} {}/packet_app.c -lhsa-runtime64 && \
         g++ -O1 -shared -fPIC -DAMD_INTERNAL_BUILD -o {} {}/packet_tool.cpp",
        app.display(),
        src.display(),
        tool.display(),
        src.display()
    );
    let out = in_chroot("7.2", Some(dir))
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "building the packet programs: {}",
        stderr(&out)
    );
    (app, tool)
}

/// `program` on the model with its execution switched off
/// (DITTO_MODEL_GPU_EXECUTE=0) is still running, silent, after
/// SWITCHED_OFF_WAIT: what completes with it on, the model completed.
pub fn assert_never_finishes_switched_off(dir: &Path, program: &str) {
    let off = [("DITTO_MODEL_GPU_EXECUTE", "0".to_string())];
    let limit = SWITCHED_OFF_WAIT.as_secs().to_string();
    let out = on_model(dir, &off, &["timeout", &limit, program], LIMIT);
    assert_eq!(
        out.status.code(),
        Some(124),
        "stdout: {}\nstderr: {}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(stdout(&out), "");
}

pub fn gfx942_apps() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = profile_dir().join("apps").join("hip-7.2-gfx942");
            std::fs::create_dir_all(&dir).unwrap();
            hip_apps_for_gfx942(&dir);
            dir
        })
        .clone()
}

pub fn hip_apps_for_gfx942(dir: &Path) {
    let mut names: Vec<&str> = HIP_SUITE.iter().map(|(name, ..)| *name).collect();
    names.dedup();
    let sources = repo_root().join("tests/hip");
    let script: Vec<String> = names
        .iter()
        .map(|name| {
            format!(
                "hipcc --offload-arch=gfx942 -O2 -o {out}/{name} {src}/{name}.hip",
                out = dir.display(),
                src = sources.display()
            )
        })
        .collect();
    let out = in_chroot("7.2", Some(dir))
        .args(["--", "sh", "-c", &script.join(" && ")])
        .output()
        .unwrap();
    assert!(out.status.success(), "hipcc 7.2.4: {}", stderr(&out));
    for name in names {
        let host_build = format!("{name}.host.so");
        std::fs::copy(hip_app(&host_build), dir.join(&host_build)).unwrap();
    }
}

/// tests/hip/NAME.hip built by hipcc 7.2.4 for gfx942 into `dir`, its
/// host build beside it: one program, for a test of its own.
pub fn gfx942_build(dir: &Path, name: &str) -> PathBuf {
    let exe = dir.join(name);
    let out = in_chroot("7.2", Some(dir))
        .args(["--", "hipcc", "--offload-arch=gfx942", "-O2", "-o"])
        .arg(&exe)
        .arg(repo_root().join(format!("tests/hip/{name}.hip")))
        .output()
        .unwrap();
    assert!(out.status.success(), "hipcc 7.2.4: {}", stderr(&out));
    let host_build = format!("{name}.host.so");
    std::fs::copy(hip_app(&host_build), dir.join(&host_build)).unwrap();
    exe
}

/// `ditto ARGS` in the ROCm 7.2 chroot, `dir` bound writable and its
/// TMPDIR (where ditto writes the model topology), plus `env`. The caller
/// puts `--hsa-runtime model` among `args` where the command takes it.
pub fn ditto_in_chroot(dir: &Path, args: &[&str], env: &[(&str, String)]) -> Output {
    let mut c = in_chroot("7.2", Some(dir));
    c.arg("--env").arg(format!("TMPDIR={}", dir.display()));
    for (k, v) in env {
        c.arg("--env").arg(format!("{k}={v}"));
    }
    c.arg("--").arg(ditto_bin()).args(args);
    output_within(
        &mut c,
        LIMIT,
        &format!("ditto {args:?} in the ROCm 7.2 chroot"),
    )
}

/// `ditto validate --json --hsa-runtime model --kernel reduce_sum` of two
/// gfx942 builds of `gfx942_apps()` in the ROCm 7.2 chroot: real ROCr in
/// model mode under ditto's tool.
pub fn validate_on_model(reference: &str, optimized: &str, env: &[(&str, String)]) -> Output {
    let apps = gfx942_apps();
    let dir = tempfile::tempdir().unwrap();
    validate_programs_on_model(
        dir.path(),
        &apps.join(reference),
        &apps.join(optimized),
        env,
    )
}

/// [`validate_on_model`] of two programs by path, `dir` as in
/// [`ditto_in_chroot`].
pub fn validate_programs_on_model(
    dir: &Path,
    reference: &Path,
    optimized: &Path,
    env: &[(&str, String)],
) -> Output {
    ditto_in_chroot(
        dir,
        &[
            "validate",
            "--json",
            "--hsa-runtime",
            "model",
            "--kernel",
            "reduce_sum",
            "--timeout",
            "60",
            "--ref",
            reference.to_str().unwrap(),
            "--opt",
            optimized.to_str().unwrap(),
        ],
        env,
    )
}

/// `ditto run --hsa-runtime model OPTIONS --out SNAP -- CMD` in the ROCm
/// 7.2 chroot, `dir` as in [`ditto_in_chroot`], plus `env`.
pub fn ditto_run_on_model(
    dir: &Path,
    options: &[&str],
    snap: &Path,
    cmd: &[&str],
    env: &[(&str, String)],
) -> Output {
    let mut args = vec!["run", "--hsa-runtime", "model"];
    args.extend(options);
    args.extend(["--out", snap.to_str().unwrap(), "--"]);
    args.extend(cmd);
    ditto_in_chroot(dir, &args, env)
}
