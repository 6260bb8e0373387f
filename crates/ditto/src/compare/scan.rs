//! The element-wise scan behind `compare_arrays`: one pass over two
//! equally long arrays of one dtype, deciding each pair with the closeness
//! rule and gathering the statistics of the mismatches.
//!
//! Owns speed, not rules: each dtype gets its own monomorphic loop (no
//! per-element dispatch), and arrays larger than one chunk are scanned in
//! chunks on rayon's pool, then merged in index order so that the result is
//! exactly the sequential one (same counts, same first index on ties, same
//! worst elements). The rules themselves (what matches, NaN and infinity,
//! ULP distance) are `closeness`'s.

use super::closeness::{
    ArrayStats, CompareOptions, Element, NonFiniteCounts, Tolerance, WORST_ELEMENTS, WorstElement,
    ulp_distance,
};
use ditto_protocol::DType;
use half::{bf16, f16};
use rayon::prelude::*;

/// Elements scanned by one task. Large enough that merging costs nothing,
/// small enough that two cores share a 1 GiB array evenly.
const CHUNK_ELEMENTS: usize = 1 << 20;

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
    fn ints(&self, p: &mut Partial, index: u64, b: i128, a: i128) {
        if self.exact {
            if a == b {
                return;
            }
        } else {
            let d = (a - b).unsigned_abs() as f64;
            if d <= self.tol.atol + self.tol.rtol * (b.unsigned_abs() as f64) {
                return;
            }
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
/// elements) whose first element has index `first`.
fn scan_range(rule: &Rule, reference: &[u8], optimized: &[u8], first: u64) -> Partial {
    let mut p = Partial::default();
    macro_rules! floats {
        ($n:expr, $decode:expr) => {
            for (i, (b, a)) in reference
                .chunks_exact($n)
                .zip(optimized.chunks_exact($n))
                .enumerate()
            {
                let b: f64 = $decode(b.try_into().unwrap());
                let a: f64 = $decode(a.try_into().unwrap());
                rule.floats(&mut p, first + i as u64, b, a);
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
                rule.ints(&mut p, first + i as u64, b, a);
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
    let partial = if elements <= chunk_elements {
        scan_range(&rule, reference, optimized, 0)
    } else {
        let partials: Vec<Partial> = reference
            .par_chunks(chunk_bytes)
            .zip(optimized.par_chunks(chunk_bytes))
            .enumerate()
            .map(|(c, (r, o))| scan_range(&rule, r, o, (c * chunk_elements) as u64))
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
