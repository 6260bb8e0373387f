//! Ranks on different GPUs of one host, through one collector, on the CPU
//! runtime with two GPU agents (DITTO_HSA_CPU_GPUS=2): two ranks of a HIP
//! program (tests/hip/as_written/ranks_on_gpus.hip, built by `ditto hipcc`)
//! each pick their own device, launch the target 200 times on fresh
//! buffers, and are captured by IPC (staging off). The collector attaches
//! each buffer on the GPU that owns it (its log names the node), its
//! mappings of pool memory stay flat, and `ditto compare` of the reference
//! against the build with a mismatch planted on rank 1 reports rank 1 only.

use crate::common::*;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

const LAUNCHES: usize = 200;
const LIMIT: Duration = Duration::from_secs(300);

fn build(dir: &Path, name: &str, defines: &[&str]) -> std::path::PathBuf {
    let mut cmd = Command::new(ditto_bin());
    cmd.current_dir(dir)
        .args(["hipcc", "--offload-arch=gfx90a", "-O2"])
        .args(defines)
        .arg(repo_root().join("tests/hip/as_written/ranks_on_gpus.hip"))
        .args(["-o", name]);
    let out = output_within(&mut cmd, LIMIT, &format!("ditto hipcc {name}"));
    assert!(out.status.success(), "{}", stderr(&out));
    dir.join(name)
}

fn run_rank(socket: &Path, run: &str, program: &Path, rank: u32) {
    let mut cmd = ditto_run(socket, "scale", run, program);
    cmd.arg(LAUNCHES.to_string())
        .env("OMPI_COMM_WORLD_RANK", rank.to_string())
        .env("DITTO_HSA_CPU_GPUS", "2")
        .env("DITTO_STAGING_MIB", "0")
        .env("DITTO_DISPATCH", "all");
    let out = output_within(&mut cmd, LIMIT, &format!("{run} rank {rank}"));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{run} rank {rank}: {}",
        stderr(&out)
    );
    assert!(
        stdout(&out).contains(&format!(
            "rank {rank}: {LAUNCHES} launches on device {rank}, buffers owned by device {rank}"
        )),
        "{}",
        stdout(&out)
    );
}

#[test]
fn two_ranks_on_two_gpus_are_attached_on_their_own_gpu_and_compared_by_rank() {
    let dir = tempfile::tempdir().unwrap();
    let reference = build(dir.path(), "reference", &[]);
    let optimized = build(dir.path(), "optimized", &["-DPLANT_ON_RANK_1"]);
    let socket = dir.path().join("socket");
    let snaps = dir.path().join("snaps");
    let log_file = dir.path().join("collector.log");
    let collector =
        Collector::start_logging_with(&socket, &snaps, &log_file, &[("DITTO_HSA_CPU_GPUS", "2")]);
    let collector_pid = collector.pid();
    let most_mapped = AtomicUsize::new(0);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                most_mapped.fetch_max(pool_mappings(collector_pid), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        for (run, program) in [("ref", &reference), ("opt", &optimized)] {
            std::thread::scope(|ranks| {
                for rank in 0..2 {
                    let socket = &socket;
                    ranks.spawn(move || run_rank(socket, run, program, rank));
                }
            });
        }
        done.store(true, Ordering::SeqCst);
    });
    assert_eq!(
        pool_mappings(collector_pid),
        0,
        "the collector kept a mapping"
    );
    drop(collector);
    // Two ranks capture at once: at most one live mapping each.
    let most = most_mapped.load(Ordering::SeqCst);
    assert!(most <= 2, "the collector held {most} mappings at once");

    // Every attachment on the owner's GPU: rank r's on node r + 1.
    let log = std::fs::read_to_string(&log_file).unwrap();
    for rank in 0..2 {
        let attaches = attach_lines(&log, rank);
        assert_eq!(attaches.len(), 2 * LAUNCHES, "rank {rank}:\n{log}");
        let node = format!("on the GPU of node {}", rank + 1);
        assert!(
            attaches.iter().all(|l| l.ends_with(&node)),
            "rank {rank}: {:?}",
            attaches.iter().find(|l| !l.ends_with(&node))
        );
    }

    let (v, out) = compare_json(&snaps.join("ref"), &snaps.join("opt"));
    assert_eq!(v["valid"], false, "{}", stderr(&out));
    let arrays = v["arrays"].as_array().unwrap();
    assert_eq!(
        arrays.len(),
        2 * LAUNCHES,
        "one output per dispatch and rank"
    );
    for a in arrays {
        let rank = a["rank"].as_u64().unwrap();
        let expected = if rank == 1 { 1 } else { 0 };
        assert_eq!(a["mismatched_elements"].as_u64(), Some(expected), "{a}");
    }
}
