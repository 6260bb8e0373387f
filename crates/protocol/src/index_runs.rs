//! A set of dispatch indices kept as disjoint half-open runs `start..end`:
//! what a tool has reported, or a collector has accounted, of a
//! connection's matched dispatches. Indices reported in order stay one run,
//! so memory is constant however many dispatches a process makes. Owns
//! the set and its gaps; what the indices mean is the caller's.

use std::collections::BTreeMap;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct IndexRuns(BTreeMap<u64, u64>);

impl IndexRuns {
    /// Adds `start..end` (saturating: a run never wraps past u64::MAX).
    pub fn insert(&mut self, start: u64, end: u64) {
        if end <= start {
            return;
        }
        let (mut start, mut end) = (start, end);
        // Merge with a run that ends at or after `start` and begins before it.
        if let Some((&s, &e)) = self.0.range(..=start).next_back()
            && e >= start
        {
            start = s;
            end = end.max(e);
            self.0.remove(&s);
        }
        while let Some((&s, &e)) = self.0.range(start..=end).next() {
            end = end.max(e);
            self.0.remove(&s);
        }
        self.0.insert(start, end);
    }

    /// The runs of `0..total` not in the set, in order.
    pub fn gaps(&self, total: u64) -> Vec<(u64, u64)> {
        let mut gaps = Vec::new();
        let mut at = 0;
        for (&s, &e) in &self.0 {
            if s >= total {
                break;
            }
            if s > at {
                gaps.push((at, s));
            }
            at = at.max(e);
        }
        if at < total {
            gaps.push((at, total));
        }
        gaps
    }

    /// How many runs the set holds.
    pub fn runs(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_merge_and_gaps_are_what_is_left_of_the_range() {
        let mut r = IndexRuns::default();
        for i in (0..1000).rev() {
            r.insert(i, i + 1);
        }
        assert_eq!(r.runs(), 1);
        r.insert(1001, 1002);
        r.insert(2000, 2005);
        assert_eq!(r.gaps(2010), vec![(1000, 1001), (1002, 2000), (2005, 2010)]);
        // A run bridging the two first runs merges them.
        r.insert(999, 1001);
        assert_eq!(r.runs(), 2);
        assert_eq!(r.gaps(1002), vec![]);
        // Empty and reversed runs add nothing.
        r.insert(5000, 5000);
        r.insert(6000, 10);
        assert_eq!(r.gaps(7000), vec![(1002, 2000), (2005, 7000)]);
    }
}
