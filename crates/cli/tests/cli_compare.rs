//! `ditto compare` as a user runs it: exit codes 0/1/2, the torch-shaped
//! text, the JSON object and the errors for structural differences; and
//! `ditto inspect --json --manifest`, the manifest the Python package reads
//! snapshots through, on the same kind of snapshot.

mod support;

use ditto_cli::store::{CapturedBuffer, SnapshotWriter};
use ditto_protocol::{DType, Goodbye, KernelName};
use std::path::Path;
use std::process::{Command, Output};
use support::*;

/// Writes a snapshot of reduce_sum with `outputs[i]` as dispatch i's arg 1.
fn snapshot(dir: &Path, outputs: &[&[f32]]) {
    let mut w = SnapshotWriter::create(dir, "reduce_sum").unwrap();
    let rank = w.add_run(&hello("r")).unwrap();
    let name = KernelName {
        mangled: "_Z10reduce_sumPKfPfi".into(),
        demangled: "reduce_sum(float const*, float*, int)".into(),
    };
    for (i, out) in outputs.iter().enumerate() {
        let input = f32_bytes(&[0.5; 4]);
        let output = f32_bytes(out);
        let mut d = dispatch(i as u64, vec![]);
        d.kernel = name.clone();
        let captured = [
            CapturedBuffer {
                buffer: buffer(0, &[1; 32], &input, 0, input.len() as u64),
                data: input.clone(),
            },
            CapturedBuffer {
                buffer: buffer(1, &[2; 32], &output, 0, output.len() as u64),
                data: output.clone(),
            },
        ];
        w.add_dispatch(rank, 4242, &d, &captured).unwrap();
    }
    let other = KernelName {
        mangled: "_Z10vector_addPKfS0_Pfi".into(),
        demangled: "vector_add(float const*, float const*, float*, int)".into(),
    };
    let mut dispatched = vec![(other, 3)];
    if !outputs.is_empty() {
        dispatched.push((name, outputs.len() as u64));
    }
    let matched = outputs.len() as u64;
    w.add_goodbye(&Goodbye {
        dispatched,
        matched,
    })
    .unwrap();
}

fn ditto(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ditto"))
        .args(args)
        .output()
        .expect("ditto runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

struct Dirs {
    _tmp: tempfile::TempDir,
    reference: String,
    optimized: String,
}

fn dirs(reference: &[&[f32]], optimized: &[&[f32]]) -> Dirs {
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path().join("ref");
    let o = tmp.path().join("opt");
    snapshot(&r, reference);
    snapshot(&o, optimized);
    Dirs {
        reference: r.display().to_string(),
        optimized: o.display().to_string(),
        _tmp: tmp,
    }
}

#[test]
fn equal_snapshots_pass_with_exit_0() {
    let d = dirs(&[&[114688.0]], &[&[114688.0]]);
    let out = ditto(&["compare", &d.reference, &d.optimized]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Snapshots written without kernel times: the timing line says so.
    assert_eq!(
        text(&out.stdout),
        "PASS reduce_sum(float const*, float*, int): 2 arrays compared, all within tolerance\n\
         timing: no kernel times: the runtime gave none for either run (duration_ns is null in \
         its manifest), so the speedup is unknown\n"
    );
}

#[test]
fn a_wrong_result_fails_with_exit_1_and_a_torch_shaped_message() {
    let d = dirs(&[&[114688.0]], &[&[0.0]]);
    let out = ditto(&["compare", &d.reference, &d.optimized]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("FAIL reduce_sum(float const*, float*, int): 1 of 2 arrays differ\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("dispatch 0, arg 1 (float32[1]): Mismatched elements: 1 / 1 (100.0%)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Greatest absolute difference: 114688 at index (0,) (up to 1e-05 allowed)"),
        "{stdout}"
    );
    assert!(!stdout.contains('\x1b'), "no colour into a pipe");
}

#[test]
fn json_reports_validity_and_the_mismatching_argument() {
    let d = dirs(&[&[1.0, 2.0], &[3.0, 4.0]], &[&[1.0, 2.0], &[3.0, 5.0]]);
    let out = ditto(&["compare", &d.reference, &d.optimized, "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], false);
    assert_eq!(v["kernel"], "reduce_sum(float const*, float*, int)");
    assert_eq!(v["arrays_compared"], 4);
    assert_eq!(v["mismatches"].as_array().unwrap().len(), 1);
    let m = &v["mismatches"][0];
    assert_eq!(
        (m["dispatch"].as_u64(), m["arg"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(
        (
            m["mismatched_elements"].as_u64(),
            m["total_elements"].as_u64()
        ),
        (Some(1), Some(2))
    );
    assert_eq!(m["max_abs_diff"], 1.0);
    assert_eq!(m["max_abs_diff_index"], 1);
    assert_eq!(m["max_rel_diff"], 0.25);
}

#[test]
fn user_tolerances_can_accept_a_difference() {
    let d = dirs(&[&[1.0]], &[&[1.1]]);
    assert_eq!(
        ditto(&["compare", &d.reference, &d.optimized])
            .status
            .code(),
        Some(1)
    );
    let out = ditto(&[
        "compare",
        &d.reference,
        &d.optimized,
        "--atol",
        "0.2",
        "--rtol",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
}

#[test]
fn atol_without_rtol_is_an_error() {
    let d = dirs(&[&[1.0]], &[&[1.0]]);
    let out = ditto(&["compare", &d.reference, &d.optimized, "--atol", "0.1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--rtol"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_kernel_never_captured_is_an_error_listing_what_ran() {
    let d = dirs(&[&[1.0]], &[]);
    let out = ditto(&["compare", &d.reference, &d.optimized, "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.starts_with("ditto: error: "), "{stderr}");
    assert!(
        stderr.contains("optimized run") && stderr.contains("\"reduce_sum\""),
        "{stderr}"
    );
    assert!(
        stderr.contains("vector_add(float const*, float const*, float*, int) ×3"),
        "{stderr}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], false);
    assert!(v["error"].as_str().unwrap().contains("never dispatched"));
}

#[test]
fn different_dispatch_counts_are_an_error() {
    let d = dirs(&[&[1.0], &[1.0]], &[&[1.0]]);
    let out = ditto(&["compare", &d.reference, &d.optimized]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("captured 2 dispatch(es)"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn different_element_counts_are_an_error_naming_the_argument() {
    let d = dirs(&[&[1.0, 2.0]], &[&[1.0]]);
    let out = ditto(&["compare", &d.reference, &d.optimized]);
    assert_eq!(out.status.code(), Some(2));
    let e = text(&out.stderr);
    assert!(
        e.contains("dispatch 0, arg 1") && e.contains("2 elements"),
        "{e}"
    );
}

#[test]
fn a_directory_that_is_not_a_snapshot_is_an_error_naming_it() {
    let d = dirs(&[&[1.0]], &[&[1.0]]);
    let empty = tempfile::tempdir().unwrap();
    let out = ditto(&["compare", &d.reference, empty.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let e = text(&out.stderr);
    assert!(
        e.contains(&empty.path().join("manifest.json").display().to_string()),
        "{e}"
    );
}

#[test]
fn bytes_arrays_compare_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, last) in [("ref", 3u8), ("opt", 4u8)] {
        let mut w = SnapshotWriter::create(&tmp.path().join(name), "k").unwrap();
        let data = vec![1u8, 2, last];
        let mut b = buffer(0, &[1; 32], &data, 0, 3);
        b.dtype = DType::Bytes;
        b.fingerprint = ditto_protocol::fingerprint(&data);
        w.add_dispatch(
            0,
            1,
            &dispatch(0, vec![]),
            &[CapturedBuffer { buffer: b, data }],
        )
        .unwrap();
    }
    let out = ditto(&[
        "compare",
        tmp.path().join("ref").to_str().unwrap(),
        tmp.path().join("opt").to_str().unwrap(),
        "--atol",
        "5",
        "--rtol",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("arg 0 (bytes[3])"));
}

/// `ditto compare REF OPT` with its standard output a pipe whose reader
/// has already left (as `| true` leaves it): the exit status is the verdict.
fn compare_into_a_closed_pipe(d: &Dirs) -> Option<i32> {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills two fds, owned below.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both fds are new and owned here only.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read_end);
    let out = Command::new(env!("CARGO_BIN_EXE_ditto"))
        .args(["compare", &d.reference, &d.optimized])
        .stdout(std::process::Stdio::from(write_end))
        .output()
        .expect("ditto runs");
    assert!(
        text(&out.stderr).is_empty(),
        "a reader that left is not an error: {}",
        text(&out.stderr)
    );
    out.status.code()
}

#[test]
fn the_exit_status_is_the_verdict_when_the_reader_of_standard_output_left() {
    let differ = dirs(&[&[114688.0]], &[&[0.0]]);
    assert_eq!(compare_into_a_closed_pipe(&differ), Some(1), "a FAIL is 1");
    let same = dirs(&[&[1.0]], &[&[1.0]]);
    assert_eq!(compare_into_a_closed_pipe(&same), Some(0), "a PASS is 0");
}

#[test]
fn inspect_manifest_json_is_the_manifest_completed_from_the_journal_without_tensor_files() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let mut w = SnapshotWriter::create(&snap, "reduce_sum").unwrap();
    let rank = w.add_run(&hello("r")).unwrap();
    for i in 0..3u64 {
        let output = f32_bytes(&[i as f32; 4]);
        let captured = [CapturedBuffer {
            buffer: buffer(1, &[2; 32], &output, 0, output.len() as u64),
            data: output.clone(),
        }];
        w.add_dispatch(rank, 4242, &dispatch(i, vec![]), &captured)
            .unwrap();
    }
    w.set_unaccounted(rank, 3, "the connection closed").unwrap();
    drop(w);
    // A collector killed between manifest writes: dispatches 1 and 2 only in
    // the journal, then a timeout for dispatch 2 and a line cut short.
    let path = snap.join("manifest.json");
    let mut manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let first = manifest["dispatches"][0].clone();
    manifest["dispatches"] = serde_json::json!([first]);
    std::fs::write(&path, manifest.to_string()).unwrap();
    let timeout = serde_json::json!({"missing": {"rank": 0, "pid": 4242, "index": 2, "count": 1,
        "arg": null, "phase": null, "reason": "timeout", "detail": "no Ack"}});
    let mut journal = std::fs::OpenOptions::new()
        .append(true)
        .open(snap.join("dispatches.jsonl"))
        .unwrap();
    use std::io::Write;
    write!(journal, "{timeout}\n{{\"rank\": 0, \"ind").unwrap();
    drop(journal);
    // No tensor file is read: the manifest is all that is printed.
    let tensor_file = first["file"].as_str().unwrap().to_string();
    std::fs::remove_file(snap.join(&tensor_file)).unwrap();

    let o = ditto(&["inspect", "--json", "--manifest", snap.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["dir"], snap.to_str().unwrap());
    let m = &v["manifest"];
    assert_eq!(m["kernel_query"], "reduce_sum");
    let indices: Vec<u64> = m["dispatches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["index"].as_u64().unwrap())
        .collect();
    assert_eq!(
        indices,
        [0, 1],
        "dispatch 1 from the journal; 2 lost to its timeout"
    );
    let d0 = &m["dispatches"][0];
    assert_eq!(d0["file"], tensor_file.as_str());
    assert_eq!(
        (d0["rank"].as_u64(), d0["pid"].as_u64()),
        (Some(0), Some(4242))
    );
    let b = &d0["buffers"][0];
    assert_eq!(
        (b["arg"].as_u64(), b["tensor"].as_str()),
        (Some(1), Some("arg1"))
    );
    assert_eq!(
        (b["dtype"].as_str(), b["elements"].as_u64()),
        (Some("float32"), Some(4))
    );
    assert_eq!(b["shape"], serde_json::json!([4]));
    assert!(b["fingerprint"].is_u64(), "{b}");
    let missing = m["missing"].as_array().unwrap();
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert_eq!(
        (
            &missing[0]["index"],
            &missing[0]["reason"],
            &missing[0]["arg"]
        ),
        (
            &serde_json::json!(2),
            &serde_json::json!("timeout"),
            &serde_json::Value::Null
        )
    );
    assert_eq!(
        v["incomplete"],
        serde_json::json!([
            "pid 4242 (rank 0): its dispatches from index 3 on are unaccounted (the connection closed)"
        ])
    );
    // --manifest is a --json form, and lists no values.
    let o = ditto(&["inspect", "--manifest", snap.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}
