//! `ditto replay` plans each dispatch from a snapshot's manifest, which
//! anyone may hand it: whatever bytes `manifest.json` holds must load to a
//! snapshot or an error, and every replayable dispatch must plan to an
//! error or to a plan whose numbers the replay can act on without
//! overflow or a huge allocation: ranges that end below 2^63, outputs
//! inside memory the replay restores, kernel-argument bytes checked
//! against a real code object's kernel (a hipcc-built fixture) without a
//! panic. The whole input is the manifest.
#![no_main]

use ditto_cli::replay::plan::{ADDRESS_LIMIT, check_kernarg, plan, replayable};
use ditto_snapshot::store::Snapshot;
use libfuzzer_sys::fuzz_target;
use std::path::Path;
use std::sync::OnceLock;

/// A code object whose kernels' arguments the plans are checked against
/// (`_Z5saxpyPKfPffi.kd`: 24 bytes of arguments; `_Z6gatherPKiPKdPdj.kd`).
const CODE_OBJECT: &[u8] = include_bytes!("../../crates/kernels/tests/fixtures/qualifiers-v4.co");

fn dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("a temporary directory"))
        .path()
}

fuzz_target!(|data: &[u8]| {
    let dir = dir();
    std::fs::write(dir.join("manifest.json"), data).expect("write the manifest");
    let Ok(snapshot) = Snapshot::load(dir) else {
        return;
    };
    let chosen: Vec<(u32, u64)> = replayable(&snapshot)
        .iter()
        .map(|d| (d.rank, d.index))
        .collect();
    for (rank, index) in chosen {
        let Ok(p) = plan(&snapshot, rank, index) else {
            continue;
        };
        for &(start, size) in &p.ranges {
            let end = start.checked_add(size).expect("a range ends below 2^64");
            assert!(end <= ADDRESS_LIMIT, "range {start:x}+{size:x}");
        }
        for o in &p.outputs {
            let restored = p.images.iter().any(|i| {
                i.variable.is_none()
                    && o.address >= i.base
                    && o.address + o.extent <= i.base + i.size
            });
            assert!(restored, "output {o:?} outside every image");
        }
        assert!(p.record.grid.iter().all(|&g| g > 0));
        let _ = check_kernarg(&p, CODE_OBJECT, Path::new("fixture.co"));
    }
});
