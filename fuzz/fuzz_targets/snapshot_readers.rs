//! `ditto compare`, `inspect` and `validate` read snapshot directories that
//! anyone may hand them: a snapshot's `manifest.json` and its journal
//! `dispatches.jsonl`, whatever bytes they hold, must load to a snapshot or
//! an error, never a panic or a hang (a crafted missing record once made
//! `compare` walk 2^64 indices); what loads is compared with itself, which
//! reads only the manifest's own files (none exist here: each is an
//! error). The input's first two bytes (little-endian) are the manifest's
//! length; the manifest follows, then the journal.
#![no_main]

use ditto_snapshot::compare::{CompareOptions, compare_snapshots};
use ditto_snapshot::store::Snapshot;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn dir() -> &'static std::path::Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("a temporary directory"))
        .path()
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let (length, rest) = data.split_at(2);
    let at = (u16::from_le_bytes([length[0], length[1]]) as usize).min(rest.len());
    let (manifest, journal) = rest.split_at(at);
    let dir = dir();
    std::fs::write(dir.join("manifest.json"), manifest).expect("write the manifest");
    std::fs::write(dir.join("dispatches.jsonl"), journal).expect("write the journal");
    if let Ok(snapshot) = Snapshot::load(dir) {
        for m in &snapshot.manifest.missing {
            let _ = m.indices();
        }
        let _ = compare_snapshots(&snapshot, &snapshot, &CompareOptions::default());
    }
});
