//! Real ROCr 7.2.4 (the ROCm 7.2 chroot, scripts/rocm-chroot) in its own
//! model mode, on ditto's model GPU (crates/hsa-model): the thunk reads
//! the topology ditto writes (`HSA_MODEL_TOPOLOGY`) and hands its AQL
//! queues to the model library (`HSA_MODEL_LIB`), which executes them.
//! No CPU runtime is on the library path: every HSA call here is real
//! ROCr's.
//! - tests/rocm/packet_app.c (three barrier-AND packets, each with a
//!   completion signal waited on with HSA_WAIT_STATE_BLOCKED) completes;
//!   with the model's execution switched off (DITTO_MODEL_GPU_EXECUTE=0)
//!   it does not, so what completes is completed by the model;
//! - tests/rocm/packet_tool.cpp, loaded by real ROCr through
//!   HSA_TOOLS_LIB and LD_PRELOAD, sees every packet through its
//!   intercept queue;
//! - the applications of tests/hip/, built by hipcc 7.2.4 for gfx942 and
//!   run unmodified by real HIP 7.2.4 (kernels by their host builds, HIP's
//!   copies by its blit kernels and ROCr's SDMA queues), print what they
//!   print everywhere else; with execution switched off they never finish.
//!   `ipc_share` is the exception, pinned: ROCr 7.2.4's thunk implements
//!   no IPC ioctl in model mode and aborts the application.

use crate::common::hip_suite::HIP_SUITE;
use crate::common::model_gpu::*;
use crate::common::*;

const APP_LINE: &str = "packet_app: 3 of 3 packets completed\n";

#[test]
fn real_rocr_7_2_completes_barrier_packets_on_the_model_gpu_and_not_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let (app, _) = packet_programs(dir.path());
    let app = app.to_str().unwrap();
    let out = on_model(dir.path(), &[], &[app], LIMIT);
    assert_eq!(
        (out.status.code(), stdout(&out).as_str()),
        (Some(0), APP_LINE),
        "stderr:\n{}",
        stderr(&out)
    );
    // Execution switched off: the same waits never end.
    assert_never_finishes_switched_off(dir.path(), app);
}

#[test]
fn a_tool_loaded_by_real_rocr_7_2_sees_every_packet_on_the_model_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let (app, tool) = packet_programs(dir.path());
    for how in ["HSA_TOOLS_LIB", "LD_PRELOAD"] {
        let env = [(how, tool.display().to_string())];
        let out = on_model(dir.path(), &env, &[app.to_str().unwrap()], LIMIT);
        assert_eq!(out.status.code(), Some(0), "{how}: {}", stderr(&out));
        assert_eq!(
            stdout(&out),
            format!(
                "packet_tool: OnLoad runtime=3 core=2/1016 amd=2/624\n{APP_LINE}\
                 packet_tool: 1 intercept queue(s), 3 packet(s) seen\n"
            ),
            "{how}"
        );
    }
}

/// The applications of tests/hip/ that HIP_SUITE runs, built by hipcc
/// 7.2.4 for gfx942 into target/<profile>/apps/hip-7.2-gfx942/ (once per
/// test process), each with its host build beside it.
#[test]
fn hip_programs_run_unmodified_by_real_hip_and_rocr_7_2_on_the_model_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let apps = gfx942_apps();
    for (name, args, expected) in HIP_SUITE {
        let exe = apps.join(name);
        let mut cmd = vec![exe.to_str().unwrap()];
        cmd.extend(args.iter());
        let out = on_model(dir.path(), &[], &cmd, LIMIT);
        if *name == "ipc_share" {
            // ROCr 7.2.4's thunk has no IPC in model mode: it aborts
            // (SIGABRT; scripts/rocm-chroot exits with 128 + the signal).
            assert_eq!(out.status.code(), Some(128 + 6), "{name}: {}", stderr(&out));
            assert!(
                stderr(&out).contains("model: Unimplemented KFD ioctl"),
                "{}",
                stderr(&out)
            );
            continue;
        }
        assert_eq!(
            (out.status.code(), stdout(&out).as_str()),
            (Some(0), *expected),
            "{name} {args:?} on the model GPU; stderr:\n{}",
            stderr(&out)
        );
    }
    // Execution switched off: the first kernel's completion never comes.
    let exe = apps.join("reduce_sum_baseline");
    assert_never_finishes_switched_off(dir.path(), exe.to_str().unwrap());
}

#[test]
fn ditto_validate_beneath_real_rocr_7_2_gives_the_cpu_runtime_s_verdicts() {
    let out = validate_on_model("reduce_sum_baseline", "reduce_sum_optimized", &[]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("{e}: stdout {} stderr {}", stdout(&out), stderr(&out)));
    assert_eq!(
        (out.status.code(), &v["valid"]),
        (Some(0), &serde_json::json!(true)),
        "{v}"
    );
    assert_eq!(v["arrays_compared"], 1, "{v}");
    assert_eq!(
        v["kernel"].as_str(),
        Some("reduce_sum(float const*, float*, int)")
    );
    let out = validate_on_model("reduce_sum_baseline", "reduce_sum_wrong", &[]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        (out.status.code(), &v["valid"]),
        (Some(1), &serde_json::json!(false)),
        "{v}"
    );
    let m = &v["mismatches"][0];
    assert_eq!(
        (m["dispatch"].as_u64(), m["arg"].as_u64()),
        (Some(0), Some(1)),
        "{v}"
    );
    let expected_sum: f64 = (0..65536).map(|i| (i % 7) as f64 * 0.5).sum();
    assert_eq!(m["max_abs_diff"].as_f64(), Some(expected_sum), "{v}");
    assert!(
        stderr(&out).contains("captured 1 dispatch of reduce_sum"),
        "{}",
        stderr(&out)
    );
    // The model's execution switched off: no kernel completes, the
    // reference run is stopped at its --timeout, and there is no verdict.
    let off = [("DITTO_MODEL_GPU_EXECUTE", "0".to_string())];
    let out = validate_on_model("reduce_sum_baseline", "reduce_sum_wrong", &off);
    assert_eq!(
        out.status.code(),
        Some(2),
        "stdout {} stderr {}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        !stdout(&out).contains("\"valid\": true"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_rocr_without_model_mode_is_refused_naming_it_and_what_works() {
    let mut c = in_chroot("6.4", None);
    c.arg("--").arg(ditto_bin()).args([
        "run",
        "--hsa-runtime",
        "model",
        "--kernel",
        "k",
        "--",
        "true",
    ]);
    let out = output_within(
        &mut c,
        LIMIT,
        "ditto run --hsa-runtime model in the 6.4 chroot",
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("libhsa-runtime64.so.1 has no model mode")
            && err.contains("ROCr 7.2 is the first")
            && err.contains("--hsa-runtime cpu"),
        "{err}"
    );
}

#[test]
fn a_kernel_without_its_host_build_is_named_and_the_application_aborted_not_hung() {
    let dir = tempfile::tempdir().unwrap();
    // vector_add alone, without vector_add.host.so beside it.
    let exe = dir.path().join("vector_add");
    std::fs::copy(gfx942_apps().join("vector_add"), &exe).unwrap();
    let out = on_model(dir.path(), &[], &[exe.to_str().unwrap()], LIMIT);
    let err = stderr(&out);
    // SIGABRT, as ROCr aborts on a GPU exception (rocm-chroot: 128 + 6).
    assert_eq!(
        out.status.code(),
        Some(128 + 6),
        "stdout {} stderr {err}",
        stdout(&out)
    );
    assert_eq!(stdout(&out), "", "no result of a kernel that did not run");
    assert!(
        err.contains("vector_add(float const*, float const*, float*, int)")
            && err.contains("has no host implementation")
            && err.contains(".host.so")
            && err.contains("the application is aborted"),
        "{err}"
    );
}

#[test]
fn a_megabyte_copy_of_pageable_memory_aborts_unless_hip_stages_it() {
    // dispatch_storm with a 4 MiB output, copied back from device memory
    // into a std::vector by hipMemcpy.
    let dir = tempfile::tempdir().unwrap();
    let exe = gfx942_build(dir.path(), "dispatch_storm");
    let cmd = [exe.to_str().unwrap(), "2", "--floats", "1048576"];
    // HIP pins pageable memory of more than 1 MiB: the model-mode thunk has
    // no userptr and aborts (SIGABRT: 128 + 6).
    let out = on_model(dir.path(), &[], &cmd, LIMIT);
    assert_eq!(out.status.code(), Some(128 + 6), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("model: userptr not supported"),
        "{}",
        stderr(&out)
    );
    // What --hsa-runtime model sets: HIP stages the copy.
    let staged = [("GPU_PINNED_MIN_XFER_SIZE", "4096".to_string())];
    let out = on_model(dir.path(), &staged, &cmd, LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("dispatch_storm: dispatches=2 items=64"),
        "{}",
        stdout(&out)
    );
}
