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
use crate::log::{log_debug, log_warn};
use ditto_protocol::{DispatchSelection, Goodbye, IndexRuns, MissReason, Missed, Phase};

/// Why capture stopped, and at which dispatch, for the later ones.
#[derive(Debug, Clone)]
struct Stop {
    reason: MissReason,
    detail: String,
}

#[derive(Debug, Default)]
pub struct Ledger {
    reported: IndexRuns,
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

    /// Misses taken but not sent (the connection could not take them):
    /// back at the front of the queue, for the next send.
    fn requeue(&mut self, unsent: Vec<Missed>) {
        let later = std::mem::replace(&mut self.queued, unsent);
        self.queued.extend(later);
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
/// can carry them. The first that cannot be sent stops it: it and the
/// later ones stay queued for the next call (the Goodbye's, when a slow
/// collector may have caught up). A failed write while capturing fails
/// open, and is why capture stopped.
pub fn send_queued(
    connection: &mut Option<CollectorConnection>,
    ledger: &mut Ledger,
    lifecycle: &Lifecycle,
) {
    let Some(conn) = connection.as_mut() else {
        return;
    };
    let mut queued = ledger.take_queued().into_iter();
    while let Some(missed) = queued.next() {
        let sent = if conn.writable() {
            conn.missed(&missed)
        } else {
            Err(ClientError::Protocol("the connection is broken".into()))
        };
        if let Err(e) = sent {
            if lifecycle.is_capturing() {
                ledger.stopped(MissReason::Error, e.to_string());
                lifecycle.fail(&e.to_string());
            } else {
                log_debug!("could not report missed dispatch {} yet: {e}", missed.index);
            }
            let mut unsent = vec![missed];
            unsent.extend(queued);
            ledger.requeue(unsent);
            return;
        }
    }
}

/// Says Goodbye after the last misses. When it cannot, the collector
/// finds this process's accounting incomplete and marks the snapshot so;
/// a warning only if capture was still on (else the failure that stopped
/// it was the process's one warning).
pub fn say_goodbye(
    connection: &mut Option<CollectorConnection>,
    ledger: &mut Ledger,
    lifecycle: &Lifecycle,
    goodbye: &Goodbye,
) {
    send_queued(connection, ledger, lifecycle);
    let Some(conn) = connection.as_mut() else {
        return;
    };
    let unsent = ledger.queued.len();
    let said = if unsent > 0 {
        Err(format!(
            "{unsent} report(s) of dispatches not captured could not be sent"
        ))
    } else {
        conn.goodbye(goodbye).map_err(|e| e.to_string())
    };
    if let Err(e) = said {
        if lifecycle.is_capturing() {
            log_warn!(
                "could not say Goodbye to the collector: {e}; the snapshot will say which of this \
                 process's {} matched dispatch(es) are unaccounted",
                goodbye.matched
            );
        } else {
            log_debug!("could not say Goodbye to the collector: {e}");
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
        assert_eq!(l.reported.runs(), 1);
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
