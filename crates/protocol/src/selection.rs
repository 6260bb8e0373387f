//! What the user asked to capture, as both sides spell it: which dispatches
//! (`--dispatch` / `DITTO_DISPATCH`) and which arguments when
//! (`--capture` / `DITTO_CAPTURE`). The CLI parses it to reject a bad
//! flag before anything runs; the tool parses the same text from its
//! environment. Owns the syntax and the membership test only; it never
//! reads the environment.
//!
//! Syntax (indices are the real dispatch indices, from 0, counted over the
//! dispatches of the matched kernel in one process):
//! `all` | `N` | `N..M` (N through M, both included) | `N..` (N and every
//! later one) | a comma-separated list of those, e.g. `0,3..5,9..`.

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
    pub fn parse(text: &str) -> Result<DispatchSelection, String> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("all") {
            return Ok(DispatchSelection::All);
        }
        let hint = "write all, N, N..M (both included), N.. or a list like 0,3..5";
        let number = |s: &str, part: &str| {
            s.trim().parse::<u64>().map_err(|_| {
                format!("dispatch selection `{text}`: `{part}` is not a dispatch index; {hint}")
            })
        };
        let mut ranges = Vec::new();
        for part in text.split(',') {
            let part = part.trim();
            if part.is_empty() {
                return Err(format!(
                    "dispatch selection `{text}` has an empty item; {hint}"
                ));
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
                        return Err(format!(
                            "dispatch selection `{text}`: `{part}` ends before it starts; {hint}"
                        ));
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

/// `--capture`: a comma-separated list of `outputs` (the default: non-const
/// pointers, after the kernel ran), `inputs` (const pointers, before it
/// ran: after all earlier work in the queue completed), `written` (the
/// outputs, both before and after: compared by what the kernels wrote)
/// and `all` (every pointer, both before and after).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaptureSet {
    pub inputs: bool,
    pub outputs: bool,
    pub written: bool,
    pub all: bool,
}

impl Default for CaptureSet {
    fn default() -> Self {
        CaptureSet {
            inputs: false,
            outputs: true,
            written: false,
            all: false,
        }
    }
}

impl CaptureSet {
    pub fn parse(text: &str) -> Result<CaptureSet, String> {
        let mut set = CaptureSet {
            inputs: false,
            outputs: false,
            written: false,
            all: false,
        };
        for part in text.split(',') {
            match part.trim().to_ascii_lowercase().as_str() {
                "inputs" => set.inputs = true,
                "outputs" => set.outputs = true,
                "all" => set.all = true,
                "written" => set.written = true,
                other => {
                    return Err(format!(
                        "capture `{text}`: `{other}` is not one of inputs, outputs, written, all; \
                         write e.g. outputs (the default), inputs,outputs, written or all"
                    ));
                }
            }
        }
        Ok(set)
    }

    /// Whether a snapshot is taken before the kernel runs.
    pub fn takes_inputs(&self) -> bool {
        self.inputs || self.written || self.all
    }

    /// Whether a pointer argument (const or not) is captured in `phase`.
    pub fn captures(&self, phase: crate::messages::Phase, is_const: bool) -> bool {
        match phase {
            crate::messages::Phase::Before => {
                self.all || (self.inputs && is_const) || (self.written && !is_const)
            }
            crate::messages::Phase::After => {
                self.all || ((self.outputs || self.written) && !is_const)
            }
        }
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
        let d = CaptureSet::default();
        assert_eq!(d, CaptureSet::parse("outputs").unwrap());
        assert!(!d.takes_inputs());
        assert!(CaptureSet::parse("inputs").unwrap().takes_inputs());
        assert!(CaptureSet::parse("all").unwrap().takes_inputs());
        let e = CaptureSet::parse("inputs,everything").unwrap_err();
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
            let e = DispatchSelection::parse(text).unwrap_err();
            assert!(e.contains(item), "{text}: {e}");
            assert!(e.contains("N..M"), "{text}: says how to write it: {e}");
        }
    }
}
