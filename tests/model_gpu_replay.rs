//! `ditto replay` beneath real ROCr 7.2.4 in its model mode on ditto's
//! model GPU (the ROCm 7.2 chroot): a dispatch captured with
//! `--capture replay` from a gfx942 build, run by real HIP over real ROCr,
//! is run again on its own by a replay process that loads real ROCr
//! itself; with the captured kernel it reproduces the application's
//! outputs exactly, with a replacement from another program it gives the
//! verdict `ditto validate --hsa-runtime model` gives for the pair, and
//! its emitted reproducer, built by hipcc 7.2.4, gives it too on the
//! model. With the model's execution switched off the replay stops at its
//! `--timeout` with no verdict.
//!
//! What real ROCr does differently from ditto's CPU runtime, pinned here:
//! its model mode has no virtual-memory API (`hsa_amd_vmem_*`: the
//! emulated KFD reports an interface older than 1.15), so no range can be
//! placed at its captured address: every range is relocated and the
//! pointer arguments rewritten; and it gives no kernel times (the thunk's
//! clock counters read 0), so the replay has none.

use crate::common::model_gpu::*;
use crate::common::*;
use std::path::Path;
use std::process::Output;

/// `ditto run --hsa-runtime model --capture replay` of a gfx942 build into
/// `dir/snap`, which must succeed.
fn capture_on_model(dir: &Path, program: &str, kernel: &str) -> std::path::PathBuf {
    let snap = dir.join("snap");
    let exe = gfx942_apps().join(program);
    let out = ditto_run_on_model(
        dir,
        &["--kernel", kernel, "--capture", "replay"],
        &snap,
        &[exe.to_str().unwrap()],
        &[],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "capture of {kernel}: {}",
        stderr(&out)
    );
    snap
}

/// `ditto replay SNAP --hsa-runtime model --json ARGS` in the chroot.
fn replay_on_model(dir: &Path, snap: &Path, args: &[&str], env: &[(&str, String)]) -> Output {
    let mut all = vec![
        "replay",
        snap.to_str().unwrap(),
        "--hsa-runtime",
        "model",
        "--json",
    ];
    all.extend(args);
    ditto_in_chroot(dir, &all, env)
}

#[test]
fn the_captured_kernel_replayed_beneath_real_rocr_reproduces_the_outputs_exactly() {
    for (program, kernel) in [
        ("reduce_sum_baseline", "reduce_sum"),
        ("vector_add", "vector_add"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let snap = capture_on_model(dir.path(), program, kernel);
        let out = replay_on_model(
            dir.path(),
            &snap,
            &["--atol", "0", "--rtol", "0", "--iterations", "3"],
            &[],
        );
        let v = json(&out);
        assert_eq!(
            (out.status.code(), &v["valid"]),
            (Some(0), &serde_json::json!(true)),
            "{kernel}: {v}\nstderr:\n{}",
            stderr(&out)
        );
        assert!(v["arrays_compared"].as_u64().unwrap() >= 1, "{kernel}: {v}");
        assert_eq!(v["mismatches"].as_array().unwrap().len(), 0, "{kernel}");
        let r = &v["replay"];
        assert_eq!(r["iterations"], 3, "{kernel}");
        // No virtual-memory API in model mode: every captured range is
        // relocated (original, new address, size), none kept its address.
        let relocated = r["relocated"].as_array().unwrap();
        assert!(!relocated.is_empty(), "{kernel}: {r}");
        for range in relocated {
            assert_ne!(range[0], range[1], "{kernel}: {r}");
        }
        assert!(
            stderr(&out).contains("could not be placed at the captured address and was relocated"),
            "{}",
            stderr(&out)
        );
        // No kernel times beneath real ROCr's model mode.
        assert_eq!(r["times_ns"].as_array().unwrap().len(), 0, "{kernel}: {r}");
        assert_eq!(r["median_ns"], serde_json::Value::Null, "{kernel}: {r}");
    }
    // Switched off: the replay's first copy to the GPU never completes;
    // the replay stops at its --timeout, without a verdict.
    let dir = tempfile::tempdir().unwrap();
    let snap = capture_on_model(dir.path(), "reduce_sum_baseline", "reduce_sum");
    let off = [("DITTO_MODEL_GPU_EXECUTE", "0".to_string())];
    let out = replay_on_model(dir.path(), &snap, &["--timeout", "3"], &off);
    let v = json(&out);
    assert_eq!(out.status.code(), Some(2), "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("did not complete within 3 s (the replay's --timeout)"),
        "{v}"
    );
}

#[test]
fn a_replacement_beneath_real_rocr_gets_the_verdict_validate_gives_for_the_pair() {
    let dir = tempfile::tempdir().unwrap();
    let snap = capture_on_model(dir.path(), "reduce_sum_baseline", "reduce_sum");
    let wrong = gfx942_apps().join("reduce_sum_wrong");
    let out = replay_on_model(dir.path(), &snap, &["--from", wrong.to_str().unwrap()], &[]);
    let v = json(&out);
    assert_eq!(out.status.code(), Some(1), "{v}\n{}", stderr(&out));
    assert_eq!(v["replay"]["original_reproduced"], true, "{v}");
    let validated = validate_on_model("reduce_sum_baseline", "reduce_sum_wrong", &[]);
    let w = json(&validated);
    assert_eq!(
        mismatch_fields(&v),
        mismatch_fields(&w),
        "replay {v}\nvalidate {w}"
    );
    assert_eq!(mismatch_fields(&v).len(), 1);

    let optimized = gfx942_apps().join("reduce_sum_optimized");
    let out = replay_on_model(
        dir.path(),
        &snap,
        &["--from", optimized.to_str().unwrap()],
        &[],
    );
    let v = json(&out);
    assert_eq!(
        (out.status.code(), &v["valid"]),
        (Some(0), &serde_json::json!(true)),
        "{v}\n{}",
        stderr(&out)
    );
    assert!(v["replay"]["kernel_object"].as_str().is_some(), "{v}");
}

/// The emitted reproducer in `emitted`, built by hipcc 7.2.4 for gfx942
/// and run (3 iterations) on the model: its exit status and output.
fn build_and_run_reproducer(emitted: &Path, env: &[(&str, String)]) -> Output {
    let built = in_chroot("7.2", Some(emitted))
        .args(["--cwd"])
        .arg(emitted)
        .args([
            "--",
            "hipcc",
            "--offload-arch=gfx942",
            "-O2",
            "replay.cpp",
            "-o",
            "replay",
        ])
        .output()
        .unwrap();
    assert!(built.status.success(), "hipcc: {}", stderr(&built));
    run_reproducer(emitted, env, "")
}

/// `./replay 3` in `emitted` on the model, behind `prefix` (a command
/// such as `timeout N`, or nothing).
fn run_reproducer(emitted: &Path, env: &[(&str, String)], prefix: &str) -> Output {
    let script = format!("cd {} && exec {prefix} ./replay 3", emitted.display());
    on_model(emitted, env, &["sh", "-c", &script], LIMIT)
}

#[test]
fn an_emitted_reproducer_built_by_hipcc_7_2_gives_the_verdict_on_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let snap = capture_on_model(dir.path(), "reduce_sum_baseline", "reduce_sum");
    let emitted = dir.path().join("emit");
    let out = replay_on_model(
        dir.path(),
        &snap,
        &["--emit", emitted.to_str().unwrap()],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        emitted.join("kernel.host.so").exists(),
        "the host build goes along"
    );
    let run = build_and_run_reproducer(&emitted, &[]);
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}{}",
        stdout(&run),
        stderr(&run)
    );
    assert!(stdout(&run).starts_with("PASS "), "{}", stdout(&run));

    let wrong = gfx942_apps().join("reduce_sum_wrong");
    let emitted = dir.path().join("emit-wrong");
    let out = replay_on_model(
        dir.path(),
        &snap,
        &[
            "--emit",
            emitted.to_str().unwrap(),
            "--from",
            wrong.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let run = build_and_run_reproducer(&emitted, &[]);
    let printed = stdout(&run);
    assert_eq!(run.status.code(), Some(1), "{printed}{}", stderr(&run));
    assert!(
        printed.contains(
            "arg 1 (f32[1]): 1 of 1 elements differ; first at index 0: 0, reference 98301.5"
        ) && printed.contains("FAIL reduce_sum(float const*, float*, int): 1 of 1 arrays differ"),
        "{printed}"
    );
    // Switched off, the reproducer's kernel never completes.
    let off = [("DITTO_MODEL_GPU_EXECUTE", "0".to_string())];
    let limit = format!("timeout {}", SWITCHED_OFF_WAIT.as_secs());
    let run = run_reproducer(&emitted, &off, &limit);
    assert_eq!(
        run.status.code(),
        Some(124),
        "{}{}",
        stdout(&run),
        stderr(&run)
    );
    assert!(!stdout(&run).contains("PASS") && !stdout(&run).contains("FAIL"));
}
