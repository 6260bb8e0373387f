//! `ditto kernels FILE`: the kernels of an AMDGPU code object, of a HIP
//! program's `.hip_fatbin` bundles or of a standalone bundle file, each with
//! the argument layout ditto would capture — computed by the very function
//! the tool calls at executable freeze ([`KernelSignature::for_capture`]),
//! so the listing cannot drift from a run.
//!
//! Owns turning a file's bytes into that listing and its text and JSON
//! forms; never runs anything and never writes files.
//!
//! # JSON schema (`ditto kernels FILE --json`)
//!
//! ```text
//! {
//!   "file": str,
//!   "kernels": [{
//!     "name": str,                  // what --kernel takes: name<template args>
//!     "demangled": str, "mangled": str,
//!     "symbol": str,                // kernel descriptor symbol (`<mangled>.kd`)
//!     "kernarg_segment_size": int,  // from the metadata, hidden arguments included
//!     "target": str|null,           // gfx90a, gfx1030, …
//!     "triple": str|null,           // bundle entry triple; null for a bare code object
//!     "bundle": int|null,           // bundle (translation unit) index, from 0
//!     "arg_types_applied": bool,    // --arg-types typed this kernel
//!     "triton_entry": str|null,     // the Triton cache entry that typed it
//!     "warning": str|null,          // e.g. an extern "C" kernel captured as raw bytes
//!     "error": str|null,            // why ditto could not capture it (then "args" is [])
//!     "args": [{
//!       "index": int, "offset": int, "size": int,
//!       "kind": "pointer"|"scalar",
//!       "dtype": str,               // float32, int32, …, bytes
//!       "const": bool,
//!       "role": "input"|"output"|"scalar",  // const pointers are inputs
//!       "name": str|null            // source name (-fhip-kernel-arg-name)
//!     }]
//!   }]
//! }
//! ```
//!
//! Hidden arguments (code object v5's `hidden_*`) are not listed: ditto never
//! captures them. A kernel present for several GPU targets is listed once per
//! target. On an error (exit 2) with `--json`, stdout carries
//! `{"valid": false, "error": str}` as for the other commands.

use ditto_kernels::triton;
use ditto_kernels::{
    BundleError, DeviceCodeObject, KernelError, KernelNames, KernelSignature, MetadataError,
    ParamKind, ParamType, device_code_objects, matches, parse_code_object,
};
use serde_json::{Value, json};
use std::fmt::Write;

/// One kernel of the file, laid out as ditto would capture it.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedKernel {
    pub names: KernelNames,
    pub symbol: String,
    pub kernarg_segment_size: u64,
    pub target: Option<String>,
    pub triple: Option<String>,
    pub bundle: Option<usize>,
    pub arg_types_applied: bool,
    /// The Triton cache entry that typed it (an extern "C" kernel without
    /// `--arg-types`, as a run types it).
    pub triton_entry: Option<std::path::PathBuf>,
    /// The layout ditto captures, or why it cannot capture this kernel.
    pub layout: Result<KernelSignature, KernelError>,
    pub warning: Option<String>,
}

/// Why a file's kernels could not be listed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KernelListError {
    #[error(transparent)]
    Bundle(#[from] BundleError),
    #[error(
        "its {origin} has no AMDGPU metadata note (code object v2 or older?); \
         ditto reads code object v3 and later"
    )]
    NoMetadata { origin: String },
    #[error("its {origin}: {error}")]
    Metadata {
        origin: String,
        error: MetadataError,
    },
}

/// How a listed argument is captured.
pub fn role(kind: &ParamKind) -> &'static str {
    match kind {
        ParamKind::Pointer { is_const: true, .. } => "input",
        ParamKind::Pointer {
            is_const: false, ..
        } => "output",
        ParamKind::Scalar { .. } => "scalar",
    }
}

/// Where a device code object came from, for messages.
fn origin(object: &DeviceCodeObject) -> String {
    match (&object.triple, object.bundle) {
        (Some(triple), Some(bundle)) => format!("`{triple}` code object of bundle {bundle}"),
        _ => "code object".into(),
    }
}

/// Every kernel of `bytes` (see [`device_code_objects`]) that `query`
/// names (all without one), laid out by [`KernelSignature::for_capture`]
/// from its metadata. `arg_types` types the kernels a `ditto run --kernel
/// QUERY --arg-types …` would apply them to: with a query, every kernel it
/// names; without one, the kernels whose names carry no types (extern "C").
/// Without `arg_types`, an extern "C" kernel compiled by Triton is typed
/// from its entry in `triton_caches`, as a run types it.
pub fn list(
    bytes: &[u8],
    query: Option<&str>,
    arg_types: Option<&[ParamType]>,
    triton_caches: &[std::path::PathBuf],
) -> Result<Vec<ListedKernel>, KernelListError> {
    let objects = device_code_objects(bytes)?;
    let mut listed = Vec::new();
    for object in &objects {
        let kernels = match parse_code_object(object.bytes) {
            Ok(Some(kernels)) => kernels,
            Ok(None) => {
                return Err(KernelListError::NoMetadata {
                    origin: origin(object),
                });
            }
            Err(error) => {
                return Err(KernelListError::Metadata {
                    origin: origin(object),
                    error,
                });
            }
        };
        let target = object.target();
        for kernel in &kernels {
            let names = KernelNames::new(&kernel.symbol);
            if query.is_some_and(|q| !matches(q, &names)) {
                continue;
            }
            let types = arg_types.filter(|_| query.is_some() || names.param_types().is_none());
            let triton = match types {
                None if names.param_types().is_none() && !triton_caches.is_empty() => {
                    triton::types_for(
                        triton_caches,
                        "hip",
                        &names.mangled,
                        kernel.explicit_args().len(),
                        Some(object.bytes),
                    )
                    .ok()
                }
                _ => None,
            };
            let (layout, warning) = match KernelSignature::for_capture(
                &kernel.symbol,
                kernel.kernarg_segment_size,
                types.or(triton.as_ref().map(|t| &t.types[..])),
                Some(kernel),
            ) {
                Ok((mut sig, mut warning)) => {
                    if let Some(t) = &triton {
                        sig.name_unnamed(&t.names);
                        if let Some(reason) = &t.unanalysed {
                            let all_written = format!(
                                "every pointer argument counts as written (an output): {reason}"
                            );
                            warning = Some(match warning {
                                Some(w) => format!("{w}; {all_written}"),
                                None => all_written,
                            });
                        }
                    }
                    (Ok(sig), warning)
                }
                Err(e) => (Err(e), None),
            };
            listed.push(ListedKernel {
                names,
                symbol: kernel.symbol.clone(),
                kernarg_segment_size: kernel.kernarg_segment_size,
                target: target.clone(),
                triple: object.triple.clone(),
                bundle: object.bundle,
                arg_types_applied: types.is_some(),
                triton_entry: triton.map(|t| t.entry),
                layout,
                warning,
            });
        }
    }
    Ok(listed)
}

fn kind_name(kind: &ParamKind) -> (&'static str, &'static str, bool) {
    match kind {
        ParamKind::Pointer { dtype, is_const } => ("pointer", dtype.name(), *is_const),
        ParamKind::Scalar { dtype } => ("scalar", dtype.name(), false),
    }
}

/// The `--json` object.
pub fn render_json(file: &str, kernels: &[ListedKernel]) -> Value {
    let kernels: Vec<Value> = kernels
        .iter()
        .map(|k| {
            let args: Vec<Value> = match &k.layout {
                Ok(sig) => sig
                    .params
                    .iter()
                    .map(|p| {
                        let (kind, dtype, is_const) = kind_name(&p.kind);
                        json!({
                            "index": p.index, "offset": p.offset, "size": p.size,
                            "kind": kind, "dtype": dtype, "const": is_const,
                            "role": role(&p.kind), "name": sig.arg_name(p.index),
                        })
                    })
                    .collect(),
                Err(_) => Vec::new(),
            };
            json!({
                "name": k.names.name,
                "demangled": k.names.demangled,
                "mangled": k.names.mangled,
                "symbol": k.symbol,
                "kernarg_segment_size": k.kernarg_segment_size,
                "target": k.target,
                "triple": k.triple,
                "bundle": k.bundle,
                "arg_types_applied": k.arg_types_applied,
                "triton_entry": k.triton_entry.as_ref().map(|e| e.display().to_string()),
                "warning": k.warning,
                "error": k.layout.as_ref().err().map(ToString::to_string),
                "args": args,
            })
        })
        .collect();
    json!({"file": file, "kernels": kernels})
}

/// Columns padded to their widest cell, two spaces apart, indented.
fn table(rows: &[Vec<String>], indent: &str) -> String {
    let mut widths = vec![0; rows.first().map_or(0, Vec::len)];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = indent.to_string();
        for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
            // Numbers right-aligned, text left-aligned.
            if i < 3 {
                let _ = write!(line, "{cell:>w$}  ");
            } else {
                let _ = write!(line, "{cell:<w$}  ");
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

/// The listing for people: per kernel its names, target, symbol, segment
/// size and a table of its arguments, ending in a newline.
pub fn render(file: &str, kernels: &[ListedKernel]) -> String {
    let mut out = String::new();
    let mut targets: Vec<&str> = kernels.iter().filter_map(|k| k.target.as_deref()).collect();
    targets.sort_unstable();
    targets.dedup();
    let _ = writeln!(
        out,
        "{file}: {}{}",
        crate::units::plural(kernels.len() as u64, "kernel", "kernels"),
        if targets.is_empty() {
            String::new()
        } else {
            format!(" for {}", targets.join(", "))
        }
    );
    for k in kernels {
        let place = match (&k.target, k.bundle) {
            (Some(t), Some(b)) => format!(" ({t}, bundle {b})"),
            (Some(t), None) => format!(" ({t})"),
            (None, Some(b)) => format!(" (bundle {b})"),
            (None, None) => String::new(),
        };
        let _ = writeln!(out, "\nkernel {}{place}", k.names.name);
        if k.names.demangled != k.names.name {
            let _ = writeln!(out, "  {}", k.names.demangled);
        }
        let _ = writeln!(
            out,
            "  symbol {}, kernarg segment {} bytes{}",
            k.symbol,
            k.kernarg_segment_size,
            match (&k.triton_entry, k.arg_types_applied) {
                (_, true) => ", typed by --arg-types".to_string(),
                (Some(entry), false) =>
                    format!(", typed by Triton's cache entry {}", entry.display()),
                (None, false) => String::new(),
            }
        );
        match &k.layout {
            Ok(sig) if sig.params.is_empty() => {
                let _ = writeln!(out, "  no arguments");
            }
            Ok(sig) => {
                let mut rows = vec![
                    [
                        "arg", "offset", "size", "kind", "dtype", "const", "role", "name",
                    ]
                    .map(String::from)
                    .to_vec(),
                ];
                for p in &sig.params {
                    let (kind, dtype, is_const) = kind_name(&p.kind);
                    rows.push(vec![
                        p.index.to_string(),
                        p.offset.to_string(),
                        p.size.to_string(),
                        kind.into(),
                        dtype.into(),
                        if is_const { "const" } else { "-" }.into(),
                        role(&p.kind).into(),
                        sig.arg_name(p.index).unwrap_or("-").into(),
                    ]);
                }
                out.push_str(&table(&rows, "  "));
            }
            Err(e) => {
                let _ = writeln!(out, "  cannot be captured: {e}");
            }
        }
        if let Some(w) = &k.warning {
            let _ = writeln!(out, "  warning: {w}");
        }
    }
    let _ = writeln!(
        out,
        "\noutputs are captured after the dispatch (the default); inputs before it with \
         --capture inputs,outputs; every pointer with --capture all"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_right_aligns_numbers_and_pads_text() {
        let rows = vec![
            vec!["arg".into(), "offset".into(), "size".into(), "kind".into()],
            vec!["0".into(), "16".into(), "8".into(), "pointer".into()],
        ];
        assert_eq!(
            table(&rows, "  "),
            "  arg  offset  size  kind\n    0      16     8  pointer\n"
        );
    }

    #[test]
    fn const_pointers_are_inputs_and_others_outputs() {
        use ditto_protocol::DType;
        let p = |is_const| ParamKind::Pointer {
            dtype: DType::F32,
            is_const,
        };
        assert_eq!(role(&p(true)), "input");
        assert_eq!(role(&p(false)), "output");
        assert_eq!(role(&ParamKind::Scalar { dtype: DType::I32 }), "scalar");
    }
}
