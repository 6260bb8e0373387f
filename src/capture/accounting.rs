//! The ledger of a connection's matched dispatches: which indices have had their
//! fate reported to the collector (a Dispatch sent, or a Missed), the
//! misses waiting to be sent (consecutive ones with the same reason merged
//! into one run), and why capture stopped, if it did. At shutdown it turns
//! every index never reported into a Missed: `selection` when `--dispatch`
//! did not choose it, else the reason capture stopped. Memory stays
//! constant while dispatches are reported in order (one run of indices).
//! Owns no connection: [`send_queued`] sends what the ledger queued over
//! the backend's.

use super::client::{ClientError, CollectorConnection};
use crate::lifecycle::Lifecycle;
use crate::log::log_debug;
use ditto_protocol::{DispatchSelection, MissReason, Missed, Phase};
use std::collections::BTreeMap;

/// A set of u64 kept as disjoint half-open runs `start → end`.
#[derive(Debug, Default)]
struct Runs(BTreeMap<u64, u64>);

impl Runs {
    fn insert(&mut self, start: u64, end: u64) {
        let (mut start, mut end) = (start, end);
        // Merge with a run that ends at or after `start` and begins before `end`.
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

    /// The runs of `0..total` not in the set.
    fn gaps(&self, total: u64) -> Vec<(u64, u64)> {
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
}

/// Why capture stopped, and at which dispatch, for the later ones.
#[derive(Debug, Clone)]
struct Stop {
    reason: MissReason,
    detail: String,
}

#[derive(Debug, Default)]
pub struct Ledger {
    reported: Runs,
    queued: Vec<Missed>,
    stop: Option<Stop>,
}

impl Ledger {
    /// A Dispatch (its After part) went to the collector: it reports its
    /// own failures from there.
    pub fn sent(&mut self, index: u64) {
        self.reported.insert(index, index + 1);
    }

    /// Dispatch `index` will not be captured.
    pub fn missed(&mut self, index: u64, reason: MissReason, detail: String) {
        self.reported.insert(index, index + 1);
        self.queue(index, 1, reason, detail);
    }

    /// One argument of dispatch `index` will not be captured; the rest is.
    pub fn missed_buffer(&mut self, index: u64, arg: u32, phase: Phase, detail: String) {
        self.queued.push(Missed {
            index,
            count: 1,
            arg: Some(arg),
            phase,
            reason: MissReason::Error,
            detail,
        });
    }

    fn queue(&mut self, index: u64, count: u64, reason: MissReason, detail: String) {
        if let Some(last) = self.queued.last_mut()
            && last.arg.is_none()
            && last.reason == reason
            && last.detail == detail
            && last.index + last.count == index
        {
            last.count += count;
            return;
        }
        self.queued.push(Missed {
            index,
            count,
            arg: None,
            phase: Phase::After,
            reason,
            detail,
        });
    }

    /// Dispatch `index` ran uncaptured (`outcome` says how) because of
    /// `detail`, and capture stops for the same reason: its miss, and the
    /// reason every later dispatch not reported is missed for.
    pub fn failed(&mut self, index: u64, reason: MissReason, detail: &str, outcome: &str) {
        self.missed(index, reason, format!("{detail}; {outcome}"));
        self.stopped(
            reason,
            format!("capture stopped at dispatch {index}: {detail}"),
        );
    }

    /// Capture stopped (the first failure only is kept): every dispatch
    /// not reported by the end is missed for this reason.
    pub fn stopped(&mut self, reason: MissReason, detail: String) {
        if self.stop.is_none() {
            self.stop = Some(Stop { reason, detail });
        }
    }

    /// The misses to send now, oldest first.
    pub fn take_queued(&mut self) -> Vec<Missed> {
        std::mem::take(&mut self.queued)
    }

    /// At shutdown: every index of `0..matched` never reported, as runs of
    /// misses (`selection` where `selection` skips it, else why capture
    /// stopped, else an error saying the dispatch was never handed to the
    /// worker), queued after what is still queued.
    pub fn close(&mut self, matched: u64, selection: &DispatchSelection) {
        for (start, end) in self.reported.gaps(matched) {
            for index in start..end {
                let (reason, detail) = if !selection.selects(index) {
                    (
                        MissReason::Selection,
                        "not chosen by --dispatch (DITTO_DISPATCH)".to_string(),
                    )
                } else if let Some(stop) = &self.stop {
                    (stop.reason, stop.detail.clone())
                } else {
                    (
                        MissReason::Error,
                        "the dispatch ran uncaptured (it was submitted while the tool was \
                         shutting down)"
                            .to_string(),
                    )
                };
                self.queue(index, 1, reason, detail);
            }
            self.reported.insert(start, end);
        }
    }
}

/// Dispatch `index` ran uncaptured (`outcome`) because the connection
/// failed with `error`: it is missed (`timeout` when its Ack did not come
/// in time), capture fails open for the same reason, and the miss is sent
/// while the connection's frames are intact.
pub fn fail_on(
    connection: &mut Option<CollectorConnection>,
    ledger: &mut Ledger,
    lifecycle: &Lifecycle,
    index: u64,
    error: ClientError,
    outcome: &str,
) {
    let reason = match error {
        ClientError::Timeout { .. } => MissReason::Timeout,
        _ => MissReason::Error,
    };
    let detail = error.to_string();
    ledger.failed(index, reason, &detail, outcome);
    lifecycle.fail(&detail);
    send_queued(connection, ledger, lifecycle);
}

/// Sends the ledger's queued misses, oldest first, while the connection
/// can carry them (best effort once capture has stopped). A failed write
/// while capturing fails open, and is why capture stopped.
pub fn send_queued(
    connection: &mut Option<CollectorConnection>,
    ledger: &mut Ledger,
    lifecycle: &Lifecycle,
) {
    let queued = ledger.take_queued();
    let Some(conn) = connection.as_mut() else {
        return;
    };
    for missed in queued {
        if !conn.writable() {
            return;
        }
        if let Err(e) = conn.missed(&missed) {
            if lifecycle.is_capturing() {
                ledger.stopped(MissReason::Error, e.to_string());
                lifecycle.fail(&e.to_string());
            } else {
                log_debug!("could not report missed dispatch {}: {e}", missed.index);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(ledger: &mut Ledger) -> Vec<(u64, u64, MissReason)> {
        ledger
            .take_queued()
            .into_iter()
            .map(|m| (m.index, m.count, m.reason))
            .collect()
    }

    #[test]
    fn unreported_indices_become_selection_or_stop_runs_at_close() {
        let mut l = Ledger::default();
        let selection = DispatchSelection::parse("1,3..").unwrap();
        l.sent(1);
        l.sent(3);
        l.missed(4, MissReason::Timeout, "no Ack".into());
        l.stopped(MissReason::Timeout, "capture stopped at dispatch 4".into());
        assert_eq!(runs(&mut l), vec![(4, 1, MissReason::Timeout)]);
        l.close(8, &selection);
        assert_eq!(
            runs(&mut l),
            vec![
                (0, 1, MissReason::Selection),
                (2, 1, MissReason::Selection),
                (5, 3, MissReason::Timeout),
            ]
        );
        // Closing again reports nothing twice.
        l.close(8, &selection);
        assert!(l.take_queued().is_empty());
    }

    #[test]
    fn reported_runs_merge_so_in_order_reporting_keeps_one_run() {
        let mut l = Ledger::default();
        for i in (0..1000).rev() {
            l.sent(i);
        }
        assert_eq!(l.reported.0.len(), 1);
        assert_eq!(l.reported.gaps(1002), vec![(1000, 1002)]);
        l.sent(1001);
        assert_eq!(l.reported.gaps(1002), vec![(1000, 1001)]);
    }

    #[test]
    fn buffer_misses_do_not_account_the_dispatch() {
        let mut l = Ledger::default();
        l.missed_buffer(0, 2, Phase::After, "not exported".into());
        l.close(1, &DispatchSelection::All);
        let q = l.take_queued();
        assert_eq!(q.len(), 2);
        assert_eq!((q[0].arg, q[0].reason), (Some(2), MissReason::Error));
        assert_eq!((q[1].arg, q[1].index, q[1].count), (None, 0, 1));
    }
}
