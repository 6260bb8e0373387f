//! `ditto inspect DIR`: what a snapshot directory holds — its runs, every
//! captured dispatch and per array its dtype, shape, min, max, mean and
//! NaN/inf counts — the dispatches (and buffers) matched but not captured,
//! with why, and, with `--dump ARG`, the values of one argument; with
//! `--json --manifest`, the manifest as the reader completed it from the
//! journal, for programs that read the tensor files themselves (the Python
//! package, which so keeps no second copy of the journal and missing rules).
//!
//! Owns the statistics of one array and their text and JSON forms. It never
//! compares snapshots and never writes files.

use crate::compare::{Element, elements, results_only};
use crate::report::py_float;
use crate::store::{Array, BufferRecord, DispatchRecord, Snapshot, StoreError};
use serde_json::{Value, json};
use std::fmt::Write;

/// Statistics of one array over its finite values.
#[derive(Debug, Clone, PartialEq)]
pub struct ArraySummary {
    pub elements: u64,
    /// `None` when no element is finite (or the array is empty).
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub mean: Option<f64>,
    pub nan: u64,
    pub inf: u64,
}

pub fn summarize(array: &Array) -> ArraySummary {
    let mut s = ArraySummary {
        elements: array.elements() as u64,
        min: None,
        max: None,
        mean: None,
        nan: 0,
        inf: 0,
    };
    let (mut sum, mut finite) = (0.0f64, 0u64);
    for e in elements(array.dtype, &array.bytes) {
        let x = match e {
            Element::Float(f) => f,
            Element::Int(i) => i as f64,
        };
        if x.is_nan() {
            s.nan += 1;
            continue;
        }
        if x.is_infinite() {
            s.inf += 1;
            continue;
        }
        s.min = Some(s.min.map_or(x, |m| m.min(x)));
        s.max = Some(s.max.map_or(x, |m| m.max(x)));
        sum += x;
        finite += 1;
    }
    if finite > 0 {
        s.mean = Some(sum / finite as f64);
    }
    s
}

fn opt(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), py_float)
}

fn json_opt(x: Option<f64>) -> Value {
    x.map_or(Value::Null, |v| json!(v))
}

/// The listing, ending in a newline; with `dump`, the values of that argument.
pub fn render(snapshot: &Snapshot, dump: Option<u32>) -> Result<String, StoreError> {
    let m = &snapshot.manifest;
    let mut out = String::new();
    let kernel = m
        .kernel
        .as_ref()
        .map_or("(none captured)", |k| k.demangled.as_str());
    let _ = writeln!(
        out,
        "{}: kernel {kernel}, query {:?}, ditto {}",
        snapshot.dir.display(),
        m.kernel_query,
        m.ditto_version
    );
    for r in &m.runs {
        // A run of one collector per node: whose part the process is in.
        let node = r
            .node
            .as_ref()
            .map(|n| format!(" node {n}"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "run '{}' rank {} ({}){node} pid {}: {} (in {})",
            r.run,
            r.rank,
            r.rank_source,
            r.pid,
            r.command_line.join(" "),
            r.working_directory
        );
    }
    // Before the dispatches: what the snapshot lacks is read first.
    for u in m.unaccounted() {
        let _ = writeln!(out, "incomplete: {u}");
    }
    let mut dispatches: Vec<_> = m.dispatches.iter().collect();
    dispatches.sort_by_key(|d| (d.rank, d.index));
    for d in dispatches {
        let duration = d.duration_ns.map_or_else(String::new, |ns| {
            format!(", {} µs", py_float(ns as f64 / 1000.0))
        });
        let _ = writeln!(
            out,
            "rank {} dispatch {}: grid {:?} block {:?}{duration} ({})",
            d.rank, d.index, d.grid, d.block, d.file
        );
        if let Some(line) = replay_line(d) {
            let _ = writeln!(out, "{line}");
        }
        for (arg, array) in snapshot.load_dispatch(&results_only(d))? {
            let s = summarize(&array);
            let _ = writeln!(
                out,
                "  arg {arg} {}[{}]: min {} max {} mean {} nan {} inf {}",
                array.dtype.name(),
                s.elements,
                opt(s.min),
                opt(s.max),
                opt(s.mean),
                s.nan,
                s.inf
            );
            if dump == Some(arg) {
                let values: Vec<String> = elements(array.dtype, &array.bytes)
                    .map(|e| match e {
                        Element::Float(f) => py_float(f),
                        Element::Int(i) => i.to_string(),
                    })
                    .collect();
                for chunk in values.chunks(8) {
                    let _ = writeln!(out, "    {}", chunk.join(" "));
                }
            }
        }
    }
    for r in &m.missing {
        let what = match r.arg {
            None => String::new(),
            Some(arg) => format!(
                " argument {arg}{}",
                if r.phase == Some(ditto_protocol::Phase::Before) {
                    " (before)"
                } else {
                    ""
                }
            ),
        };
        let _ = writeln!(
            out,
            "rank {} dispatch {}{what}: not captured ({}): {}",
            r.rank,
            r.indices(),
            r.reason.name(),
            r.detail
        );
    }
    if m.dispatches.is_empty() {
        let _ = writeln!(
            out,
            "no dispatch captured; {}",
            crate::diagnose::what_ran(m)
        );
    }
    Ok(out)
}

/// What a replay capture holds of a dispatch besides its arrays, in one
/// line; `None` for a dispatch captured without replay data.
fn replay_line(d: &DispatchRecord) -> Option<String> {
    let launch = d.launch.as_ref()?;
    let images: Vec<&BufferRecord> = d
        .buffers
        .iter()
        .filter(|b| b.phase == ditto_protocol::Phase::Replay)
        .collect();
    let bytes: u64 = images.iter().map(|b| b.extent).sum();
    let code = launch.code_object.as_deref().map_or_else(
        || {
            format!(
                "no code object ({})",
                launch.code_object_missing.as_deref().unwrap_or("none kept")
            )
        },
        str::to_string,
    );
    let variables: Vec<&str> = launch.variables.iter().map(|v| v.name.as_str()).collect();
    Some(format!(
        "  replay: {} of memory before the kernel in {} image{} ({} module variable{}{}), \
         {} bytes of kernel arguments, {code}",
        crate::units::human_bytes(bytes),
        images.len(),
        if images.len() == 1 { "" } else { "s" },
        variables.len(),
        if variables.len() == 1 { "" } else { "s" },
        if variables.is_empty() {
            String::new()
        } else {
            format!(": {}", variables.join(", "))
        },
        launch.kernarg.len() / 2,
    ))
}

/// `--json`: `{"dir", "kernel", "kernel_query", "runs": [manifest runs],
/// "dispatches": [{"rank","index","grid","block","duration_ns","file",
/// "arrays": [{"arg","dtype","elements","min","max","mean","nan","inf","values"?}],
/// "replay"?: {"launch": the manifest's launch, "images": [{"image","base","size","variable"}]}}],
/// "missing": [manifest missing records]}`.
pub fn render_json(snapshot: &Snapshot, dump: Option<u32>) -> Result<Value, StoreError> {
    let m = &snapshot.manifest;
    let mut dispatches = Vec::new();
    let mut sorted: Vec<_> = m.dispatches.iter().collect();
    sorted.sort_by_key(|d| (d.rank, d.index));
    for d in sorted {
        let mut arrays = Vec::new();
        for (arg, array) in snapshot.load_dispatch(&results_only(d))? {
            let s = summarize(&array);
            let mut a = json!({"arg": arg, "dtype": array.dtype.name(), "elements": s.elements,
                "min": json_opt(s.min), "max": json_opt(s.max), "mean": json_opt(s.mean),
                "nan": s.nan, "inf": s.inf});
            if dump == Some(arg) {
                let values: Vec<Value> = elements(array.dtype, &array.bytes)
                    .map(|e| match e {
                        Element::Float(f) if f.is_finite() => json!(f),
                        Element::Float(_) => Value::Null,
                        Element::Int(i) => json!(i as f64),
                    })
                    .collect();
                a["values"] = Value::Array(values);
            }
            arrays.push(a);
        }
        let mut dispatch = json!({"rank": d.rank, "index": d.index, "grid": d.grid,
            "block": d.block, "duration_ns": d.duration_ns, "file": d.file, "arrays": arrays});
        if let Some(launch) = &d.launch {
            let images: Vec<Value> = d
                .buffers
                .iter()
                .filter(|b| b.phase == ditto_protocol::Phase::Replay)
                .map(|b| {
                    json!({"image": b.arg, "base": b.alloc_base, "size": b.extent,
                    "variable": launch.variables.iter().find(|v| v.image == b.arg)
                        .map(|v| v.name.clone())})
                })
                .collect();
            dispatch["replay"] = json!({"launch": launch, "images": images});
        }
        dispatches.push(dispatch);
    }
    Ok(json!({
        "dir": snapshot.dir.display().to_string(),
        "kernel": m.kernel,
        "kernel_query": m.kernel_query,
        "runs": m.runs,
        "dispatches": dispatches,
        "missing": m.missing,
    }))
}

/// `--json --manifest`: `{"dir", "manifest": the manifest as read (its
/// schema is manifest.json's, completed from dispatches.jsonl: dispatches
/// only the journal has added, missing records merged, dispatches a
/// whole-dispatch missing record covers removed), "incomplete": [one line
/// per process whose dispatches are unaccounted]}`. Reads no tensor file.
pub fn render_manifest_json(snapshot: &Snapshot) -> Value {
    let m = &snapshot.manifest;
    json!({
        "dir": snapshot.dir.display().to_string(),
        "manifest": m,
        "incomplete": m.unaccounted(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ditto_protocol::DType;

    #[test]
    fn summary_skips_nan_and_inf_in_min_max_mean_and_counts_them() {
        let a = Array {
            dtype: DType::F32,
            bytes: [1.0f32, f32::NAN, -2.0, f32::INFINITY, 4.0]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect(),
        };
        let s = summarize(&a);
        assert_eq!((s.elements, s.nan, s.inf), (5, 1, 1));
        assert_eq!((s.min, s.max, s.mean), (Some(-2.0), Some(4.0), Some(1.0)));
        let empty = summarize(&Array {
            dtype: DType::I32,
            bytes: Vec::new().into(),
        });
        assert_eq!(empty.mean, None);
    }
}
