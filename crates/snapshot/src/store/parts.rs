//! A run captured by several collectors, one per node of a job, into one
//! run directory on a shared file system. Each collector writes only its
//! own part, `<run>/node-<NAME>/`: a whole snapshot directory (manifest,
//! journal, tensor files, code objects) of the ranks it served, written by
//! the ordinary [`super::SnapshotWriter`], so two collectors never write
//! the same file. The run directory itself holds nothing but parts.
//!
//! Owns the part names ([`check_node_name`], [`part_dir`]), the check a
//! part's writer makes of the run directory before it writes (a snapshot
//! of one collector there is never written beside), and the merge a reader
//! makes of every part (`merge`): ranks from all parts, a rank in two
//! parts an error naming both, and so are parts whose collectors ran in
//! different jobs (an earlier job's part left in the run directory). Never
//! writes a file.

use super::dir_handle::DirHandle;
use super::error::{StoreError, io_err};
use super::manifest::{CollectorRecord, DispatchedKernel, MANIFEST_FILE, Manifest};
use super::output_dir;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A part's directory is this prefix and its node's name.
pub const PART_PREFIX: &str = "node-";
/// The longest node name.
const MOST_NAME_BYTES: usize = 64;

/// Whether `name` may name a node's part: 1 to 64 letters, digits, `.`,
/// `_` or `-`, not starting with `.` (a host name is one).
pub fn check_node_name(name: &str) -> Result<(), StoreError> {
    let fine = !name.is_empty()
        && name.len() <= MOST_NAME_BYTES
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if fine {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "node name {name:?}: give 1 to {MOST_NAME_BYTES} letters, digits, '.', '_' or '-', \
             not starting with '.' (e.g. the host name)"
        )))
    }
}

/// The part of node `node` in the run directory `run_dir`, once the run
/// directory is found fit for it: missing (the part's writer creates it),
/// or a directory that holds only parts. A snapshot of one collector there
/// (its `manifest.json`) or anything else is refused, naming it: a part is
/// never written beside what a reader would take for the whole run.
pub fn part_dir(run_dir: &Path, node: &str) -> Result<PathBuf, StoreError> {
    check_node_name(node)?;
    match std::fs::symlink_metadata(run_dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(run_dir)(e)),
        Ok(_) => {
            let handle = output_dir::open(run_dir)?;
            let names = handle.names().map_err(io_err(run_dir))?;
            let mut foreign: Vec<String> = names
                .iter()
                .map(|n| n.to_string_lossy().into_owned())
                .filter(|n| !n.starts_with(PART_PREFIX))
                .collect();
            foreign.sort();
            if foreign.iter().any(|n| n == MANIFEST_FILE) {
                return Err(StoreError::ForeignDirectory {
                    path: run_dir.to_path_buf(),
                    what: "it holds a snapshot written by one collector (manifest.json); a node's \
                           collector (--node) writes its part beside other nodes' parts, never \
                           beside or over such a snapshot"
                        .into(),
                });
            }
            if let Some(first) = foreign.first() {
                return Err(StoreError::ForeignDirectory {
                    path: run_dir.to_path_buf(),
                    what: format!(
                        "it holds {first}{}, not only the parts of nodes ({PART_PREFIX}<NAME>)",
                        match foreign.len() {
                            1 => String::new(),
                            n => format!(" and {} more", n - 1),
                        }
                    ),
                });
            }
        }
    }
    Ok(run_dir.join(format!("{PART_PREFIX}{node}")))
}

/// The names of the parts in the run directory `dir` has open, sorted;
/// none when it holds none.
pub(super) fn part_names(dir: &DirHandle) -> Result<Vec<String>, StoreError> {
    let mut parts: Vec<String> = dir
        .names()
        .map_err(io_err(dir.path()))?
        .into_iter()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| n.len() > PART_PREFIX.len() && n.starts_with(PART_PREFIX))
        .collect();
    parts.sort();
    Ok(parts)
}

/// One part as a reader loaded it.
pub(super) struct LoadedPart {
    /// Its directory's name in the run directory (`node-<NAME>`).
    pub name: String,
    pub manifest: Manifest,
}

/// The node a part's directory name names.
fn node_of(part: &str) -> &str {
    part.strip_prefix(PART_PREFIX).unwrap_or(part)
}

/// The manifest of the whole run from its parts (in the order given): the
/// runs of every part, each with its node; dispatches and missing records
/// in (rank, index) order; dispatched kernels counted over all parts.
/// Refused: parts captured for different kernel queries or in different
/// jobs, and a rank found in two parts (its runs, dispatches or missing
/// records), naming both.
/// Returns, with the manifest, the part (its position) of each rank.
pub(super) fn merge(
    run_dir: &Path,
    parts: Vec<LoadedPart>,
) -> Result<(Manifest, BTreeMap<u32, usize>), StoreError> {
    let bad = |reason: String| StoreError::BadManifest {
        path: run_dir.to_path_buf(),
        reason,
    };
    let mut rank_part: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, part) in parts.iter().enumerate() {
        let m = &part.manifest;
        let ranks = m
            .runs
            .iter()
            .map(|r| r.rank)
            .chain(m.dispatches.iter().map(|d| d.rank))
            .chain(m.missing.iter().map(|r| r.rank));
        for rank in ranks {
            match rank_part.get(&rank) {
                Some(&other) if other != i => {
                    let pid = |p: &LoadedPart| {
                        p.manifest
                            .runs
                            .iter()
                            .find(|r| r.rank == rank)
                            .map(|r| format!(" (pid {})", r.pid))
                            .unwrap_or_default()
                    };
                    return Err(bad(format!(
                        "rank {rank} was seen by two collectors: {}{} and {}{}; each node's \
                         collector must serve only its own node's ranks, every process \
                         having its own launcher rank (OMPI_COMM_WORLD_RANK, PMI_RANK, \
                         SLURM_PROCID); capture the run again into a fresh --out",
                        parts[other].name,
                        pid(&parts[other]),
                        part.name,
                        pid(part)
                    )));
                }
                Some(_) => {}
                None => {
                    rank_part.insert(rank, i);
                }
            }
        }
    }
    let mut parts = parts.into_iter();
    let first = parts.next().ok_or_else(|| bad("it holds no part".into()))?;
    let first_name = first.name.clone();
    let mut whole = first.manifest;
    for run in &mut whole.runs {
        run.node = Some(node_of(&first_name).to_string());
    }
    for part in parts {
        let m = part.manifest;
        if m.kernel_query != whole.kernel_query {
            return Err(bad(format!(
                "its parts were captured for different kernels: {first_name} for `{}`, {} for \
                 `{}`; start every node's collector and process with the same --kernel",
                whole.kernel_query, part.name, m.kernel_query
            )));
        }
        if let (Some(a), Some(b)) = (&whole.job, &m.job)
            && a != b
        {
            return Err(bad(format!(
                "its parts are of different jobs: {first_name} of job {a}, {} of job {b}; an \
                 earlier job's parts stay beside a new one's: capture each job into a fresh \
                 --out (e.g. snaps/$SLURM_JOB_ID), or remove the older parts",
                part.name
            )));
        }
        whole.job = whole.job.or(m.job);
        let node = node_of(&part.name).to_string();
        whole.runs.extend(m.runs.into_iter().map(|mut r| {
            r.node = Some(node.clone());
            r
        }));
        whole.dispatches.extend(m.dispatches);
        whole.missing.extend(m.missing);
        for k in m.dispatched_kernels {
            add_count(&mut whole.dispatched_kernels, k);
        }
    }
    whole.runs.sort_by_key(|r| r.rank);
    whole.dispatches.sort_by_key(|d| (d.rank, d.index));
    whole.missing.sort_by_key(|r| (r.rank, r.index));
    whole.kernel = whole
        .dispatches
        .iter()
        .find_map(|d| d.kernel.clone())
        .or(whole.kernel);
    Ok((whole, rank_part))
}

/// The manifest of the part the directory `dir` has open (a snapshot, as
/// [`output_dir::check_opened`] found it).
pub(super) fn written_part(dir: &DirHandle) -> Result<Manifest, StoreError> {
    let path = dir.shown(MANIFEST_FILE);
    let mut file = match dir.open_regular(MANIFEST_FILE) {
        Ok(Some(file)) => file,
        Ok(None) => {
            return Err(StoreError::BadManifest {
                path,
                reason: "it is gone".into(),
            });
        }
        Err(e) => {
            return Err(StoreError::NotRegularFile { path, what: e.0 });
        }
    };
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut file, &mut bytes).map_err(io_err(&path))?;
    serde_json::from_slice(&bytes).map_err(|e| StoreError::BadManifest {
        path,
        reason: e.to_string(),
    })
}

/// Whether the collector `ours`, running in job `job`, may replace the
/// node's part at `dir` whose manifest is `existing`. Only a part of an
/// earlier capture is replaced: one its own process wrote, one of another
/// job, or one whose collector stopped before `ours` started (a capture
/// run again into the same --out). A part another collector wrote while
/// `ours` ran, or whose collector never recorded its end (it still runs,
/// or it was killed), belongs to this capture and is refused, naming its
/// collector: a second collector given the same node name would
/// otherwise wipe the first one's ranks. Parts of older ditto versions,
/// which record no collector, are replaced as before.
pub(super) fn check_replacing(
    dir: &Path,
    existing: &Manifest,
    ours: &CollectorRecord,
    job: Option<&str>,
) -> Result<(), StoreError> {
    let Some(theirs) = &existing.collector else {
        return Ok(());
    };
    if theirs.same_process(ours) {
        return Ok(());
    }
    if let (Some(theirs), Some(ours)) = (existing.job.as_deref(), job)
        && theirs != ours
    {
        return Ok(());
    }
    let ended = match theirs.ended_ms {
        Some(ended) if ended <= ours.started_ms => return Ok(()),
        Some(ended) => format!(
            "stopped at {}, after this collector started at {}",
            utc(ended),
            utc(ours.started_ms)
        ),
        None => "not stopped: it still runs, or it was killed".into(),
    };
    let node = dir
        .file_name()
        .map(|n| node_of(&n.to_string_lossy()).to_string())
        .unwrap_or_default();
    let ranks: Vec<String> = existing.runs.iter().map(|r| r.rank.to_string()).collect();
    Err(StoreError::PartOfAnotherCollector {
        path: dir.to_path_buf(),
        what: format!(
            "this part of the run holds rank{} {} ({} dispatches) written by another collector \
             of node {node}: pid {} on host {}, started at {}, {ended}",
            if ranks.len() == 1 { "" } else { "s" },
            if ranks.is_empty() {
                "none".to_string()
            } else {
                ranks.join(", ")
            },
            existing.dispatches.len(),
            theirs.pid,
            theirs.host,
            utc(theirs.started_ms),
        ),
    })
}

/// `2026-12-07 21:50:56 UTC` for milliseconds since the Unix epoch.
fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

fn add_count(kernels: &mut Vec<DispatchedKernel>, k: DispatchedKernel) {
    match kernels.iter_mut().find(|have| have.mangled == k.mangled) {
        Some(have) => have.count += k.count,
        None => kernels.push(k),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{captured, dispatch};
    use super::super::{Snapshot, SnapshotWriter};
    use super::*;
    use ditto_protocol::{DType, Hello};

    fn ranked(rank: u32, pid: u32) -> Hello {
        let mut h = super::super::fixtures::hello("run");
        h.rank = Some(rank);
        h.pid = pid;
        h
    }

    /// A part of `run` for node `node`, its ranks each with one dispatch
    /// whose byte is the rank.
    fn write_part(run: &Path, node: &str, ranks: &[u32]) {
        let mut w = SnapshotWriter::create(&part_dir(run, node).unwrap(), "k").unwrap();
        for &r in ranks {
            assert_eq!(w.add_run(&ranked(r, 100 + r)).unwrap(), r);
            w.add_dispatch(
                r,
                100 + r,
                &dispatch(0),
                &[captured(1, DType::U8, vec![r as u8])],
            )
            .unwrap();
        }
    }

    #[test]
    fn a_reader_sees_the_ranks_of_every_part_and_reads_each_from_its_own() {
        let root = tempfile::tempdir().unwrap();
        let run = root.path().join("run");
        write_part(&run, "b", &[3, 2]);
        write_part(&run, "a", &[0, 1]);
        assert!(!run.join(MANIFEST_FILE).exists(), "no run-level manifest");
        let s = Snapshot::load(&run).unwrap();
        let runs: Vec<(u32, Option<&str>)> = s
            .manifest
            .runs
            .iter()
            .map(|r| (r.rank, r.node.as_deref()))
            .collect();
        assert_eq!(
            runs,
            [
                (0, Some("a")),
                (1, Some("a")),
                (2, Some("b")),
                (3, Some("b"))
            ]
        );
        let keys: Vec<(u32, u64)> = s
            .manifest
            .dispatches
            .iter()
            .map(|d| (d.rank, d.index))
            .collect();
        assert_eq!(keys, [(0, 0), (1, 0), (2, 0), (3, 0)]);
        for d in &s.manifest.dispatches {
            let arrays = s.load_dispatch(d).unwrap();
            assert_eq!(arrays[0].1.bytes, vec![d.rank as u8], "rank {}", d.rank);
        }
        assert_eq!(s.dir_of_rank(2), run.join("node-b"));
        assert_eq!(s.dir_of_rank(0), run.join("node-a"));
    }

    #[test]
    fn a_rank_in_two_parts_is_an_error_naming_both() {
        let root = tempfile::tempdir().unwrap();
        let run = root.path().join("run");
        write_part(&run, "a", &[0, 1]);
        write_part(&run, "b", &[1, 2]);
        let e = Snapshot::load(&run).unwrap_err().to_string();
        assert!(
            e.contains("rank 1 was seen by two collectors: node-a (pid 101) and node-b (pid 101)"),
            "{e}"
        );
    }

    #[test]
    fn parts_of_different_kernels_are_refused() {
        let root = tempfile::tempdir().unwrap();
        let run = root.path().join("run");
        write_part(&run, "a", &[0]);
        let w = SnapshotWriter::create(&part_dir(&run, "b").unwrap(), "other").unwrap();
        drop(w);
        let e = Snapshot::load(&run).unwrap_err().to_string();
        assert!(e.contains("node-a for `k`, node-b for `other`"), "{e}");
    }

    #[test]
    fn parts_of_different_jobs_are_refused_and_parts_of_one_job_are_read() {
        let root = tempfile::tempdir().unwrap();
        let run = root.path().join("run");
        for (node, rank, job) in [("a", 0, "41"), ("b", 1, "41"), ("c", 2, "40")] {
            let mut w = SnapshotWriter::create(&part_dir(&run, node).unwrap(), "k").unwrap();
            w.set_job(Some(job.into()));
            w.add_run(&ranked(rank, 100 + rank)).unwrap();
        }
        let e = Snapshot::load(&run).unwrap_err().to_string();
        assert!(
            e.contains("its parts are of different jobs: node-a of job 41, node-c of job 40"),
            "{e}"
        );
        std::fs::remove_dir_all(run.join("node-c")).unwrap();
        let s = Snapshot::load(&run).unwrap();
        assert_eq!(s.manifest.job.as_deref(), Some("41"));
        assert_eq!(s.manifest.runs.len(), 2);
    }

    #[test]
    fn a_part_is_never_written_beside_a_one_collector_snapshot_or_other_files() {
        let root = tempfile::tempdir().unwrap();
        let run = root.path().join("run");
        let w = SnapshotWriter::create(&run, "k").unwrap();
        drop(w);
        let e = part_dir(&run, "a").unwrap_err().to_string();
        assert!(
            e.contains("holds a snapshot written by one collector (manifest.json)"),
            "{e}"
        );
        let other = root.path().join("other");
        std::fs::create_dir_all(other.join("node-x")).unwrap();
        std::fs::write(other.join("notes.txt"), "x").unwrap();
        let e = part_dir(&other, "a").unwrap_err().to_string();
        assert!(e.contains("it holds notes.txt, not only the parts"), "{e}");
        assert_eq!(
            part_dir(&root.path().join("new"), "host-1.cluster").unwrap(),
            root.path().join("new/node-host-1.cluster")
        );
        for bad in ["", ".hidden", "a/b", "a b", &"x".repeat(65)] {
            assert!(part_dir(&root.path().join("new"), bad).is_err(), "{bad:?}");
        }
    }

    /// A collector record of pid `pid` on host `n01`, started at
    /// `started_ms` and, when given, stopped at `ended_ms`.
    fn collector(pid: u32, started_ms: u64, ended_ms: Option<u64>) -> CollectorRecord {
        CollectorRecord {
            host: "n01".into(),
            pid,
            started_ms,
            ended_ms,
        }
    }

    /// Node a's part written by collector `by` in job `job`, holding rank 0.
    fn part_by(run: &Path, by: &CollectorRecord, job: Option<&str>) -> Result<(), StoreError> {
        let dir = part_dir(run, "a").unwrap();
        let mut w = SnapshotWriter::create_part(&dir, "k", by.clone(), job.map(String::from))?;
        w.add_run(&ranked(0, by.pid)).unwrap();
        drop(w);
        // The record as `by` left it (the writer dropped here recorded
        // this test's time as its end).
        let mut m = written_part(&output_dir::open(&dir).unwrap()).unwrap();
        assert!(m.collector.as_ref().unwrap().ended_ms.is_some());
        m.collector = Some(by.clone());
        std::fs::write(dir.join(MANIFEST_FILE), serde_json::to_vec(&m).unwrap()).unwrap();
        Ok(())
    }

    #[test]
    fn a_part_is_replaced_only_when_it_is_of_an_earlier_capture() {
        let root = tempfile::tempdir().unwrap();
        let run = root.path().join("run");
        // Stopped at 2000, before the next collector started at 3000: a
        // capture run again, replaced.
        part_by(&run, &collector(10, 1000, Some(2000)), None).unwrap();
        part_by(&run, &collector(11, 3000, None), None).unwrap();
        // Still running (no end): refused, naming it.
        let e = part_by(&run, &collector(12, 4000, None), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "node-a: this part of the run holds rank 0 (0 dispatches) written by another \
                 collector of node a: pid 11 on host n01, started at 1970-01-01 00:00:03 UTC, \
                 not stopped: it still runs, or it was killed"
            ) && e.contains("another --node name, or write into another --out, or remove"),
            "{e}"
        );
        // Stopped after the new one started: they ran together, refused.
        part_by(&run, &collector(12, 4000, Some(9000)), Some("41")).unwrap_err();
        std::fs::remove_dir_all(run.join("node-a")).unwrap();
        part_by(&run, &collector(12, 4000, Some(9000)), Some("41")).unwrap();
        let e = part_by(&run, &collector(13, 5000, None), Some("41"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "stopped at 1970-01-01 00:00:09 UTC, after this collector started at \
                        1970-01-01 00:00:05 UTC"
            ),
            "{e}"
        );
        // Of another job: an earlier job's part, replaced.
        part_by(&run, &collector(13, 5000, None), Some("42")).unwrap();
        // Its own process: replaced.
        part_by(&run, &collector(13, 5000, None), Some("42")).unwrap();
    }

    #[test]
    fn utc_times_read_as_calendar_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_796_680_256_000), "2026-12-07 21:50:56 UTC");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00 UTC");
    }
}
