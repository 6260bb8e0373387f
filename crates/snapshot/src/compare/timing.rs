//! Kernel times beside the verdict: the runtime's duration of each compared
//! dispatch on both sides (`duration_ns` in the manifests), their medians
//! and the speedup, said in one line ("optimized 1.84x faster: 2.10 ms ->
//! 1.14 ms, median of 3 dispatches"), or plainly that the runtime gave no
//! times. Owns the arithmetic and that line; never affects the verdict.

use serde::Serialize;

/// One compared pair of dispatches and their kernel times.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DispatchTime {
    pub rank: u32,
    pub dispatch: u64,
    pub reference_ns: Option<u64>,
    pub optimized_ns: Option<u64>,
}

/// The times of every compared pair, in comparison order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Timing {
    pub dispatches: Vec<DispatchTime>,
    /// What the second side is called in the line: `optimized` unless set
    /// (`ditto replay` says `replay`).
    pub second: Option<&'static str>,
}

/// Medians over the pairs timed on both sides.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimingSummary {
    pub reference_median_ns: u64,
    pub optimized_median_ns: u64,
    /// Pairs timed on both sides (the medians' sample).
    pub timed: usize,
    /// reference / optimized: above 1, the optimized kernel is faster.
    pub speedup: f64,
}

impl Timing {
    /// The medians and speedup, when at least one pair has both times.
    pub fn summary(&self) -> Option<TimingSummary> {
        let (mut reference, mut optimized): (Vec<u64>, Vec<u64>) = self
            .dispatches
            .iter()
            .filter_map(|d| Some((d.reference_ns?, d.optimized_ns?)))
            .unzip();
        if reference.is_empty() {
            return None;
        }
        let (r, o) = (median(&mut reference), median(&mut optimized));
        Some(TimingSummary {
            reference_median_ns: r,
            optimized_median_ns: o,
            timed: reference.len(),
            speedup: if o == 0 {
                f64::INFINITY
            } else {
                r as f64 / o as f64
            },
        })
    }

    /// "optimized 1.84x faster: 2.10 ms -> 1.14 ms, median of 3
    /// dispatches", or why there is nothing to say.
    pub fn line(&self) -> String {
        let n = self.dispatches.len();
        let second = self.second.unwrap_or("optimized");
        let Some(s) = self.summary() else {
            let untimed = |side: fn(&DispatchTime) -> Option<u64>| {
                self.dispatches.iter().all(|d| side(d).is_none())
            };
            let which = match (untimed(|d| d.reference_ns), untimed(|d| d.optimized_ns)) {
                (true, true) => "either run",
                (true, false) => "the reference run",
                _ => &format!("the {second} run"),
            };
            return format!(
                "no kernel times: the runtime gave none for {which} (duration_ns is null in its \
                 manifest), so the speedup is unknown"
            );
        };
        let verdict = if (s.speedup - 1.0).abs() < 0.005 {
            format!("{second} as fast (1.00x)")
        } else if s.speedup > 1.0 {
            format!("{second} {:.2}x faster", s.speedup)
        } else {
            format!("{second} {:.2}x slower", 1.0 / s.speedup)
        };
        let sample = if s.timed == n {
            format!("median of {n} dispatch{}", if n == 1 { "" } else { "es" })
        } else {
            format!(
                "median of the {} of {n} dispatches timed on both sides",
                s.timed
            )
        };
        format!(
            "{verdict}: {} -> {}, {sample}",
            human_duration(s.reference_median_ns),
            human_duration(s.optimized_median_ns)
        )
    }
}

/// The median (the mean of the two middle values for an even count).
fn median(values: &mut [u64]) -> u64 {
    values.sort_unstable();
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        let (a, b) = (values[n / 2 - 1], values[n / 2]);
        a / 2 + b / 2 + (a % 2 + b % 2) / 2
    }
}

/// "850 ns", "12.3 µs", "2.10 ms", "1.23 s".
pub fn human_duration(ns: u64) -> String {
    let x = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} µs", x / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2} ms", x / 1e6)
    } else {
        format!("{:.2} s", x / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(pairs: &[(Option<u64>, Option<u64>)]) -> Timing {
        Timing {
            dispatches: pairs
                .iter()
                .enumerate()
                .map(|(i, &(r, o))| DispatchTime {
                    rank: 0,
                    dispatch: i as u64,
                    reference_ns: r,
                    optimized_ns: o,
                })
                .collect(),
            second: None,
        }
    }

    #[test]
    fn the_line_gives_both_medians_and_the_speedup() {
        let t = timing(&[
            (Some(2_100_000), Some(1_140_000)),
            (Some(2_000_000), Some(1_100_000)),
            (Some(2_500_000), Some(1_200_000)),
        ]);
        let s = t.summary().unwrap();
        assert_eq!(
            (s.reference_median_ns, s.optimized_median_ns),
            (2_100_000, 1_140_000)
        );
        assert_eq!(
            t.line(),
            "optimized 1.84x faster: 2.10 ms -> 1.14 ms, median of 3 dispatches"
        );
        let slower = timing(&[(Some(1_000), Some(1_500))]);
        assert_eq!(
            slower.line(),
            "optimized 1.50x slower: 1.0 µs -> 1.5 µs, median of 1 dispatch"
        );
        assert_eq!(
            timing(&[(Some(700), Some(700))]).line(),
            "optimized as fast (1.00x): 700 ns -> 700 ns, median of 1 dispatch"
        );
        // `ditto replay` names its side.
        let replayed = Timing {
            second: Some("replay"),
            ..timing(&[(Some(1_000), Some(1_500))])
        };
        assert_eq!(
            replayed.line(),
            "replay 1.50x slower: 1.0 µs -> 1.5 µs, median of 1 dispatch"
        );
        let untimed = Timing {
            second: Some("replay"),
            ..timing(&[(Some(1_000), None)])
        };
        assert!(
            untimed.line().contains("for the replay run"),
            "{}",
            untimed.line()
        );
    }

    #[test]
    fn an_even_count_takes_the_mean_of_the_middle_two_without_overflow() {
        let t = timing(&[(Some(u64::MAX), Some(3)), (Some(u64::MAX - 2), Some(5))]);
        let s = t.summary().unwrap();
        assert_eq!(s.reference_median_ns, u64::MAX - 1);
        assert_eq!(s.optimized_median_ns, 4);
    }

    #[test]
    fn missing_times_are_said_plainly_and_partial_ones_counted() {
        assert_eq!(
            timing(&[(None, None)]).line(),
            "no kernel times: the runtime gave none for either run (duration_ns is null in its \
             manifest), so the speedup is unknown"
        );
        assert!(
            timing(&[(None, Some(5))])
                .line()
                .contains("none for the reference run")
        );
        assert!(
            timing(&[(Some(5), None)])
                .line()
                .contains("none for the optimized run")
        );
        assert_eq!(
            timing(&[(Some(4_000), Some(2_000)), (None, Some(1))]).line(),
            "optimized 2.00x faster: 4.0 µs -> 2.0 µs, median of the 1 of 2 dispatches timed on \
             both sides"
        );
    }
}
