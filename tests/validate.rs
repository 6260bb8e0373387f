//! `ditto validate` end to end on the CPU HSA runtime: the demo's verdicts.

use crate::common::*;

fn validate_reduce_sum(opt: &str) -> std::process::Output {
    validate_reduce_sum_with(opt, &[])
}

/// `ditto validate --json` of reduce_sum_baseline against `opt`, with `extra`.
fn validate_reduce_sum_with(opt: &str, extra: &[&str]) -> std::process::Output {
    let reference = app("reduce_sum_baseline");
    let optimized = app(opt);
    let mut args = vec![
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
    ];
    args.extend_from_slice(extra);
    ditto(&args)
}

#[test]
fn optimized_reduce_sum_is_valid_against_baseline() {
    let out = validate_reduce_sum("reduce_sum_optimized");
    let v = json(&out);
    assert_eq!(v["valid"], true, "stderr:\n{}", stderr(&out));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        v["arrays_compared"], 1,
        "one output array (argument 1) per run"
    );
    assert_eq!(v["mismatches"].as_array().unwrap().len(), 0);
    assert!(v["kernel"].as_str().unwrap().contains("reduce_sum"));
}

#[test]
fn wrong_reduce_sum_mismatches_on_argument_1() {
    let out = validate_reduce_sum("reduce_sum_wrong");
    let v = json(&out);
    assert_eq!(v["valid"], false, "stderr:\n{}", stderr(&out));
    assert_eq!(out.status.code(), Some(1));
    let mismatches = v["mismatches"].as_array().unwrap();
    assert_eq!(mismatches.len(), 1);
    let m = &mismatches[0];
    assert_eq!(m["dispatch"], 0);
    assert_eq!(m["arg"], 1);
    assert_eq!(m["mismatched_elements"], 1);
    assert_eq!(m["total_elements"], 1);
    // The baseline's sum of (i % 7) * 0.5 over 65536 elements, against 0.
    let expected_sum: f64 = (0..65536).map(|i| (i % 7) as f64 * 0.5).sum();
    assert_eq!(m["max_abs_diff"].as_f64().unwrap(), expected_sum);
    assert_eq!(m["max_abs_diff_index"], 0);
    assert_eq!(m["max_rel_diff"].as_f64().unwrap(), 1.0);
}

#[test]
fn human_output_names_pass_and_fail() {
    let reference = app("reduce_sum_baseline");
    let wrong = app("reduce_sum_wrong");
    let out = ditto(&[
        "validate",
        "--hsa-runtime",
        "cpu",
        "--kernel",
        "reduce_sum",
        "--ref",
        reference.to_str().unwrap(),
        "--opt",
        wrong.to_str().unwrap(),
    ]);
    let text = stdout(&out);
    assert!(
        text.contains("FAIL"),
        "stdout:\n{text}\nstderr:\n{}",
        stderr(&out)
    );
    assert!(
        text.contains("Mismatched elements: 1 / 1 (100.0%)"),
        "stdout:\n{text}"
    );
    assert!(
        !text.contains('\x1b'),
        "no colour when stdout is not a terminal"
    );
}

#[test]
fn a_stored_reference_validates_several_optimized_builds_with_their_own_environment() {
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().join("snaps");
    let first = ditto(&[
        "validate",
        "--hsa-runtime",
        "cpu",
        "--kernel",
        "reduce_sum",
        "--ref",
        app("reduce_sum_baseline").to_str().unwrap(),
        "--opt",
        app("reduce_sum_optimized").to_str().unwrap(),
        "--keep",
        keep.to_str().unwrap(),
    ]);
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    // The optimized run must see its own variable and working directory.
    let cwd = tempfile::tempdir().unwrap();
    let check = format!(
        "test \"$SIDE\" = opt && test \"$(pwd -P)\" = '{}' && exec {}",
        cwd.path().canonicalize().unwrap().display(),
        app("reduce_sum_optimized").display()
    );
    let out = ditto(&[
        "validate",
        "--json",
        "--hsa-runtime",
        "cpu",
        "--kernel",
        "reduce_sum",
        "--ref-snapshot",
        keep.join("ref").to_str().unwrap(),
        "--opt",
        &format!("sh -c '{}'", check.replace('\'', "'\\''")),
        "--opt",
        app("reduce_sum_wrong").to_str().unwrap(),
        "--opt-env",
        "SIDE=opt",
        "--opt-cwd",
        cwd.path().to_str().unwrap(),
    ]);
    let v = json(&out);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(v["valid"], false);
    let c = v["comparisons"].as_array().unwrap();
    assert_eq!(c.len(), 2);
    assert_eq!(
        c[0]["valid"], true,
        "the optimized build against the stored reference"
    );
    assert_eq!(c[1]["valid"], false, "the wrong build");
    assert_eq!(c[1]["mismatches"][0]["arg"], 1);
}

#[test]
fn validate_gives_both_sides_kernel_times_and_the_speedup_beside_the_verdict() {
    // Issue 23, item 3: the verdict said nothing about speed, which is why
    // the kernel was optimized.
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().join("snaps");
    let out = validate_reduce_sum_with("reduce_sum_optimized", &["--keep", keep.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    let time_of = |run: &str| {
        snapshot_manifest(&keep.join(run))["dispatches"][0]["duration_ns"]
            .as_u64()
            .unwrap_or_else(|| panic!("the CPU runtime times dispatches ({run})"))
    };
    let (reference, optimized) = (time_of("ref"), time_of("opt"));
    let t = &v["timing"];
    assert_eq!(t["reference_median_ns"], reference);
    assert_eq!(t["optimized_median_ns"], optimized);
    assert_eq!(t["dispatches_timed"], 1);
    assert_eq!(
        t["dispatches"],
        serde_json::json!([{"rank": 0, "dispatch": 0, "reference_ns": reference,
                            "optimized_ns": optimized}])
    );
    let speedup = t["speedup"].as_f64().unwrap();
    assert!((speedup - reference as f64 / optimized as f64).abs() < 1e-9);
    let line = t["summary"].as_str().unwrap();
    let expected_word = if reference > optimized {
        "x faster: "
    } else {
        "x slower: "
    };
    assert!(
        line.starts_with("optimized ") && line.contains(expected_word),
        "{line} ({reference} ns -> {optimized} ns)"
    );
    // On the CPU runtime the times are said to be host code's, not a GPU's.
    assert!(
        line.ends_with(
            ", median of 1 dispatch (times on ditto's CPU HSA runtime: the kernels ran as host \
             code on CPU threads, so this says nothing of their speed on a GPU)"
        ),
        "{line}"
    );
    assert!(
        t["note"]
            .as_str()
            .is_some_and(|n| n.starts_with("times on ditto's CPU HSA runtime")),
        "{t}"
    );
    // The human report ends with it, after the verdict.
    let human = v["summary"].as_str().unwrap();
    assert!(human.starts_with("PASS "), "{human}");
    assert!(human.ends_with(&format!("timing: {line}\n")), "{human}");

    // Several optimized builds: a timing line for each.
    let out = ditto(&[
        "validate",
        "--hsa-runtime",
        "cpu",
        "--kernel",
        "reduce_sum",
        "--ref-snapshot",
        keep.join("ref").to_str().unwrap(),
        "--opt",
        app("reduce_sum_optimized").to_str().unwrap(),
        "--opt",
        app("reduce_sum_wrong").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let timing_lines: Vec<&str> = std::str::from_utf8(&out.stdout)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("timing: optimized "))
        .collect();
    assert_eq!(timing_lines.len(), 2, "{}", stdout(&out));
}

#[test]
fn a_renamed_optimized_kernel_is_validated_with_opt_kernel() {
    // Issue 23, item 4: the optimized build often renames its kernel
    // (`reduce_sum_v2`); ditto required the same name on both sides.
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().join("snaps");
    let validate = |extra: &[&str]| validate_reduce_sum_with("reduce_sum_renamed", extra);
    // Without it: the optimized run never dispatched `reduce_sum`, and the
    // error says what it did dispatch and which option takes it.
    let out = validate(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("reduce_sum_v2(float const*, float*, int)") && err.contains("--opt-kernel"),
        "{err}"
    );
    let out = validate(&[
        "--opt-kernel",
        "reduce_sum_v2",
        "--keep",
        keep.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["valid"], true);
    assert_eq!(v["kernel"], "reduce_sum(float const*, float*, int)");
    assert_eq!(
        v["optimized_kernel"],
        "reduce_sum_v2(float const*, float*, int)"
    );
    assert_eq!(v["dispatches_compared"], 1);
    assert!(
        v["summary"].as_str().unwrap().contains(
            "note: the optimized run dispatched reduce_sum_v2(float const*, float*, int)"
        ),
        "{}",
        v["summary"]
    );

    // compare --opt-kernel: only that kernel's dispatches of the optimized
    // snapshot; a name it does not hold is an error naming what it holds.
    let (r, o) = (keep.join("ref"), keep.join("opt"));
    let compare = |query: &str| {
        ditto(&[
            "compare",
            "--json",
            r.to_str().unwrap(),
            o.to_str().unwrap(),
            "--opt-kernel",
            query,
        ])
    };
    let out = compare("reduce_sum_v2");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        json(&out)["optimized_kernel"],
        "reduce_sum_v2(float const*, float*, int)"
    );
    let out = compare("reduce_sum_v3");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "--opt-kernel \"reduce_sum_v3\" names no dispatch of {}: it holds reduce_sum_v2(float const*, float*, int)",
            o.display()
        )),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_kernel_regex_captures_the_one_kernel_it_matches_and_refuses_two() {
    // Issue 23, item 5: long library names want a pattern; exact matching
    // stays the default, so the pattern is explicit.
    let dir = tempfile::tempdir().unwrap();
    let run = |regex: &str, app_name: &str, out: &str| {
        ditto(&[
            "run",
            "--hsa-runtime",
            "cpu",
            "--kernel-regex",
            regex,
            "--out",
            dir.path().join(out).to_str().unwrap(),
            "--",
            app(app_name).to_str().unwrap(),
        ])
    };
    let out = run("^reduce_sum_v[0-9]+\\(", "reduce_sum_renamed", "one");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let m = snapshot_manifest(&dir.path().join("one"));
    assert_eq!(
        m["dispatches"][0]["kernel"]["demangled"],
        "reduce_sum_v2(float const*, float*, int)"
    );
    assert_eq!(m["kernel_query"], "re:^reduce_sum_v[0-9]+\\(");
    // Two kernels of parallel_groups match: an error naming both.
    let out = run("shared_identity", "parallel_groups", "two");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "the kernel regex \"shared_identity\" matched 2 kernels: \
             dynamic_shared_identity(int*, int); shared_identity(int*, int); make it match one"
        ),
        "{}",
        stderr(&out)
    );
    // A pattern that does not parse is refused before anything runs.
    let out = run("(", "reduce_sum_renamed", "bad");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("the kernel regex \"(\" is not a regular expression: unclosed group"),
        "{}",
        stderr(&out)
    );
    assert!(
        !stdout(&out).contains("sum ="),
        "the application did not run"
    );
    // Exact names stay exact: `reduce_sum` does not name reduce_sum_v2.
    let exact = ditto(&[
        "run",
        "--hsa-runtime",
        "cpu",
        "--kernel",
        "reduce_sum",
        "--out",
        dir.path().join("exact").to_str().unwrap(),
        "--",
        app("reduce_sum_renamed").to_str().unwrap(),
    ]);
    assert_eq!(exact.status.code(), Some(2), "{}", stderr(&exact));
}
