//! A kernel's time as the application reads it from its dispatch's own
//! completion signal (what CLR does for a profiled kernel) is the kernel's
//! under ditto too. The tool leaves the application's signal on the
//! dispatch, raised by 1 while the dispatch is held, so the command
//! processor writes the kernel's start and end into it; the capture of a
//! 256 MiB allocation, far longer than this one-work-item kernel, is not
//! counted in it, and the application still sees the signal complete only
//! after the capture. The manifest's duration is the same kernel's.

use crate::common::*;

/// The four timestamps kernel_time prints: before, start, end, after.
fn times(out: &str) -> [u64; 4] {
    let line = out
        .lines()
        .find(|l| l.starts_with("kernel_time: "))
        .unwrap_or_else(|| panic!("no kernel_time line in {out}"));
    let value = |key: &str| -> u64 {
        let at = line.find(&format!("{key}=")).expect(key) + key.len() + 1;
        line[at..].split(' ').next().unwrap().parse().expect(key)
    };
    [
        value("before"),
        value("start"),
        value("end"),
        value("after"),
    ]
}

#[test]
fn a_profiled_kernel_s_own_signal_carries_the_kernel_s_times_not_the_capture_s() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let mut cmd = std::process::Command::new(ditto_bin());
    cmd.args([
        "run",
        "--hsa-runtime",
        "cpu",
        "--kernel",
        "mark_one",
        "--out",
    ])
    .arg(&snap)
    .arg("--")
    .arg(app("kernel_time"))
    .args(["--mib", "256"])
    .env("DITTO_STAGING_MIB", "0");
    let out = output_within(
        &mut cmd,
        std::time::Duration::from_secs(300),
        "kernel_time under ditto",
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let [before, start, end, after] = times(&stdout(&out));
    assert!(
        before <= start && start <= end && end <= after,
        "{before} {start} {end} {after}"
    );
    let m = snapshot_manifest(&snap);
    let d = &m["dispatches"][0];
    assert_eq!(d["buffers"][0]["extent"].as_u64(), Some(256 << 20), "{d}");
    // The CPU runtime's timestamps tick in nanoseconds.
    assert_eq!(
        d["duration_ns"].as_u64(),
        Some(end - start),
        "the manifest times the kernel the application timed"
    );
    // The wait took the capture of 256 MiB; the kernel wrote one float.
    // Before the tool left the signal on the dispatch, it carried the held
    // barrier's times: from the kernel's end to the capture's release.
    assert!(
        (end - start) * 4 < after - before,
        "the kernel took {} ns of the {} ns from launch to synchronisation",
        end - start,
        after - before
    );
}
