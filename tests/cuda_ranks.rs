//! Ranks of a CUDA program on different devices of one host, through one
//! collector, over the fake driver of tests/cuda/fake/ with two devices
//! whose memory is exportable (FAKE_CUDA_DEVICES=2, FAKE_CUDA_IPC=1) and no
//! peer path between them (FAKE_CUDA_NO_PEER=1: an IPC handle opened in
//! the other device's context fails, as on GPUs without one). Two ranks of
//! tests/cuda/fake/fake_ranks.c launch the target 200 times each on fresh
//! buffers, captured by IPC (staging off). The reference run picks devices
//! with cudaSetDevice(rank), the optimized one with CUDA_VISIBLE_DEVICES
//! (each rank sees its device as ordinal 0, so only the UUID the tool sends
//! names it to the collector). Every handle is opened in its owner's
//! context, the collector's mappings stay flat, and `ditto compare` reports
//! the mismatch planted on rank 1 only. A collector that cannot see a
//! rank's device says which device and what to do.

use crate::common::*;
use std::path::Path;
use std::process::Output;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

const LAUNCHES: usize = 200;
const LIMIT: Duration = Duration::from_secs(300);

/// The fake driver's two devices, as every process of a test sees them
/// (CUDA_VISIBLE_DEVICES aside).
const DEVICES: [(&str, &str); 3] = [
    ("FAKE_CUDA_DEVICES", "2"),
    ("FAKE_CUDA_IPC", "1"),
    ("FAKE_CUDA_NO_PEER", "1"),
];

/// The collector's view of the fake driver, its opens logged to `opens`.
fn collector_env<'a>(lib: &'a Path, opens: &'a Path) -> Vec<(&'a str, &'a str)> {
    let mut env = DEVICES.to_vec();
    env.push(("DITTO_CUDA_DRIVER", lib.to_str().unwrap()));
    env.push(("FAKE_CUDA_LOG", opens.to_str().unwrap()));
    env
}

/// One rank under `scripts/ditto-run`, its device picked by
/// `cudaSetDevice(rank)` or, `by_visible_devices`, by CUDA_VISIBLE_DEVICES.
fn run_rank(
    socket: &Path,
    lib: &Path,
    run: &str,
    program: &Path,
    rank: u32,
    by_visible_devices: bool,
) -> Output {
    let mut cmd = ditto_run(socket, "scale", run, program);
    cmd.arg(LAUNCHES.to_string())
        .envs(DEVICES)
        .env("DITTO_CUDA_DRIVER", lib)
        .env("DITTO_CUPTI_LIBRARY", lib)
        .env("OMPI_COMM_WORLD_RANK", rank.to_string())
        .env("DITTO_STAGING_MIB", "0")
        .env("DITTO_DISPATCH", "all");
    if by_visible_devices {
        cmd.env("CUDA_VISIBLE_DEVICES", rank.to_string())
            .env("FAKE_RANK_BY_VISIBLE_DEVICES", "1");
    }
    let out = output_within(&mut cmd, LIMIT, &format!("{run} rank {rank}"));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{run} rank {rank}: {}",
        stderr(&out)
    );
    let ordinal = if by_visible_devices { 0 } else { rank };
    assert!(
        stdout(&out).contains(&format!(
            "rank {rank}: {LAUNCHES} launches on physical device {rank} (ordinal {ordinal})"
        )),
        "{}",
        stdout(&out)
    );
    out
}

/// Lines of the collector's maps naming the fake driver's device memory.
fn device_mappings(pid: u32) -> usize {
    maps_naming(pid, "fake-cuda-device-memory")
}

#[test]
fn two_ranks_on_two_devices_are_copied_on_their_own_device_and_compared_by_rank() {
    let dir = tempfile::tempdir().unwrap();
    let (lib, reference) = build_fake_cuda(dir.path(), "fake_ranks");
    let (_, optimized) = build_fake_cuda_with(dir.path(), "fake_ranks", &["-DPLANT_ON_RANK_1"]);
    let socket = dir.path().join("socket");
    let snaps = dir.path().join("snaps");
    let log_file = dir.path().join("collector.log");
    let opens = dir.path().join("opens.log");
    let collector =
        Collector::start_logging_with(&socket, &snaps, &log_file, &collector_env(&lib, &opens));
    let collector_pid = collector.pid();
    let most_mapped = AtomicUsize::new(0);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                most_mapped.fetch_max(device_mappings(collector_pid), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        for (run, program, by_visible_devices) in
            [("ref", &reference, false), ("opt", &optimized, true)]
        {
            std::thread::scope(|ranks| {
                for rank in 0..2 {
                    let (socket, lib) = (&socket, &lib);
                    ranks.spawn(move || {
                        run_rank(socket, lib, run, program, rank, by_visible_devices)
                    });
                }
            });
        }
        done.store(true, Ordering::SeqCst);
    });
    assert_eq!(
        device_mappings(collector_pid),
        0,
        "the collector kept a mapping"
    );
    drop(collector);
    let most = most_mapped.load(Ordering::SeqCst);
    assert!(most <= 2, "the collector held {most} mappings at once");

    // Every handle was opened in its owner's context: one output per
    // launch (the input is const), two runs, two ranks.
    let opens = std::fs::read_to_string(&opens).unwrap();
    let lines: Vec<&str> = opens.lines().collect();
    assert_eq!(lines.len(), 2 * 2 * LAUNCHES, "{opens}");
    for device in 0..2 {
        let own = format!("open: owner device {device}, context of device {device}");
        let n = lines.iter().filter(|l| **l == own).count();
        assert_eq!(n, 2 * LAUNCHES, "device {device}:\n{opens}");
    }
    // ... and the collector's log names the device by ordinal and UUID.
    let log = std::fs::read_to_string(&log_file).unwrap();
    for rank in 0..2 {
        let attaches = attach_lines(&log, rank);
        assert_eq!(attaches.len(), 2 * LAUNCHES, "rank {rank}:\n{log}");
        // The fake UUID "fake-cuda-gpu-R" in nvidia-smi's form.
        let on = format!("on CUDA device {rank} (GPU-66616b65-2d63-7564-612d-6770752d3{rank}00)");
        assert!(
            attaches.iter().all(|l| l.ends_with(&on)),
            "rank {rank}: {:?}",
            attaches.iter().find(|l| !l.ends_with(&on))
        );
    }

    let (v, out) = compare_json(&snaps.join("ref"), &snaps.join("opt"));
    assert_eq!(v["valid"], false, "{}", stderr(&out));
    let arrays = v["arrays"].as_array().unwrap();
    assert_eq!(arrays.len(), 2 * LAUNCHES, "one output per launch and rank");
    for a in arrays {
        let rank = a["rank"].as_u64().unwrap();
        let expected = if rank == 1 { 1 } else { 0 };
        assert_eq!(a["mismatched_elements"].as_u64(), Some(expected), "{a}");
    }
}

#[test]
fn a_collector_that_cannot_see_the_owning_device_names_it_and_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let (lib, program) = build_fake_cuda(dir.path(), "fake_ranks");
    let socket = dir.path().join("socket");
    let snaps = dir.path().join("snaps");
    let log_file = dir.path().join("collector.log");
    let opens = dir.path().join("opens.log");
    let mut env = collector_env(&lib, &opens);
    env.push(("CUDA_VISIBLE_DEVICES", "0"));
    let collector = Collector::start_logging_with(&socket, &snaps, &log_file, &env);
    let mut cmd = ditto_run(&socket, "scale", "ref", &program);
    cmd.arg("3")
        .envs(DEVICES)
        .env("DITTO_CUDA_DRIVER", &lib)
        .env("DITTO_CUPTI_LIBRARY", &lib)
        .env("OMPI_COMM_WORLD_RANK", "1")
        .env("DITTO_STAGING_MIB", "0");
    let out = output_within(&mut cmd, LIMIT, "rank 1");
    // The application's result is its own whatever the capture did.
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("rank 1: 3 launches on physical device 1 (ordinal 1)"),
        "{}",
        stdout(&out)
    );
    drop(collector);
    let m = snapshot_manifest(&snaps.join("ref"));
    let missing = m["missing"].as_array().expect("a missing list");
    assert!(!missing.is_empty(), "{m:#}");
    let detail = missing[0]["detail"].as_str().unwrap();
    for part in [
        "cuIpcOpenMemHandle failed: CUDA error 217",
        "the buffer's device GPU-66616b65-2d63-7564-612d-677075",
        "is not among the collector's 1 CUDA device(s)",
        "without a narrower CUDA_VISIBLE_DEVICES",
    ] {
        assert!(detail.contains(part), "{part}: {detail}");
    }
}
