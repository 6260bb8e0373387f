//! What the user asked to capture, as both sides spell it: which dispatches
//! (`--dispatch` / `DITTO_DISPATCH`) and which arguments when
//! (`--capture` / `DITTO_CAPTURE`). The CLI parses it to reject a bad
//! flag before anything runs and carries the parsed value; the tool
//! parses the text form ([`std::fmt::Display`], written into its
//! environment by the CLI) back to the same value. Owns the syntax, the
//! text form and the membership test only; it never reads the environment.
//!
//! Syntax (indices are the real dispatch indices, from 0, counted over the
//! dispatches of the matched kernel in one process):
//! `all` | `N` | `N..M` (N through M, both included) | `N..` (N and every
//! later one) | a comma-separated list of those, e.g. `0,3..5,9..`.

use std::fmt;

/// The hint every dispatch-selection error ends with.
const SELECTION_HINT: &str = "write all, N, N..M (both included), N.. or a list like 0,3..5";

/// Why a `--dispatch` selection does not parse; each says how to write it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    #[error("dispatch selection `{text}`: `{part}` is not a dispatch index; {SELECTION_HINT}")]
    NotAnIndex { text: String, part: String },
    #[error("dispatch selection `{text}` has an empty item; {SELECTION_HINT}")]
    EmptyItem { text: String },
    #[error("dispatch selection `{text}`: `{part}` ends before it starts; {SELECTION_HINT}")]
    EndsBeforeStart { text: String, part: String },
}

/// Why a `--capture` list does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "capture `{text}`: `{word}` is not one of inputs, outputs, written, all, replay, replay-all; \
     write e.g. outputs (the default), inputs,outputs, written, all or replay"
)]
pub struct CaptureError {
    pub text: String,
    pub word: String,
}

/// A set of dispatch indices. Membership never allocates (the tool tests
/// it on the application's submitting thread).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum DispatchSelection {
    #[default]
    All,
    /// Inclusive ranges; `u64::MAX` as end means "and every later one".
    Ranges(Vec<(u64, u64)>),
}

impl DispatchSelection {
    /// Parses the syntax above; the error says what is wrong and how to write it.
    pub fn parse(text: &str) -> Result<DispatchSelection, SelectionError> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("all") {
            return Ok(DispatchSelection::All);
        }
        let number = |s: &str, part: &str| {
            s.trim()
                .parse::<u64>()
                .map_err(|_| SelectionError::NotAnIndex {
                    text: text.to_string(),
                    part: part.to_string(),
                })
        };
        let mut ranges = Vec::new();
        for part in text.split(',') {
            let part = part.trim();
            if part.is_empty() {
                return Err(SelectionError::EmptyItem {
                    text: text.to_string(),
                });
            }
            let range = match part.split_once("..") {
                None => {
                    let n = number(part, part)?;
                    (n, n)
                }
                Some((start, "")) => (number(start, part)?, u64::MAX),
                Some((start, end)) => {
                    let (start, end) = (number(start, part)?, number(end, part)?);
                    if end < start {
                        return Err(SelectionError::EndsBeforeStart {
                            text: text.to_string(),
                            part: part.to_string(),
                        });
                    }
                    (start, end)
                }
            };
            ranges.push(range);
        }
        Ok(DispatchSelection::Ranges(ranges))
    }

    /// Whether the dispatch with this index is captured.
    pub fn selects(&self, index: u64) -> bool {
        match self {
            DispatchSelection::All => true,
            DispatchSelection::Ranges(ranges) => ranges
                .iter()
                .any(|&(start, end)| start <= index && index <= end),
        }
    }
}

/// The text form, which [`DispatchSelection::parse`] reads back to the
/// same selection: `all`, or items `N`, `N..M`, `N..` joined by commas.
impl fmt::Display for DispatchSelection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ranges = match self {
            DispatchSelection::All => return f.write_str("all"),
            DispatchSelection::Ranges(ranges) => ranges,
        };
        for (i, &(start, end)) in ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match end {
                u64::MAX => write!(f, "{start}..")?,
                _ if end == start => write!(f, "{start}")?,
                _ => write!(f, "{start}..{end}")?,
            }
        }
        Ok(())
    }
}

/// `--capture`: a comma-separated list of `outputs` (the default: non-const
/// pointers, after the kernel ran), `inputs` (const pointers, before it
/// ran: after all earlier work in the queue completed), `written` (the
/// outputs, both before and after: compared by what the kernels wrote)
/// and `all` (every pointer, both before and after); `replay` (the
/// outputs, plus what `ditto replay` needs to run the dispatch again: the
/// whole allocation each pointer argument reaches and the code object's
/// module variables, before the kernel; the kernel-argument bytes, the
/// launch and the code object) and `replay-all` (the same with every live
/// allocation the tool tracks, for kernels that follow pointers stored in
/// memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaptureSet {
    pub inputs: bool,
    pub outputs: bool,
    pub written: bool,
    pub all: bool,
    pub replay: Replay,
}

/// How much of the memory before the kernel a replay capture takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Replay {
    /// No replay capture.
    #[default]
    Off,
    /// The allocations the pointer arguments reach (`replay`).
    Arguments,
    /// Every live allocation the tool tracks (`replay-all`).
    AllAllocations,
}

impl Default for CaptureSet {
    fn default() -> Self {
        CaptureSet {
            inputs: false,
            outputs: true,
            written: false,
            all: false,
            replay: Replay::Off,
        }
    }
}

impl Replay {
    /// The wider of the two.
    fn max_with(self, other: Replay) -> Replay {
        match (self, other) {
            (Replay::AllAllocations, _) | (_, Replay::AllAllocations) => Replay::AllAllocations,
            (Replay::Arguments, _) | (_, Replay::Arguments) => Replay::Arguments,
            _ => Replay::Off,
        }
    }
}

impl CaptureSet {
    pub fn parse(text: &str) -> Result<CaptureSet, CaptureError> {
        let mut set = CaptureSet {
            inputs: false,
            outputs: false,
            written: false,
            all: false,
            replay: Replay::Off,
        };
        for part in text.split(',') {
            match part.trim().to_ascii_lowercase().as_str() {
                "inputs" => set.inputs = true,
                "outputs" => set.outputs = true,
                "all" => set.all = true,
                "written" => set.written = true,
                // A replay also checks the outputs the application produced.
                "replay" => {
                    set.outputs = true;
                    set.replay = set.replay.max_with(Replay::Arguments);
                }
                "replay-all" => {
                    set.outputs = true;
                    set.replay = Replay::AllAllocations;
                }
                other => {
                    return Err(CaptureError {
                        text: text.to_string(),
                        word: other.to_string(),
                    });
                }
            }
        }
        Ok(set)
    }

    /// Whether a snapshot is taken before the kernel runs.
    pub fn takes_inputs(&self) -> bool {
        self.inputs || self.written || self.all || self.replays()
    }

    /// Whether the dispatch is captured so that `ditto replay` can run it.
    pub fn replays(&self) -> bool {
        self.replay != Replay::Off
    }

    /// Whether a pointer argument (const or not) is captured in `phase`
    /// (a replay capture's images are taken apart from the arguments).
    pub fn captures(&self, phase: crate::messages::Phase, is_const: bool) -> bool {
        match phase {
            crate::messages::Phase::Before => {
                self.all || (self.inputs && is_const) || (self.written && !is_const)
            }
            crate::messages::Phase::After => {
                self.all || ((self.outputs || self.written) && !is_const)
            }
            // Replay images are whole allocations, not arguments.
            crate::messages::Phase::Replay => false,
        }
    }
}

/// The text form, which [`CaptureSet::parse`] reads back to the same set:
/// the words set, in the order inputs, outputs, written, all, replay.
impl fmt::Display for CaptureSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let words = [
            (self.inputs, "inputs"),
            (self.outputs, "outputs"),
            (self.written, "written"),
            (self.all, "all"),
            (self.replay == Replay::Arguments, "replay"),
            (self.replay == Replay::AllAllocations, "replay-all"),
        ];
        let set: Vec<&str> = words
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, w)| *w)
            .collect();
        f.write_str(&set.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::Phase;

    #[test]
    fn capture_sets_pick_arguments_by_constness_and_phase() {
        // (phase, const) in the order: before const, before mutable, after const, after mutable.
        let table = |text: &str| {
            let c = CaptureSet::parse(text).unwrap();
            [
                c.captures(Phase::Before, true),
                c.captures(Phase::Before, false),
                c.captures(Phase::After, true),
                c.captures(Phase::After, false),
            ]
        };
        assert_eq!(table("outputs"), [false, false, false, true]);
        assert_eq!(table("inputs"), [true, false, false, false]);
        assert_eq!(table("inputs, outputs"), [true, false, false, true]);
        assert_eq!(table("all"), [true, true, true, true]);
        assert_eq!(table("written"), [false, true, false, true]);
        assert!(CaptureSet::parse("written").unwrap().takes_inputs());
        // A replay capture takes the outputs too, and memory before the kernel.
        let r = CaptureSet::parse("replay").unwrap();
        assert_eq!(
            (r.outputs, r.replay, r.takes_inputs()),
            (true, Replay::Arguments, true)
        );
        assert_eq!(table("replay"), [false, false, false, true]);
        let all = CaptureSet::parse("replay,replay-all").unwrap();
        assert_eq!(all.replay, Replay::AllAllocations);
        for text in ["replay", "replay-all", "inputs,replay", "all,replay-all"] {
            let set = CaptureSet::parse(text).unwrap();
            assert_eq!(CaptureSet::parse(&set.to_string()).unwrap(), set, "{text}");
        }
        let d = CaptureSet::default();
        assert_eq!(d, CaptureSet::parse("outputs").unwrap());
        assert!(!d.takes_inputs());
        assert!(!d.replays());
        assert!(CaptureSet::parse("inputs").unwrap().takes_inputs());
        assert!(CaptureSet::parse("all").unwrap().takes_inputs());
        let e = CaptureSet::parse("inputs,everything")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`everything`") && e.contains("inputs,outputs"),
            "{e}"
        );
    }

    fn selected(text: &str, upto: u64) -> Vec<u64> {
        let s = DispatchSelection::parse(text).unwrap();
        (0..upto).filter(|&i| s.selects(i)).collect()
    }

    #[test]
    fn every_form_selects_exactly_its_indices() {
        assert_eq!(selected("all", 4), vec![0, 1, 2, 3]);
        assert_eq!(selected(" ALL ", 2), vec![0, 1]);
        assert_eq!(selected("1", 4), vec![1]);
        assert_eq!(selected("2..4", 8), vec![2, 3, 4]);
        assert_eq!(selected("5..", 8), vec![5, 6, 7]);
        assert_eq!(selected("0, 3..4,6", 8), vec![0, 3, 4, 6]);
        assert_eq!(selected("3..3", 8), vec![3]);
    }

    #[test]
    fn malformed_selections_are_rejected_with_the_offending_item() {
        for (text, item) in [
            ("x", "`x`"),
            ("1,,2", "empty item"),
            ("4..2", "`4..2` ends before"),
            ("..3", "`..3`"),
            ("1..b", "`1..b`"),
            ("-1", "`-1`"),
            ("", "empty item"),
        ] {
            let e = DispatchSelection::parse(text).unwrap_err().to_string();
            assert!(e.contains(item), "{text}: {e}");
            assert!(e.contains("N..M"), "{text}: says how to write it: {e}");
        }
    }

    #[test]
    fn the_text_forms_read_back_to_the_same_values() {
        for text in ["all", "1", "2..4", "5..", "0, 3..4,6,9..", "3..3"] {
            let s = DispatchSelection::parse(text).unwrap();
            assert_eq!(DispatchSelection::parse(&s.to_string()), Ok(s.clone()));
        }
        assert_eq!(
            DispatchSelection::parse("0, 3..4,6..6,9..")
                .unwrap()
                .to_string(),
            "0,3..4,6,9.."
        );
        for text in ["outputs", "inputs, outputs", "written", "all", "ALL,inputs"] {
            let c = CaptureSet::parse(text).unwrap();
            assert_eq!(CaptureSet::parse(&c.to_string()), Ok(c));
        }
        assert_eq!(
            CaptureSet::parse("outputs, inputs").unwrap().to_string(),
            "inputs,outputs"
        );
    }
}
