//! `ditto run --kernel NAME -- APP` with no other flag, for every test
//! application (crates/test-apps): the application ends with its own exit
//! code, at least one dispatch is captured with the arguments ditto captures
//! by default (the non-const pointers, typed from the kernel's name), and
//! nothing is logged at warn level. The application that never dispatches
//! the target gets the documented "never dispatched" error.
//!
//! Applications get the arguments they need; ditto gets nothing but
//! `--kernel` and the command. DITTO_LOG=warn only filters what is printed,
//! so that every `ditto:` line left would be a warning or an error.

use crate::common::*;

/// Printed whatever the filter says when no GPU is present: not a warning.
const CPU_RUNTIME_NOTICE: &str = "ditto: no AMD GPU found";

/// Every application built by crates/test-apps, with what it needs.
struct Case {
    app: &'static str,
    args: &'static [&'static str],
    kernel: &'static str,
    /// The buffers captured by default: (argument index, dtype).
    captured: &'static [(u64, &'static str)],
    /// Dispatches of the target the application makes.
    dispatches: usize,
}

const CASES: &[Case] = &[
    Case {
        app: "reduce_sum_baseline",
        args: &[],
        kernel: "reduce_sum",
        captured: &[(1, "float32")],
        dispatches: 1,
    },
    Case {
        app: "reduce_sum_optimized",
        args: &[],
        kernel: "reduce_sum",
        captured: &[(1, "float32")],
        dispatches: 1,
    },
    Case {
        app: "reduce_sum_wrong",
        args: &[],
        kernel: "reduce_sum",
        captured: &[(1, "float32")],
        dispatches: 1,
    },
    Case {
        app: "reduce_sum_renamed",
        args: &[],
        kernel: "reduce_sum_v2",
        captured: &[(1, "float32")],
        dispatches: 1,
    },
    Case {
        app: "vector_add",
        args: &[],
        kernel: "vector_add",
        captured: &[(2, "float32")],
        dispatches: 1,
    },
    Case {
        app: "scale_values",
        args: &["float"],
        kernel: "scale_values",
        captured: &[(0, "float32"), (1, "float32")],
        dispatches: 1,
    },
    Case {
        app: "scale_values",
        args: &["double"],
        kernel: "scale_values",
        captured: &[(0, "float64"), (1, "float64")],
        dispatches: 1,
    },
    Case {
        app: "scale_twice",
        args: &[],
        kernel: "scale_values",
        captured: &[(0, "float32"), (1, "float32")],
        dispatches: 2,
    },
    Case {
        app: "parallel_groups",
        args: &[],
        kernel: "barrier_rounds",
        captured: &[(0, "int32")],
        dispatches: 1,
    },
    Case {
        app: "caching_allocator",
        args: &[],
        kernel: "scale_add",
        // An interior pointer of the pool without --arg-sizes: its image
        // before the kernel too (compared by what the kernels wrote).
        captured: &[(2, "float32"), (2, "float32")],
        dispatches: 1,
    },
    Case {
        app: "host_output",
        args: &[],
        kernel: "square_into_host",
        captured: &[(1, "float32")],
        dispatches: 1,
    },
    Case {
        app: "dispatch_storm",
        args: &["20"],
        kernel: "storm_fill",
        captured: &[(0, "float32")],
        // One warm-up dispatch, then the 20 asked for.
        dispatches: 21,
    },
    Case {
        app: "many_queues",
        args: &["--threads", "2", "--queues", "2", "--per-queue", "2"],
        kernel: "fill_tag",
        captured: &[(0, "uint32")],
        dispatches: 8,
    },
    Case {
        app: "queue_churn",
        args: &["5", "2"],
        kernel: "fill_tag",
        captured: &[(0, "uint32")],
        dispatches: 5,
    },
    Case {
        app: "host_reads_device",
        args: &["--copy"],
        kernel: "fill_index",
        captured: &[(0, "float32")],
        dispatches: 1,
    },
    Case {
        app: "vmem_output",
        args: &[],
        kernel: "vmem_fill",
        // An interior pointer of the mapping: its image before the kernel too.
        captured: &[(0, "float32"), (0, "float32")],
        dispatches: 2,
    },
    Case {
        app: "kernel_time",
        args: &["--mib", "4"],
        kernel: "mark_one",
        captured: &[(0, "float32")],
        dispatches: 1,
    },
    Case {
        app: "address_reuse",
        args: &[],
        kernel: "stamp",
        captured: &[(0, "float32")],
        dispatches: 3,
    },
    Case {
        app: "spawns_children",
        args: &["fork-exec"],
        kernel: "scale_values",
        captured: &[(0, "float32"), (1, "float32")],
        // The parent's and the exec'd child's.
        dispatches: 2,
    },
    Case {
        app: "large_output",
        args: &["--mib", "4"],
        kernel: "large_fill",
        captured: &[(0, "float32")],
        // The warm-up is another kernel.
        dispatches: 1,
    },
    Case {
        app: "large_output_ranks",
        // Alone: no barrier to wait at.
        args: &["--mib", "4"],
        kernel: "ranks_mark",
        captured: &[(0, "float32")],
        // The fill is another kernel.
        dispatches: 1,
    },
];

/// Applications that never dispatch the kernel they are run with.
const NEVER_DISPATCHED: &[(&str, &str)] = &[("no_dispatch", "reduce_sum")];

/// Lines ditto (CLI or tool) printed at warn level or above.
fn warnings(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("ditto:") && !l.starts_with(CPU_RUNTIME_NOTICE))
        .collect()
}

fn check(case: &Case) {
    let what = format!("{} {}", case.app, case.args.join(" "));
    let plain = run_plain(&app(case.app), case.args);
    let (out, manifest) = zero_configuration_run(&app(case.app), case.args, case.kernel);
    let e = stderr(&out);
    assert_eq!(
        out.status.code(),
        plain.status.code(),
        "{what}: ditto's exit code is the application's own; stderr:\n{e}"
    );
    assert_eq!(
        warnings(&e),
        Vec::<&str>::new(),
        "{what}: nothing logged at warn level"
    );
    let manifest = manifest.unwrap_or_else(|| panic!("{what}: no manifest; stderr:\n{e}"));
    let dispatches = manifest["dispatches"].as_array().unwrap();
    assert_eq!(
        dispatches.len(),
        case.dispatches,
        "{what}: every dispatch of {} captured",
        case.kernel
    );
    for d in dispatches {
        let captured: Vec<(u64, &str)> = d["buffers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| (b["arg"].as_u64().unwrap(), b["dtype"].as_str().unwrap()))
            .collect();
        assert_eq!(
            captured, case.captured,
            "{what}: the arguments captured and their types in {d}"
        );
        let demangled = d["kernel"]["demangled"].as_str().unwrap_or_default();
        let name = demangled.split('(').next().unwrap_or_default();
        assert!(
            name == case.kernel
                || name.ends_with(&format!(" {}", case.kernel))
                || name.contains(&format!("{}<", case.kernel)),
            "{what}: {demangled} is {}",
            case.kernel
        );
    }
}

fn case(app_name: &str, first_arg: Option<&str>) -> &'static Case {
    CASES
        .iter()
        .find(|c| c.app == app_name && c.args.first().copied() == first_arg)
        .expect("a case of the table")
}

#[test]
fn every_built_test_application_has_a_zero_configuration_case() {
    let dir = profile_dir().join("apps");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.contains('.') {
            continue; // code objects (<app>.co, kernel-only files)
        }
        if entry.path().is_dir() {
            continue; // apps/hip: the hipcc-built applications, tests/real_hip.rs
        }
        let covered =
            CASES.iter().any(|c| c.app == name) || NEVER_DISPATCHED.iter().any(|(a, _)| *a == name);
        if !covered {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "test applications with no case in tests/zero_configuration.rs: {missing:?}"
    );
}

#[test]
fn reduce_sum_baseline_needs_only_the_kernel_name() {
    check(case("reduce_sum_baseline", None));
}

#[test]
fn reduce_sum_optimized_needs_only_the_kernel_name() {
    check(case("reduce_sum_optimized", None));
}

#[test]
fn reduce_sum_wrong_needs_only_the_kernel_name() {
    check(case("reduce_sum_wrong", None));
}

#[test]
fn reduce_sum_renamed_needs_only_the_kernel_name() {
    check(case("reduce_sum_renamed", None));
}

#[test]
fn vector_add_needs_only_the_kernel_name() {
    check(case("vector_add", None));
}

#[test]
fn scale_values_of_floats_a_template_needs_only_the_kernel_name() {
    check(case("scale_values", Some("float")));
}

#[test]
fn scale_values_of_doubles_a_template_needs_only_the_kernel_name() {
    check(case("scale_values", Some("double")));
}

#[test]
fn scale_twice_needs_only_the_kernel_name() {
    check(case("scale_twice", None));
}

#[test]
fn parallel_groups_needs_only_the_kernel_name() {
    check(case("parallel_groups", None));
}

#[test]
fn caching_allocator_slices_need_only_the_kernel_name() {
    check(case("caching_allocator", None));
}

#[test]
fn host_output_memory_needs_only_the_kernel_name() {
    check(case("host_output", None));
}

#[test]
fn dispatch_storm_needs_only_the_kernel_name() {
    check(case("dispatch_storm", Some("20")));
}

#[test]
fn large_output_needs_only_the_kernel_name() {
    check(case("large_output", Some("--mib")));
}

#[test]
fn large_output_ranks_needs_only_the_kernel_name() {
    check(case("large_output_ranks", Some("--mib")));
}

#[test]
fn many_queues_needs_only_the_kernel_name() {
    check(case("many_queues", Some("--threads")));
}

#[test]
fn queue_churn_needs_only_the_kernel_name() {
    check(case("queue_churn", Some("5")));
}

#[test]
fn host_reads_device_through_a_copy_needs_only_the_kernel_name() {
    check(case("host_reads_device", Some("--copy")));
}

#[test]
fn vmem_output_needs_only_the_kernel_name() {
    check(case("vmem_output", None));
}

#[test]
fn kernel_time_needs_only_the_kernel_name() {
    check(case("kernel_time", Some("--mib")));
}

#[test]
fn address_reuse_needs_only_the_kernel_name() {
    check(case("address_reuse", None));
}

#[test]
fn spawns_children_needs_only_the_kernel_name() {
    check(case("spawns_children", Some("fork-exec")));
}

#[test]
fn an_application_that_never_dispatches_the_kernel_gets_the_never_dispatched_error() {
    for &(app_name, kernel) in NEVER_DISPATCHED {
        let (out, _) = zero_configuration_run(&app(app_name), &[], kernel);
        let e = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{app_name}: {e}");
        assert!(
            e.contains(&format!("never dispatched a kernel matching \"{kernel}\"")),
            "{app_name}: {e}"
        );
        let unexpected: Vec<&str> = warnings(&e)
            .into_iter()
            .filter(|l| !l.starts_with("ditto: error: "))
            .collect();
        assert_eq!(unexpected, Vec::<&str>::new(), "{app_name}: only the error");
    }
}
