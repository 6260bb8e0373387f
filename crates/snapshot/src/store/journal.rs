//! The dispatch journal of a snapshot directory, `dispatches.jsonl`: one
//! JSON line per stored dispatch (its manifest record), appended after the
//! dispatch's tensor file is in place and before the collector acknowledges
//! it, and one line `{"missing": {...}}` per missing record (a dispatch
//! matched but not captured), appended when it is known. Lines are events
//! in order: a reader applies them in order ([`super::missing::merge`]). `manifest.json` is rewritten only now and then (and whole at the
//! end), so a collector killed mid-capture leaves every acknowledged
//! dispatch in the journal; readers merge the two.
//!
//! Owns the journal's format and its append/read; never decides when the
//! manifest is written.

use super::dir_handle::DirHandle;
use super::error::{StoreError, io_err};
use super::manifest::DispatchRecord;
use super::missing::{BadMissingRecord, MissingRecord};
use serde::Serialize;
use std::fs::File;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;

pub const JOURNAL_FILE: &str = "dispatches.jsonl";

/// The open journal of a snapshot being written.
#[derive(Debug)]
pub struct Journal {
    /// `None` while closed ([`Journal::close`]); reopened to append.
    file: Option<File>,
    dir: Arc<DirHandle>,
    path: PathBuf,
}

impl Journal {
    /// A new, empty journal in `dir` (an older one is truncated). Never
    /// through a symbolic link (O_NOFOLLOW: a link planted under the
    /// journal's name is refused, not followed).
    pub fn create(dir: &Arc<DirHandle>) -> Result<Journal, StoreError> {
        let path = dir.shown(JOURNAL_FILE);
        let file = dir
            .create_truncated(JOURNAL_FILE, 0o644)
            .map_err(io_err(&path))?;
        Ok(Journal {
            file: Some(file),
            dir: dir.clone(),
            path,
        })
    }

    /// Closes the file while no process writes to this snapshot (a
    /// collector serving many runs would otherwise hold one fd per run);
    /// the next record reopens it at its end.
    pub fn close(&mut self) {
        self.file = None;
    }

    /// Appends one record as one line, in one write: a crash leaves at
    /// most the last line cut short, never a line half-mixed with another.
    /// Returns the line's length.
    pub fn append(&mut self, record: &DispatchRecord) -> Result<usize, StoreError> {
        self.append_line(record)
    }

    /// Appends one missing record, as `{"missing": record}`.
    pub fn append_missing(&mut self, record: &MissingRecord) -> Result<usize, StoreError> {
        #[derive(Serialize)]
        struct Line<'a> {
            missing: &'a MissingRecord,
        }
        self.append_line(&Line { missing: record })
    }

    fn append_line<T: Serialize>(&mut self, record: &T) -> Result<usize, StoreError> {
        let mut line = serde_json::to_vec(record)
            .map_err(|e| StoreError::Invalid(format!("journal record: {e}")))?;
        line.push(b'\n');
        let file = match &mut self.file {
            Some(file) => file,
            None => self.file.insert(
                self.dir
                    .open_append(JOURNAL_FILE)
                    .map_err(io_err(&self.path))?,
            ),
        };
        file.write_all(&line).map_err(io_err(&self.path))?;
        Ok(line.len())
    }
}

/// One journal line.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    Dispatch(DispatchRecord),
    Missing(MissingRecord),
}

/// Why a journal line cannot be read.
#[derive(Debug, thiserror::Error)]
enum BadLine {
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Missing(#[from] BadMissingRecord),
}

fn parse_line(line: &[u8]) -> Result<Entry, BadLine> {
    let value: serde_json::Value = serde_json::from_slice(line)?;
    match value.get("missing") {
        Some(missing) => {
            let record: MissingRecord = serde_json::from_value(missing.clone())?;
            record.check()?;
            Ok(Entry::Missing(record))
        }
        None => Ok(Entry::Dispatch(serde_json::from_value(value)?)),
    }
}

/// The entries journalled in `dir`, in order; none when it has no journal.
/// A last line without its newline (the collector died while writing it)
/// is ignored; any other line that does not parse is an error.
pub fn read(dir: &DirHandle) -> Result<Vec<Entry>, StoreError> {
    let path = dir.shown(JOURNAL_FILE);
    let mut text = Vec::new();
    match dir.open_regular(JOURNAL_FILE) {
        Ok(Some(mut file)) => {
            file.read_to_end(&mut text).map_err(io_err(&path))?;
        }
        Ok(None) => return Ok(Vec::new()),
        Err(e) => return Err(StoreError::NotRegularFile { path, what: e.0 }),
    }
    let complete = match text.iter().rposition(|&b| b == b'\n') {
        Some(end) => &text[..end],
        None => return Ok(Vec::new()),
    };
    complete
        .split(|&b| b == b'\n')
        .enumerate()
        .filter(|(_, line)| !line.is_empty())
        .map(|(n, line)| {
            parse_line(line).map_err(|e| StoreError::BadManifest {
                path: path.clone(),
                reason: format!("line {}: {e}", n + 1),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_under_the_journal_s_name_is_refused_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "kept\n").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join(JOURNAL_FILE)).unwrap();
        let handle = Arc::new(DirHandle::open(dir.path()).unwrap());
        let e = Journal::create(&handle).unwrap_err().to_string();
        assert!(e.contains(JOURNAL_FILE), "{e}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "kept\n");
    }
}
