//! The tool on a discrete GPU's memory, as the CPU runtime models it by
//! default: GPU memory the CPU cannot touch, and kernels released at AGENT
//! scope (as HIP's CLR releases every kernel) whose writes the SDMA copy
//! engines do not see until a SYSTEM-scope release. The tool reads device
//! buffers only through the copy engine, so without its scope fix
//! (DITTO_TEST_KEEP_AGENT_RELEASE=1, for tests only) a capture stores the
//! bytes from before the dispatch and its own fingerprint, read the same
//! way, does not notice: the hazard is real in the model. With the fix the
//! capture holds what the kernel wrote.

use crate::common::*;
use std::path::Path;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(300);
const DISPATCHES: u64 = 6;

/// dispatch_storm with CLR's AGENT-scope kernels under ditto; the
/// snapshot directory, the trace and the run's stderr.
fn storm_with_agent_scope_kernels(
    dir: &Path,
    keep_agent_release: bool,
) -> (std::path::PathBuf, String) {
    let socket = dir.join("collector.sock");
    let out = dir.join("snapshots");
    let trace = dir.join("trace.txt");
    let collector = Collector::start(&socket, &out);
    let mut cmd = ditto_run(&socket, "storm_fill", "storm", &app("dispatch_storm"));
    cmd.arg(DISPATCHES.to_string())
        .env("HIPLITE_KERNEL_SCOPE", "agent")
        .env("DITTO_HSA_CPU_TRACE", &trace);
    if keep_agent_release {
        cmd.env("DITTO_TEST_KEEP_AGENT_RELEASE", "1");
    }
    let o = output_within(&mut cmd, LIMIT, "dispatch_storm under ditto");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    drop(collector);
    let trace = std::fs::read_to_string(&trace).unwrap_or_default();
    (out.join("storm"), trace)
}

/// What dispatch `index` of the storm wrote at element j: the warm-up
/// (index 0) writes -1 + j, dispatch i of the loop (index i + 1) i + j.
fn written(index: u64, j: usize) -> f32 {
    index as f32 - 1.0 + j as f32
}

fn captured(snap: &Path) -> Vec<(u64, Vec<f32>)> {
    let m = snapshot_manifest(snap);
    assert_eq!(missing_count(&m, "error"), 0, "no capture failed: {m}");
    assert_eq!(missing_count(&m, "timeout"), 0, "{m}");
    let dispatches = m["dispatches"].as_array().expect("dispatches");
    assert_eq!(dispatches.len() as u64, DISPATCHES + 1, "{m}");
    dispatches
        .iter()
        .map(|d| {
            assert_eq!(d["buffers"][0]["transport"], "staged", "{d}");
            let values = f32_tensor(snap, d["file"].as_str().unwrap(), "arg0");
            (d["index"].as_u64().unwrap(), values)
        })
        .collect()
}

#[test]
fn without_the_scope_fix_an_sdma_capture_stores_the_bytes_before_the_dispatch_unnoticed() {
    let dir = tempfile::tempdir().unwrap();
    let (snap, trace) = storm_with_agent_scope_kernels(dir.path(), true);
    for (index, values) in captured(&snap) {
        assert_eq!(values.len(), 1024);
        for j in [0usize, 1, 1023] {
            // The buffer as the dispatch before left it (zeros before the
            // first): the copy engine saw no write of this dispatch, and
            // the fingerprint, read the same way, agreed.
            let before = if index == 0 {
                0.0
            } else {
                written(index - 1, j)
            };
            assert_eq!(values[j], before, "dispatch {index}, element {j}");
        }
    }
    let stale_reads = trace
        .lines()
        .filter(|l| l.starts_with("stale-read"))
        .count();
    assert!(
        stale_reads as u64 > DISPATCHES,
        "each capture read bytes its dispatch had not yet released: {stale_reads} stale reads"
    );
}

#[test]
fn with_the_scope_fix_every_capture_holds_what_the_kernel_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let (snap, trace) = storm_with_agent_scope_kernels(dir.path(), false);
    for (index, values) in captured(&snap) {
        for j in [0usize, 1, 1023] {
            assert_eq!(
                values[j],
                written(index, j),
                "dispatch {index}, element {j}"
            );
        }
    }
    assert!(
        !trace.lines().any(|l| l.starts_with("stale-read")),
        "the tool never read unreleased bytes:\n{trace}"
    );
}

#[test]
fn a_program_that_reads_device_memory_on_the_host_faults_as_on_a_gpu() {
    use std::os::unix::process::ExitStatusExt;
    let o = run_plain(&app("host_reads_device"), &[]);
    assert!(
        stdout(&o).contains("reading device memory on the host"),
        "it got that far: {}{}",
        stdout(&o),
        stderr(&o)
    );
    if cpu_has_protection_keys() {
        assert_eq!(
            o.status.signal(),
            Some(libc::SIGSEGV),
            "the host load of hipMalloc memory faults: {:?}\n{}",
            o.status,
            stderr(&o)
        );
    } else {
        // No protection keys on this CPU: the load cannot fault here. The
        // runtime must say so, not pass silently.
        assert!(
            stderr(&o).contains("GPU memory is not protected from CPU threads (pkey_alloc failed"),
            "{}",
            stderr(&o)
        );
        eprintln!(
            "NOT CHECKED on this machine: its CPU has no protection keys (no `pku` flag), so the \
             host load of device memory cannot fault here; checked that the runtime says so"
        );
    }
    // Read through hipMemcpy, as HIP requires, the same buffer is right.
    let o = run_plain(&app("host_reads_device"), &["--copy"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("sum=32640"), "{}", stdout(&o));
}

#[test]
fn outputs_in_virtual_memory_are_captured_from_the_mapping_and_a_remapped_range_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("collector.sock");
    let out = dir.path().join("snapshots");
    let collector = Collector::start(&socket, &out);
    let o = output_within(
        &mut ditto_run(&socket, "vmem_fill", "vmem", &app("vmem_output")),
        LIMIT,
        "vmem_output under ditto",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("vmem_output: ok"), "{}", stdout(&o));
    drop(collector);
    let snap = out.join("vmem");
    let m = snapshot_manifest(&snap);
    assert_eq!(missing_count(&m, "error"), 0, "{m}");
    let dispatches = m["dispatches"].as_array().expect("dispatches");
    assert_eq!(dispatches.len(), 2, "{m}");
    // The output starts 64 KiB into a 2 MiB mapping: the buffer reaches the
    // mapping's end (what the tool learnt from hsa_amd_vmem_map; pointer
    // info would have given the pointer itself as the start). The runtime
    // exports no IPC handle of virtual memory: it travels as a copy.
    for (d, value) in dispatches.iter().zip([1.0f32, 100.0]) {
        let buffer = &d["buffers"][0];
        assert_eq!(buffer["transport"], "shared-memory", "{d}");
        let file = d["file"].as_str().unwrap();
        let after = f32_tensor(&snap, file, "arg0");
        assert_eq!(after.len(), ((2 << 20) - (64 << 10)) / 4, "{d}");
        for j in [0usize, 1, 1023] {
            assert_eq!(
                after[j],
                value + j as f32,
                "dispatch {}, element {j}",
                d["index"]
            );
        }
        // Before the kernel: the fresh handle's zeros, the second time too
        // (the unmapped range was forgotten, not served from the first).
        let before = f32_tensor(&snap, file, "arg0.before");
        assert_eq!(before[0], 0.0, "{d}");
    }
}
