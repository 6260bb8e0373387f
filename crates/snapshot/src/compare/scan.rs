//! The element-wise scan behind `compare_arrays`: one pass over two
//! equally long arrays of one dtype, deciding each pair with the closeness
//! rule and gathering the statistics of the mismatches.
//!
//! Owns speed, not rules: each dtype gets its own monomorphic loop (no
//! per-element dispatch), and arrays larger than one chunk are scanned in
//! chunks on rayon's pool, then merged in index order so that the result is
//! exactly the sequential one (same counts, same first index on ties, same
//! worst elements). Within a chunk, blocks go first through a branch-free
//! pass that only asks whether any element mismatches or is not finite;
//! only the blocks it flags go through the detailed scan that records
//! statistics (a block it passes would have recorded nothing). The rules themselves (what matches, NaN and infinity,
//! ULP distance) are `closeness`'s.

use super::closeness::{
    ArrayStats, CompareError, CompareOptions, Element, NonFiniteCounts, Tolerance, WORST_ELEMENTS,
    WorstElement, ulp_distance,
};
use crate::store::Array;
use ditto_protocol::DType;
use half::{bf16, f16};
use rayon::prelude::*;

/// Elements scanned by one task. Large enough that merging costs nothing,
/// small enough that two cores share a 1 GiB array evenly.
const CHUNK_ELEMENTS: usize = 1 << 20;

/// Elements of one block of the fast pass ([`may_contribute`]): a block
/// it flags is scanned again in detail, so small enough that a few
/// mismatches cost little, large enough that the flag test is rare.
const BLOCK_ELEMENTS: usize = 4096;

/// What one scanned range contributes.
#[derive(Debug, Clone, Default)]
struct Partial {
    mismatched: u64,
    max_abs: Option<(f64, u64)>,
    max_rel: Option<(f64, u64)>,
    max_ulp: Option<(u64, u64)>,
    nonfinite: NonFiniteCounts,
    worst: Vec<WorstElement>,
}

/// `x` is a greater difference than `y` (NaN greatest; the earlier one is
/// kept on ties).
pub(super) fn greater(x: f64, y: f64) -> bool {
    (x.is_nan() && !y.is_nan()) || x > y
}

impl Partial {
    fn record(
        &mut self,
        index: u64,
        reference: Element,
        optimized: Element,
        abs_diff: f64,
        magnitude: f64,
        ulp: Option<u64>,
    ) {
        self.mismatched += 1;
        // An infinite difference is infinitely relative too (inf / inf would be NaN).
        let rel_diff = if abs_diff.is_infinite() {
            f64::INFINITY
        } else {
            abs_diff / magnitude
        };
        if let Some(u) = ulp
            && self.max_ulp.is_none_or(|(m, _)| u > m)
        {
            self.max_ulp = Some((u, index));
        }
        if self.max_abs.is_none_or(|(m, _)| greater(abs_diff, m)) {
            self.max_abs = Some((abs_diff, index));
        }
        if self.max_rel.is_none_or(|(m, _)| greater(rel_diff, m)) {
            self.max_rel = Some((rel_diff, index));
        }
        insert_worst(
            &mut self.worst,
            WorstElement {
                index,
                reference,
                optimized,
                abs_diff,
            },
        );
    }

    /// Folds in the partial of the range right after this one's.
    fn then(mut self, later: Partial) -> Partial {
        self.mismatched += later.mismatched;
        if let Some((u, i)) = later.max_ulp
            && self.max_ulp.is_none_or(|(m, _)| u > m)
        {
            self.max_ulp = Some((u, i));
        }
        if let Some((d, i)) = later.max_abs
            && self.max_abs.is_none_or(|(m, _)| greater(d, m))
        {
            self.max_abs = Some((d, i));
        }
        if let Some((d, i)) = later.max_rel
            && self.max_rel.is_none_or(|(m, _)| greater(d, m))
        {
            self.max_rel = Some((d, i));
        }
        let n = &mut self.nonfinite;
        n.reference_nan += later.nonfinite.reference_nan;
        n.optimized_nan += later.nonfinite.optimized_nan;
        n.reference_inf += later.nonfinite.reference_inf;
        n.optimized_inf += later.nonfinite.optimized_inf;
        for w in later.worst {
            insert_worst(&mut self.worst, w);
        }
        self
    }
}

/// Keeps the [`WORST_ELEMENTS`] greatest differences, earlier first on ties.
fn insert_worst(worst: &mut Vec<WorstElement>, w: WorstElement) {
    let pos = worst
        .iter()
        .position(|k| greater(w.abs_diff, k.abs_diff))
        .unwrap_or(worst.len());
    if pos < WORST_ELEMENTS {
        worst.insert(pos, w);
        worst.truncate(WORST_ELEMENTS);
    }
}

/// How each pair of elements is judged: fixed for one scan.
#[derive(Clone, Copy)]
struct Rule {
    dtype: DType,
    tol: Tolerance,
    equal_nan: bool,
    ulp: Option<u64>,
    /// Integers: no tolerance at all.
    exact: bool,
}

impl Rule {
    #[inline(always)]
    fn floats(&self, p: &mut Partial, index: u64, b: f64, a: f64) {
        let n = &mut p.nonfinite;
        n.reference_nan += b.is_nan() as u64;
        n.optimized_nan += a.is_nan() as u64;
        n.reference_inf += b.is_infinite() as u64;
        n.optimized_inf += a.is_infinite() as u64;
        let (matched, abs_diff, ulp) = if b.is_nan() || a.is_nan() {
            let matched = self.equal_nan && b.is_nan() && a.is_nan();
            (matched, if matched { 0.0 } else { f64::NAN }, None)
        } else if b.is_infinite() || a.is_infinite() {
            let matched = a == b;
            (matched, if matched { 0.0 } else { f64::INFINITY }, None)
        } else if let Some(allowed) = self.ulp {
            let u = ulp_distance(self.dtype, a, b).expect("a float dtype");
            (u <= allowed, (a - b).abs(), Some(u))
        } else {
            let d = (a - b).abs();
            (d <= self.tol.atol + self.tol.rtol * b.abs(), d, None)
        };
        if !matched {
            p.record(
                index,
                Element::Float(b),
                Element::Float(a),
                abs_diff,
                b.abs(),
                ulp,
            );
        }
    }

    #[inline(always)]
    fn ints_match(&self, b: i128, a: i128) -> bool {
        if self.exact {
            a == b
        } else {
            let d = (a - b).unsigned_abs() as f64;
            d <= self.tol.atol + self.tol.rtol * (b.unsigned_abs() as f64)
        }
    }

    #[inline(always)]
    fn ints(&self, p: &mut Partial, index: u64, b: i128, a: i128) {
        if self.ints_match(b, a) {
            return;
        }
        let d = (a - b).unsigned_abs() as f64;
        p.record(
            index,
            Element::Int(b),
            Element::Int(a),
            d,
            b.unsigned_abs() as f64,
            None,
        );
    }
}

/// Scans `reference` and `optimized` (same dtype, same length, whole
/// elements) whose first element has index `first`, element by element:
/// the detailed scan, which records every mismatch.
fn scan_range(rule: &Rule, reference: &[u8], optimized: &[u8], first: u64) -> Partial {
    let mut p = Partial::default();
    scan_detailed(rule, &mut p, reference, optimized, first);
    p
}

/// Adds the mismatches and non-finite values of one range to `p`.
fn scan_detailed(rule: &Rule, p: &mut Partial, reference: &[u8], optimized: &[u8], first: u64) {
    macro_rules! floats {
        ($n:expr, $decode:expr) => {
            for (i, (b, a)) in reference
                .chunks_exact($n)
                .zip(optimized.chunks_exact($n))
                .enumerate()
            {
                let b: f64 = $decode(b.try_into().unwrap());
                let a: f64 = $decode(a.try_into().unwrap());
                rule.floats(p, first + i as u64, b, a);
            }
        };
    }
    macro_rules! ints {
        ($n:expr, $decode:expr) => {
            for (i, (b, a)) in reference
                .chunks_exact($n)
                .zip(optimized.chunks_exact($n))
                .enumerate()
            {
                let b: i128 = $decode(b.try_into().unwrap());
                let a: i128 = $decode(a.try_into().unwrap());
                rule.ints(p, first + i as u64, b, a);
            }
        };
    }
    match rule.dtype {
        DType::F16 => floats!(2, |c| f16::from_le_bytes(c).to_f64()),
        DType::BF16 => floats!(2, |c| bf16::from_le_bytes(c).to_f64()),
        DType::F32 => floats!(4, |c| f32::from_le_bytes(c) as f64),
        DType::F64 => floats!(8, f64::from_le_bytes),
        DType::I8 => ints!(1, |c| i8::from_le_bytes(c) as i128),
        DType::I16 => ints!(2, |c| i16::from_le_bytes(c) as i128),
        DType::I32 => ints!(4, |c| i32::from_le_bytes(c) as i128),
        DType::I64 => ints!(8, |c| i64::from_le_bytes(c) as i128),
        DType::U8 | DType::Bool | DType::Bytes => ints!(1, |c| u8::from_le_bytes(c) as i128),
        DType::U16 => ints!(2, |c| u16::from_le_bytes(c) as i128),
        DType::U32 => ints!(4, |c| u32::from_le_bytes(c) as i128),
        DType::U64 => ints!(8, |c| u64::from_le_bytes(c) as i128),
    }
}

/// Whether some element of the range may contribute to the statistics:
/// a mismatch or a NaN or infinity (counted even when matched). A branch-
/// free pass the compiler vectorises; it over-reports, never under-reports
/// (a range it passes has nothing for [`scan_detailed`] to record), so
/// skipping the ranges it passes leaves the result exactly as it was.
/// On x86-64 CPUs with AVX2 the same code is compiled for it (twice the
/// lanes of the baseline SSE2); the arithmetic is the same IEEE operations
/// (no fused multiply-add), so the answer is too.
fn may_contribute(rule: &Rule, reference: &[u8], optimized: &[u8]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { may_contribute_avx2(rule, reference, optimized) };
    }
    may_contribute_portable(rule, reference, optimized)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn may_contribute_avx2(rule: &Rule, reference: &[u8], optimized: &[u8]) -> bool {
    may_contribute_portable(rule, reference, optimized)
}

#[inline(always)]
fn may_contribute_portable(rule: &Rule, reference: &[u8], optimized: &[u8]) -> bool {
    let (atol, rtol) = (rule.tol.atol, rule.tol.rtol);
    let by_bits = rule.ulp.is_some();
    // Finite, and within the tolerance (or, under a ULP rule, the same bits:
    // distance 0). NaN fails every comparison, so it is flagged too.
    let clean = |b: f64, a: f64| {
        let finite = (b.abs() < f64::INFINITY) & (a.abs() < f64::INFINITY);
        let close = if by_bits {
            a.to_bits() == b.to_bits()
        } else {
            (a - b).abs() <= atol + rtol * b.abs()
        };
        finite & close
    };
    macro_rules! floats {
        ($n:expr, $decode:expr) => {
            reference
                .chunks_exact($n)
                .zip(optimized.chunks_exact($n))
                .fold(false, |flagged, (b, a)| {
                    let b: f64 = $decode(b.try_into().unwrap());
                    let a: f64 = $decode(a.try_into().unwrap());
                    flagged | !clean(b, a)
                })
        };
    }
    macro_rules! ints {
        ($n:expr, $decode:expr) => {
            reference
                .chunks_exact($n)
                .zip(optimized.chunks_exact($n))
                .fold(false, |flagged, (b, a)| {
                    let b: i128 = $decode(b.try_into().unwrap());
                    let a: i128 = $decode(a.try_into().unwrap());
                    flagged | !rule.ints_match(b, a)
                })
        };
    }
    match rule.dtype {
        DType::F16 => floats!(2, |c| f16::from_le_bytes(c).to_f64()),
        DType::BF16 => floats!(2, |c| bf16::from_le_bytes(c).to_f64()),
        DType::F32 => floats!(4, |c| f32::from_le_bytes(c) as f64),
        DType::F64 => floats!(8, f64::from_le_bytes),
        DType::I8 => ints!(1, |c| i8::from_le_bytes(c) as i128),
        DType::I16 => ints!(2, |c| i16::from_le_bytes(c) as i128),
        DType::I32 => ints!(4, |c| i32::from_le_bytes(c) as i128),
        DType::I64 => ints!(8, |c| i64::from_le_bytes(c) as i128),
        DType::U8 | DType::Bool | DType::Bytes => ints!(1, |c| u8::from_le_bytes(c) as i128),
        DType::U16 => ints!(2, |c| u16::from_le_bytes(c) as i128),
        DType::U32 => ints!(4, |c| u32::from_le_bytes(c) as i128),
        DType::U64 => ints!(8, |c| u64::from_le_bytes(c) as i128),
    }
}

/// [`scan_range`] in blocks of `block_elements`: each block first through
/// [`may_contribute`], only the blocks it flags through the detailed scan.
/// Same result, in the same order; most of the time of an array that
/// matches goes to the fast pass.
fn scan_range_fast(
    rule: &Rule,
    reference: &[u8],
    optimized: &[u8],
    first: u64,
    block_elements: usize,
) -> Partial {
    let mut p = Partial::default();
    let block_bytes = block_elements.max(1).saturating_mul(rule.dtype.size());
    for (k, (r, o)) in reference
        .chunks(block_bytes)
        .zip(optimized.chunks(block_bytes))
        .enumerate()
    {
        if may_contribute(rule, r, o) {
            let start = first + (k * block_elements.max(1)) as u64;
            scan_detailed(rule, &mut p, r, o, start);
        }
    }
    p
}

/// Compares two arrays of `dtype` element by element (`reference` is b in
/// `|a - b| <= atol + rtol * |b|`). Both hold the same whole number of
/// elements; the caller checked.
pub(super) fn scan(
    dtype: DType,
    tol: Tolerance,
    options: &CompareOptions,
    reference: &[u8],
    optimized: &[u8],
) -> ArrayStats {
    scan_in_chunks(dtype, tol, options, reference, optimized, CHUNK_ELEMENTS)
}

/// [`scan`] with chunks of `chunk_elements` (tests use tiny ones).
pub(super) fn scan_in_chunks(
    dtype: DType,
    tol: Tolerance,
    options: &CompareOptions,
    reference: &[u8],
    optimized: &[u8],
    chunk_elements: usize,
) -> ArrayStats {
    scan_with(
        dtype,
        tol,
        options,
        reference,
        optimized,
        chunk_elements,
        Some(BLOCK_ELEMENTS),
    )
}

/// [`scan_in_chunks`], each chunk in fast-pass blocks of `block_elements`
/// or, with `None`, through the detailed scan alone (tests compare the two).
pub(super) fn scan_with(
    dtype: DType,
    tol: Tolerance,
    options: &CompareOptions,
    reference: &[u8],
    optimized: &[u8],
    chunk_elements: usize,
    block_elements: Option<usize>,
) -> ArrayStats {
    let rule = Rule {
        dtype,
        tol,
        equal_nan: options.equal_nan,
        ulp: options.ulp,
        exact: tol.atol == 0.0 && tol.rtol == 0.0,
    };
    let size = dtype.size();
    let elements = reference.len() / size;
    let chunk_elements = chunk_elements.max(1);
    let chunk_bytes = chunk_elements.saturating_mul(size);
    let scan_range = |r: &[u8], o: &[u8], first: u64| match block_elements {
        Some(block) => scan_range_fast(&rule, r, o, first, block),
        None => scan_range(&rule, r, o, first),
    };
    let partial = if elements <= chunk_elements {
        scan_range(reference, optimized, 0)
    } else {
        let partials: Vec<Partial> = reference
            .par_chunks(chunk_bytes)
            .zip(optimized.par_chunks(chunk_bytes))
            .enumerate()
            .map(|(c, (r, o))| scan_range(r, o, (c * chunk_elements) as u64))
            .collect();
        partials
            .into_iter()
            .reduce(Partial::then)
            .unwrap_or_default()
    };
    let (max_abs_diff, max_abs_diff_index) = partial.max_abs.unwrap_or((0.0, 0));
    let (max_rel_diff, max_rel_diff_index) = partial.max_rel.unwrap_or((0.0, 0));
    ArrayStats {
        dtype,
        tolerance: tol,
        total_elements: elements as u64,
        mismatched_elements: partial.mismatched,
        max_abs_diff,
        max_abs_diff_index,
        max_rel_diff,
        max_rel_diff_index,
        max_ulp_diff: partial.max_ulp.map(|(u, _)| u),
        max_ulp_diff_index: partial.max_ulp.map_or(0, |(_, i)| i),
        nonfinite: partial.nonfinite,
        worst: partial.worst,
    }
}

/// Compares element by element; `b` is the reference.
pub fn compare_arrays(
    reference: &Array,
    optimized: &Array,
    options: &CompareOptions,
    location: &str,
) -> Result<ArrayStats, CompareError> {
    check_comparable(reference, optimized, location)?;
    let dtype = reference.dtype;
    Ok(scan(
        dtype,
        options.tolerance_for(dtype),
        options,
        &reference.bytes,
        &optimized.bytes,
    ))
}

/// The two arrays have one dtype and one length, or the error says which
/// differs at `location`.
pub fn check_comparable(
    reference: &Array,
    optimized: &Array,
    location: &str,
) -> Result<(), CompareError> {
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
    Ok(())
}
