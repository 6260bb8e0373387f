//! Rendering a [`ComparisonReport`] for people (torch.testing-shaped text,
//! colour only on a terminal without NO_COLOR) and for programs (`--json`).
//!
//! Owns the output formats and nothing else: it never compares values and
//! never decides the exit code.
//!
//! # JSON schema (`ditto compare --json`, `ditto validate --json`)
//!
//! Stable: fields are only ever added. One object on stdout (README.md,
//! "JSON output", documents the same):
//!
//! ```text
//! {
//!   "valid": bool,                 // every array within tolerance
//!   "kernel": str,                 // demangled name of the reference's kernel
//!   "mangled": str,
//!   "optimized_kernel": str|null,  // set only when the optimized run's kernel differs
//!   "reference": str, "optimized": str,   // snapshot directories
//!   "dispatches_compared": int,
//!   "arrays_compared": int,
//!   "equal_nan": bool,
//!   "tolerance": {"atol": float, "rtol": float} | null,   // null: per-dtype defaults
//!   "ulp": int|null,               // --ulp N
//!   "mismatches": [{
//!     "rank": int, "dispatch": int, "arg": int, "name": str|null,   // the parameter's source name
//!     "phase": "before"|"after", "dtype": str,
//!     "mismatched_elements": int, "total_elements": int,
//!     "nonfinite": {"reference_nan","optimized_nan","reference_inf","optimized_inf": int},
//!     "written": null | {          // an output compared by what the kernels wrote
//!       "compared": int,           // elements both kernels changed
//!       "untouched": int,          // neither changed: outside the comparison
//!       "only_reference": {"count": int, "runs": [[first, last]], "past_the_other": bool},
//!       "only_optimized": {"count": int, "runs": [[first, last]], "past_the_other": bool}
//!     },
//!     "max_abs_diff": float|null, "max_abs_diff_index": int,   // null when NaN/inf
//!     "max_rel_diff": float|null, "max_rel_diff_index": int,
//!     "max_ulp_diff": int|null, "max_ulp_diff_index": int,     // with --ulp
//!     "atol": float, "rtol": float,
//!     "worst": [{"index": int, "reference": num|null, "optimized": num|null, "abs_diff": float|null}]
//!   }],
//!   "arrays": [{"rank","dispatch","arg","name","phase","dtype","total_elements","mismatched_elements","nonfinite","written"}],
//!   "timing": {                    // kernel times (the runtime's duration_ns), never in the verdict
//!     "reference_median_ns": int|null, "optimized_median_ns": int|null,  // over pairs timed on both sides
//!     "speedup": float|null,       // reference / optimized: > 1 means the optimized kernel is faster
//!     "dispatches_timed": int,
//!     "dispatches": [{"rank": int, "dispatch": int, "reference_ns": int|null, "optimized_ns": int|null}],
//!     "note": str|null,            // what the times are, when known (validate on the CPU runtime)
//!     "summary": str               // the human "timing:" line
//!   },
//!   "summary": str                 // the human report, as printed without --json (no colour)
//! }
//! ```
//!
//! `ditto validate` with several `--opt`: `{"valid": bool, "comparisons": [object, ...]}`,
//! one object as above per optimized build, in the order given.
//! On an error (exit 2) with `--json`, stdout carries `{"valid": false, "error": str}`.

use crate::compare::{ArrayComparison, ComparisonReport, Element};
use ditto_protocol::DType;
use serde_json::{Value, json};

/// Formats a float the way Python's `repr` does (what torch's messages show):
/// exponent form below 1e-4 and from 1e16 (`1e-05`, `1.3e-06`), plain
/// otherwise, and integral values without a fraction (`114688`).
pub fn py_float(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if x == 0.0 {
        return if x.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let sci = format!("{x:e}"); // shortest round-trip digits, e.g. "1.3e-6"
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("exponent is an integer");
    if !(-4..16).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    } else {
        format!("{x}")
    }
}

fn element(e: Element) -> String {
    match e {
        Element::Float(f) => py_float(f),
        Element::Int(i) => i.to_string(),
    }
}

/// A float for JSON: NaN and infinities become null.
fn json_float(x: f64) -> Value {
    if x.is_finite() { json!(x) } else { Value::Null }
}

fn json_element(e: Element) -> Value {
    match e {
        Element::Float(f) => json_float(f),
        Element::Int(i) => i64::try_from(i)
            .map(Value::from)
            .unwrap_or_else(|_| json!(i as f64)),
    }
}

/// Whether stdout gets colour: a terminal, and NO_COLOR unset.
pub fn stdout_wants_color() -> bool {
    // SAFETY: isatty only inspects the descriptor.
    let tty = unsafe { libc::isatty(libc::STDOUT_FILENO) } == 1;
    tty && std::env::var_os("NO_COLOR").is_none()
}

fn paint(text: &str, code: &str, color: bool) -> String {
    if color {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}

fn array_label(report: &ComparisonReport, a: &ArrayComparison) -> String {
    let rank = if report.multi_rank {
        format!("rank {}, ", a.rank)
    } else {
        String::new()
    };
    let before = if a.phase == ditto_protocol::Phase::Before {
        " before"
    } else {
        ""
    };
    let name = a
        .name
        .as_ref()
        .map(|n| format!(" '{n}'"))
        .unwrap_or_default();
    format!(
        "{rank}dispatch {}, arg {}{name}{before} ({}[{}])",
        a.dispatch,
        a.arg,
        a.stats.dtype.name(),
        a.stats.total_elements
    )
}

/// The human report, ending in a newline.
/// What the kernel times of a verdict are when the HSA applications ran on
/// ditto's CPU runtime (`ditto validate` knows; a stored snapshot does not
/// say).
pub const CPU_RUNTIME_TIMES: &str = "times on ditto's CPU HSA runtime: the kernels ran as host \
     code on CPU threads, so this says nothing of their speed on a GPU";

pub fn render_human(report: &ComparisonReport, color: bool) -> String {
    render_human_noting(report, color, None)
}

/// The "timing:" line: the speedup, and what the times are when known.
fn timing_line(report: &ComparisonReport, times_note: Option<&str>) -> String {
    match times_note {
        Some(note) if report.timing.summary().is_some() => {
            format!("{} ({note})", report.timing.line())
        }
        _ => report.timing.line(),
    }
}

/// [`render_human`], its timing line saying what the times are
/// (`times_note`, e.g. [`CPU_RUNTIME_TIMES`]).
pub fn render_human_noting(
    report: &ComparisonReport,
    color: bool,
    times_note: Option<&str>,
) -> String {
    let mut out = String::new();
    let n = report.arrays.len();
    if report.valid() {
        out.push_str(&format!(
            "{} {}: {n} array{} compared, all within tolerance\n",
            paint("PASS", "1;32", color),
            report.kernel,
            if n == 1 { "" } else { "s" }
        ));
    } else {
        let bad = report.mismatching().count();
        out.push_str(&format!(
            "{} {}: {bad} of {n} arrays differ\n",
            paint("FAIL", "1;31", color),
            report.kernel
        ));
    }
    if let Some(k) = &report.optimized_kernel {
        out.push_str(&format!("note: the optimized run dispatched {k}\n"));
    }
    // Outputs compared by what the kernels wrote, which left some alone.
    for a in report.arrays.iter().filter(|a| a.stats.matches()) {
        if let Some(w) = a.written.as_ref().filter(|w| w.untouched > 0) {
            out.push_str(&format!(
                "note: {}: compared the {} element(s) the kernels wrote; {} neither changed are \
                 outside the comparison\n",
                array_label(report, a),
                w.compared,
                w.untouched
            ));
        }
    }
    for a in report.mismatching() {
        let s = &a.stats;
        let pct = s.mismatched_elements as f64 / s.total_elements.max(1) as f64 * 100.0;
        out.push_str(&format!(
            "{}: Mismatched elements: {} / {} ({pct:.1}%)\n",
            array_label(report, a),
            s.mismatched_elements,
            s.total_elements
        ));
        if let Some(w) = &a.written {
            for (side, one, other) in [
                ("optimized", &w.only_optimized, "reference"),
                ("reference", &w.only_reference, "optimized"),
            ] {
                if one.count > 0 {
                    out.push_str(&format!(
                        "  Written only by the {side} kernel: {}{}\n",
                        one.describe(),
                        if one.past_the_other {
                            format!(", past what the {other} wrote")
                        } else {
                            String::new()
                        }
                    ));
                }
            }
            if w.untouched > 0 {
                out.push_str(&format!(
                    "  Outside the comparison: {} element(s) neither kernel changed\n",
                    w.untouched
                ));
            }
        }
        // Only one-sided writes: no value was compared wrong, nothing to tabulate.
        let one_sided = a
            .written
            .as_ref()
            .map_or(0, |w| w.only_reference.count + w.only_optimized.count);
        if s.mismatched_elements == one_sided {
            continue;
        }
        match (report.options.ulp, s.dtype) {
            (Some(ulp), DType::F16 | DType::BF16 | DType::F32 | DType::F64) => {
                out.push_str(&format!(
                    "  Greatest absolute difference: {} at index ({},)\n",
                    py_float(s.max_abs_diff),
                    s.max_abs_diff_index,
                ));
                let (greatest, at) = match s.max_ulp_diff {
                    Some(u) => (u.to_string(), s.max_ulp_diff_index),
                    None => ("- (only NaN/inf differ)".into(), 0),
                };
                out.push_str(&format!(
                    "  Greatest ULP difference: {greatest} at index ({at},) (up to {ulp} allowed)\n",
                ));
            }
            _ => {
                out.push_str(&format!(
                    "  Greatest absolute difference: {} at index ({},) (up to {} allowed)\n",
                    py_float(s.max_abs_diff),
                    s.max_abs_diff_index,
                    py_float(s.tolerance.atol)
                ));
                out.push_str(&format!(
                    "  Greatest relative difference: {} at index ({},) (up to {} allowed)\n",
                    py_float(s.max_rel_diff),
                    s.max_rel_diff_index,
                    py_float(s.tolerance.rtol)
                ));
            }
        }
        let nf = &s.nonfinite;
        if nf.reference_nan + nf.optimized_nan + nf.reference_inf + nf.optimized_inf > 0 {
            out.push_str(&format!(
                "  NaN: reference {}, optimized {}; inf: reference {}, optimized {}{}\n",
                nf.reference_nan,
                nf.optimized_nan,
                nf.reference_inf,
                nf.optimized_inf,
                if report.options.equal_nan {
                    ""
                } else {
                    " (NaN never equals NaN without --equal-nan)"
                }
            ));
        }
        let rows: Vec<[String; 4]> = s
            .worst
            .iter()
            .map(|w| {
                [
                    w.index.to_string(),
                    element(w.reference),
                    element(w.optimized),
                    py_float(w.abs_diff),
                ]
            })
            .collect();
        let header = ["index", "reference", "optimized", "abs diff"].map(String::from);
        let mut widths = header.clone().map(|h| h.len());
        for r in &rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(c.len());
            }
        }
        for r in std::iter::once(&header).chain(rows.iter()) {
            let line: Vec<String> = r
                .iter()
                .zip(widths)
                .map(|(c, w)| format!("{c:>w$}"))
                .collect();
            out.push_str(&format!("    {}\n", line.join("  ")));
        }
    }
    // Last: the speedup is beside the verdict, never part of it.
    out.push_str(&format!("timing: {}\n", timing_line(report, times_note)));
    out
}

fn array_json(a: &ArrayComparison, detailed: bool) -> Value {
    let s = &a.stats;
    let mut v = json!({
        "rank": a.rank,
        "dispatch": a.dispatch,
        "arg": a.arg,
        "name": a.name,
        "phase": a.phase,
        "dtype": s.dtype.name(),
        "mismatched_elements": s.mismatched_elements,
        "total_elements": s.total_elements,
        "nonfinite": s.nonfinite,
        "written": a.written,
    });
    if detailed {
        let o = v.as_object_mut().expect("object");
        o.insert("max_abs_diff".into(), json_float(s.max_abs_diff));
        o.insert("max_abs_diff_index".into(), json!(s.max_abs_diff_index));
        o.insert("max_rel_diff".into(), json_float(s.max_rel_diff));
        o.insert("max_rel_diff_index".into(), json!(s.max_rel_diff_index));
        o.insert("atol".into(), json!(s.tolerance.atol));
        o.insert("rtol".into(), json!(s.tolerance.rtol));
        o.insert("max_ulp_diff".into(), json!(s.max_ulp_diff));
        o.insert("max_ulp_diff_index".into(), json!(s.max_ulp_diff_index));
        let worst: Vec<Value> = s
            .worst
            .iter()
            .map(|w| {
                json!({"index": w.index, "reference": json_element(w.reference),
                       "optimized": json_element(w.optimized), "abs_diff": json_float(w.abs_diff)})
            })
            .collect();
        o.insert("worst".into(), Value::Array(worst));
    }
    v
}

/// The `--json` object documented at the top of this module.
pub fn render_json(report: &ComparisonReport) -> Value {
    render_json_noting(report, None)
}

/// [`render_json`], with what the times are (`timing.note`) when known.
pub fn render_json_noting(report: &ComparisonReport, times_note: Option<&str>) -> Value {
    json!({
        "valid": report.valid(),
        "kernel": report.kernel,
        "mangled": report.mangled,
        "optimized_kernel": report.optimized_kernel,
        "reference": report.reference_dir.display().to_string(),
        "optimized": report.optimized_dir.display().to_string(),
        "dispatches_compared": report.dispatches_compared,
        "arrays_compared": report.arrays.len(),
        "equal_nan": report.options.equal_nan,
        "tolerance": report.options.tolerance.map(|t| json!({"atol": t.atol, "rtol": t.rtol})),
        "ulp": report.options.ulp,
        "mismatches": report.mismatching().map(|a| array_json(a, true)).collect::<Vec<_>>(),
        "arrays": report.arrays.iter().map(|a| array_json(a, false)).collect::<Vec<_>>(),
        "timing": timing_json(report, times_note),
        "summary": render_human_noting(report, false, times_note),
    })
}

fn timing_json(report: &ComparisonReport, times_note: Option<&str>) -> Value {
    let s = report.timing.summary();
    json!({
        "reference_median_ns": s.map(|s| s.reference_median_ns),
        "optimized_median_ns": s.map(|s| s.optimized_median_ns),
        "speedup": s.map(|s| json_float(s.speedup)),
        "dispatches_timed": s.map_or(0, |s| s.timed),
        "dispatches": report.timing.dispatches,
        "note": s.and(times_note),
        "summary": timing_line(report, times_note),
    })
}

/// `{"valid": false, "error": ...}` for `--json` runs that failed.
pub fn render_json_error(message: &str) -> Value {
    json!({"valid": false, "error": message})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::{CompareOptions, compare_arrays};
    use crate::store::Array;
    use ditto_protocol::DType;

    fn report(reference: &[f32], optimized: &[f32]) -> ComparisonReport {
        let a = |v: &[f32]| Array {
            dtype: DType::F32,
            bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        };
        let opts = CompareOptions::default();
        let stats =
            compare_arrays(&a(reference), &a(optimized), &opts, "dispatch 0, arg 1").unwrap();
        ComparisonReport {
            kernel: "reduce_sum(float const*, float*, int)".into(),
            mangled: "_Z10reduce_sumPKfPfi".into(),
            optimized_kernel: None,
            reference_dir: "ref".into(),
            optimized_dir: "opt".into(),
            dispatches_compared: 1,
            multi_rank: false,
            options: opts,
            timing: crate::compare::Timing {
                dispatches: vec![crate::compare::DispatchTime {
                    rank: 0,
                    dispatch: 0,
                    reference_ns: Some(2_100_000),
                    optimized_ns: Some(1_140_000),
                }],
                second: None,
            },
            arrays: vec![ArrayComparison {
                name: None,
                written: None,
                phase: ditto_protocol::Phase::After,
                rank: 0,
                dispatch: 0,
                arg: 1,
                stats,
            }],
        }
    }

    #[test]
    fn floats_print_like_python_repr() {
        assert_eq!(py_float(1e-5), "1e-05");
        assert_eq!(py_float(1.3e-6), "1.3e-06");
        assert_eq!(py_float(1e-7), "1e-07");
        assert_eq!(py_float(1.6e-2), "0.016");
        assert_eq!(py_float(114688.0), "114688");
        assert_eq!(py_float(1.0), "1");
        assert_eq!(py_float(0.5), "0.5");
        assert_eq!(py_float(1e16), "1e+16");
        assert_eq!(py_float(f64::NAN), "nan");
        assert_eq!(py_float(f64::NEG_INFINITY), "-inf");
    }

    #[test]
    fn failing_report_reads_like_torch_assert_close() {
        let text = render_human(&report(&[114688.0], &[0.0]), false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "FAIL reduce_sum(float const*, float*, int): 1 of 1 arrays differ"
        );
        assert_eq!(
            lines[1],
            "dispatch 0, arg 1 (float32[1]): Mismatched elements: 1 / 1 (100.0%)"
        );
        assert_eq!(
            lines[2],
            "  Greatest absolute difference: 114688 at index (0,) (up to 1e-05 allowed)"
        );
        assert_eq!(
            lines[3],
            "  Greatest relative difference: 1 at index (0,) (up to 1.3e-06 allowed)"
        );
        assert_eq!(
            lines[4].split_whitespace().collect::<Vec<_>>(),
            ["index", "reference", "optimized", "abs", "diff"]
        );
        assert_eq!(
            lines[5].split_whitespace().collect::<Vec<_>>(),
            ["0", "114688", "0", "114688"]
        );
        assert_eq!(
            lines[6],
            "timing: optimized 1.84x faster: 2.10 ms -> 1.14 ms, median of 1 dispatch"
        );
        assert!(!text.contains('\x1b'));
    }

    #[test]
    fn times_of_the_cpu_runtime_say_so_beside_the_speedup_in_text_and_json() {
        let r = report(&[1.0, 2.0], &[1.0, 2.0]);
        let line = "timing: optimized 1.84x faster: 2.10 ms -> 1.14 ms, median of 1 dispatch \
                    (times on ditto's CPU HSA runtime: the kernels ran as host code on CPU \
                    threads, so this says nothing of their speed on a GPU)";
        let text = render_human_noting(&r, false, Some(CPU_RUNTIME_TIMES));
        assert_eq!(text.lines().nth(1), Some(line), "{text}");
        let v = render_json_noting(&r, Some(CPU_RUNTIME_TIMES));
        assert_eq!(v["timing"]["note"], CPU_RUNTIME_TIMES);
        assert_eq!(
            v["timing"]["summary"].as_str(),
            line.strip_prefix("timing: ")
        );
        // No times, no note: nothing to qualify.
        let mut untimed = r.clone();
        untimed.timing.dispatches.clear();
        let v = render_json_noting(&untimed, Some(CPU_RUNTIME_TIMES));
        assert!(v["timing"]["note"].is_null(), "{v}");
        assert!(
            !render_human_noting(&untimed, false, Some(CPU_RUNTIME_TIMES)).contains("CPU threads")
        );
    }

    #[test]
    fn passing_report_is_the_verdict_and_the_timing_and_colour_is_optional() {
        let r = report(&[1.0, 2.0], &[1.0, 2.0]);
        assert_eq!(
            render_human(&r, false),
            "PASS reduce_sum(float const*, float*, int): 1 array compared, all within tolerance\n\
             timing: optimized 1.84x faster: 2.10 ms -> 1.14 ms, median of 1 dispatch\n"
        );
        assert!(render_human(&r, true).starts_with("\x1b[1;32mPASS\x1b[0m"));
    }

    #[test]
    fn an_argument_with_a_source_name_is_named_in_the_report_and_the_json() {
        let mut r = report(&[114688.0], &[0.0]);
        r.arrays[0].name = Some("output".into());
        let text = render_human(&r, false);
        assert_eq!(
            text.lines().nth(1),
            Some("dispatch 0, arg 1 'output' (float32[1]): Mismatched elements: 1 / 1 (100.0%)")
        );
        let v = render_json(&r);
        assert_eq!(v["mismatches"][0]["name"], "output");
        assert_eq!(v["arrays"][0]["name"], "output");
        assert!(render_json(&report(&[1.0], &[1.0]))["arrays"][0]["name"].is_null());
    }

    #[test]
    fn json_has_the_documented_shape() {
        let v = render_json(&report(&[1.0, 114688.0], &[1.0, 0.0]));
        assert_eq!(v["valid"], false);
        assert_eq!(v["kernel"], "reduce_sum(float const*, float*, int)");
        assert_eq!(v["arrays_compared"], 1);
        let m = &v["mismatches"][0];
        assert_eq!(m["dispatch"], 0);
        assert_eq!(m["arg"], 1);
        assert_eq!(m["mismatched_elements"], 1);
        assert_eq!(m["total_elements"], 2);
        assert_eq!(m["max_abs_diff"], 114688.0);
        assert_eq!(m["max_abs_diff_index"], 1);
        assert_eq!(m["max_rel_diff"], 1.0);
        assert_eq!(m["worst"][0]["reference"], 114688.0);
        assert!(v["tolerance"].is_null());
        let summary = v["summary"].as_str().expect("the human report is a string");
        assert_eq!(
            summary,
            render_human(&report(&[1.0, 114688.0], &[1.0, 0.0]), false)
        );
        assert!(summary.contains("Mismatched elements: 1 / 2"), "{summary}");
        let ok = render_json(&report(&[1.0], &[1.0]));
        assert_eq!(ok["valid"], true);
        assert_eq!(ok["mismatches"], json!([]));
        assert_eq!(
            v["timing"],
            json!({
                "reference_median_ns": 2_100_000, "optimized_median_ns": 1_140_000,
                "speedup": 2_100_000.0 / 1_140_000.0, "dispatches_timed": 1,
                "dispatches": [{"rank": 0, "dispatch": 0, "reference_ns": 2_100_000,
                                "optimized_ns": 1_140_000}],
                "note": null,
                "summary": "optimized 1.84x faster: 2.10 ms -> 1.14 ms, median of 1 dispatch"
            })
        );
    }

    #[test]
    fn nan_differences_become_null_in_json() {
        let v = render_json(&report(&[f32::NAN], &[1.0]));
        assert!(v["mismatches"][0]["max_abs_diff"].is_null());
        assert!(v["mismatches"][0]["worst"][0]["reference"].is_null());
    }
}
