//! The snapshot's accounting of dispatches that were matched but not
//! captured: `manifest.json` "missing", one record per run of consecutive
//! dispatch indices of one process (or per buffer of one dispatch), with
//! the reason (`selection`, `timeout`, `error`) and its detail.
//!
//! Owns the rules that merge records (their schema is the manifest's) into
//! a manifest, the same for the writer and for every reader of the journal:
//! - a missing record for whole dispatches wins over a stored dispatch with
//!   the same (rank, index): the tool released that dispatch before the
//!   collector's copy was acknowledged (a timeout), so the stored bytes may
//!   not be what the kernel wrote;
//! - a later whole-dispatch record for one index replaces an earlier one
//!   (the tool's `timeout` after the collector's own `error` for the late
//!   copy says why better).

pub use super::manifest::{BadMissingRecord, MissingRecord};
use super::manifest::{DispatchRecord, Manifest};
use ditto_protocol::MissReason;

/// Adds `record` to `manifest` by the rules above, keeping the records in
/// (rank, index, argument) order whatever order they were replayed in;
/// returns the dispatches it removed.
pub fn merge(manifest: &mut Manifest, record: MissingRecord) -> Vec<DispatchRecord> {
    if manifest.missing.contains(&record) {
        return drop_covered(manifest);
    }
    if record.arg.is_none() && record.count == 1 {
        manifest
            .missing
            .retain(|m| !(m.arg.is_none() && m.count == 1 && m.covers(record.rank, record.index)));
    }
    manifest.missing.push(record);
    manifest.missing.sort_by_key(|m| (m.rank, m.index, m.arg));
    drop_covered(manifest)
}

/// Removes the dispatches a whole-dispatch missing record covers.
pub fn drop_covered(manifest: &mut Manifest) -> Vec<DispatchRecord> {
    let missing = &manifest.missing;
    let (dropped, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut manifest.dispatches)
        .into_iter()
        .partition(|d| missing.iter().any(|m| m.covers(d.rank, d.index)));
    manifest.dispatches = kept;
    dropped
}

/// The whole-dispatch record for (rank, index), if any.
pub fn find(manifest: &Manifest, rank: u32, index: u64) -> Option<&MissingRecord> {
    manifest
        .missing
        .iter()
        .rev()
        .find(|m| m.covers(rank, index))
}

/// How many whole dispatches the records say are missing, per reason.
pub fn count_by_reason(manifest: &Manifest) -> Vec<(MissReason, u64)> {
    let mut counts: Vec<(MissReason, u64)> = Vec::new();
    for m in manifest.missing.iter().filter(|m| m.arg.is_none()) {
        match counts.iter_mut().find(|(r, _)| *r == m.reason) {
            Some((_, n)) => *n = n.saturating_add(m.count),
            None => counts.push((m.reason, m.count)),
        }
    }
    counts
}
