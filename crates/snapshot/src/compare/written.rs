//! Comparing what two kernels wrote: an output captured before and after
//! the kernel on both sides is compared only where either kernel changed
//! it. An element both changed is compared by value (the usual rule); one
//! only one side's kernel changed is a mismatch, named as such ("written
//! only by the optimized kernel: indices 4096..4103"), an out-of-bounds or
//! a missing write; one neither changed is outside the comparison and only
//! counted (other tensors' bytes of a caching allocator's segment,
//! uninitialised memory, a different placement).
//!
//! What this cannot see: an element a kernel writes with the value it
//! already held looks untouched. That never turns a mismatch into a PASS:
//! if the other kernel wrote it with another value, that side changed it
//! and it is a one-sided write; if with the same value, both agree.
//!
//! Owns the write masks and their report; the element rule stays `scan`'s.

use super::closeness::{ArrayStats, CompareError, CompareOptions};
use super::scan::{check_comparable, compare_arrays};
use crate::store::Array;
use serde::Serialize;

/// How many index runs of one-sided writes a report keeps.
pub const MAX_RUNS: usize = 8;

/// Elements one side's kernel changed and the other's did not.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct OneSided {
    pub count: u64,
    /// The first `MAX_RUNS` runs, as inclusive `[first, last]` indices.
    pub runs: Vec<[u64; 2]>,
    /// Whether every such element lies past the last one the other side wrote.
    pub past_the_other: bool,
}

/// The write-set part of an output's comparison.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct WrittenSet {
    /// Elements both kernels changed: compared by value.
    pub compared: u64,
    /// Elements neither kernel changed: outside the comparison.
    pub untouched: u64,
    pub only_reference: OneSided,
    pub only_optimized: OneSided,
}

/// Compares `reference` and `optimized` (after the kernel) where either
/// kernel changed them from `*_before`. The stats' mismatches count the
/// value mismatches of elements both wrote plus every one-sided write;
/// `total_elements` stays the array's length.
pub fn compare_written(
    reference_before: &Array,
    reference: &Array,
    optimized_before: &Array,
    optimized: &Array,
    options: &CompareOptions,
    location: &str,
) -> Result<(ArrayStats, WrittenSet), CompareError> {
    // The usual checks (dtype, length) on the results, then on each side's
    // before-image against its result.
    check_comparable(reference, optimized, location)?;
    for (before, after, side) in [
        (reference_before, reference, "reference"),
        (optimized_before, optimized, "optimized"),
    ] {
        if before.dtype != after.dtype || before.bytes.len() != after.bytes.len() {
            return Err(CompareError::Usage(format!(
                "{location}: the {side} run's image before the kernel ({} bytes of {}) does not \
                 match its result ({} bytes of {})",
                before.bytes.len(),
                before.dtype.name(),
                after.bytes.len(),
                after.dtype.name()
            )));
        }
    }
    let size = reference.dtype.size();
    let n = reference.elements();
    let changed = |before: &Array, after: &Array, i: usize| {
        before.bytes[i * size..(i + 1) * size] != after.bytes[i * size..(i + 1) * size]
    };
    // Both sides' results with the elements not compared by value set to
    // zero on both (equal whatever the rule: no NaN).
    let mut r_masked = reference.bytes.to_vec();
    let mut o_masked = optimized.bytes.to_vec();
    let mut set = WrittenSet::default();
    let (mut last_r, mut last_o): (Option<u64>, Option<u64>) = (None, None);
    for i in 0..n {
        let (wr, wo) = (
            changed(reference_before, reference, i),
            changed(optimized_before, optimized, i),
        );
        if wr {
            last_r = Some(i as u64);
        }
        if wo {
            last_o = Some(i as u64);
        }
        match (wr, wo) {
            (true, true) => {
                set.compared += 1;
                continue;
            }
            (false, false) => set.untouched += 1,
            (true, false) => record(&mut set.only_reference, i as u64),
            (false, true) => record(&mut set.only_optimized, i as u64),
        }
        r_masked[i * size..(i + 1) * size].fill(0);
        o_masked[i * size..(i + 1) * size].fill(0);
    }
    set.only_reference.past_the_other = past(&set.only_reference, last_o);
    set.only_optimized.past_the_other = past(&set.only_optimized, last_r);
    let masked = |bytes: Vec<u8>| Array {
        dtype: reference.dtype,
        bytes: bytes.into(),
    };
    let mut stats = compare_arrays(&masked(r_masked), &masked(o_masked), options, location)?;
    stats.mismatched_elements += set.only_reference.count + set.only_optimized.count;
    Ok((stats, set))
}

/// Adds index `i` to a side's one-sided writes (runs kept while few; the
/// first run is always kept).
fn record(side: &mut OneSided, i: u64) {
    side.count += 1;
    if let Some(run) = side.runs.last_mut()
        && run[1] + 1 == i
    {
        run[1] = i;
    } else if side.runs.len() < MAX_RUNS {
        side.runs.push([i, i]);
    }
}

/// Whether a side's one-sided writes all come after the other side's last
/// write (the other side wrote something).
fn past(side: &OneSided, other_last: Option<u64>) -> bool {
    match (side.runs.first(), other_last) {
        (Some(first), Some(last)) => first[0] > last,
        _ => false,
    }
}

impl OneSided {
    /// "indices 4096..4103 and 5000 (9 elements)".
    pub fn describe(&self) -> String {
        let runs: Vec<String> = self
            .runs
            .iter()
            .map(|[a, b]| {
                if a == b {
                    a.to_string()
                } else {
                    format!("{a}..{b}")
                }
            })
            .collect();
        let listed: u64 = self.runs.iter().map(|[a, b]| b - a + 1).sum();
        let more = if listed < self.count { ", ..." } else { "" };
        format!(
            "indices {}{more} ({} element{})",
            runs.join(", "),
            self.count,
            if self.count == 1 { "" } else { "s" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ditto_protocol::DType;

    fn f32s(v: &[f32]) -> Array {
        Array {
            dtype: DType::F32,
            bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    #[test]
    fn elements_neither_kernel_changed_are_outside_the_comparison() {
        // A caching allocator's segment: the kernel writes [0, 2); the rest
        // is another tensor's bytes, different between the runs.
        let (rb, ra) = (f32s(&[0.0, 0.0, 7.0, 7.0]), f32s(&[1.0, 2.0, 7.0, 7.0]));
        let (ob, oa) = (
            f32s(&[0.0, 0.0, 9.0, f32::NAN]),
            f32s(&[1.0, 2.0, 9.0, f32::NAN]),
        );
        let (stats, set) =
            compare_written(&rb, &ra, &ob, &oa, &CompareOptions::default(), "arg 1").unwrap();
        assert!(stats.matches(), "{stats:?}");
        assert_eq!((set.compared, set.untouched), (2, 2));
        assert_eq!(stats.total_elements, 4);
        assert_eq!(
            stats.nonfinite.optimized_nan, 0,
            "the untouched NaN is not compared"
        );
    }

    #[test]
    fn a_write_past_what_the_reference_wrote_is_named_with_its_indices() {
        let before = f32s(&[0.0; 8]);
        let ra = f32s(&[1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
        let oa = f32s(&[1.0, 1.0, 1.0, 1.0, 5.0, 5.0, 0.0, 5.0]);
        let (stats, set) = compare_written(
            &before,
            &ra,
            &before,
            &oa,
            &CompareOptions::default(),
            "arg 1",
        )
        .unwrap();
        assert_eq!(stats.mismatched_elements, 3);
        assert_eq!(set.only_optimized.count, 3);
        assert_eq!(set.only_optimized.runs, vec![[4, 5], [7, 7]]);
        assert!(set.only_optimized.past_the_other);
        assert_eq!(
            set.only_optimized.describe(),
            "indices 4..5, 7 (3 elements)"
        );
        assert_eq!(set.only_reference, OneSided::default());
        assert_eq!((set.compared, set.untouched), (4, 1));
    }

    #[test]
    fn a_missing_tail_write_and_a_wrong_value_are_both_mismatches() {
        let before = f32s(&[0.0; 4]);
        let ra = f32s(&[1.0, 2.0, 3.0, 4.0]);
        // The optimized kernel skips the tail and gets one value wrong.
        let oa = f32s(&[1.0, 2.5, 3.0, 0.0]);
        let (stats, set) = compare_written(
            &before,
            &ra,
            &before,
            &oa,
            &CompareOptions::default(),
            "arg 1",
        )
        .unwrap();
        assert_eq!(stats.mismatched_elements, 2);
        assert_eq!(set.only_reference.runs, vec![[3, 3]]);
        assert!(
            set.only_reference.past_the_other,
            "the optimized kernel stopped at index 2: the reference's write at 3 lies past it"
        );
        assert_eq!(stats.max_abs_diff_index, 1);
    }

    #[test]
    fn a_before_image_of_another_length_is_an_error() {
        let e = compare_written(
            &f32s(&[0.0]),
            &f32s(&[1.0, 2.0]),
            &f32s(&[0.0, 0.0]),
            &f32s(&[1.0, 2.0]),
            &CompareOptions::default(),
            "dispatch 0, arg 1",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("the reference run's image before the kernel"),
            "{e}"
        );
    }
}
