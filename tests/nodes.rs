//! A job across nodes, one collector per node, into one run directory on
//! a shared file system: two `ditto collect --node` on this machine (two
//! sockets, as two nodes would have) write the same --out, each serving
//! different ranks of one job (started as mpirun starts them,
//! OMPI_COMM_WORLD_RANK set, through scripts/ditto-run). Each writes only
//! its own part; `ditto inspect` and `ditto compare` of the run see every
//! rank, against a run of one collector or another of several; a rank
//! seen by both collectors is an error naming both, and so is a part an
//! earlier job left in the run directory; a process without a launcher
//! rank is not served by a node's collector.

use crate::common::*;
use std::path::Path;

/// Runs `program` as rank `rank` of run `run` through the collector at
/// `socket`.
fn run_rank(socket: &Path, run: &str, rank: u32, program: &str) {
    let out = ditto_run(socket, "reduce_sum", run, &app(program))
        .env("OMPI_COMM_WORLD_RANK", rank.to_string())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "rank {rank}: {}", stderr(&out));
    assert!(
        stdout(&out).contains("sum = "),
        "rank {rank}: {}",
        stdout(&out)
    );
}

/// The ranks of a manifest's runs, in its order.
fn ranks(manifest: &serde_json::Value) -> Vec<u64> {
    manifest["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rank"].as_u64().unwrap())
        .collect()
}

/// The ranks of a compare report's `key` list (`arrays`, `mismatches`).
fn ranks_in(report: &serde_json::Value, key: &str) -> Vec<u64> {
    let mut r: Vec<u64> = report[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key}: {report}"))
        .iter()
        .map(|a| a["rank"].as_u64().unwrap())
        .collect();
    r.sort();
    r
}

#[test]
fn two_nodes_collectors_write_one_run_that_compare_and_inspect_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    // The reference: one collector, four ranks.
    let single = dir.path().join("single");
    let single_socket = dir.path().join("single.sock");
    let collector = Collector::start(&single_socket, &single);
    for rank in 0..4 {
        run_rank(&single_socket, "ref", rank, "reduce_sum_baseline");
    }
    drop(collector);
    // The job: ranks 0 and 1 on node a, 2 and 3 on node b, all at once;
    // rank 3 runs the wrong kernel in the optimized run.
    let shared = dir.path().join("shared");
    let (socket_a, socket_b) = (dir.path().join("a.sock"), dir.path().join("b.sock"));
    let node_a = Collector::start_node(&socket_a, &shared, "a");
    let node_b = Collector::start_node(&socket_b, &shared, "b");
    for (run, program) in [
        ("ref", "reduce_sum_baseline"),
        ("opt", "reduce_sum_optimized"),
    ] {
        std::thread::scope(|s| {
            for rank in 0..4u32 {
                let socket = if rank < 2 { &socket_a } else { &socket_b };
                let program = if run == "opt" && rank == 3 {
                    "reduce_sum_wrong"
                } else {
                    program
                };
                s.spawn(move || run_rank(socket, run, rank, program));
            }
        });
    }
    drop(node_a);
    drop(node_b);
    for run in ["ref", "opt"] {
        let run_dir = shared.join(run);
        let mut names: Vec<String> = std::fs::read_dir(&run_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["node-a", "node-b"], "{run}: only the two parts");
        for (part, expected) in [("node-a", [0, 1]), ("node-b", [2, 3])] {
            let mut got = ranks(&snapshot_manifest(&run_dir.join(part)));
            got.sort();
            assert_eq!(got, expected, "{run}/{part} holds its node's ranks only");
        }
    }
    // inspect sees every rank, each with its node.
    let out = ditto(&["inspect", "--json", shared.join("opt").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    let runs: Vec<(u64, String)> = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["rank"].as_u64().unwrap(),
                r["node"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        runs,
        [
            (0, "a".to_string()),
            (1, "a".to_string()),
            (2, "b".to_string()),
            (3, "b".to_string())
        ]
    );
    let dispatch_ranks: Vec<u64> = v["dispatches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["rank"].as_u64().unwrap())
        .collect();
    assert_eq!(dispatch_ranks, [0, 1, 2, 3]);
    let text = stdout(&ditto(&["inspect", shared.join("opt").to_str().unwrap()]));
    assert!(text.contains("rank 2 (launcher) node b pid"), "{text}");

    // The job's reference against one collector's: PASS, every rank.
    let (v, out) = compare_json(&single.join("ref"), &shared.join("ref"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(v["valid"], true);
    assert_eq!(ranks_in(&v, "arrays"), [0, 1, 2, 3]);
    // The job's optimized run against one collector's: FAIL on rank 3 only.
    let (v, out) = compare_json(&single.join("ref"), &shared.join("opt"));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(v["valid"], false);
    assert_eq!(ranks_in(&v, "arrays"), [0, 1, 2, 3]);
    assert_eq!(ranks_in(&v, "mismatches"), [3]);
    // Two runs of the job against each other: the same verdict.
    let (v, out) = compare_json(&shared.join("ref"), &shared.join("opt"));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(ranks_in(&v, "mismatches"), [3]);
    let summary = v["summary"].as_str().unwrap();
    assert!(summary.contains("rank 3"), "{summary}");
    assert!(!summary.contains("rank 2,"), "{summary}");
}

#[test]
fn a_rank_seen_by_two_nodes_collectors_is_an_error_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    let (socket_a, socket_b) = (dir.path().join("a.sock"), dir.path().join("b.sock"));
    let node_a = Collector::start_node(&socket_a, &shared, "a");
    let node_b = Collector::start_node(&socket_b, &shared, "b");
    run_rank(&socket_a, "ref", 0, "reduce_sum_baseline");
    run_rank(&socket_a, "ref", 1, "reduce_sum_baseline");
    run_rank(&socket_b, "ref", 1, "reduce_sum_baseline");
    drop(node_a);
    drop(node_b);
    let run = shared.join("ref");
    for args in [
        vec!["inspect", run.to_str().unwrap()],
        vec!["compare", run.to_str().unwrap(), run.to_str().unwrap()],
    ] {
        let out = ditto(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let e = stderr(&out);
        assert!(
            e.contains("rank 1 was seen by two collectors: node-a (pid ")
                && e.contains(") and node-b (pid "),
            "{args:?}: {e}"
        );
    }
}

#[test]
fn a_nodes_collector_serves_no_process_without_a_launcher_rank() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    let socket = dir.path().join("a.sock");
    let node = Collector::start_node(&socket, &shared, "a");
    let out = ditto_run(&socket, "reduce_sum", "ref", &app("reduce_sum_baseline"))
        .env_remove("OMPI_COMM_WORLD_RANK")
        .env_remove("PMI_RANK")
        .env_remove("SLURM_PROCID")
        .env_remove("RANK")
        .output()
        .unwrap();
    drop(node);
    // Fails open: the application runs on, uncaptured, and says why.
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("sum = 98301.5"), "{}", stdout(&out));
    let e = stderr(&out);
    assert!(
        e.contains("the collector rejected this process")
            && e.contains("served only with its launcher's rank"),
        "{e}"
    );
    assert!(!shared.join("ref").exists(), "no part for it");
}

#[test]
fn a_part_an_earlier_job_left_in_the_run_directory_is_an_error_naming_both_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    let (socket_a, socket_b) = (dir.path().join("a.sock"), dir.path().join("b.sock"));
    // Job 40 ran on nodes b: its part stays.
    let old = Collector::start_node_in_job(&socket_b, &shared, "b", "40");
    run_rank(&socket_b, "ref", 1, "reduce_sum_baseline");
    drop(old);
    // Job 41 runs on node a only, into the same --out.
    let new = Collector::start_node_in_job(&socket_a, &shared, "a", "41");
    run_rank(&socket_a, "ref", 0, "reduce_sum_baseline");
    drop(new);
    let manifest = snapshot_manifest(&shared.join("ref/node-a"));
    assert_eq!(manifest["job"], "41");
    let out = ditto(&["inspect", shared.join("ref").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let e = stderr(&out);
    assert!(
        e.contains("its parts are of different jobs: node-a of job 41, node-b of job 40"),
        "{e}"
    );
}

/// The ranks of `inspect --json`'s dispatches of run directory `run`.
fn inspected_dispatch_ranks(run: &Path) -> Vec<u64> {
    let out = ditto(&["inspect", "--json", run.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    json(&out)["dispatches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["rank"].as_u64().unwrap())
        .collect()
}

#[test]
fn a_second_collector_of_one_node_name_never_replaces_the_part_another_collector_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    let (socket_a, socket_a2) = (dir.path().join("a.sock"), dir.path().join("a2.sock"));
    // Collector a serves rank 0 of run ref to its end, then idles.
    let a = Collector::start_node(&socket_a, &shared, "a");
    run_rank(&socket_a, "ref", 0, "reduce_sum_baseline");
    let rank0 = inspected_dispatch_ranks(&shared.join("ref"));
    assert!(
        !rank0.is_empty() && rank0.iter().all(|&r| r == 0),
        "{rank0:?}"
    );
    // A second collector given the same node name gets rank 1 of that run.
    let a2 = Collector::start_node(&socket_a2, &shared, "a");
    let out = ditto_run(&socket_a2, "reduce_sum", "ref", &app("reduce_sum_baseline"))
        .env("OMPI_COMM_WORLD_RANK", "1")
        .output()
        .unwrap();
    drop(a2);
    let a_pid = a.pid();
    drop(a);
    // Rank 0's part is whole: every dispatch a captured is still listed.
    assert_eq!(inspected_dispatch_ranks(&shared.join("ref")), rank0);
    // Rank 1 was refused: it ran on uncaptured and says why.
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let e = stderr(&out);
    assert!(
        e.contains("ref/node-a: this part of the run holds rank 0 (")
            && e.contains("written by another collector of node a: pid ")
            && e.contains(&format!("pid {a_pid} on host "))
            && e.contains("not stopped: it still runs, or it was killed")
            && e.contains("give this collector another --node name, or write into another --out"),
        "{e}"
    );
}
