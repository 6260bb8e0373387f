//! The comparison engine: pairs the dispatches of a reference and an
//! optimized snapshot and compares their arrays element by element with
//! torch.testing.assert_close's rules.
//!
//! Owns tolerances (per-dtype defaults, user overrides), the closeness rule
//! `|a - b| <= atol + rtol * |b|` (b = reference), NaN/inf handling and the
//! statistics of a mismatch. It never prints (see `report`) and never writes
//! files; structural differences (dtype, length, dispatch count, a kernel that
//! was never captured) are errors, not mismatches.

use crate::store::{Array, DispatchRecord, Manifest, Snapshot, StoreError};
use ditto_protocol::{DType, Phase};
use half::{bf16, f16};
use std::path::PathBuf;

/// How close two elements must be: `|a - b| <= atol + rtol * |b|`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Tolerance {
    pub rtol: f64,
    pub atol: f64,
}

/// torch.testing.assert_close's defaults; integers, bool and raw bytes exact.
pub fn default_tolerance(dtype: DType) -> Tolerance {
    let (rtol, atol) = match dtype {
        DType::F16 => (1e-3, 1e-5),
        DType::BF16 => (1.6e-2, 1e-5),
        DType::F32 => (1.3e-6, 1e-5),
        DType::F64 => (1e-7, 1e-7),
        _ => (0.0, 0.0),
    };
    Tolerance { rtol, atol }
}

/// What the user asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CompareOptions {
    /// `None`: per-dtype defaults. Applies to numeric dtypes; bool and raw
    /// bytes are always compared exactly.
    pub tolerance: Option<Tolerance>,
    /// NaN equals NaN only when set.
    pub equal_nan: bool,
    /// `--ulp N`: finite floats match when at most N units in the last
    /// place apart (in their own dtype); replaces atol/rtol for floats,
    /// integers stay exact. Exclusive with `tolerance`.
    pub ulp: Option<u64>,
}

impl CompareOptions {
    /// `--atol` and `--rtol` are given together or not at all.
    pub fn new(
        atol: Option<f64>,
        rtol: Option<f64>,
        equal_nan: bool,
    ) -> Result<Self, CompareError> {
        let tolerance = match (atol, rtol) {
            (Some(atol), Some(rtol)) => {
                if !(atol >= 0.0 && rtol >= 0.0) {
                    return Err(CompareError::Usage(format!(
                        "tolerances must be non-negative numbers (got --atol {atol} --rtol {rtol})"
                    )));
                }
                Some(Tolerance { rtol, atol })
            }
            (None, None) => None,
            (Some(_), None) => {
                return Err(CompareError::Usage(
                    "--atol was given without --rtol: give both, or neither for the per-dtype defaults".into(),
                ));
            }
            (None, Some(_)) => {
                return Err(CompareError::Usage(
                    "--rtol was given without --atol: give both, or neither for the per-dtype defaults".into(),
                ));
            }
        };
        Ok(CompareOptions {
            tolerance,
            equal_nan,
            ulp: None,
        })
    }

    /// Adds `--ulp N`; refused together with `--atol/--rtol`.
    pub fn with_ulp(mut self, ulp: Option<u64>) -> Result<Self, CompareError> {
        if ulp.is_some() && self.tolerance.is_some() {
            return Err(CompareError::Usage(
                "--ulp cannot be combined with --atol/--rtol: choose a distance in units in the last place \
                 or absolute/relative tolerances"
                    .into(),
            ));
        }
        self.ulp = ulp;
        Ok(self)
    }

    pub fn tolerance_for(&self, dtype: DType) -> Tolerance {
        match (dtype, self.tolerance) {
            (DType::Bool | DType::Bytes, _) => Tolerance {
                rtol: 0.0,
                atol: 0.0,
            },
            (_, Some(t)) => t,
            (_, None) => default_tolerance(dtype),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error(
        "{location}: the reference is {reference} but the optimized run is {optimized}; \
         both runs must pass the same element types (check --arg-types)"
    )]
    DtypeDiffers {
        location: String,
        reference: &'static str,
        optimized: &'static str,
    },
    #[error(
        "{location} ({dtype}): the reference has {reference} elements but the optimized run has {optimized}; \
         both runs must use the same problem size"
    )]
    LengthDiffers {
        location: String,
        dtype: &'static str,
        reference: usize,
        optimized: usize,
    },
    #[error(
        "{location}: the reference captured {} but the optimized run captured {} \
         (run both with the same --capture)", .reference.join(", "), .optimized.join(", ")
    )]
    ArgumentsDiffer {
        location: String,
        /// Tensor names (`arg1`, `arg0.before`), in manifest order.
        reference: Vec<String>,
        optimized: Vec<String>,
    },
    #[error(
        "the reference ({reference_dir}) captured {reference} dispatch(es) of {kernel} but the optimized run \
         ({optimized_dir}) captured {optimized}: {detail}"
    )]
    DispatchesDiffer {
        kernel: String,
        reference_dir: PathBuf,
        optimized_dir: PathBuf,
        reference: usize,
        optimized: usize,
        detail: String,
    },
    #[error(
        "{dispatches} dispatch(es) of {kernel} were captured in {reference_dir} and {optimized_dir} but none \
         carried an output buffer, so nothing was compared: for an extern \"C\" kernel pass --arg-types \
         (e.g. `const f32*,f32*,i32`); otherwise rerun with DITTO_LOG=warn to see why the tool skipped \
         its pointer arguments"
    )]
    NothingCompared {
        kernel: String,
        reference_dir: PathBuf,
        optimized_dir: PathBuf,
        dispatches: usize,
    },
    #[error(
        "{location}: the reference ran {reference} but the optimized run ran {optimized}; dispatches are \
         paired by (kernel, rank, dispatch index): both runs must dispatch the same kernels in the same order"
    )]
    KernelsDiffer {
        location: String,
        reference: String,
        optimized: String,
    },
    #[error("{which} run ({dir}) never dispatched a kernel matching {query:?}; {what_ran}")]
    NotCaptured {
        which: &'static str,
        dir: PathBuf,
        query: String,
        what_ran: String,
    },
}

/// One element decoded for comparison.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub enum Element {
    Float(f64),
    Int(i128),
}

/// Elements of `bytes` (little-endian) as `dtype`.
pub fn elements(dtype: DType, bytes: &[u8]) -> Box<dyn Iterator<Item = Element> + '_> {
    macro_rules! chunks {
        ($n:expr, $f:expr) => {
            Box::new(bytes.chunks_exact($n).map(|c| $f(c.try_into().unwrap())))
        };
    }
    match dtype {
        DType::F16 => chunks!(2, |c| Element::Float(f16::from_le_bytes(c).to_f64())),
        DType::BF16 => chunks!(2, |c| Element::Float(bf16::from_le_bytes(c).to_f64())),
        DType::F32 => chunks!(4, |c| Element::Float(f32::from_le_bytes(c) as f64)),
        DType::F64 => chunks!(8, |c| Element::Float(f64::from_le_bytes(c))),
        DType::I8 => chunks!(1, |c| Element::Int(i8::from_le_bytes(c) as i128)),
        DType::I16 => chunks!(2, |c| Element::Int(i16::from_le_bytes(c) as i128)),
        DType::I32 => chunks!(4, |c| Element::Int(i32::from_le_bytes(c) as i128)),
        DType::I64 => chunks!(8, |c| Element::Int(i64::from_le_bytes(c) as i128)),
        DType::U8 | DType::Bool | DType::Bytes => {
            chunks!(1, |c| Element::Int(u8::from_le_bytes(c) as i128))
        }
        DType::U16 => chunks!(2, |c| Element::Int(u16::from_le_bytes(c) as i128)),
        DType::U32 => chunks!(4, |c| Element::Int(u32::from_le_bytes(c) as i128)),
        DType::U64 => chunks!(8, |c| Element::Int(u64::from_le_bytes(c) as i128)),
    }
}

/// A mismatching element kept for the report's table.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct WorstElement {
    pub index: u64,
    pub reference: Element,
    pub optimized: Element,
    pub abs_diff: f64,
}

/// NaN and infinity counts of both sides.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct NonFiniteCounts {
    pub reference_nan: u64,
    pub optimized_nan: u64,
    pub reference_inf: u64,
    pub optimized_inf: u64,
}

/// Result of comparing two arrays. As in torch, the greatest differences
/// are taken over mismatching elements only (0 when all match); a NaN
/// difference counts as the greatest.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayStats {
    pub dtype: DType,
    pub tolerance: Tolerance,
    pub total_elements: u64,
    pub mismatched_elements: u64,
    pub max_abs_diff: f64,
    pub max_abs_diff_index: u64,
    pub max_rel_diff: f64,
    pub max_rel_diff_index: u64,
    /// With `--ulp`: the greatest ULP distance among mismatching finite
    /// floats, and where.
    pub max_ulp_diff: Option<u64>,
    pub max_ulp_diff_index: u64,
    pub nonfinite: NonFiniteCounts,
    /// Up to [`WORST_ELEMENTS`] mismatching elements, greatest difference first.
    pub worst: Vec<WorstElement>,
}

pub const WORST_ELEMENTS: usize = 5;

impl ArrayStats {
    pub fn matches(&self) -> bool {
        self.mismatched_elements == 0
    }
}

/// Distance between two finite floats of `dtype` in units in the last
/// place: how many representable values of that dtype lie between them
/// (+0 and -0 are 0 apart). `None` for non-float dtypes.
pub fn ulp_distance(dtype: DType, a: f64, b: f64) -> Option<u64> {
    // Sign-magnitude bits to a line where adjacent floats differ by 1.
    fn ordered(bits: u64, sign_bit: u64) -> i128 {
        let magnitude = (bits & (sign_bit - 1)) as i128;
        if bits & sign_bit != 0 {
            -magnitude
        } else {
            magnitude
        }
    }
    let (oa, ob) = match dtype {
        DType::F64 => (ordered(a.to_bits(), 1 << 63), ordered(b.to_bits(), 1 << 63)),
        DType::F32 => (
            ordered((a as f32).to_bits() as u64, 1 << 31),
            ordered((b as f32).to_bits() as u64, 1 << 31),
        ),
        DType::F16 => (
            ordered(f16::from_f64(a).to_bits() as u64, 1 << 15),
            ordered(f16::from_f64(b).to_bits() as u64, 1 << 15),
        ),
        DType::BF16 => (
            ordered(bf16::from_f64(a).to_bits() as u64, 1 << 15),
            ordered(bf16::from_f64(b).to_bits() as u64, 1 << 15),
        ),
        _ => return None,
    };
    Some((oa - ob).unsigned_abs() as u64)
}

/// `x` is a greater difference than `y` (NaN greatest; first one kept on ties).
fn greater(x: f64, y: f64) -> bool {
    (x.is_nan() && !y.is_nan()) || x > y
}

/// Compares element by element; `b` is the reference.
pub fn compare_arrays(
    reference: &Array,
    optimized: &Array,
    options: &CompareOptions,
    location: &str,
) -> Result<ArrayStats, CompareError> {
    if reference.dtype != optimized.dtype {
        return Err(CompareError::DtypeDiffers {
            location: location.to_string(),
            reference: reference.dtype.name(),
            optimized: optimized.dtype.name(),
        });
    }
    if reference.elements() != optimized.elements() {
        return Err(CompareError::LengthDiffers {
            location: location.to_string(),
            dtype: reference.dtype.name(),
            reference: reference.elements(),
            optimized: optimized.elements(),
        });
    }
    let dtype = reference.dtype;
    let tol = options.tolerance_for(dtype);
    let mut s = ArrayStats {
        dtype,
        tolerance: tol,
        total_elements: reference.elements() as u64,
        mismatched_elements: 0,
        max_abs_diff: 0.0,
        max_abs_diff_index: 0,
        max_rel_diff: 0.0,
        max_rel_diff_index: 0,
        max_ulp_diff: None,
        max_ulp_diff_index: 0,
        nonfinite: NonFiniteCounts::default(),
        worst: Vec::new(),
    };
    let pairs = elements(dtype, &reference.bytes).zip(elements(dtype, &optimized.bytes));
    for (i, (b, a)) in pairs.enumerate() {
        let mut ulp_diff = None;
        let (matched, abs_diff, magnitude_b) = match (b, a) {
            (Element::Float(b), Element::Float(a)) => {
                let n = &mut s.nonfinite;
                n.reference_nan += b.is_nan() as u64;
                n.optimized_nan += a.is_nan() as u64;
                n.reference_inf += b.is_infinite() as u64;
                n.optimized_inf += a.is_infinite() as u64;
                if b.is_nan() || a.is_nan() {
                    let matched = options.equal_nan && b.is_nan() && a.is_nan();
                    (matched, if matched { 0.0 } else { f64::NAN }, b.abs())
                } else if b.is_infinite() || a.is_infinite() {
                    let matched = a == b;
                    (matched, if matched { 0.0 } else { f64::INFINITY }, b.abs())
                } else if let Some(allowed) = options.ulp {
                    let u = ulp_distance(dtype, a, b).expect("a float dtype");
                    ulp_diff = Some(u);
                    (u <= allowed, (a - b).abs(), b.abs())
                } else {
                    let d = (a - b).abs();
                    (d <= tol.atol + tol.rtol * b.abs(), d, b.abs())
                }
            }
            (Element::Int(b), Element::Int(a)) => {
                let d = (a - b).unsigned_abs() as f64;
                let exact = tol.atol == 0.0 && tol.rtol == 0.0;
                let matched = if exact {
                    a == b
                } else {
                    d <= tol.atol + tol.rtol * (b.unsigned_abs() as f64)
                };
                (matched, d, b.unsigned_abs() as f64)
            }
            _ => unreachable!("both sides decode with the same dtype"),
        };
        if matched {
            continue;
        }
        s.mismatched_elements += 1;
        // An infinite difference is infinitely relative too (inf / inf would be NaN).
        let rel_diff = if abs_diff.is_infinite() {
            f64::INFINITY
        } else {
            abs_diff / magnitude_b
        };
        let i = i as u64;
        if let Some(u) = ulp_diff
            && s.max_ulp_diff.is_none_or(|m| u > m)
        {
            s.max_ulp_diff = Some(u);
            s.max_ulp_diff_index = i;
        }
        if s.mismatched_elements == 1 || greater(abs_diff, s.max_abs_diff) {
            s.max_abs_diff = abs_diff;
            s.max_abs_diff_index = i;
        }
        if s.mismatched_elements == 1 || greater(rel_diff, s.max_rel_diff) {
            s.max_rel_diff = rel_diff;
            s.max_rel_diff_index = i;
        }
        let pos = s
            .worst
            .iter()
            .position(|w| greater(abs_diff, w.abs_diff))
            .unwrap_or(s.worst.len());
        if pos < WORST_ELEMENTS {
            s.worst.insert(
                pos,
                WorstElement {
                    index: i,
                    reference: b,
                    optimized: a,
                    abs_diff,
                },
            );
            s.worst.truncate(WORST_ELEMENTS);
        }
    }
    Ok(s)
}

/// One compared array and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayComparison {
    pub rank: u32,
    /// Dispatch index within its process.
    pub dispatch: u64,
    pub arg: u32,
    /// Before or after the kernel ran.
    pub phase: Phase,
    pub stats: ArrayStats,
}

/// Everything `ditto compare` found.
#[derive(Debug, Clone, PartialEq)]
pub struct ComparisonReport {
    /// Demangled name of the reference's kernel.
    pub kernel: String,
    pub mangled: String,
    /// Demangled name of the optimized run's kernel when it differs.
    pub optimized_kernel: Option<String>,
    pub reference_dir: PathBuf,
    pub optimized_dir: PathBuf,
    pub dispatches_compared: usize,
    /// Whether more than one process (rank) took part.
    pub multi_rank: bool,
    pub options: CompareOptions,
    pub arrays: Vec<ArrayComparison>,
}

impl ComparisonReport {
    pub fn valid(&self) -> bool {
        self.arrays.iter().all(|a| a.stats.matches())
    }
    pub fn mismatching(&self) -> impl Iterator<Item = &ArrayComparison> {
        self.arrays.iter().filter(|a| !a.stats.matches())
    }
}

/// What to say when the kernel asked for was never captured (see
/// [`crate::diagnose::what_ran`]).
pub fn what_ran(m: &Manifest) -> String {
    crate::diagnose::what_ran(m)
}

fn location(multi_rank: bool, d: &DispatchRecord, arg: Option<u32>) -> String {
    let mut s = String::new();
    if multi_rank {
        s.push_str(&format!("rank {}, ", d.rank));
    }
    s.push_str(&format!("dispatch {}", d.index));
    if let Some(arg) = arg {
        s.push_str(&format!(", arg {arg}"));
    }
    s
}

/// Pairs dispatches by (rank, index) and arguments by position, then
/// compares every array.
pub fn compare_snapshots(
    reference: &Snapshot,
    optimized: &Snapshot,
    options: &CompareOptions,
) -> Result<ComparisonReport, CompareError> {
    for (which, s) in [("the reference", reference), ("the optimized", optimized)] {
        if s.manifest.dispatches.is_empty() {
            return Err(CompareError::NotCaptured {
                which,
                dir: s.dir.clone(),
                query: s.manifest.kernel_query.clone(),
                what_ran: what_ran(&s.manifest),
            });
        }
    }
    let mut ref_d: Vec<&DispatchRecord> = reference.manifest.dispatches.iter().collect();
    let mut opt_d: Vec<&DispatchRecord> = optimized.manifest.dispatches.iter().collect();
    ref_d.sort_by_key(|d| (d.rank, d.index));
    opt_d.sort_by_key(|d| (d.rank, d.index));
    let kernel = reference
        .manifest
        .kernel
        .clone()
        .unwrap_or_else(|| ditto_protocol::KernelName {
            mangled: String::new(),
            demangled: reference.manifest.kernel_query.clone(),
        });
    let keys = |v: &[&DispatchRecord]| v.iter().map(|d| (d.rank, d.index)).collect::<Vec<_>>();
    if keys(&ref_d) != keys(&opt_d) {
        let detail = if ref_d.len() != opt_d.len() {
            "the runs must dispatch the kernel equally often (same inputs and iteration counts)"
                .to_string()
        } else {
            format!(
                "the (rank, dispatch) pairs differ: reference {:?}, optimized {:?}",
                keys(&ref_d),
                keys(&opt_d)
            )
        };
        return Err(CompareError::DispatchesDiffer {
            kernel: kernel.demangled.clone(),
            reference_dir: reference.dir.clone(),
            optimized_dir: optimized.dir.clone(),
            reference: ref_d.len(),
            optimized: opt_d.len(),
            detail,
        });
    }
    let multi_rank = ref_d.iter().chain(opt_d.iter()).any(|d| d.rank != 0);
    let kernels_of = |v: &[&DispatchRecord]| {
        let mut k: Vec<&str> = v
            .iter()
            .filter_map(|d| d.kernel.as_ref())
            .map(|k| k.mangled.as_str())
            .collect();
        k.sort_unstable();
        k.dedup();
        k.len()
    };
    let several_kernels = kernels_of(&ref_d) > 1 || kernels_of(&opt_d) > 1;
    let mut arrays = Vec::new();
    for (r, o) in ref_d.iter().zip(opt_d.iter()) {
        // Paired by tensor name: argument and phase (before/after).
        let ref_args: Vec<String> = r.buffers.iter().map(|b| b.tensor.clone()).collect();
        let opt_args: Vec<String> = o.buffers.iter().map(|b| b.tensor.clone()).collect();
        if ref_args != opt_args {
            return Err(CompareError::ArgumentsDiffer {
                location: location(multi_rank, r, None),
                reference: ref_args,
                optimized: opt_args,
            });
        }
        // With several kernels in one snapshot (a bare name matching several
        // instantiations) a pair must be the same kernel; with one kernel on
        // each side a renamed optimized kernel is paired (and noted).
        if several_kernels
            && let (Some(rk), Some(ok)) = (&r.kernel, &o.kernel)
            && rk.mangled != ok.mangled
        {
            return Err(CompareError::KernelsDiffer {
                location: location(multi_rank, r, None),
                reference: rk.demangled.clone(),
                optimized: ok.demangled.clone(),
            });
        }
        let ref_arrays = reference.load_dispatch(r)?;
        let opt_arrays = optimized.load_dispatch(o)?;
        for (((arg, ra), (_, oa)), record) in ref_arrays
            .iter()
            .zip(opt_arrays.iter())
            .zip(r.buffers.iter())
        {
            let mut loc = location(multi_rank, r, Some(*arg));
            if record.phase == Phase::Before {
                loc.push_str(" (before)");
            }
            let stats = compare_arrays(ra, oa, options, &loc)?;
            arrays.push(ArrayComparison {
                rank: r.rank,
                dispatch: r.index,
                arg: *arg,
                phase: record.phase,
                stats,
            });
        }
    }
    if arrays.is_empty() {
        // A verdict over no arrays would be a PASS that checked nothing.
        return Err(CompareError::NothingCompared {
            kernel: kernel.demangled,
            reference_dir: reference.dir.clone(),
            optimized_dir: optimized.dir.clone(),
            dispatches: ref_d.len(),
        });
    }
    let optimized_kernel = optimized
        .manifest
        .kernel
        .as_ref()
        .filter(|k| k.mangled != kernel.mangled)
        .map(|k| k.demangled.clone());
    Ok(ComparisonReport {
        kernel: kernel.demangled,
        mangled: kernel.mangled,
        optimized_kernel,
        reference_dir: reference.dir.clone(),
        optimized_dir: optimized.dir.clone(),
        dispatches_compared: ref_d.len(),
        multi_rank,
        options: *options,
        arrays,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> Array {
        Array {
            dtype: DType::F32,
            bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }
    fn f64s(v: &[f64]) -> Array {
        Array {
            dtype: DType::F64,
            bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }
    fn cmp(r: &Array, o: &Array, opts: CompareOptions) -> ArrayStats {
        compare_arrays(r, o, &opts, "dispatch 0, arg 1").unwrap()
    }
    fn defaults() -> CompareOptions {
        CompareOptions::default()
    }

    #[test]
    fn identical_arrays_match_with_zero_differences() {
        let a = f32s(&[1.0, 2.0, -3.5, 0.0]);
        let s = cmp(&a, &a.clone(), defaults());
        assert!(s.matches());
        assert_eq!(
            (s.total_elements, s.mismatched_elements, s.max_abs_diff),
            (4, 0, 0.0)
        );
    }

    #[test]
    fn f32_difference_within_default_tolerance_matches_and_beyond_it_does_not() {
        // atol 1e-5 + rtol 1.3e-6 * 1000 = 1.31e-3 allowed at 1000.
        let r = f32s(&[1000.0, 1000.0]);
        let o = f32s(&[1000.001, 1000.01]);
        let s = cmp(&r, &o, defaults());
        assert_eq!(s.mismatched_elements, 1);
        assert_eq!(s.max_abs_diff_index, 1);
        assert!((s.max_abs_diff - 0.01).abs() < 1e-4, "{}", s.max_abs_diff);
        assert!((s.max_rel_diff - 1e-5).abs() < 1e-7, "{}", s.max_rel_diff);
    }

    #[test]
    fn reduce_sum_against_zero_reports_like_torch() {
        let s = cmp(&f32s(&[114688.0]), &f32s(&[0.0]), defaults());
        assert_eq!(s.mismatched_elements, 1);
        assert_eq!(s.max_abs_diff, 114688.0);
        assert_eq!(s.max_rel_diff, 1.0);
        assert_eq!(
            s.tolerance,
            Tolerance {
                rtol: 1.3e-6,
                atol: 1e-5
            }
        );
        assert_eq!(
            s.worst[0],
            WorstElement {
                index: 0,
                reference: Element::Float(114688.0),
                optimized: Element::Float(0.0),
                abs_diff: 114688.0
            }
        );
    }

    #[test]
    fn nan_equals_nan_only_with_equal_nan() {
        let r = f64s(&[f64::NAN, 1.0]);
        let o = f64s(&[f64::NAN, 1.0]);
        let strict = cmp(&r, &o, defaults());
        assert_eq!(strict.mismatched_elements, 1);
        assert!(strict.max_abs_diff.is_nan());
        assert_eq!(strict.nonfinite.reference_nan, 1);
        assert_eq!(strict.nonfinite.optimized_nan, 1);
        let lenient = cmp(
            &r,
            &o,
            CompareOptions {
                equal_nan: true,
                ..defaults()
            },
        );
        assert!(lenient.matches());
        // A NaN against a number never matches, even with equal_nan.
        let s = cmp(
            &f64s(&[1.0]),
            &f64s(&[f64::NAN]),
            CompareOptions {
                equal_nan: true,
                ..defaults()
            },
        );
        assert_eq!(s.mismatched_elements, 1);
    }

    #[test]
    fn ulp_distance_counts_representable_values_in_the_dtype() {
        let next = f32::from_bits(1.0f32.to_bits() + 3);
        assert_eq!(ulp_distance(DType::F32, 1.0, next as f64), Some(3));
        assert_eq!(ulp_distance(DType::F32, -0.0, 0.0), Some(0));
        // The smallest subnormals on both sides of zero are 2 apart.
        let tiny = f32::from_bits(1) as f64;
        assert_eq!(ulp_distance(DType::F32, -tiny, tiny), Some(2));
        assert_eq!(ulp_distance(DType::F64, 1.0, 1.0 + f64::EPSILON), Some(1));
        assert_eq!(ulp_distance(DType::BF16, 1.0, 1.0078125), Some(1));
        assert_eq!(ulp_distance(DType::I32, 1.0, 2.0), None);
    }

    #[test]
    fn ulp_tolerance_replaces_atol_and_rtol_and_excludes_them() {
        let one = 1.0f32;
        let r = f32s(&[one, one, 1000.0]);
        let o = f32s(&[
            f32::from_bits(one.to_bits() + 2),
            f32::from_bits(one.to_bits() + 3),
            1000.0,
        ]);
        let opts = CompareOptions::default().with_ulp(Some(2)).unwrap();
        let s = cmp(&r, &o, opts);
        assert_eq!(s.mismatched_elements, 1);
        assert_eq!((s.max_ulp_diff, s.max_ulp_diff_index), (Some(3), 1));
        let err = CompareOptions::new(Some(1e-5), Some(1e-5), false)
            .unwrap()
            .with_ulp(Some(4))
            .unwrap_err();
        assert!(
            err.to_string().contains("--ulp cannot be combined"),
            "{err}"
        );
        // Integers stay exact under --ulp.
        let i = |v: &[i32]| Array {
            dtype: DType::I32,
            bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        };
        assert_eq!(cmp(&i(&[5]), &i(&[6]), opts).mismatched_elements, 1);
    }

    #[test]
    fn infinity_equals_only_the_same_infinity() {
        let r = f32s(&[f32::INFINITY, f32::INFINITY, f32::NEG_INFINITY, 1e30]);
        let o = f32s(&[
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NEG_INFINITY,
            f32::INFINITY,
        ]);
        let s = cmp(&r, &o, defaults());
        assert_eq!(s.mismatched_elements, 2);
        assert_eq!(
            s.worst.iter().map(|w| w.index).collect::<Vec<_>>(),
            vec![1, 3]
        );
        assert_eq!(s.max_abs_diff, f64::INFINITY);
        assert_eq!(s.nonfinite.reference_inf, 3);
        assert_eq!(s.nonfinite.optimized_inf, 4);
    }

    #[test]
    fn f16_and_bf16_use_their_own_default_tolerances() {
        let h = |v: &[f32]| Array {
            dtype: DType::F16,
            bytes: v
                .iter()
                .flat_map(|x| f16::from_f32(*x).to_le_bytes())
                .collect(),
        };
        // 1.0 vs 1.0009765625 (next f16): diff 9.77e-4 <= 1e-5 + 1e-3.
        let s = cmp(
            &h(&[1.0, 1.0]),
            &h(&[1.0 + 1.0 / 1024.0, 1.0078125]),
            defaults(),
        );
        assert_eq!(s.mismatched_elements, 1);
        assert_eq!(s.max_abs_diff_index, 1);
        let b = |v: &[f32]| Array {
            dtype: DType::BF16,
            bytes: v
                .iter()
                .flat_map(|x| bf16::from_f32(*x).to_le_bytes())
                .collect(),
        };
        // bf16: 1.0 vs 1.0078125 (next bf16) is within rtol 1.6e-2; 1.03125 is not.
        let s = cmp(&b(&[1.0, 1.0]), &b(&[1.0078125, 1.03125]), defaults());
        assert_eq!(s.mismatched_elements, 1);
        assert_eq!(s.max_abs_diff, 0.03125);
    }

    #[test]
    fn integers_compare_exactly_by_default() {
        let i = |v: &[i32]| Array {
            dtype: DType::I32,
            bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        };
        let s = cmp(&i(&[5, -7, 100]), &i(&[5, -6, 100]), defaults());
        assert_eq!(s.mismatched_elements, 1);
        assert_eq!(s.max_abs_diff, 1.0);
        assert_eq!(s.worst[0].reference, Element::Int(-7));
        let u = Array {
            dtype: DType::U64,
            bytes: u64::MAX.to_le_bytes().to_vec(),
        };
        assert!(cmp(&u, &u.clone(), defaults()).matches());
        // With user tolerances integers may differ by atol.
        let loose = CompareOptions::new(Some(1.0), Some(0.0), false).unwrap();
        assert!(cmp(&i(&[5, -7]), &i(&[6, -7]), loose).matches());
    }

    #[test]
    fn bytes_stay_exact_even_with_user_tolerances() {
        let r = Array {
            dtype: DType::Bytes,
            bytes: vec![1, 2, 3],
        };
        let o = Array {
            dtype: DType::Bytes,
            bytes: vec![1, 2, 4],
        };
        let loose = CompareOptions::new(Some(10.0), Some(1.0), false).unwrap();
        assert_eq!(cmp(&r, &o, loose).mismatched_elements, 1);
    }

    #[test]
    fn default_tolerances_follow_torch_per_dtype() {
        assert_eq!(
            default_tolerance(DType::F16),
            Tolerance {
                rtol: 1e-3,
                atol: 1e-5
            }
        );
        assert_eq!(
            default_tolerance(DType::BF16),
            Tolerance {
                rtol: 1.6e-2,
                atol: 1e-5
            }
        );
        assert_eq!(
            default_tolerance(DType::F32),
            Tolerance {
                rtol: 1.3e-6,
                atol: 1e-5
            }
        );
        assert_eq!(
            default_tolerance(DType::F64),
            Tolerance {
                rtol: 1e-7,
                atol: 1e-7
            }
        );
        for d in [DType::I8, DType::I32, DType::U64, DType::Bool, DType::Bytes] {
            assert_eq!(
                default_tolerance(d),
                Tolerance {
                    rtol: 0.0,
                    atol: 0.0
                }
            );
        }
    }

    #[test]
    fn atol_and_rtol_must_come_together() {
        assert!(matches!(
            CompareOptions::new(Some(1e-3), None, false),
            Err(CompareError::Usage(_))
        ));
        assert!(matches!(
            CompareOptions::new(None, Some(1e-3), false),
            Err(CompareError::Usage(_))
        ));
        let o = CompareOptions::new(Some(0.5), Some(0.25), true).unwrap();
        assert_eq!(
            o.tolerance_for(DType::F32),
            Tolerance {
                rtol: 0.25,
                atol: 0.5
            }
        );
        assert!(o.equal_nan);
    }

    #[test]
    fn different_lengths_or_dtypes_are_errors_not_mismatches() {
        let err = compare_arrays(
            &f32s(&[1.0, 2.0]),
            &f32s(&[1.0]),
            &defaults(),
            "dispatch 0, arg 1",
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(matches!(
            err,
            CompareError::LengthDiffers {
                reference: 2,
                optimized: 1,
                ..
            }
        ));
        assert!(
            msg.contains("dispatch 0, arg 1") && msg.contains("float32"),
            "{msg}"
        );
        let err = compare_arrays(&f32s(&[1.0, 2.0]), &f64s(&[1.0]), &defaults(), "x").unwrap_err();
        assert!(matches!(
            err,
            CompareError::DtypeDiffers {
                reference: "float32",
                optimized: "float64",
                ..
            }
        ));
    }

    #[test]
    fn worst_elements_are_the_greatest_differences_in_order() {
        let r = f32s(&[0.0; 8]);
        let o = f32s(&[1.0, 7.0, 3.0, 0.0, 5.0, 2.0, 6.0, 4.0]);
        let s = cmp(&r, &o, defaults());
        assert_eq!(s.mismatched_elements, 7);
        assert_eq!(
            s.worst.iter().map(|w| w.index).collect::<Vec<_>>(),
            vec![1, 6, 4, 7, 2]
        );
        assert_eq!(s.max_rel_diff, f64::INFINITY); // reference 0
    }

    #[test]
    fn an_infinite_reference_that_differs_has_an_infinite_relative_difference() {
        // inf vs -inf and inf vs 1: |a - b| is inf, and inf / |inf| must not become NaN
        // (a NaN would rank above every real relative difference).
        let s = cmp(
            &f32s(&[1.0, f32::INFINITY, f32::INFINITY]),
            &f32s(&[1.5, f32::NEG_INFINITY, 1.0]),
            defaults(),
        );
        assert_eq!(s.mismatched_elements, 3);
        assert_eq!(s.max_rel_diff, f64::INFINITY);
        assert_eq!(s.max_rel_diff_index, 1);
        assert_eq!(s.max_abs_diff, f64::INFINITY);
    }

    #[test]
    fn signed_zeros_and_subnormals_compare_by_value() {
        let tiny = f32::from_bits(1); // smallest subnormal
        let s = cmp(
            &f32s(&[0.0, tiny, -tiny]),
            &f32s(&[-0.0, 0.0, tiny]),
            defaults(),
        );
        assert!(s.matches(), "{s:?}");
        // Exact tolerances still tell a subnormal from zero.
        let exact = CompareOptions::new(Some(0.0), Some(0.0), false).unwrap();
        let s = cmp(&f32s(&[0.0, tiny]), &f32s(&[-0.0, 0.0]), exact);
        assert_eq!(s.mismatched_elements, 1);
        assert_eq!(s.max_abs_diff_index, 1);
        assert_eq!(s.max_rel_diff, 1.0);
    }

    #[test]
    fn integer_differences_at_the_extremes_do_not_overflow() {
        let i64s = |v: &[i64]| Array {
            dtype: DType::I64,
            bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        };
        let s = cmp(&i64s(&[i64::MIN, 0]), &i64s(&[i64::MAX, 0]), defaults());
        assert_eq!(s.mismatched_elements, 1);
        assert_eq!(s.max_abs_diff, u64::MAX as f64);
        // The reference 0 gives an infinite relative difference, as in torch.
        let s = cmp(&i64s(&[0]), &i64s(&[i64::MIN]), defaults());
        assert_eq!(s.max_rel_diff, f64::INFINITY);
    }

    fn snapshot_without_buffers(dir: &std::path::Path) -> Snapshot {
        let mut w = crate::store::SnapshotWriter::create(dir, "reduce_sum").unwrap();
        let d = ditto_protocol::Dispatch {
            index: 0,
            kernel: ditto_protocol::KernelName {
                mangled: "reduce_sum".into(),
                demangled: "reduce_sum".into(),
            },
            grid: [1, 1, 1],
            block: [1, 1, 1],
            duration_ns: None,
            buffers: vec![],
        };
        w.add_dispatch(0, 1, &d, &[]).unwrap();
        Snapshot::load(dir).unwrap()
    }

    #[test]
    fn with_several_kernels_dispatches_pair_only_with_the_same_kernel() {
        use crate::store::{CapturedBuffer, SnapshotWriter};
        let write = |dir: &std::path::Path, kernels: [&str; 2]| {
            let mut w = SnapshotWriter::create(dir, "scale_values").unwrap();
            for (index, mangled) in kernels.iter().enumerate() {
                let data = vec![0u8; 4];
                let d = ditto_protocol::Dispatch {
                    index: index as u64,
                    kernel: ditto_protocol::KernelName {
                        mangled: mangled.to_string(),
                        demangled: mangled.to_string(),
                    },
                    grid: [1, 1, 1],
                    block: [1, 1, 1],
                    duration_ns: None,
                    buffers: vec![],
                };
                let b = ditto_protocol::Buffer {
                    phase: ditto_protocol::Phase::After,
                    arg_index: 1,
                    name: None,
                    dtype: DType::U8,
                    handle: vec![0; 32],
                    owner_pid: 1,
                    alloc_base: 0,
                    alloc_size: 4,
                    offset: 0,
                    extent: 4,
                    fingerprint: ditto_protocol::fingerprint(&data),
                };
                w.add_dispatch(0, 1, &d, &[CapturedBuffer { buffer: b, data }])
                    .unwrap();
            }
            Snapshot::load(dir).unwrap()
        };
        let dir = tempfile::tempdir().unwrap();
        let a = write(&dir.path().join("a"), ["kf", "kd"]);
        let b = write(&dir.path().join("b"), ["kd", "kf"]);
        let same = write(&dir.path().join("c"), ["kf", "kd"]);
        let err = compare_snapshots(&a, &b, &defaults())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("dispatch 0: the reference ran kf but the optimized run ran kd"),
            "{err}"
        );
        assert_eq!(
            compare_snapshots(&a, &same, &defaults())
                .unwrap()
                .arrays
                .len(),
            2
        );
    }

    /// A snapshot of one reduce_sum dispatch with the given (arg, phase, f32 value) buffers.
    fn snapshot_with(dir: &std::path::Path, buffers: &[(u32, Phase, f32)]) -> Snapshot {
        use crate::store::{CapturedBuffer, SnapshotWriter};
        let mut w = SnapshotWriter::create(dir, "reduce_sum").unwrap();
        let d = ditto_protocol::Dispatch {
            index: 0,
            kernel: ditto_protocol::KernelName {
                mangled: "reduce_sum".into(),
                demangled: "reduce_sum".into(),
            },
            grid: [1, 1, 1],
            block: [1, 1, 1],
            duration_ns: None,
            buffers: vec![],
        };
        let captured: Vec<CapturedBuffer> = buffers
            .iter()
            .map(|&(arg, phase, value)| {
                let data = value.to_le_bytes().to_vec();
                CapturedBuffer {
                    buffer: ditto_protocol::Buffer {
                        phase,
                        arg_index: arg,
                        name: None,
                        dtype: DType::F32,
                        handle: vec![0; 32],
                        owner_pid: 1,
                        alloc_base: 0,
                        alloc_size: 4,
                        offset: 0,
                        extent: 4,
                        fingerprint: ditto_protocol::fingerprint(&data),
                    },
                    data,
                }
            })
            .collect();
        w.add_dispatch(0, 1, &d, &captured).unwrap();
        Snapshot::load(dir).unwrap()
    }

    #[test]
    fn before_and_after_arrays_pair_by_tensor_name_and_differing_captures_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let both = [(0, Phase::Before, 1.5), (1, Phase::After, 2.0)];
        let r = snapshot_with(&dir.path().join("r"), &both);
        assert_eq!(r.manifest.dispatches[0].buffers[0].tensor, "arg0.before");
        assert_eq!(r.manifest.dispatches[0].buffers[0].phase, Phase::Before);
        let o = snapshot_with(
            &dir.path().join("o"),
            &[(0, Phase::Before, 1.5), (1, Phase::After, 9.0)],
        );
        let report = compare_snapshots(&r, &o, &defaults()).unwrap();
        let seen: Vec<(u32, Phase, u64)> = report
            .arrays
            .iter()
            .map(|a| (a.arg, a.phase, a.stats.mismatched_elements))
            .collect();
        assert_eq!(seen, vec![(0, Phase::Before, 0), (1, Phase::After, 1)]);
        let outputs_only = snapshot_with(&dir.path().join("x"), &[(1, Phase::After, 2.0)]);
        let err = compare_snapshots(&r, &outputs_only, &defaults())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("captured arg0.before, arg1 but the optimized run captured arg1"),
            "{err}"
        );
        assert!(err.contains("same --capture"), "{err}");
    }

    #[test]
    fn dispatches_without_buffers_are_an_error_not_a_pass() {
        // An extern "C" kernel run without --arg-types captures dispatches with no
        // buffers: comparing nothing must not read as "valid".
        let (r, o) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let err = compare_snapshots(
            &snapshot_without_buffers(r.path()),
            &snapshot_without_buffers(o.path()),
            &defaults(),
        )
        .unwrap_err();
        assert!(
            matches!(err, CompareError::NothingCompared { dispatches: 1, .. }),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("--arg-types") && msg.contains("reduce_sum"),
            "{msg}"
        );
    }
}
