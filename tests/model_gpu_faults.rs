//! Bad input beneath real ROCr 7.2.4 (the ROCm 7.2 chroot) on ditto's
//! model GPU: each a clear error, nothing hung.
//! - a kernel that faults (tests/hip/reduce_sum_faulty.hip, built by hipcc
//!   7.2.4 for gfx942): ROCr's own "Memory access fault by GPU node-1 ...
//!   on address 0x..." line, then the model's naming the kernel, and the
//!   application aborted (SIGABRT), plainly and under `ditto run` and
//!   `ditto validate`;
//! - an application that never destroys its queues nor shuts HSA down
//!   (tests/rocm/packet_app.c `leave-queues`: a barrier packet pending at
//!   exit): it exits at once with its own status;
//! - a topology real ROCr rejects, named with DITTO_MODEL_TOPOLOGY: ditto
//!   refuses it before the application starts, naming the topology, what
//!   ROCr said and what to change.

use crate::common::model_gpu::*;
use crate::common::*;
use ditto_hsa_model::topology::Topology;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Far more than a run that does not hang takes on two busy cores.
const PROMPT: Duration = Duration::from_secs(40);

/// `ditto run --hsa-runtime model --kernel KERNEL -- CMD` in the ROCm 7.2
/// chroot, its snapshot under `dir`, plus `env`.
fn ditto_run_kernel(
    dir: &Path,
    kernel: &str,
    cmd: &[&str],
    env: &[(&str, String)],
) -> std::process::Output {
    let snap = dir.join("snapshot");
    ditto_run_on_model(dir, &["--kernel", kernel], &snap, cmd, env)
}

/// The address of ROCr's memory-fault line in `err`.
fn fault_address(err: &str) -> u64 {
    let line = err
        .lines()
        .find(|l| l.starts_with("Memory access fault by GPU node-1 (Agent handle: "))
        .unwrap_or_else(|| panic!("no memory-fault line: {err}"));
    let hex = line
        .split("on address 0x")
        .nth(1)
        .and_then(|r| r.split('.').next())
        .unwrap_or_else(|| panic!("no address in {line}"));
    assert!(
        line.ends_with(". Reason: Page not present or supervisor privilege."),
        "{line}"
    );
    u64::from_str_radix(hex, 16).unwrap()
}

#[test]
fn a_kernel_that_faults_is_named_at_its_address_and_the_application_aborted_not_hung() {
    let dir = tempfile::tempdir().unwrap();
    let exe = gfx942_build(dir.path(), "reduce_sum_faulty");
    let exe = exe.to_str().unwrap();
    let started = Instant::now();
    let out = on_model(dir.path(), &[], &[exe], LIMIT);
    let err = stderr(&out);
    // SIGABRT, as ROCr aborts on a GPU memory fault (rocm-chroot: 128 + 6).
    assert_eq!(out.status.code(), Some(128 + 6), "{err}");
    assert!(started.elapsed() < PROMPT, "{:?}", started.elapsed());
    assert_eq!(stdout(&out), "", "no sum from a kernel that faulted");
    // input[1 << 40] of floats: 4 TiB past the input, which lies in the
    // model's 256 GiB GPU address space.
    let address = fault_address(&err);
    assert!(
        (1u64 << 42..(1u64 << 42) + (1u64 << 38)).contains(&address),
        "0x{address:x}"
    );
    assert!(
        err.contains(&format!(
            "ditto model GPU: kernel reduce_sum(float const*, float*, int) (of file://{exe}#"
        )) && err.contains(&format!("faulted: a read at address 0x{address:x}"))
            && err.contains("the application is aborted"),
        "{err}"
    );

    // Under ditto run: the application's end and ROCr's line, exit 2.
    let out = ditto_run_kernel(dir.path(), "reduce_sum", &[exe], &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("Memory access fault by GPU node-1")
            && err.contains("kernel reduce_sum(float const*, float*, int)")
            && err.contains(&format!(
                "ditto: error: the application ({exe}) ended with killed by signal 6 (Aborted)"
            )),
        "{err}"
    );

    // Under ditto validate: no verdict, the optimized run's end named.
    let reference = gfx942_apps().join("reduce_sum_baseline");
    let out = validate_programs_on_model(dir.path(), &reference, Path::new(exe), &[]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("{e}: {} {}", stdout(&out), stderr(&out)));
    assert_eq!(
        (out.status.code(), &v["valid"]),
        (Some(2), &serde_json::json!(false)),
        "{v}"
    );
    assert_eq!(
        v["error"].as_str().unwrap(),
        format!(
            "optimized run ({exe}) ended with killed by signal 6 (Aborted): fix the application \
             first (run it without ditto to see); no dispatch was in flight; nothing was saved"
        )
    );
    assert!(
        stderr(&out).contains("Memory access fault by GPU node-1"),
        "{}",
        stderr(&out)
    );
}

const APP_LINES: &str =
    "packet_app: 3 of 3 packets completed\npacket_app: leaving with a packet pending\n";

#[test]
fn an_application_that_never_destroys_its_queues_exits_at_once_with_its_own_status() {
    let dir = tempfile::tempdir().unwrap();
    let (app, _) = packet_programs(dir.path());
    let app = app.to_str().unwrap();
    for _ in 0..2 {
        let started = Instant::now();
        let out = on_model(dir.path(), &[], &[app, "leave-queues"], LIMIT);
        assert_eq!(
            (out.status.code(), stdout(&out).as_str()),
            (Some(3), APP_LINES),
            "stderr:\n{}",
            stderr(&out)
        );
        assert!(started.elapsed() < PROMPT, "{:?}", started.elapsed());
        assert!(
            !stderr(&out).contains("ditto model GPU"),
            "{}",
            stderr(&out)
        );
    }
    let out = ditto_run_kernel(dir.path(), "k", &[app, "leave-queues"], &[]);
    assert_eq!(
        (out.status.code(), stdout(&out).as_str()),
        (Some(2), APP_LINES),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains(&format!(
            "ditto: error: the application ({app} leave-queues) ended with exit status 3"
        )),
        "{}",
        stderr(&out)
    );
}

/// A copy of ditto's one-GPU topology in `dir/name`, changed by `edit`
/// (given node 1's directory).
fn topology_with(dir: &Path, name: &str, edit: impl FnOnce(&Path)) -> PathBuf {
    let topology = dir.join(name);
    Topology::for_this_machine(1).write(&topology).unwrap();
    edit(&topology.join("nodes/1"));
    topology
}

fn set_property(node: &Path, key: &str, value: u64) {
    let path = node.join("properties");
    let text: String = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| match l.split_once(' ') {
            Some((k, _)) if k == key => format!("{key} {value}\n"),
            _ => format!("{l}\n"),
        })
        .collect();
    std::fs::write(path, text).unwrap();
}

#[test]
fn a_topology_real_rocr_rejects_is_refused_before_the_application_starts() {
    let dir = tempfile::tempdir().unwrap();
    let (app, _) = packet_programs(dir.path());
    let app = app.to_str().unwrap();
    let gfx90a = topology_with(dir.path(), "gfx90a", |n| {
        set_property(n, "gfx_target_version", 90010)
    });
    let no_caches = topology_with(dir.path(), "no-caches", |n| {
        set_property(n, "caches_count", 0);
        std::fs::remove_dir_all(n.join("caches")).unwrap();
        std::fs::create_dir(n.join("caches")).unwrap();
    });
    let gpu_id = topology_with(dir.path(), "gpu-id", |n| {
        std::fs::write(n.join("gpu_id"), "5\n").unwrap()
    });
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let missing = dir.path().join("missing");
    let cases: [(&Path, &str, &str); 5] = [
        (
            &gfx90a,
            "ROCr aborted (SIGABRT) initialising on it, saying: \"model: Unimplemented KFD ioctl\"",
            "nodes/1/properties: gfx_target_version 90010: for this target ROCr binds a trap \
             handler",
        ),
        (
            &no_caches,
            "GPU cache info missing.\"' failed.\"",
            "nodes/1 has no caches (caches_count and caches/M/properties)",
        ),
        (
            &gpu_id,
            "saying: \"model: Node 1 has KFD GPU ID 5, but should be 2. Please change the gpu_id \
             file.\"",
            "nodes/1/gpu_id is 5: model mode needs a GPU's gpu_id to be its node + 1 (write 2)",
        ),
        (
            &empty,
            "ROCr refused it, saying: \"hsa_init returned 0x1008 \
             (HSA_STATUS_ERROR_OUT_OF_RESOURCES",
            "it holds no nodes/0/properties",
        ),
        (
            &missing,
            "ROCr refused it, saying: \"hsa_init returned 0x1008",
            "it is not a directory",
        ),
    ];
    for (topology, rocr_said, advice) in cases {
        let env = [("DITTO_MODEL_TOPOLOGY", topology.display().to_string())];
        let started = Instant::now();
        let out = ditto_run_kernel(dir.path(), "k", &[app], &env);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{}: {err}", topology.display());
        assert!(started.elapsed() < PROMPT, "{:?}", started.elapsed());
        assert_eq!(stdout(&out), "", "the application never started");
        assert!(
            err.starts_with(&format!(
                "ditto: error: --hsa-runtime model: the model topology {} (DITTO_MODEL_TOPOLOGY) \
                 is one real ROCr rejects: ",
                topology.display()
            )) && err.contains(rocr_said)
                && err.contains(advice)
                && err
                    .contains("or unset DITTO_MODEL_TOPOLOGY to run on the topology ditto writes"),
            "{}: {err}",
            topology.display()
        );
    }
    // An untouched copy passes the check and the application runs on it.
    let good = topology_with(dir.path(), "good", |_| {});
    let env = [("DITTO_MODEL_TOPOLOGY", good.display().to_string())];
    let out = ditto_run_kernel(dir.path(), "k", &[app], &env);
    assert_eq!(
        stdout(&out),
        "packet_app: 3 of 3 packets completed\n",
        "{}",
        stderr(&out)
    );
}
