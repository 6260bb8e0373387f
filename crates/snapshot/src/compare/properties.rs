//! Property tests of the comparison engine: arbitrary arrays full of the
//! values that break comparisons (NaN, ±inf, -0.0, subnormals, extremes),
//! empty and very large arrays, mismatched lengths. The chunked parallel
//! scan must agree exactly with one sequential pass, the fast pass (blocks
//! that only go through the detailed scan when flagged) exactly with the
//! detailed scan alone, and a plain element-by-element model of the
//! closeness rule must agree with all of them.

use super::scan::{scan_in_chunks, scan_with};
use super::*;
use crate::store::Array;
use ditto_protocol::DType;
use proptest::prelude::*;

/// f32 values weighted towards the awkward ones.
fn awkward_f32() -> impl Strategy<Value = f32> {
    prop_oneof![
        4 => -1.0e3f32..1.0e3f32,
        1 => Just(f32::NAN),
        1 => Just(f32::INFINITY),
        1 => Just(f32::NEG_INFINITY),
        1 => Just(-0.0f32),
        1 => Just(0.0f32),
        1 => Just(f32::MIN_POSITIVE / 4.0),
        1 => Just(-f32::MIN_POSITIVE / 3.0),
        1 => Just(f32::MAX),
        1 => Just(f32::MIN),
        1 => any::<f32>(),
    ]
}

/// A reference array and an optimized one of the same length, the latter
/// mostly equal or nearly equal to the former.
fn pair_f32(max_len: usize) -> impl Strategy<Value = (Vec<f32>, Vec<f32>)> {
    prop::collection::vec((awkward_f32(), awkward_f32(), 0u8..4), 0..max_len).prop_map(|v| {
        let reference: Vec<f32> = v.iter().map(|(r, _, _)| *r).collect();
        let optimized = v
            .iter()
            .map(|(r, other, how)| match how {
                0 => *r,
                1 => *r * (1.0 + 1e-7),
                2 => f32::from_bits(r.to_bits() ^ 1),
                _ => *other,
            })
            .collect();
        (reference, optimized)
    })
}

/// A reference array of ordinary values and an optimized copy, with a few
/// awkward values planted on either side at random places: long runs that
/// match, as real arrays mostly do, so that most blocks pass the fast pass.
fn planted_f32(max_len: usize) -> impl Strategy<Value = (Vec<f32>, Vec<f32>)> {
    (
        prop::collection::vec(-1.0e3f32..1.0e3f32, 0..max_len),
        prop::collection::vec((any::<usize>(), awkward_f32(), any::<bool>()), 0..6),
    )
        .prop_map(|(mut reference, plants)| {
            let mut optimized = reference.clone();
            for (at, value, in_reference) in plants {
                if reference.is_empty() {
                    break;
                }
                let at = at % reference.len();
                if in_reference {
                    reference[at] = value;
                } else {
                    optimized[at] = value;
                }
            }
            (reference, optimized)
        })
}

/// Two arrays of any dtype: random bytes (for floats: NaN, infinities,
/// subnormals and -0.0 among them) and a copy with a few bytes changed.
fn planted_bytes(max_len: usize) -> impl Strategy<Value = (DType, Vec<u8>, Vec<u8>)> {
    (
        prop::sample::select(vec![
            DType::F16,
            DType::BF16,
            DType::F32,
            DType::F64,
            DType::I8,
            DType::I32,
            DType::I64,
            DType::U16,
            DType::U64,
            DType::Bool,
        ]),
        prop::collection::vec(any::<u8>(), 0..max_len),
        prop::collection::vec((any::<usize>(), 1u8..=255), 0..6),
    )
        .prop_map(|(dtype, mut reference, changes)| {
            reference.truncate(reference.len() / dtype.size() * dtype.size());
            let mut optimized = reference.clone();
            for (at, bits) in changes {
                if optimized.is_empty() {
                    break;
                }
                let at = at % optimized.len();
                optimized[at] ^= bits;
            }
            (dtype, reference, optimized)
        })
}

fn array(v: &[f32]) -> Array {
    Array {
        dtype: DType::F32,
        bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

fn options() -> impl Strategy<Value = CompareOptions> {
    prop_oneof![
        Just(CompareOptions::default()),
        Just(CompareOptions {
            equal_nan: true,
            ..CompareOptions::default()
        }),
        (0.0f64..1.0, 0.0f64..0.1).prop_map(|(atol, rtol)| CompareOptions::new(
            Some(atol),
            Some(rtol),
            false
        )
        .unwrap()),
        (0u64..8).prop_map(|ulp| CompareOptions::default().with_ulp(Some(ulp)).unwrap()),
    ]
}

/// The closeness rule for one f32 pair, written out plainly.
fn model_matches(b: f32, a: f32, options: &CompareOptions) -> bool {
    let (b, a) = (b as f64, a as f64);
    if b.is_nan() || a.is_nan() {
        return options.equal_nan && b.is_nan() && a.is_nan();
    }
    if b.is_infinite() || a.is_infinite() {
        return a == b;
    }
    if let Some(allowed) = options.ulp {
        return ulp_distance(DType::F32, a, b).unwrap() <= allowed;
    }
    let t = options.tolerance_for(DType::F32);
    (a - b).abs() <= t.atol + t.rtol * b.abs()
}

/// ArrayStats with NaN made comparable (NaN == NaN) for equality checks.
fn comparable(s: &ArrayStats) -> String {
    format!("{s:?}")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn chunked_scan_equals_one_sequential_pass(
        (r, o) in pair_f32(200),
        opts in options(),
        chunk in 1usize..17,
    ) {
        let tol = opts.tolerance_for(DType::F32);
        let (rb, ob) = (array(&r).bytes, array(&o).bytes);
        let whole = scan_in_chunks(DType::F32, tol, &opts, &rb, &ob, usize::MAX);
        let chunked = scan_in_chunks(DType::F32, tol, &opts, &rb, &ob, chunk);
        prop_assert_eq!(comparable(&whole), comparable(&chunked));
    }

    #[test]
    fn the_fast_pass_gives_exactly_the_detailed_scan_on_f32(
        (r, o) in planted_f32(3000),
        opts in options(),
        block in 1usize..300,
        chunk in prop_oneof![Just(usize::MAX), 1usize..1000],
    ) {
        let tol = opts.tolerance_for(DType::F32);
        let (rb, ob) = (array(&r).bytes, array(&o).bytes);
        let detailed = scan_with(DType::F32, tol, &opts, &rb, &ob, usize::MAX, None);
        let fast = scan_with(DType::F32, tol, &opts, &rb, &ob, chunk, Some(block));
        prop_assert_eq!(comparable(&detailed), comparable(&fast));
        // And both follow the plain rule.
        let mismatching = (0..r.len()).filter(|&i| !model_matches(r[i], o[i], &opts)).count();
        prop_assert_eq!(fast.mismatched_elements, mismatching as u64);
    }

    #[test]
    fn the_fast_pass_gives_exactly_the_detailed_scan_on_every_dtype(
        (dtype, rb, ob) in planted_bytes(4000),
        opts in options(),
        block in 1usize..200,
        chunk in prop_oneof![Just(usize::MAX), 1usize..700],
    ) {
        let tol = opts.tolerance_for(dtype);
        let detailed = scan_with(dtype, tol, &opts, &rb, &ob, usize::MAX, None);
        let fast = scan_with(dtype, tol, &opts, &rb, &ob, chunk, Some(block));
        prop_assert_eq!(comparable(&detailed), comparable(&fast));
    }

    #[test]
    fn mismatch_count_and_first_greatest_difference_follow_the_plain_rule(
        (r, o) in pair_f32(200),
        opts in options(),
    ) {
        let s = compare_arrays(&array(&r), &array(&o), &opts, "arg 1").unwrap();
        let mismatching: Vec<usize> = (0..r.len())
            .filter(|&i| !model_matches(r[i], o[i], &opts))
            .collect();
        prop_assert_eq!(s.total_elements, r.len() as u64);
        prop_assert_eq!(s.mismatched_elements, mismatching.len() as u64);
        prop_assert_eq!(s.matches(), mismatching.is_empty());
        let nans = |v: &[f32]| v.iter().filter(|x| x.is_nan()).count() as u64;
        let infs = |v: &[f32]| v.iter().filter(|x| x.is_infinite()).count() as u64;
        prop_assert_eq!(s.nonfinite.reference_nan, nans(&r));
        prop_assert_eq!(s.nonfinite.optimized_nan, nans(&o));
        prop_assert_eq!(s.nonfinite.reference_inf, infs(&r));
        prop_assert_eq!(s.nonfinite.optimized_inf, infs(&o));
        match mismatching.first() {
            None => prop_assert_eq!((s.max_abs_diff, s.worst.len()), (0.0, 0)),
            Some(_) => {
                // The reported greatest difference is at a mismatching index,
                // and no mismatching element differs by more.
                prop_assert!(mismatching.contains(&(s.max_abs_diff_index as usize)));
                prop_assert_eq!(s.worst[0].index, s.max_abs_diff_index);
                prop_assert_eq!(s.worst.len(), mismatching.len().min(WORST_ELEMENTS));
                if !s.max_abs_diff.is_nan() {
                    for &i in &mismatching {
                        let d = (r[i] as f64 - o[i] as f64).abs();
                        let d = if r[i].is_infinite() || o[i].is_infinite() { f64::INFINITY } else { d };
                        prop_assert!(!(r[i].is_nan() || o[i].is_nan()));
                        prop_assert!(d <= s.max_abs_diff, "index {} differs by {} > {}", i, d, s.max_abs_diff);
                    }
                }
            }
        }
    }

    #[test]
    fn an_array_always_matches_itself_unless_it_holds_nan(
        (r, _) in pair_f32(200),
        equal_nan in any::<bool>(),
    ) {
        let opts = CompareOptions { equal_nan, ..CompareOptions::default() };
        let s = compare_arrays(&array(&r), &array(&r), &opts, "arg 1").unwrap();
        let nans = r.iter().filter(|x| x.is_nan()).count() as u64;
        prop_assert_eq!(s.mismatched_elements, if equal_nan { 0 } else { nans });
    }

    #[test]
    fn a_looser_tolerance_never_finds_more_mismatches(
        (r, o) in pair_f32(100),
        atol in 0.0f64..1.0,
        rtol in 0.0f64..0.1,
        grow in 1.0f64..10.0,
    ) {
        let tight = CompareOptions::new(Some(atol), Some(rtol), false).unwrap();
        let loose = CompareOptions::new(Some(atol * grow), Some(rtol * grow), false).unwrap();
        let (ra, oa) = (array(&r), array(&o));
        let t = compare_arrays(&ra, &oa, &tight, "arg 1").unwrap();
        let l = compare_arrays(&ra, &oa, &loose, "arg 1").unwrap();
        prop_assert!(l.mismatched_elements <= t.mismatched_elements);
    }

    #[test]
    fn arrays_of_different_lengths_are_an_error_never_a_verdict(
        (r, _) in pair_f32(50),
        extra in 1usize..5,
    ) {
        let longer: Vec<f32> = r.iter().copied().chain(std::iter::repeat_n(1.0, extra)).collect();
        let err = compare_arrays(&array(&r), &array(&longer), &CompareOptions::default(), "arg 1")
            .unwrap_err();
        let is_length_error = matches!(err, CompareError::LengthDiffers { .. });
        prop_assert!(is_length_error, "{}", err);
    }
}

#[test]
fn signed_zeros_and_equal_infinities_match_opposite_infinities_do_not() {
    let r = array(&[0.0, f32::INFINITY, f32::NEG_INFINITY, f32::INFINITY]);
    let o = array(&[-0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NEG_INFINITY]);
    let s = compare_arrays(&r, &o, &CompareOptions::default(), "arg 1").unwrap();
    assert_eq!(s.mismatched_elements, 1);
    assert_eq!((s.max_abs_diff, s.max_abs_diff_index), (f64::INFINITY, 3));
    assert_eq!(s.max_rel_diff, f64::INFINITY);
}

#[test]
fn adjacent_subnormals_are_one_ulp_apart_and_within_the_default_atol() {
    let a = f32::from_bits(1);
    let b = f32::from_bits(2);
    assert_eq!(ulp_distance(DType::F32, a as f64, b as f64), Some(1));
    let s = compare_arrays(
        &array(&[a]),
        &array(&[b]),
        &CompareOptions::default(),
        "arg 1",
    )
    .unwrap();
    assert!(s.matches());
    let exact = CompareOptions::default().with_ulp(Some(0)).unwrap();
    let s = compare_arrays(&array(&[a]), &array(&[b]), &exact, "arg 1").unwrap();
    assert_eq!((s.mismatched_elements, s.max_ulp_diff), (1, Some(1)));
}

#[test]
fn empty_arrays_match_with_no_elements() {
    let s = compare_arrays(
        &array(&[]),
        &array(&[]),
        &CompareOptions::default(),
        "arg 1",
    )
    .unwrap();
    assert_eq!((s.total_elements, s.mismatched_elements), (0, 0));
    assert!(s.matches() && s.worst.is_empty());
}

#[test]
fn a_very_large_array_is_scanned_in_parallel_chunks_and_reports_the_exact_indices() {
    // Three default chunks and a bit: indices must be global, not per chunk.
    let n = (3 << 20) + 5;
    let r = vec![1.0f32; n];
    let mut o = r.clone();
    let late = n - 2;
    o[late] = 3.0;
    o[(1 << 20) + 7] = 2.0;
    o[(1 << 20) + 8] = 3.0; // ties with `late` on |diff| = 2: the earlier is kept first
    let s = compare_arrays(&array(&r), &array(&o), &CompareOptions::default(), "arg 1").unwrap();
    assert_eq!(s.total_elements, n as u64);
    assert_eq!(s.mismatched_elements, 3);
    assert_eq!((s.max_abs_diff, s.max_abs_diff_index), (2.0, (1 << 20) + 8));
    let order: Vec<u64> = s.worst.iter().map(|w| w.index).collect();
    assert_eq!(order, vec![(1 << 20) + 8, late as u64, (1 << 20) + 7]);
}
