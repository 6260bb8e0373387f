//! Four ranks through one `ditto collect`, each capturing one 256 MiB
//! buffer by IPC at the same moment (large_output_ranks: the ranks leave a
//! file barrier together, then dispatch the target): the collector's own
//! debug log shows the four attachments live at once, so the large buffers
//! of different connections of one run are not copied one at a time under
//! the run's writer lock; and every dispatch is stored whole.

use crate::common::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

const RANKS: u64 = 4;
const MIB: u64 = 256;

/// One attachment of the collector's log: when it was mapped and unmapped,
/// in µs since the collector started.
#[derive(Debug, Default, Clone, Copy)]
struct Interval {
    attach_us: Option<u64>,
    detach_us: Option<u64>,
}

/// The attachments the collector's debug log records, per connection: the
/// lines "ditto: debug: attach at T µs: connection C (...)" and "... detach
/// at T µs: connection C (...)". A connection attaching twice fails the test
/// (each rank sends one large buffer).
fn attachments(log: &str) -> BTreeMap<u64, Interval> {
    let mut by_connection: BTreeMap<u64, Interval> = BTreeMap::new();
    for line in log.lines() {
        let Some(rest) = line.strip_prefix("ditto: debug: ") else {
            continue;
        };
        let Some((event, rest)) = rest.split_once(" at ") else {
            continue;
        };
        if event != "attach" && event != "detach" {
            continue;
        }
        let (us, rest) = rest
            .split_once(" µs: connection ")
            .unwrap_or_else(|| panic!("an attachment line without its instant: {line}"));
        let us: u64 = us.parse().unwrap_or_else(|e| panic!("{line}: {e}"));
        let connection: u64 = rest
            .split_whitespace()
            .next()
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("an attachment line without its connection: {line}"));
        let interval = by_connection.entry(connection).or_default();
        let slot = if event == "attach" {
            &mut interval.attach_us
        } else {
            &mut interval.detach_us
        };
        assert!(
            slot.is_none(),
            "connection {connection}: a second {event}: {line}"
        );
        *slot = Some(us);
    }
    by_connection
}

fn run_rank(socket: &Path, barrier: &Path, rank: u64) {
    let mut cmd = ditto_run(socket, "ranks_mark", "together", &app("large_output_ranks"));
    cmd.arg("--barrier")
        .arg(barrier)
        .args(["--ranks", &RANKS.to_string(), "--mib", &MIB.to_string()])
        .env("OMPI_COMM_WORLD_RANK", rank.to_string());
    let out = output_within(&mut cmd, Duration::from_secs(120), &format!("rank {rank}"));
    assert_eq!(out.status.code(), Some(0), "rank {rank}: {}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("large_output_ranks: mib={MIB} ")),
        "rank {rank}: {}",
        stdout(&out)
    );
}

/// Elements 0, 1, 4095, 4096 and the last of a stored buffer are i % 4096.
fn check_values(snap: &Path, file: &str) {
    let bytes = std::fs::read(snap.join(file)).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let data = tensors.tensor("arg0").unwrap().data();
    assert_eq!(data.len() as u64, MIB << 20, "{file}");
    let n = data.len() / 4;
    for i in [0, 1, 4095, 4096, n - 1] {
        let v = f32::from_le_bytes(data[4 * i..4 * i + 4].try_into().unwrap());
        assert_eq!(v, (i % 4096) as f32, "{file}: element {i}");
    }
}

#[test]
fn large_buffers_of_four_ranks_are_attached_and_copied_at_the_same_time() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("socket");
    let snaps = dir.path().join("snaps");
    let barrier = dir.path().join("barrier");
    std::fs::create_dir(&barrier).unwrap();
    let log_file = dir.path().join("collector.log");
    let collector = Collector::start_logging(&socket, &snaps, &log_file);
    std::thread::scope(|s| {
        for rank in 0..RANKS {
            let (socket, barrier) = (&socket, &barrier);
            s.spawn(move || run_rank(socket, barrier, rank));
        }
    });
    drop(collector);

    let snap = snaps.join("together");
    let m = snapshot_manifest(&snap);
    let dispatches = m["dispatches"].as_array().unwrap();
    let mut ranks: Vec<u64> = dispatches
        .iter()
        .map(|d| d["rank"].as_u64().unwrap())
        .collect();
    ranks.sort();
    assert_eq!(ranks, (0..RANKS).collect::<Vec<_>>(), "{m}");
    for d in dispatches {
        let buffers = d["buffers"].as_array().unwrap();
        assert_eq!(buffers.len(), 1, "{d}");
        assert_eq!(buffers[0]["extent"].as_u64(), Some(MIB << 20), "{d}");
        assert_eq!(buffers[0]["transport"], "ipc", "{d}");
        check_values(&snap, d["file"].as_str().unwrap());
    }

    let log = std::fs::read_to_string(&log_file).unwrap();
    let by_connection = attachments(&log);
    eprintln!("attachments, µs since the collector started: {by_connection:?}");
    assert_eq!(
        by_connection.len() as u64,
        RANKS,
        "{by_connection:?}\n{log}"
    );
    let mut last_attach = 0;
    let mut first_detach = u64::MAX;
    for (connection, interval) in &by_connection {
        let (Some(attach), Some(detach)) = (interval.attach_us, interval.detach_us) else {
            panic!("connection {connection}: an attach without its detach: {interval:?}\n{log}");
        };
        assert!(attach <= detach, "connection {connection}: {interval:?}");
        last_attach = last_attach.max(attach);
        first_detach = first_detach.min(detach);
    }
    assert!(
        last_attach < first_detach,
        "the four attachments were never all live at once (last attach at {last_attach} µs, \
         first detach at {first_detach} µs): {by_connection:?}"
    );
}
