//! Sub-allocations on a real application: a caching allocator hands out
//! slices of one hipMalloc; a pointer argument resolves to the whole
//! allocation (the handle covers it, the manifest gives the offset) and
//! its extent is what `--arg-sizes` says, else the rest of the allocation.

use crate::common::*;
use std::path::Path;

const POOL: u64 = 1 << 20;
/// Slices are 4096-byte aligned: x, y, out, then an untouched tail of 7.0.
const OUT_OFFSET: u64 = 2 * 4096;

fn capture(extra: &[&str], snap: &Path) -> serde_json::Value {
    let out = std::process::Command::new(ditto_bin())
        .args(["run", "--hsa-runtime", "cpu", "--kernel", "scale_add"])
        .args(extra)
        .arg("--out")
        .arg(snap)
        .arg("--")
        .arg(app("caching_allocator"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("wrong = 0"), "{}", stdout(&out));
    serde_json::from_slice(&std::fs::read(snap.join("manifest.json")).unwrap()).unwrap()
}

#[test]
fn a_slice_with_arg_sizes_is_exactly_its_elements_at_its_offset_in_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let m = capture(
        &[
            "--capture",
            "all",
            "--arg-sizes",
            "arg0=arg3,arg1=arg3,arg2=arg3",
        ],
        &snap,
    );
    let d = &m["dispatches"][0];
    let bufs = d["buffers"].as_array().unwrap();
    assert_eq!(bufs.len(), 6, "three pointers, before and after");
    let bases: Vec<u64> = bufs
        .iter()
        .map(|b| b["alloc_base"].as_u64().unwrap())
        .collect();
    assert!(
        bases.iter().all(|&b| b == bases[0]),
        "one allocation: {bases:?}"
    );
    for b in bufs {
        assert_eq!(b["alloc_size"], POOL);
        assert_eq!(b["elements"], 1000, "{b}");
        let arg = b["arg"].as_u64().unwrap();
        assert_eq!(b["offset"].as_u64().unwrap(), arg * 4096, "{b}");
    }
    let file = d["file"].as_str().unwrap();
    let x = f32_tensor(&snap, file, "arg0.before");
    let out = f32_tensor(&snap, file, "arg2");
    for i in 0..1000 {
        assert_eq!(x[i], i as f32);
        assert_eq!(out[i], 2.0 * i as f32 + 1.0, "out[{i}]");
    }
}

#[test]
fn without_arg_sizes_a_slice_extends_to_the_end_of_its_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let m = capture(&[], &snap);
    let d = &m["dispatches"][0];
    let b = &d["buffers"][0];
    assert_eq!(b["arg"], 2, "only the output by default");
    assert_eq!(b["offset"].as_u64(), Some(OUT_OFFSET));
    assert_eq!(b["extent"].as_u64(), Some(POOL - OUT_OFFSET));
    let out = f32_tensor(&snap, d["file"].as_str().unwrap(), "arg2");
    assert_eq!(out.len() as u64, (POOL - OUT_OFFSET) / 4);
    assert_eq!(out[999], 1999.0);
    assert_eq!(
        out[1024], 7.0,
        "the next slice, which the kernel never wrote"
    );
}

#[test]
fn a_malformed_arg_sizes_list_is_refused_before_the_application_runs() {
    let out = ditto(&[
        "run",
        "--hsa-runtime",
        "cpu",
        "--kernel",
        "scale_add",
        "--arg-sizes",
        "out=n",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("`out` is not an argument"),
        "{}",
        stderr(&out)
    );
}

/// `ditto validate --kernel scale_add --json [EXTRA]` of the caching
/// allocator against itself with `opt_args`, with `env` set for ditto and
/// the applications.
fn validate_slices(
    opt_args: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (std::process::Output, serde_json::Value) {
    let reference = app("caching_allocator");
    let out = std::process::Command::new(ditto_bin())
        .args([
            "validate",
            "--json",
            "--hsa-runtime",
            "cpu",
            "--kernel",
            "scale_add",
            "--ref",
        ])
        .arg(&reference)
        .arg("--opt")
        .arg(format!("{} {opt_args}", reference.display()))
        .args(extra)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let v = json(&out);
    (out, v)
}

#[test]
fn another_tensor_of_the_segment_that_differs_is_outside_a_comparison_of_what_was_written() {
    // Issue 23, item 1: the output, captured to the end of its segment,
    // held another tensor's bytes; when they differed between the runs,
    // ditto reported a mismatch the kernel did not make.
    let (out, v) = validate_slices("--tail 8", &[], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(v["valid"], true);
    // The output (argument 2): its before-image is only the baseline.
    let arrays = v["arrays"].as_array().unwrap();
    assert_eq!(arrays.len(), 1, "{v}");
    let w = &arrays[0]["written"];
    let elements = (POOL - OUT_OFFSET) / 4;
    assert_eq!(w["compared"], 1000, "{w}");
    assert_eq!(w["untouched"], elements - 1000, "{w}");
    assert!(
        v["summary"].as_str().unwrap().contains(&format!(
            "compared the 1000 element(s) the kernels wrote; {} neither changed are outside the \
             comparison",
            elements - 1000
        )),
        "{}",
        v["summary"]
    );
    // The same on request, and the plain comparison when asked: the other
    // tensor then shows as the mismatch the kernel did not make.
    let (out, v) = validate_slices("--tail 8", &["--capture", "written"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(v["arrays"][0]["written"]["compared"], 1000);
    let (plain, v) = validate_slices("--tail 8", &[], &[("DITTO_SUBALLOCATION_WRITES", "0")]);
    assert_eq!(plain.status.code(), Some(1), "{}", stderr(&plain));
    assert!(v["mismatches"][0]["written"].is_null(), "{v}");
    assert_eq!(
        v["mismatches"][0]["mismatched_elements"], 1000,
        "the other tensor's 1000 floats"
    );
}

#[test]
fn a_write_past_the_reference_s_and_a_missing_tail_are_named_by_their_indices() {
    // Issue 23, item 1: an out-of-bounds write by the optimized kernel is
    // caught, and a tail bug still is.
    let (out, v) = validate_slices("--write 1008", &[], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let m = &v["mismatches"][0];
    assert_eq!(m["arg"], 2);
    assert_eq!(m["mismatched_elements"], 8);
    assert_eq!(
        m["written"]["only_optimized"],
        serde_json::json!({"count": 8, "runs": [[1000, 1007]], "past_the_other": true})
    );
    assert!(
        v["summary"].as_str().unwrap().contains(
            "Written only by the optimized kernel: indices 1000..1007 (8 elements), past what \
             the reference wrote"
        ),
        "{}",
        v["summary"]
    );

    let (out, v) = validate_slices("--write 990", &[], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let m = &v["mismatches"][0];
    assert_eq!(m["mismatched_elements"], 10);
    assert_eq!(
        m["written"]["only_reference"]["runs"],
        serde_json::json!([[990, 999]])
    );
    assert!(
        v["summary"]
            .as_str()
            .unwrap()
            .contains("Written only by the reference kernel: indices 990..999 (10 elements)"),
        "{}",
        v["summary"]
    );
}
