//! `ditto replay` end to end on the CPU runtime, with the hipcc-built
//! programs of tests/hip/: a capture with `--capture replay` (or
//! `replay-all`), then its dispatch run again on its own, with the
//! captured kernel (its outputs reproduced exactly) or a replacement
//! taken from another program (the verdict `ditto validate` gives for the
//! pair, and a speedup), and every bad input a clear error that names what
//! to do, within a bounded time.

use crate::common::*;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

/// Far beyond what any of these needs; reaching it means a hang.
const LIMIT: Duration = Duration::from_secs(300);

/// `ditto run --kernel KERNEL --capture CAPTURE --out OUT -- PROGRAM` on the
/// CPU runtime (the program's own arguments can follow).
fn run_command(program: &Path, kernel: &str, capture: &str, out: &Path) -> Command {
    let mut cmd = Command::new(ditto_bin());
    cmd.args([
        "run",
        "--hsa-runtime",
        "cpu",
        "--kernel",
        kernel,
        "--capture",
        capture,
    ])
    .arg("--out")
    .arg(out)
    .arg("--")
    .arg(program);
    cmd
}

/// [`run_command`] of the hipcc-built `app`, which must succeed.
pub(crate) fn capture(app: &str, kernel: &str, capture: &str, out: &Path) {
    let mut cmd = run_command(&hip_app(app), kernel, capture, out);
    let o = output_within(&mut cmd, LIMIT, &format!("capture of {kernel}"));
    assert_eq!(o.status.code(), Some(0), "stderr:\n{}", stderr(&o));
}

/// `ditto replay SNAPSHOT ARGS --json` on the CPU runtime.
pub(crate) fn replay(snapshot: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(ditto_bin());
    cmd.arg("replay")
        .arg(snapshot)
        .args(["--hsa-runtime", "cpu", "--json"])
        .args(args)
        .env("NO_COLOR", "1");
    output_within(&mut cmd, LIMIT, "ditto replay")
}

#[test]
fn the_captured_kernel_replayed_reproduces_the_application_s_outputs_exactly() {
    // (program, kernel, capture): an in-place kernel, a pointer table in
    // device memory (every allocation taken), a __constant__ global, and a
    // reduction.
    let cases = [
        ("replay_cases", "scale_in_place", "replay"),
        ("replay_cases", "gather_rows", "replay-all"),
        ("replay_cases", "apply_coefficients", "replay"),
        ("reduce_sum_baseline", "reduce_sum", "replay"),
    ];
    for (app, kernel, mode) in cases {
        let dir = tempfile::tempdir().unwrap();
        let snap = dir.path().join("snap");
        capture(app, kernel, mode, &snap);
        let out = replay(&snap, &["--atol", "0", "--rtol", "0", "--iterations", "3"]);
        let v = json(&out);
        assert_eq!(
            (out.status.code(), &v["valid"]),
            (Some(0), &serde_json::json!(true)),
            "{kernel}: stderr:\n{}",
            stderr(&out)
        );
        assert!(v["arrays_compared"].as_u64().unwrap() >= 1, "{kernel}: {v}");
        assert_eq!(v["mismatches"].as_array().unwrap().len(), 0, "{kernel}");
        let r = &v["replay"];
        assert_eq!(r["iterations"], 3, "{kernel}");
        assert_eq!(r["times_ns"].as_array().unwrap().len(), 3, "{kernel}: {r}");
        assert!(r["median_ns"].as_u64().unwrap() > 0, "{kernel}");
        assert_eq!(r["relocated"].as_array().unwrap().len(), 0, "{kernel}: {r}");
        assert_eq!(r["kernel_object"], serde_json::Value::Null, "{kernel}");
    }
}

#[test]
fn replay_captures_carry_code_object_kernel_arguments_and_memory_before_the_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    capture("replay_cases", "apply_coefficients", "replay", &snap);
    let m = snapshot_manifest(&snap);
    let d = &m["dispatches"][0];
    let launch = &d["launch"];
    assert_eq!(launch["symbol"], "_Z18apply_coefficientsPKfPfi.kd");
    assert_eq!(
        launch["isa"], "gfx90a",
        "the code object's target: {launch}"
    );
    let code = launch["code_object"].as_str().unwrap();
    let bytes = std::fs::read(snap.join(code)).unwrap();
    assert_eq!(&bytes[..4], b"\x7fELF", "the code object as loaded");
    assert!(code.starts_with("code-object-") && code.len() == "code-object-.co".len() + 64);
    // in, out, n: two pointers and an int.
    assert_eq!(launch["kernarg"].as_str().unwrap().len() / 2, 20);
    let variables: Vec<&str> = launch["variables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert!(variables.contains(&"coefficients"), "{variables:?}");
    let phases: Vec<&str> = d["buffers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["phase"].as_str().unwrap())
        .collect();
    // Both pointer arguments' allocations and the variables before the
    // kernel; the output after it.
    assert!(
        phases.iter().filter(|p| **p == "replay").count() >= 3,
        "{phases:?}"
    );
    assert_eq!(
        phases.iter().filter(|p| **p == "after").count(),
        1,
        "{phases:?}"
    );
    // inspect names the images apart from the arrays.
    let inspected = ditto(&["inspect", snap.to_str().unwrap()]);
    let text = stdout(&inspected);
    assert!(
        text.contains("  replay: ")
            && text.contains("coefficients")
            && text.contains("20 bytes of kernel arguments")
            && text.contains("  arg 1 float32[1024]")
            && !text.contains("bytes["),
        "{text}"
    );
    let v = json(&ditto(&["inspect", snap.to_str().unwrap(), "--json"]));
    let d0 = &v["dispatches"][0];
    assert_eq!(d0["arrays"].as_array().unwrap().len(), 1, "{d0}");
    assert!(
        d0["replay"]["images"].as_array().unwrap().len() >= 3,
        "{d0}"
    );
    // A replay capture still compares with a plain capture of the same run.
    let plain = dir.path().join("plain");
    // A plain capture: outputs only (the default).
    capture("replay_cases", "apply_coefficients", "outputs", &plain);
    let (v, out) = compare_json(&snap, &plain);
    assert_eq!(v["valid"], true, "stderr:\n{}", stderr(&out));
}

#[test]
fn a_replacement_from_the_wrong_program_fails_with_the_mismatches_validate_reports() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    capture("reduce_sum_baseline", "reduce_sum", "replay", &snap);
    let wrong = hip_app("reduce_sum_wrong");
    let out = replay(&snap, &["--from", wrong.to_str().unwrap()]);
    let v = json(&out);
    assert_eq!(out.status.code(), Some(1), "stderr:\n{}", stderr(&out));
    assert_eq!(v["valid"], false);
    // The same pair through `ditto validate`.
    let mut cmd = Command::new(ditto_bin());
    cmd.args([
        "validate",
        "--json",
        "--hsa-runtime",
        "cpu",
        "--kernel",
        "reduce_sum",
        "--ref",
    ])
    .arg(hip_app("reduce_sum_baseline"))
    .arg("--opt")
    .arg(&wrong);
    let validated = output_within(&mut cmd, LIMIT, "ditto validate");
    let w = json(&validated);
    assert_eq!(
        mismatch_fields(&v),
        mismatch_fields(&w),
        "replay:\n{v}\nvalidate:\n{w}"
    );
    assert_eq!(mismatch_fields(&v).len(), 1);
    let r = &v["replay"];
    assert_eq!(r["original_reproduced"], true, "{r}");
    assert!(r["kernel_object"].as_str().is_some());
}

#[test]
fn validate_with_capture_replay_keeps_a_reference_that_replays() {
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().join("kept");
    let mut cmd = Command::new(ditto_bin());
    cmd.args([
        "validate",
        "--json",
        "--hsa-runtime",
        "cpu",
        "--kernel",
        "reduce_sum",
        "--capture",
        "replay",
        "--ref",
    ])
    .arg(hip_app("reduce_sum_baseline"))
    .arg("--opt")
    .arg(hip_app("reduce_sum_optimized"))
    .arg("--keep")
    .arg(&keep);
    let validated = output_within(&mut cmd, LIMIT, "ditto validate --capture replay");
    assert_eq!(json(&validated)["valid"], true, "{}", stderr(&validated));
    let reference = std::fs::read_dir(&keep)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("ref"))
        })
        .expect("the kept reference snapshot");
    let out = replay(&reference, &["--atol", "0", "--rtol", "0"]);
    assert_eq!(
        (out.status.code(), &json(&out)["valid"]),
        (Some(0), &serde_json::json!(true)),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_replacement_from_the_optimized_program_passes_with_a_speedup() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    capture("reduce_sum_baseline", "reduce_sum", "replay", &snap);
    let optimized = hip_app("reduce_sum_optimized");
    let out = replay(
        &snap,
        &["--from", optimized.to_str().unwrap(), "--iterations", "3"],
    );
    let v = json(&out);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", stderr(&out));
    assert_eq!(v["valid"], true);
    let r = &v["replay"];
    let (original, median) = (
        r["original_median_ns"].as_u64().unwrap(),
        r["median_ns"].as_u64().unwrap(),
    );
    let speedup = r["speedup"].as_f64().unwrap();
    assert!(
        (speedup - original as f64 / median as f64).abs() < 1e-9,
        "{r}"
    );
    assert!(stderr(&out).contains("speedup"), "{}", stderr(&out));
}

#[test]
fn relocated_ranges_replay_with_their_pointer_arguments_rewritten_and_say_so_once() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    capture("replay_cases", "scale_in_place", "replay", &snap);
    let out = replay(&snap, &["--relocate", "--atol", "0", "--rtol", "0"]);
    let v = json(&out);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", stderr(&out));
    let relocated = v["replay"]["relocated"].as_array().unwrap();
    assert_eq!(
        relocated.len(),
        1,
        "one range, the data buffer: {relocated:?}"
    );
    assert_ne!(relocated[0][0], relocated[0][1]);
    assert_eq!(
        stderr(&out).matches("relocated").count(),
        1,
        "{}",
        stderr(&out)
    );
}

#[test]
fn bad_input_is_a_clear_error_naming_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    // A snapshot without replay data.
    let plain = dir.path().join("plain");
    // A plain capture: outputs only (the default).
    capture("reduce_sum_baseline", "reduce_sum", "outputs", &plain);
    let out = replay(&plain, &[]);
    assert_eq!(out.status.code(), Some(2));
    let e = json(&out)["error"].as_str().unwrap().to_string();
    assert!(
        e.contains("without replay data") && e.contains("--capture replay"),
        "{e}"
    );

    let snap = dir.path().join("snap");
    capture("reduce_sum_baseline", "reduce_sum", "replay", &snap);
    // A program without the kernel.
    let other = hip_app("vector_add");
    let out = replay(&snap, &["--from", other.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let e = json(&out)["error"].as_str().unwrap().to_string();
    assert!(
        e.contains("holds no kernel")
            && e.contains("reduce_sum(float const*, float*, int)")
            && e.contains("_Z10vector_addPKfS0_Pfi"),
        "{e}"
    );
    // A code object for another GPU: refused before anything runs, naming both.
    let source = dir.path().join("reduce_sum_gfx1030.hip");
    std::fs::write(
        &source,
        "#include <hip/hip_runtime.h>\n\
         __global__ void reduce_sum(const float* in, float* out, int n) {\n\
           if (n > 0 && threadIdx.x == 0) *out = in[0];\n\
         }\n",
    )
    .unwrap();
    let gfx1030 = dir.path().join("reduce_sum_gfx1030.co");
    let hipcc = std::env::var("HIPCC").unwrap_or_else(|_| "hipcc".into());
    let mut build = Command::new(hipcc);
    build
        .args(["--genco", "--offload-arch=gfx1030", "-O2", "-o"])
        .arg(&gfx1030)
        .arg(&source);
    let built = output_within(&mut build, LIMIT, "hipcc --genco for gfx1030");
    assert!(built.status.success(), "hipcc: {}", stderr(&built));
    let out = replay(&snap, &["--kernel-object", gfx1030.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let e = json(&out)["error"].as_str().unwrap().to_string();
    assert!(
        e.contains("is built for gfx1030") && e.contains("--offload-arch=gfx90a"),
        "{e}"
    );
    // A replacement that faults: the replacement's fault, reported; ditto lives.
    let faulty = hip_app("reduce_sum_faulty");
    let out = replay(&snap, &["--from", faulty.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "stderr:\n{}", stderr(&out));
    let e = json(&out)["error"].as_str().unwrap().to_string();
    assert!(
        e.contains("the replacement from") && e.contains("Memory access fault by GPU"),
        "{e}"
    );
    // A kernel reading a pointer table captured without replay-all: the
    // fault, and the option that fixes it.
    let table = dir.path().join("table");
    capture("replay_cases", "gather_rows", "replay", &table);
    let out = replay(&table, &[]);
    assert_eq!(out.status.code(), Some(2), "stderr:\n{}", stderr(&out));
    let e = json(&out)["error"].as_str().unwrap().to_string();
    assert!(
        e.contains("Memory access fault") && e.contains("--capture replay-all"),
        "{e}"
    );
}

/// Builds the reproducer in `dir` with hipcc alone and runs it on the CPU
/// runtime: its exit status and stdout.
fn build_and_run_reproducer(dir: &Path) -> (Option<i32>, String) {
    let hipcc = std::env::var("HIPCC").unwrap_or_else(|_| "hipcc".into());
    let mut build = Command::new(hipcc);
    build
        .args(["--offload-arch=gfx90a", "-O2", "replay.cpp", "-o", "replay"])
        .current_dir(dir);
    let built = output_within(&mut build, LIMIT, "hipcc of the reproducer");
    assert!(built.status.success(), "hipcc: {}", stderr(&built));
    let mut run = Command::new(dir.join("replay"));
    run.arg("3")
        .current_dir(dir)
        .env("LD_LIBRARY_PATH", cpu_runtime_dir())
        .env_remove("DITTO_HIP_HOST_KERNELS");
    let out = output_within(&mut run, LIMIT, "the reproducer");
    (out.status.code(), stdout(&out))
}

#[test]
fn an_emitted_reproducer_builds_with_hipcc_alone_and_gives_the_verdict() {
    let dir = tempfile::tempdir().unwrap();
    for (app, kernel) in [
        ("reduce_sum_baseline", "reduce_sum"),
        ("replay_cases", "apply_coefficients"),
        ("replay_cases", "scale_in_place"),
    ] {
        let snap = dir.path().join(format!("snap-{kernel}"));
        capture(app, kernel, "replay", &snap);
        let emitted = dir.path().join(format!("emit-{kernel}"));
        let out = replay(&snap, &["--emit", emitted.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "stderr:\n{}", stderr(&out));
        assert_eq!(json(&out)["emitted"], emitted.to_str().unwrap());
        for file in [
            "replay.cpp",
            "replay.txt",
            "CMakeLists.txt",
            "kernel.co",
            "kernarg.bin",
        ] {
            assert!(emitted.join(file).exists(), "{kernel}: {file}");
        }
        let (code, printed) = build_and_run_reproducer(&emitted);
        assert_eq!(code, Some(0), "{kernel}: {printed}");
        assert!(printed.starts_with("PASS "), "{kernel}: {printed}");
        assert!(printed.contains("time: median"), "{kernel}: {printed}");
    }
    // The wrong program's kernel: the reproducer's FAIL, naming the element.
    let snap = dir.path().join("snap-reduce_sum");
    let emitted = dir.path().join("emit-wrong");
    let wrong = hip_app("reduce_sum_wrong");
    let out = replay(
        &snap,
        &[
            "--emit",
            emitted.to_str().unwrap(),
            "--from",
            wrong.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", stderr(&out));
    let (code, printed) = build_and_run_reproducer(&emitted);
    assert_eq!(code, Some(1), "{printed}");
    assert!(
        printed.contains(
            "arg 1 (f32[1]): 1 of 1 elements differ; first at index 0: 0, reference 98301.5"
        ) && printed.contains("FAIL reduce_sum(float const*, float*, int): 1 of 1 arrays differ"),
        "{printed}"
    );
    // A directory that holds something is refused.
    let out = replay(&snap, &["--emit", emitted.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        json(&out)["error"]
            .as_str()
            .unwrap()
            .contains("is not empty")
    );
}

#[test]
fn replay_images_larger_than_the_collector_s_memory_budget_are_spilled_not_refused() {
    // 128 MiB of memory before the kernel, a 64 MiB budget: the image goes
    // from its IPC attachment into a file, never into memory whole.
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let mut cmd = run_command(&app("large_output"), "large_fill", "replay", &snap);
    cmd.args(["--mib", "128"])
        .env("DITTO_COLLECTOR_MEMORY_MIB", "64");
    let o = output_within(&mut cmd, LIMIT, "capture of large_fill");
    assert_eq!(o.status.code(), Some(0), "stderr:\n{}", stderr(&o));
    let m = snapshot_manifest(&snap);
    let image = &m["dispatches"][0]["buffers"][0];
    assert_eq!(
        (image["phase"].as_str(), image["extent"].as_u64()),
        (Some("replay"), Some(128 << 20))
    );
    assert_eq!(image["transport"], "ipc");
    let out = replay(&snap, &["--atol", "0", "--rtol", "0"]);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", stderr(&out));
    // Nothing of the spill is left beside the snapshot.
    let mut names: Vec<String> = std::fs::read_dir(&snap)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 4, "{names:?}");
}

#[test]
fn an_output_inside_a_larger_allocation_replays_compared_by_what_the_kernels_wrote() {
    // A caching allocator's slices of one allocation (as PyTorch's): the
    // output is an interior pointer, so the capture takes it before the
    // kernel too and the comparison is by what the kernels wrote; the
    // replay's side holds the same before-image (the memory it restored).
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let mut cmd = run_command(&app("caching_allocator"), "scale_add", "replay", &snap);
    let o = output_within(&mut cmd, LIMIT, "capture of scale_add");
    assert_eq!(o.status.code(), Some(0), "stderr:\n{}", stderr(&o));
    let phases: Vec<String> = snapshot_manifest(&snap)["dispatches"][0]["buffers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["tensor"].as_str().unwrap().to_string())
        .collect();
    assert!(phases.contains(&"arg2.before".to_string()), "{phases:?}");
    let out = replay(&snap, &["--atol", "0", "--rtol", "0"]);
    let v = json(&out);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", stderr(&out));
    let a = &v["arrays"][0];
    assert_eq!(a["arg"], 2, "{v}");
    // n = 1000 elements written, the rest of the slice outside the comparison.
    assert_eq!(a["written"]["compared"], 1000, "{a}");
}
