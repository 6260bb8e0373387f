//! The CUDA backend's launch path without CUDA: tests/cuda/fake/ builds a
//! stand-in for libcuda.so.1 and libcupti (host memory, kernels that run
//! only when their stream is synchronised, the real callback and launch
//! structure layouts) and an application that calls InitializeInjection as
//! the driver does. `ditto run` captures through it: the launch is held
//! and synchronised before the snapshot (else the deferred kernel's result
//! would be missing), cuLaunchKernel and cuLaunchKernelEx_ptsz are both
//! read, non-target launches are never synchronised, a launch into a
//! capturing stream is not captured, small buffers are staged (without a
//! staging file, memory the fake driver will not export travels by the
//! copy transport), a program of many long kernel names hears a short
//! "never dispatched" message, and nothing says HSA to a CUDA program.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The fake driver and the fake application, built into `dir`.
fn build_fakes(dir: &Path) -> (PathBuf, PathBuf) {
    build_fake_cuda(dir, "fake_app")
}

/// `ditto run --kernel KERNEL [EXTRA] --out DIR/snap-KERNEL -- fake_app`
/// with the fake driver and CUPTI named to the tool.
fn capture_with(dir: &Path, lib: &Path, app: &Path, kernel: &str, extra: &[&str]) -> Output {
    let mut cmd = Command::new(ditto_bin());
    cmd.args(["run", "--kernel", kernel])
        .args(extra)
        .arg("--out")
        .arg(dir.join(format!("snap-{kernel}")));
    if Path::new("/dev/kfd").exists() {
        cmd.args(["--hsa-runtime", "cpu"]);
    }
    cmd.arg("--")
        .arg(app)
        .env("DITTO_CUDA_DRIVER", lib)
        .env("DITTO_CUPTI_LIBRARY", lib)
        .env("DITTO_LOG", "info")
        .env("NO_COLOR", "1")
        .output()
        .expect("run ditto")
}

fn capture(dir: &Path, lib: &Path, app: &Path, kernel: &str) -> Output {
    capture_with(dir, lib, app, kernel, &[])
}

/// `DITTO ARGS…` (DITTO: the ditto executable to run) with the fake driver
/// and CUPTI named to the tool, `--hsa-runtime cpu` where an AMD GPU would
/// otherwise be chosen, and no colour; the caller adds the rest.
fn fake_ditto(ditto: &Path, lib: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(ditto);
    cmd.args(args);
    if Path::new("/dev/kfd").exists() {
        cmd.args(["--hsa-runtime", "cpu"]);
    }
    cmd.env("DITTO_CUDA_DRIVER", lib)
        .env("DITTO_CUPTI_LIBRARY", lib)
        .env("NO_COLOR", "1");
    cmd
}

/// `ditto run --kernel reduce_sum --capture replay --out SNAP -- fake_app
/// replay MODE` (MODE: `eager` loads the module before the launch, `lazy`
/// during it) with the fake driver and CUPTI named to the tool.
fn replay_capture(lib: &Path, app: &Path, mode: &str, snap: &Path) -> Output {
    let args = [
        "run",
        "--kernel",
        "reduce_sum",
        "--capture",
        "replay",
        "--out",
    ];
    fake_ditto(&ditto_bin(), lib, &args)
        .arg(snap)
        .arg("--")
        .arg(app)
        .args(["replay", mode])
        .output()
        .expect("run ditto")
}

fn expected_sum() -> f32 {
    (0..4096).map(|i| (i % 7) as f32 * 0.5).sum()
}

#[test]
fn a_cuda_launch_is_synchronised_and_captured_before_the_launch_returns() {
    let dir = tempfile::tempdir().unwrap();
    let (lib, app) = build_fakes(dir.path());
    let out = capture(dir.path(), &lib, &app, "reduce_sum");
    let (so, se) = (stdout(&out), stderr(&out));
    // The launch inside a graph capture is matched but not captured: the
    // snapshot is incomplete, which `ditto run` says with exit 2.
    assert_eq!(out.status.code(), Some(2), "{so}\n{se}");
    assert!(
        se.contains("but not every matched dispatch: not captured 1 (error)"),
        "{se}"
    );
    // The application ran unchanged: its own results, and the tool never
    // synchronised a non-target launch.
    assert!(
        so.contains(&format!(
            "sum = {:.1}, tiny ran 10 times, scaled[5] = 7.5, tool syncs during non-target launches: 0",
            expected_sum()
        )),
        "{so}"
    );
    let snap = dir.path().join("snap-reduce_sum");
    let m = snapshot_manifest(&snap);
    let dispatches = m["dispatches"].as_array().unwrap();
    // Dispatch 0 only: dispatch 1 went into a capturing stream.
    assert_eq!(dispatches.len(), 1, "{m:#}");
    assert_eq!(dispatches[0]["index"], 0);
    assert!(se.contains("being captured into a CUDA graph"), "{se}");
    // ... and the snapshot says so: dispatch 1 is listed as missing.
    let missing = m["missing"].as_array().expect("a missing list");
    assert_eq!(missing.len(), 1, "{m:#}");
    assert_eq!(missing[0]["index"], 1);
    assert_eq!(missing[0]["reason"], "error");
    assert!(
        missing[0]["detail"]
            .as_str()
            .unwrap()
            .contains("captured into a CUDA graph"),
        "{m:#}"
    );
    let buffers = dispatches[0]["buffers"].as_array().unwrap();
    assert_eq!(buffers.len(), 1, "only the non-const output: {m:#}");
    // A small buffer is staged: copied into the staging file, the launch
    // released without waiting for the collector.
    assert_eq!(buffers[0]["transport"], "staged");
    let file = dispatches[0]["file"].as_str().unwrap();
    // The deferred kernel ran before the snapshot: the tool synchronised.
    assert_eq!(f32_tensor(&snap, file, "arg1"), vec![expected_sum()]);
    assert!(
        se.contains("capturing kernel `reduce_sum`"),
        "the tool said what it captures: {se}"
    );
}

#[test]
fn without_a_staging_file_a_small_buffer_travels_as_a_shared_memory_copy_with_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (lib, app) = build_fakes(dir.path());
    let mut cmd = Command::new(ditto_bin());
    cmd.args(["run", "--kernel", "reduce_sum", "--out"])
        .arg(dir.path().join("snap"))
        .arg("--")
        .arg(&app)
        .env("DITTO_CUDA_DRIVER", &lib)
        .env("DITTO_CUPTI_LIBRARY", &lib)
        .env("DITTO_STAGING_MIB", "0")
        .env("NO_COLOR", "1");
    let out = cmd.output().expect("run ditto");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let snap = dir.path().join("snap");
    let m = snapshot_manifest(&snap);
    let d = &m["dispatches"][0];
    assert_eq!(d["buffers"][0]["transport"], "shared-memory", "{m:#}");
    let file = d["file"].as_str().unwrap();
    assert_eq!(f32_tensor(&snap, file, "arg1"), vec![expected_sum()]);
}

#[test]
fn a_cuda_program_of_long_kernel_names_hears_a_short_never_dispatched_message_and_nothing_of_hsa() {
    let dir = tempfile::tempdir().unwrap();
    let (lib, app) = build_fakes(dir.path());
    let out = Command::new(ditto_bin())
        .args(["run", "--kernel", "vectorized_elementwise", "--out"])
        .arg(dir.path().join("snap"))
        .arg("--")
        .arg(&app)
        .arg("long-names")
        .env("DITTO_CUDA_DRIVER", &lib)
        .env("DITTO_CUPTI_LIBRARY", &lib)
        .env_remove("DITTO_LOG")
        .env("NO_COLOR", "1")
        .output()
        .expect("run ditto");
    let (so, se) = (stdout(&out), stderr(&out));
    assert!(
        so.contains("40 long-named kernels launched 3 times each"),
        "{so}"
    );
    assert_eq!(out.status.code(), Some(2), "{se}");
    // The closest name first, then the qualified names with their counts;
    // not every signature.
    let first = se
        .lines()
        .position(|l| l.contains("closest to \"vectorized_elementwise\""))
        .unwrap_or_else(|| panic!("no closest name: {se}"));
    assert!(
        se.lines()
            .nth(first)
            .unwrap()
            .contains("\"at::native::vectorized_elementwise_kernel\""),
        "{se}"
    );
    assert!(se.contains("at::native::reduce_kernel"), "{se}");
    assert!(
        se.lines().count() <= 20,
        "{} lines: {se}",
        se.lines().count()
    );
    assert!(se.len() < 2000, "{} characters: {se}", se.len());
    assert!(!se.contains("FillFunctor<float>"), "a full signature: {se}");
    // A CUDA program runs on no HSA runtime: nothing says one.
    assert!(!se.to_lowercase().contains("hsa"), "{se}");
}

#[test]
fn a_cuda_run_never_loads_an_hsa_runtime_in_the_collector_and_an_hsa_run_does() {
    let dir = tempfile::tempdir().unwrap();
    let (lib, fake_app) = build_fakes(dir.path());
    // Without a staging file every buffer travels by IPC (or a copy).
    let run = |kernel: &str, program: &Path, out: &str| {
        Command::new(ditto_bin())
            .args(["run", "--kernel", kernel, "--out"])
            .arg(dir.path().join(out))
            .arg("--")
            .arg(program)
            .env("DITTO_CUDA_DRIVER", &lib)
            .env("DITTO_CUPTI_LIBRARY", &lib)
            .env("DITTO_LOG", "debug")
            .env("DITTO_STAGING_MIB", "0")
            .env("NO_COLOR", "1")
            .output()
            .expect("run ditto")
    };
    let cuda = run("reduce_sum", &fake_app, "cuda");
    let se = stderr(&cuda);
    assert_eq!(cuda.status.code(), Some(2), "{se}");
    assert!(
        se.contains("dispatch 0 of `reduce_sum"),
        "the debug log ran: {se}"
    );
    assert!(!se.contains("loading the HSA runtime"), "{se}");
    // An HSA application's first IPC buffer loads it (here: the CPU
    // runtime; a staged buffer would not need it).
    let hsa = run("reduce_sum", &app("reduce_sum_baseline"), "hsa");
    let se = stderr(&hsa);
    assert_eq!(hsa.status.code(), Some(0), "{se}");
    assert!(se.contains("loading the HSA runtime"), "{se}");
}

#[test]
fn a_cuda_program_validates_with_only_ditto_and_its_tool_library_installed() {
    let dir = tempfile::tempdir().unwrap();
    let (lib, fake_app) = build_fakes(dir.path());
    // `ditto` and `libditto.so` alone in an empty directory: no CPU HSA
    // runtime beside them.
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::copy(ditto_bin(), bin.join("ditto")).unwrap();
    std::fs::copy(tool_lib(), bin.join("libditto.so")).unwrap();
    let validate = |program: &Path| {
        // (dispatch 1 is launched into a graph capture: never captured)
        let args = ["validate", "--kernel", "reduce_sum", "--dispatch", "0"];
        fake_ditto(&bin.join("ditto"), &lib, &args)
            .arg("--ref")
            .arg(program)
            .arg("--opt")
            .arg(program)
            .env_remove("DITTO_CPU_RUNTIME_DIR")
            .output()
            .expect("run ditto validate")
    };
    let out = validate(&fake_app);
    let (so, se) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{so}{se}");
    assert!(so.contains("PASS"), "{so}");
    assert!(!se.to_lowercase().contains("hsa"), "{se}");
    // An HSA application cannot start on a runtime that is not there: the
    // failure says where it was looked for.
    let out = validate(&app("reduce_sum_baseline"));
    let se = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{se}");
    let missing = bin.join("hsa-cpu").join("libhsa-runtime64.so.1");
    assert!(
        se.contains(&format!(
            "ditto's CPU HSA runtime was not found at {}",
            missing.display()
        )),
        "{se}"
    );
}

#[test]
fn a_captured_launch_is_timed_by_its_kernel_activity_record_and_validate_says_the_speedup() {
    let dir = tempfile::tempdir().unwrap();
    let (lib, fake_app) = build_fakes(dir.path());
    // The fake's kernel records last FAKE_CUDA_KERNEL_NS: 5 µs in the
    // reference, 2 µs in the optimized run.
    let keep = dir.path().join("keep");
    let args = ["validate", "--kernel", "reduce_sum", "--dispatch", "0"];
    let out = fake_ditto(&ditto_bin(), &lib, &args)
        .arg("--ref")
        .arg(&fake_app)
        .arg("--opt")
        .arg(&fake_app)
        .args(["--ref-env", "FAKE_CUDA_KERNEL_NS=5000"])
        .args(["--opt-env", "FAKE_CUDA_KERNEL_NS=2000"])
        .arg("--keep")
        .arg(&keep)
        .output()
        .expect("run ditto validate");
    let so = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{so}{}", stderr(&out));
    // The GPU's own times: no word of the CPU HSA runtime.
    assert!(
        so.contains("timing: optimized 2.50x faster: 5.0 µs -> 2.0 µs, median of 1 dispatch\n"),
        "{so}"
    );
    // Each run's own dispatch time, from its kernel record.
    for (side, ns) in [("ref", 5000), ("opt", 2000)] {
        let m = snapshot_manifest(&keep.join(side));
        assert_eq!(m["dispatches"][0]["duration_ns"], ns, "{side}: {m}");
    }
}

#[test]
fn pytorch_s_elementwise_kernel_is_captured_by_its_function_name_and_judged_by_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let (lib, fake_app) = build_fakes(dir.path());
    let validate = |opt: &str| {
        let args = [
            "validate",
            "--kernel",
            "vectorized_elementwise_kernel",
            "--json",
        ];
        fake_ditto(&ditto_bin(), &lib, &args)
            .arg("--ref")
            .arg(format!("{} elementwise 2.5", fake_app.display()))
            .arg("--opt")
            .arg(format!("{} {opt}", fake_app.display()))
            .output()
            .expect("run ditto validate")
    };
    // The same fill: PASS, its functor taken as raw bytes of the driver's
    // size and the array's one pointer as the output.
    let out = validate("elementwise 2.5");
    let v = json(&out);
    assert_eq!(out.status.code(), Some(0), "{v} {}", stderr(&out));
    assert_eq!(
        v["kernel"],
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, \
         std::array<char*, (unsigned long)1> >(int, at::native::FillFunctor<float>, \
         std::array<char*, (unsigned long)1>)",
        "{v}"
    );
    // The last element wrong: FAIL at its byte, in the array's pointer
    // (argument 2; the data are type-erased bytes).
    let out = validate("elementwise 2.5 7");
    let v = json(&out);
    assert_eq!(out.status.code(), Some(1), "{v} {}", stderr(&out));
    let m = &v["mismatches"][0];
    assert_eq!(
        (m["arg"].as_u64(), m["dtype"].as_str()),
        (Some(2), Some("bytes")),
        "{v}"
    );
    // 1023 floats equal, then the last one's four bytes: 2.5 is 0x40200000,
    // 7 is 0x40e00000; only the third byte differs.
    assert_eq!(m["max_abs_diff_index"].as_u64(), Some(1023 * 4 + 2), "{v}");
    assert_eq!(
        m["worst"][0],
        serde_json::json!({"abs_diff": 192.0, "index": 4094, "optimized": 224, "reference": 32})
    );
}

#[test]
fn a_triton_kernel_is_typed_from_triton_s_cache_and_its_scratch_pointers_are_not_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let (lib, fake_app) = build_fakes(dir.path());
    // The entry Triton 3.x writes for a CUDA target: metadata, Triton IR.
    let entry = dir.path().join("triton-cache").join("5f1e");
    std::fs::create_dir_all(&entry).unwrap();
    std::fs::write(
        entry.join("scale_add_kernel.json"),
        r#"{"hash": "5f1e", "target": {"backend": "cuda", "arch": 90, "warp_size": 32}, "num_warps": 4, "triton_version": "3.6.0", "global_scratch_size": 0, "profile_scratch_size": 0, "name": "scale_add_kernel"}"#,
    )
    .unwrap();
    std::fs::write(
        entry.join("scale_add_kernel.ttir"),
        "module {\n  tt.func public @scale_add_kernel(%x_ptr: !tt.ptr<f32> loc(\"x_ptr\"(#loc)), \
         %y_ptr: !tt.ptr<f32> loc(\"y_ptr\"(#loc)), %out_ptr: !tt.ptr<f32> loc(\"out_ptr\"(#loc)), \
         %n: i32 loc(\"n\"(#loc))) attributes {noinline = false} {\n\
         \x20   %x = tt.splat %x_ptr : !tt.ptr<f32> -> tensor<256x!tt.ptr<f32>> loc(#loc1)\n\
         \x20   %x_0 = tt.load %x : tensor<256x!tt.ptr<f32>> loc(#loc2)\n\
         \x20   %y = tt.splat %y_ptr : !tt.ptr<f32> -> tensor<256x!tt.ptr<f32>> loc(#loc3)\n\
         \x20   %y_1 = tt.load %y : tensor<256x!tt.ptr<f32>> loc(#loc4)\n\
         \x20   %0 = arith.addf %x_0, %y_1 : tensor<256xf32> loc(#loc5)\n\
         \x20   %1 = tt.splat %out_ptr : !tt.ptr<f32> -> tensor<256x!tt.ptr<f32>> loc(#loc6)\n\
         \x20   tt.store %1, %0 : tensor<256x!tt.ptr<f32>> loc(#loc7)\n\
         \x20   tt.return loc(#loc8)\n  } loc(#loc)\n}\n",
    )
    .unwrap();
    let run = |cache: &Path, out: &str| {
        let snap = dir.path().join(out);
        let args = [
            "run",
            "--kernel",
            "scale_add_kernel",
            "--capture",
            "inputs,outputs",
            "--out",
        ];
        let o = fake_ditto(&ditto_bin(), &lib, &args)
            .arg(&snap)
            .arg("--")
            .arg(&fake_app)
            .arg("triton")
            .env("TRITON_CACHE_DIR", cache)
            .output()
            .expect("run ditto");
        (o, snap)
    };
    // The entry written above, and the one the installed Triton writes
    // when it compiles the same kernel for sm_90.
    let real = real_triton_cache(dir.path(), "cuda", "scale_add_kernel");
    for (cache, out) in [(dir.path().join("triton-cache"), "typed"), (real, "real")] {
        let (o, snap) = run(&cache, out);
        assert_eq!(o.status.code(), Some(0), "{out}: {}", stderr(&o));
        let m = snapshot_manifest(&snap);
        let d = &m["dispatches"][0];
        // x, y, out as float32 tensors; the IR only loads through x and y,
        // so they are inputs (before the kernel) and out the one output;
        // the scratch pointers (arguments 4 and 5) are not buffers.
        let buffers: Vec<(u64, &str, &str)> = d["buffers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                (
                    b["arg"].as_u64().unwrap(),
                    b["dtype"].as_str().unwrap(),
                    b["phase"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            buffers,
            [
                (0, "float32", "before"),
                (1, "float32", "before"),
                (2, "float32", "after")
            ],
            "{out}: {m}"
        );
        let file = d["file"].as_str().unwrap();
        assert_eq!(f32_tensor(&snap, file, "arg2")[255], 511.0, "{out}");
    }
    // Not in the cache: dispatched, not captured, and what to pass.
    let (out, _) = run(&dir.path().join("empty-cache"), "untyped");
    let se = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{se}");
    assert!(
        se.contains("dispatched the kernel matching \"scale_add_kernel\", but no dispatch of it was captured"),
        "{se}"
    );
    assert!(
        se.contains("TRITON_CACHE_DIR") && se.contains("--arg-types"),
        "{se}"
    );
}

/// What `tests/cuda/torch_triton.py` does on a GPU, through the fake
/// driver: x, y and out in one caching-allocator segment, the kernel typed
/// from the entry the installed Triton compiles; the same kernel passes,
/// and a version wrong in its last element fails at that element, under
/// the argument that writes it.
#[test]
fn a_triton_kernel_in_one_segment_fails_at_its_wrong_last_element_under_its_output() {
    let dir = tempfile::tempdir().unwrap();
    let (lib, fake_app) = build_fakes(dir.path());
    let cache = real_triton_cache(dir.path(), "cuda", "scale_add_kernel");
    let validate = |opt: &str| {
        let args = ["validate", "--kernel", "scale_add_kernel", "--json"];
        fake_ditto(&ditto_bin(), &lib, &args)
            .arg("--ref")
            .arg(format!("{} triton segment", fake_app.display()))
            .arg("--opt")
            .arg(format!("{} {opt}", fake_app.display()))
            .env("TRITON_CACHE_DIR", &cache)
            .output()
            .expect("run ditto validate")
    };
    let out = validate("triton segment");
    let v = json(&out);
    assert_eq!(out.status.code(), Some(0), "{v} {}", stderr(&out));
    assert!(v["timing"]["speedup"].is_number(), "{v}");
    let out = validate("triton segment last");
    let v = json(&out);
    assert_eq!(out.status.code(), Some(1), "{v} {}", stderr(&out));
    // Only out is compared: from its pointer to the segment's end (512
    // floats), by what the kernels wrote (its 256 elements); the last one
    // is 2 * 255 = 510 instead of 511.
    assert_eq!(v["mismatches"].as_array().unwrap().len(), 1, "{v}");
    let m = &v["mismatches"][0];
    assert_eq!(
        (&m["arg"], &m["name"], &m["dtype"], &m["total_elements"]),
        (
            &serde_json::json!(2),
            &serde_json::json!("out_ptr"),
            &serde_json::json!("float32"),
            &serde_json::json!(512)
        ),
        "{v}"
    );
    assert_eq!(m["written"]["compared"], 256, "{v}");
    assert_eq!(
        m["worst"][0],
        serde_json::json!({"abs_diff": 1.0, "index": 255, "optimized": 510.0, "reference": 511.0}),
        "{v}"
    );
    let summary = v["summary"].as_str().unwrap();
    assert!(summary.contains("arg 2 'out_ptr'"), "{summary}");
    assert!(summary.contains("timing: "), "{summary}");
}

#[test]
fn a_launch_not_chosen_by_dispatch_is_listed_as_missing_by_selection() {
    let dir = tempfile::tempdir().unwrap();
    let (lib, app) = build_fakes(dir.path());
    let out = capture_with(dir.path(), &lib, &app, "reduce_sum", &["--dispatch", "1"]);
    // Nothing captured is an error, saying why rather than "never
    // dispatched".
    let se = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{se}");
    assert!(
        se.contains("but no dispatch of it was captured: 1 (selection), 1 (error)"),
        "{se}"
    );
    assert!(!se.contains("never dispatched"), "{se}");
    let m = snapshot_manifest(&dir.path().join("snap-reduce_sum"));
    assert_eq!(m["dispatches"].as_array().unwrap().len(), 0, "{m:#}");
    let mut missing: Vec<(u64, String)> = m["missing"]
        .as_array()
        .expect("a missing list")
        .iter()
        .map(|r| {
            (
                r["index"].as_u64().unwrap(),
                r["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    missing.sort();
    // Dispatch 0 was not chosen; dispatch 1 (chosen) went into a
    // capturing stream.
    assert_eq!(
        missing,
        vec![(0, "selection".to_string()), (1, "error".to_string())],
        "{m:#}"
    );
}

#[test]
fn a_cu_launch_kernel_ex_launch_is_captured_with_its_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let (lib, app) = build_fakes(dir.path());
    let out = capture(dir.path(), &lib, &app, "scale_values<float>");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let snap = dir.path().join("snap-scale_values<float>");
    let m = snapshot_manifest(&snap);
    let d = &m["dispatches"][0];
    let file = d["file"].as_str().unwrap();
    let scaled = f32_tensor(&snap, file, "arg1");
    assert_eq!(scaled.len(), 4096);
    assert_eq!(scaled[5], 7.5, "input (5 % 7) * 0.5 = 2.5 times 3");
    assert_eq!(f32_tensor(&snap, file, "arg0")[5], 2.5);
}

#[test]
fn inputs_are_snapshotted_at_the_launch_entry_before_the_kernel_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (lib, app) = build_fakes(dir.path());
    let out = capture_with(
        dir.path(),
        &lib,
        &app,
        "scale_values<float>",
        &["--capture", "all"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let snap = dir.path().join("snap-scale_values<float>");
    let m = snapshot_manifest(&snap);
    let d = &m["dispatches"][0];
    let file = d["file"].as_str().unwrap();
    // Before the kernel ran, its output held what the allocation held (zeros);
    // after, the scaled values.
    let before = f32_tensor(&snap, file, "arg1.before");
    assert_eq!((before.len(), before[5]), (4096, 0.0));
    assert_eq!(f32_tensor(&snap, file, "arg1")[5], 7.5);
}

#[test]
fn without_cupti_the_application_runs_unchanged_after_one_warning() {
    let dir = tempfile::tempdir().unwrap();
    let (lib, app) = build_fakes(dir.path());
    let out = Command::new(ditto_bin())
        .args(["run", "--kernel", "reduce_sum", "--out"])
        .arg(dir.path().join("snap"))
        .arg("--")
        .arg(&app)
        .env("DITTO_CUDA_DRIVER", &lib)
        .env("DITTO_CUPTI_LIBRARY", dir.path().join("no-libcupti.so"))
        .env("NO_COLOR", "1")
        .output()
        .expect("run ditto");
    let (so, se) = (stdout(&out), stderr(&out));
    assert!(so.contains(&format!("sum = {:.1}", expected_sum())), "{so}");
    let warnings: Vec<&str> = se
        .lines()
        .filter(|l| l.contains("CUPTI (libcupti) cannot be loaded"))
        .collect();
    assert_eq!(warnings.len(), 1, "{se}");
    assert!(warnings[0].contains("DITTO_CUPTI_LIBRARY"), "{se}");
}

#[test]
fn a_replay_capture_keeps_the_kernel_s_module_loaded_before_or_during_its_launch() {
    let dir = tempfile::tempdir().unwrap();
    let (lib, app) = build_fakes(dir.path());
    let executable = std::fs::read(&app).unwrap();
    for mode in ["eager", "lazy"] {
        let snap = dir.path().join(format!("snap-{mode}"));
        let out = replay_capture(&lib, &app, mode, &snap);
        assert_eq!(out.status.code(), Some(0), "{mode}: {}", stderr(&out));
        assert!(
            stdout(&out).contains(&format!("sum = {:.1}", expected_sum())),
            "{mode}: {}",
            stdout(&out)
        );
        let m = snapshot_manifest(&snap);
        let d = &m["dispatches"][0];
        let launch = &d["launch"];
        assert_eq!(launch["symbol"], "_Z10reduce_sumPKfPfi", "{mode}");
        // The module as CUPTI reported it: here the program's own ELF,
        // whose symbol table names the kernel as a cubin's does.
        let code = launch["code_object"]
            .as_str()
            .unwrap_or_else(|| panic!("{mode}: no code object: {launch}"));
        // (its e_machine made EM_CUDA, so that it reads as a cubin)
        let mut cubin = executable.clone();
        cubin[18..20].copy_from_slice(&190u16.to_le_bytes());
        let stored = std::fs::read(snap.join(code)).unwrap();
        let first_difference = stored.iter().zip(&cubin).position(|(a, b)| a != b);
        assert!(
            stored.len() == cubin.len() && first_difference.is_none(),
            "{mode}: {} bytes stored, the program has {}; first difference at {first_difference:?}",
            stored.len(),
            cubin.len()
        );
        assert!(launch["code_object_missing"].is_null(), "{mode}: {launch}");
        // in, out, n packed as the kernel's parameters: 20 bytes.
        assert_eq!(launch["kernarg"].as_str().unwrap().len(), 40, "{mode}");
        let images: Vec<u64> = d["buffers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["phase"] == "replay")
            .map(|b| b["extent"].as_u64().unwrap())
            .collect();
        assert_eq!(
            images,
            vec![4096 * 4, 4],
            "{mode}: the input and the output, whole"
        );
        let file = d["file"].as_str().unwrap();
        assert_eq!(
            f32_tensor(&snap, file, "arg1"),
            vec![expected_sum()],
            "{mode}"
        );
        // Before the kernel, the output held -1.
        assert_eq!(f32_tensor(&snap, file, "memory1"), vec![-1.0], "{mode}");
    }
}

#[test]
fn a_cuda_replay_capture_replays_on_the_driver_to_the_application_s_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let (lib, app) = build_fakes(dir.path());
    let snap = dir.path().join("snap");
    let out = replay_capture(&lib, &app, "lazy", &snap);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for extra in [&[][..], &["--relocate"][..]] {
        let out = Command::new(ditto_bin())
            .arg("replay")
            .arg(&snap)
            .args(["--json", "--atol", "0", "--rtol", "0", "--iterations", "2"])
            .args(extra)
            .env("DITTO_CUDA_DRIVER", &lib)
            .output()
            .expect("run ditto replay");
        let v = json(&out);
        assert_eq!(
            (out.status.code(), &v["valid"]),
            (Some(0), &serde_json::json!(true)),
            "{extra:?}: {}",
            stderr(&out)
        );
        let r = &v["replay"];
        assert_eq!(
            r["times_ns"],
            serde_json::json!([2000, 2000]),
            "{extra:?}: {r}"
        );
        let relocated = r["relocated"].as_array().unwrap().len();
        assert_eq!(relocated > 0, !extra.is_empty(), "{extra:?}: {r}");
    }
    // --from a CUDA program: its cubins as cuobjdump extracts them (here a
    // stand-in that writes the program's image as a cubin would be).
    let cubin = dir.path().join("program.cubin");
    let mut image = std::fs::read(&app).unwrap();
    image[18..20].copy_from_slice(&190u16.to_le_bytes());
    std::fs::write(&cubin, &image).unwrap();
    let tool = dir.path().join("cuobjdump");
    std::fs::write(
        &tool,
        format!(
            "#!/bin/sh\n[ \"$1 $2\" = \"-xelf all\" ] || exit 9\ncp {} ./program.1.sm_90.cubin\n",
            cubin.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = Command::new(ditto_bin())
        .arg("replay")
        .arg(&snap)
        .args(["--json", "--from"])
        .arg(&app)
        .env("DITTO_CUDA_DRIVER", &lib)
        .env("DITTO_CUOBJDUMP", &tool)
        .output()
        .expect("run ditto replay --from");
    let v = json(&out);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(v["replay"]["original_reproduced"], true, "{v}");
    assert!(v["replay"]["kernel_object"].as_str().is_some(), "{v}");
    // Without cuobjdump: what to do.
    let out = Command::new(ditto_bin())
        .arg("replay")
        .arg(&snap)
        .args(["--json", "--from"])
        .arg(&app)
        .env("DITTO_CUDA_DRIVER", &lib)
        .env("DITTO_CUOBJDUMP", dir.path().join("no-such-tool"))
        .output()
        .expect("run ditto replay --from");
    assert_eq!(out.status.code(), Some(2));
    let e = json(&out)["error"].as_str().unwrap().to_string();
    assert!(
        e.contains("cuobjdump") && e.contains("--kernel-object"),
        "{e}"
    );
    // The reproducer of a CUDA dispatch: for nvcc, on the driver API.
    let emitted = dir.path().join("emit");
    let out = Command::new(ditto_bin())
        .arg("replay")
        .arg(&snap)
        .arg("--emit")
        .arg(&emitted)
        .env("DITTO_CUDA_DRIVER", &lib)
        .output()
        .expect("run ditto replay --emit");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("nvcc -O2 replay.cu -o replay -lcuda"),
        "{}",
        stdout(&out)
    );
    for file in [
        "kernel.cubin",
        "replay.cu",
        "replay.cpp",
        "kernarg.bin",
        "CMakeLists.txt",
    ] {
        assert!(emitted.join(file).exists(), "{file}");
    }
    let text = std::fs::read_to_string(emitted.join("replay.txt")).unwrap();
    assert!(
        text.contains("kernel _Z10reduce_sumPKfPfi\n")
            && text.contains("cuda-launch\n")
            && text.contains("relocate-every-word\n")
            && text.contains("kernarg 20\n"),
        "{text}"
    );
    assert!(
        std::fs::read_to_string(emitted.join("replay.cu"))
            .unwrap()
            .contains("#define DITTO_REPLAY_CUDA 1")
    );
}
