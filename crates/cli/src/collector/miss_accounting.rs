//! What one connection captured, missed and lost, counted as the manifest
//! counts it: a missing record stored and counted once per dispatch under
//! its last reason ([`record_missing`]), the records of a dispatch the
//! collector could not capture ([`failed_capture_records`]), and at the
//! connection's end every matched dispatch neither captured nor reported
//! missing recorded as lost ([`account_for_the_end`]). Owns the counting;
//! reads no frame and sends nothing.

use super::capture::Origin;
use super::report::{ConnectionEnd, ConnectionReport};
use crate::store::SnapshotWriter;
use crate::store::missing::MissingRecord;
use ditto_protocol::{IndexRuns, MissReason};
use std::sync::Mutex;

/// What a connection's frames accounted for, to find at its end the
/// matched dispatches neither captured nor reported missing.
#[derive(Default)]
pub(super) struct Accounting {
    /// Dispatches captured (their After part received) or reported
    /// missing whole.
    pub(super) accounted: IndexRuns,
    /// One past the highest dispatch index any frame named.
    seen_end: u64,
    /// The Goodbye's count of matched dispatches.
    pub(super) matched: Option<u64>,
}

impl Accounting {
    /// A frame named dispatches `index..index + count`.
    pub(super) fn seen(&mut self, index: u64, count: u64) {
        self.seen_end = self.seen_end.max(index.saturating_add(count));
    }
}

/// At the end of a served connection, records as `lost` every matched
/// dispatch that was neither captured nor reported missing: of the
/// Goodbye's `matched` when it came, else of those below the highest
/// index seen; a connection that ended without Goodbye also leaves its
/// later dispatches unknown, which its run record says.
pub(super) fn account_for_the_end(
    origin: &Origin,
    report: &mut ConnectionReport,
    accounting: &Accounting,
    end: &ConnectionEnd,
) {
    let (total, detail) = match end {
        ConnectionEnd::Goodbye => (
            accounting.matched.unwrap_or(0),
            format!(
                "the process said it dispatched {} matching dispatch(es), but this one was \
                 neither captured nor reported missing (its report was lost on the way)",
                accounting.matched.unwrap_or(0)
            ),
        ),
        ConnectionEnd::Dropped { reason, .. } => (
            accounting.seen_end,
            format!("neither captured nor reported missing before the connection ended: {reason}"),
        ),
        ConnectionEnd::Stopped => (
            accounting.seen_end,
            "neither captured nor reported missing before the collector stopped".to_string(),
        ),
        ConnectionEnd::Rejected(_) | ConnectionEnd::NeverLoaded(_) => return,
    };
    for (start, end) in accounting.accounted.gaps(total) {
        let record = MissingRecord {
            rank: origin.rank,
            pid: origin.pid,
            index: start,
            count: end - start,
            arg: None,
            phase: None,
            reason: MissReason::Lost,
            detail: detail.clone(),
        };
        record_missing(origin.writer, report, record);
    }
    let unknown_after = match end {
        ConnectionEnd::Goodbye => return,
        ConnectionEnd::Dropped { reason, .. } => reason.clone(),
        _ => "the collector stopped before the process said Goodbye".to_string(),
    };
    let recorded = origin
        .writer
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .set_unaccounted(origin.rank, accounting.seen_end, &unknown_after);
    if let Err(e) = recorded {
        report
            .errors
            .push(format!("cannot record that the run is incomplete: {e}"));
    }
}

/// What the manifest records for a dispatch the collector could not
/// capture: the whole dispatch (`error`), or for its inputs (a message of
/// `Before` buffers only, whose `After` part may still be captured) each
/// input buffer.
pub(super) fn failed_capture_records(
    rank: u32,
    pid: u32,
    d: &ditto_protocol::Dispatch,
    error: &str,
) -> Vec<MissingRecord> {
    let record = |arg: Option<u32>, phase| MissingRecord {
        rank,
        pid,
        index: d.index,
        count: 1,
        arg,
        phase,
        reason: MissReason::Error,
        detail: error.to_string(),
    };
    if d.is_inputs_part() {
        d.buffers
            .iter()
            .map(|b| record(Some(b.arg_index), Some(b.phase)))
            .collect()
    } else {
        vec![record(None, None)]
    }
}

/// Stores a missing record and counts it in the connection's report as
/// the manifest counts it ([`crate::store::missing::merge`]): a record the
/// manifest already holds adds nothing, and a later record of one whole
/// dispatch takes the place of an earlier one (the tool's `timeout` after
/// the collector's own `error` for a copy read too late): one dispatch is
/// counted once, under its last reason.
pub(super) fn record_missing(
    writer: &Mutex<SnapshotWriter>,
    report: &mut ConnectionReport,
    r: MissingRecord,
) {
    let what = format!("dispatch {} ({})", r.indices(), r.reason.name());
    let mut w = writer.lock().unwrap_or_else(|e| e.into_inner());
    let known = &w.manifest().missing;
    let repeated = known.contains(&r);
    let replaced: Vec<MissReason> = if !repeated && r.arg.is_none() && r.count == 1 {
        known
            .iter()
            .filter(|m| m.arg.is_none() && m.count == 1 && m.covers(r.rank, r.index))
            .map(|m| m.reason)
            .collect()
    } else {
        Vec::new()
    };
    if !repeated {
        if r.arg.is_some() {
            report.buffers_missing += 1;
        } else {
            for reason in replaced {
                if let Some((_, n)) = report.missing.iter_mut().find(|(x, _)| *x == reason) {
                    *n = n.saturating_sub(1);
                }
            }
            match report
                .missing
                .iter_mut()
                .find(|(reason, _)| *reason == r.reason)
            {
                Some((_, n)) => *n += r.count,
                None => report.missing.push((r.reason, r.count)),
            }
            report.missing.retain(|&(_, n)| n > 0);
        }
    }
    let added = w.add_missing(r);
    drop(w);
    match added {
        // A stored dispatch the record covers (released uncaptured after
        // a timeout) is no longer in the snapshot: no longer counted.
        Ok(dropped) => {
            for d in dropped {
                report.dispatches_captured = report.dispatches_captured.saturating_sub(1);
                report.arrays_captured = report
                    .arrays_captured
                    .saturating_sub(d.buffers.len() as u64);
                let bytes = d
                    .buffers
                    .iter()
                    .fold(0u64, |n, b| n.saturating_add(b.extent));
                report.bytes_captured = report.bytes_captured.saturating_sub(bytes);
            }
        }
        Err(e) => report
            .errors
            .push(format!("cannot record the missing {what}: {e}")),
    }
}
