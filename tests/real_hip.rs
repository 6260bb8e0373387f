//! Real HIP on the CPU runtime, end to end: the applications of tests/hip/,
//! built by hipcc for gfx90a (crates/test-apps/build/hip.rs), run unmodified
//! by Debian's real HIP runtime (libamdhip64) on ditto's CPU HSA runtime.
//! Their kernels run from the host builds beside them, CLR's blit kernels
//! natively (crates/hsa-cpu/src/code_objects/blit_kernels.rs). Checks the
//! values the programs print, the clear failure of a kernel without a host build, IPC between
//! two processes, and ditto's verdicts on these programs (the same as on the
//! HIP-like applications of tests/apps/).

use crate::common;
use crate::common::*;
use std::process::Command;
use std::time::Duration;

/// Far beyond what any of these runs needs; reaching it means a hang.
const LIMIT: Duration = Duration::from_secs(300);

fn run_hip(name: &str, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(hip_app(name));
    cmd.args(args)
        .env("LD_LIBRARY_PATH", cpu_runtime_dir())
        .env_remove("DITTO_HIP_HOST_KERNELS");
    output_within(&mut cmd, LIMIT, &format!("{name} {}", args.join(" ")))
}

fn assert_prints(name: &str, args: &[&str], expected: &str) {
    let out = run_hip(name, args);
    assert_eq!(
        (out.status.code(), stdout(&out).as_str()),
        (Some(0), expected),
        "{name} {args:?}; stderr:\n{}",
        stderr(&out)
    );
}

#[test]
fn the_suite_runs_unmodified_on_the_real_hip_runtime_with_correct_values() {
    for (name, args, expected) in common::hip_suite::HIP_SUITE {
        assert_prints(name, args, expected);
    }
}

#[test]
fn a_kernel_without_host_build_fails_its_dispatch_naming_it_and_where_the_runtime_looked() {
    let dir = tempfile::tempdir().unwrap();
    let lone = dir.path().join("vector_add");
    // Copied by cp(1), not std::fs::copy: a write descriptor for the copy
    // held by this test process could be inherited by a child another test
    // thread is forking at that moment, and until that child's exec closes
    // it, starting the copy fails with ETXTBSY (it did in CI).
    let copied = Command::new("cp")
        .arg(hip_app("vector_add"))
        .arg(&lone)
        .status()
        .expect("run cp");
    assert!(copied.success(), "cp vector_add to {}", lone.display());
    let mut cmd = Command::new(&lone);
    cmd.env("LD_LIBRARY_PATH", cpu_runtime_dir())
        .env_remove("DITTO_HIP_HOST_KERNELS");
    let out = output_within(&mut cmd, LIMIT, "vector_add without host build");
    let e = stderr(&out);
    assert_ne!(out.status.code(), Some(0), "never a silent success: {e}");
    assert!(!stdout(&out).contains("wrong = 0"), "{}", stdout(&out));
    assert!(
        e.contains(
            "kernel `_Z10vector_addPKfS0_Pfi` (vector_add(float const*, float const*, float*, int)) \
             has no host implementation"
        ),
        "{e}"
    );
    assert!(
        e.contains(&format!("{}.host.so (no such file)", lone.display())),
        "{e}"
    );
    assert!(e.contains("DITTO_HIP_HOST_KERNELS is unset"), "{e}");

    // The same copy finds its kernels through DITTO_HIP_HOST_KERNELS.
    let host_build = hip_app("vector_add.host.so");
    let mut cmd = Command::new(&lone);
    cmd.env("LD_LIBRARY_PATH", cpu_runtime_dir()).env(
        "DITTO_HIP_HOST_KERNELS",
        format!("/nonexistent.so:{}", host_build.display()),
    );
    let out = output_within(&mut cmd, LIMIT, "vector_add with DITTO_HIP_HOST_KERNELS");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).ends_with("wrong = 0\n"), "{}", stdout(&out));
}

fn validate(kernel: &str, reference: &str, optimized: &str) -> std::process::Output {
    let mut cmd = Command::new(ditto_bin());
    cmd.args([
        "validate",
        "--json",
        "--hsa-runtime",
        "cpu",
        "--kernel",
        kernel,
        "--ref",
    ])
    .arg(hip_app(reference))
    .arg("--opt")
    .arg(hip_app(optimized))
    .env("NO_COLOR", "1");
    output_within(
        &mut cmd,
        LIMIT,
        &format!("validate {reference} {optimized}"),
    )
}

#[test]
fn validate_passes_the_optimized_reduction_built_by_hipcc() {
    let out = validate("reduce_sum", "reduce_sum_baseline", "reduce_sum_optimized");
    let v = json(&out);
    assert_eq!(v["valid"], true, "stderr:\n{}", stderr(&out));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(v["arrays_compared"], 1);
    assert_eq!(v["mismatches"].as_array().unwrap().len(), 0);
    assert_eq!(
        v["kernel"].as_str().unwrap(),
        "reduce_sum(float const*, float*, int)"
    );
}

#[test]
fn validate_fails_the_wrong_reduction_built_by_hipcc_on_argument_1() {
    let out = validate("reduce_sum", "reduce_sum_baseline", "reduce_sum_wrong");
    let v = json(&out);
    assert_eq!(v["valid"], false, "stderr:\n{}", stderr(&out));
    assert_eq!(out.status.code(), Some(1));
    let mismatches = v["mismatches"].as_array().unwrap();
    assert_eq!(mismatches.len(), 1, "{v}");
    let m = &mismatches[0];
    assert_eq!(
        (m["dispatch"].as_u64(), m["arg"].as_u64()),
        (Some(0), Some(1))
    );
    assert_eq!(m["mismatched_elements"], 1);
    let expected_sum: f64 = (0..65536).map(|i| (i % 7) as f64 * 0.5).sum();
    assert_eq!(m["max_abs_diff"].as_f64().unwrap(), expected_sum);
}

/// (app, args, kernel, captured (arg, dtype), dispatches).
type RunCase = (
    &'static str,
    &'static [&'static str],
    &'static str,
    &'static [(u64, &'static str)],
    usize,
);

#[test]
fn ditto_run_captures_each_hipcc_built_application_with_only_the_kernel_name() {
    let cases: &[RunCase] = &[
        (
            "reduce_sum_baseline",
            &[],
            "reduce_sum",
            &[(1, "float32")],
            1,
        ),
        (
            "reduce_sum_optimized",
            &[],
            "reduce_sum",
            &[(1, "float32")],
            1,
        ),
        ("reduce_sum_wrong", &[], "reduce_sum", &[(1, "float32")], 1),
        ("vector_add", &[], "vector_add", &[(2, "float32")], 1),
        (
            "scale_values",
            &["float"],
            "scale_values",
            &[(0, "float32"), (1, "float32")],
            1,
        ),
        (
            "scale_values",
            &["double"],
            "scale_values",
            &[(0, "float64"), (1, "float64")],
            1,
        ),
        (
            "scale_twice",
            &[],
            "scale_values",
            &[(0, "float32"), (1, "float32")],
            2,
        ),
    ];
    for &(app_name, args, kernel, captured, dispatches) in cases {
        let what = format!("{app_name} {args:?}");
        let (out, manifest) = zero_configuration_run(&hip_app(app_name), args, kernel);
        let e = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{what}: {e}");
        let manifest = manifest.unwrap_or_else(|| panic!("{what}: no manifest; stderr:\n{e}"));
        let list = manifest["dispatches"].as_array().unwrap();
        assert_eq!(list.len(), dispatches, "{what}: {manifest}");
        for d in list {
            let got: Vec<(u64, &str)> = d["buffers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| (b["arg"].as_u64().unwrap(), b["dtype"].as_str().unwrap()))
                .collect();
            assert_eq!(got, captured, "{what}: {d}");
        }
    }
}

#[test]
fn a_hipcc_built_application_that_never_dispatches_the_kernel_gets_the_never_dispatched_error() {
    let (out, _) = zero_configuration_run(&hip_app("no_dispatch"), &[], "reduce_sum");
    let e = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert!(
        e.contains("never dispatched a kernel matching \"reduce_sum\""),
        "{e}"
    );
    assert!(
        e.contains("vector_add(float const*, float const*, float*, int) ×1"),
        "{e}"
    );
}

/// The benchmark loop (scripts/bench item 1) on the real HIP runtime: every
/// launch's output is right (the program checks the last one and exits 1
/// otherwise), and under ditto, whose target is never launched, every
/// launch passes by counted and nothing is captured.
#[test]
fn the_hipcc_built_dispatch_storm_runs_its_launches_and_passes_them_all_by_a_tool_aimed_elsewhere()
{
    let out = run_hip("dispatch_storm", &["300", "--sync-every", "100"]);
    let printed = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{printed}{}", stderr(&out));
    assert!(
        printed.starts_with("dispatch_storm: dispatches=300 items=64 sync_every=100 elapsed_s="),
        "{printed}"
    );
    let (out, _) = zero_configuration_run(
        &hip_app("dispatch_storm"),
        &["300", "--sync-every", "100"],
        "storm_unused",
    );
    let e = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert!(
        e.contains("never dispatched a kernel matching \"storm_unused\""),
        "{e}"
    );
    // 300 launches and the warm-up.
    assert!(e.contains("storm_fill(float*, int, int) ×301"), "{e}");
    assert!(
        stdout(&out).starts_with("dispatch_storm: dispatches=300 "),
        "{}",
        stdout(&out)
    );
}

#[test]
fn validate_passes_scale_values_of_floats_and_doubles_against_themselves() {
    for dtype in ["float", "double"] {
        let command = format!("{} {dtype}", hip_app("scale_values").display());
        let mut cmd = Command::new(ditto_bin());
        cmd.args([
            "validate",
            "--json",
            "--hsa-runtime",
            "cpu",
            "--kernel",
            "scale_values",
        ])
        .args(["--ref", &command, "--opt", &command])
        .env("NO_COLOR", "1");
        let out = output_within(&mut cmd, LIMIT, &format!("validate scale_values {dtype}"));
        let v = json(&out);
        assert_eq!(v["valid"], true, "{dtype}: stderr:\n{}", stderr(&out));
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(v["arrays_compared"], 2, "{dtype}: input and output: {v}");
        assert_eq!(
            v["kernel"].as_str().unwrap(),
            format!("void scale_values<{dtype}>({dtype}*, {dtype}*, {dtype}, int)"),
            "{v}"
        );
    }
}

#[test]
fn the_source_names_of_a_kernel_s_arguments_reach_the_manifest_and_the_json() {
    // Issue 23, item 2: reports said `arg 2` even when the build kept the
    // names (`-fhip-kernel-arg-name` in the metadata, `-g` in the DWARF).
    for app_name in ["vector_add_arg_names", "vector_add_debug"] {
        let (out, manifest) = zero_configuration_run(&hip_app(app_name), &[], "vector_add");
        assert_eq!(out.status.code(), Some(0), "{app_name}: {}", stderr(&out));
        let manifest = manifest.unwrap_or_else(|| panic!("{app_name}: no manifest"));
        let buffers = manifest["dispatches"][0]["buffers"].as_array().unwrap();
        let named: Vec<(u64, &str)> = buffers
            .iter()
            .map(|b| {
                (
                    b["arg"].as_u64().unwrap(),
                    b["name"].as_str().unwrap_or("(none)"),
                )
            })
            .collect();
        assert_eq!(named, vec![(2, "c")], "{app_name}: {manifest}");
        let v = json(&ditto(&[
            "validate",
            "--json",
            "--kernel",
            "vector_add",
            "--ref",
            hip_app(app_name).to_str().unwrap(),
            "--opt",
            hip_app(app_name).to_str().unwrap(),
        ]));
        assert_eq!(v["valid"], true, "{app_name}: {v}");
        assert_eq!(v["arrays"][0]["name"], "c", "{app_name}: {v}");
    }
    // Built without either, no name is made up.
    let (_, manifest) = zero_configuration_run(&hip_app("vector_add"), &[], "vector_add");
    assert!(manifest.unwrap()["dispatches"][0]["buffers"][0]["name"].is_null());
}
