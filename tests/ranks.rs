//! Many processes through one `ditto collect`: four ranks started as mpirun
//! starts them (OMPI_COMM_WORLD_RANK set), each through scripts/ditto-run,
//! give one labelled snapshot set per run name, and `ditto compare` pairs
//! the two sets by rank, not by connection order.

use crate::common::*;

fn run_rank(socket: &std::path::Path, run: &str, rank: u32) {
    let n = (256 + rank).to_string();
    let out = ditto_run(socket, "scale_values<float>", run, &app("scale_values"))
        .args(["float", &n])
        .env("OMPI_COMM_WORLD_RANK", rank.to_string())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "rank {rank}: {}", stderr(&out));
}

#[test]
fn four_ranks_through_ditto_run_pair_by_rank_in_compare() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("socket");
    let snaps = dir.path().join("snaps");
    let collector = Collector::start(&socket, &snaps);
    // Reference ranks all at once; optimized ranks one by one in reverse
    // order, so connection order and rank differ.
    std::thread::scope(|s| {
        for rank in 0..4 {
            let socket = &socket;
            s.spawn(move || run_rank(socket, "ref", rank));
        }
    });
    for rank in (0..4).rev() {
        run_rank(&socket, "opt", rank);
    }
    drop(collector);
    for run in ["ref", "opt"] {
        let m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(snaps.join(run).join("manifest.json")).unwrap())
                .unwrap();
        let mut ranks: Vec<u64> = m["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                assert_eq!(r["rank_source"], "launcher");
                r["rank"].as_u64().unwrap()
            })
            .collect();
        ranks.sort();
        assert_eq!(ranks, [0, 1, 2, 3], "{run}");
    }
    let (v, out) = compare_json(&snaps.join("ref"), &snaps.join("opt"));
    assert_eq!(v["valid"], true, "{}", stderr(&out));
    let arrays = v["arrays"].as_array().unwrap();
    assert_eq!(arrays.len(), 8, "two arrays per rank");
    for a in arrays {
        let rank = a["rank"].as_u64().unwrap();
        assert_eq!(a["total_elements"].as_u64().unwrap(), 256 + rank, "{a}");
    }
}
