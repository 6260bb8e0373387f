//! The seeds' hazard, pinned: the collector holds no IPC mapping of the
//! application's memory once it has acknowledged a dispatch. scale_twice
//! pauses after each of its two dispatches has completed — which, under the
//! tool, means after the collector's ack — and the test reads the
//! collector's /proc/<pid>/maps at each pause.

use crate::common::*;
use std::process::Stdio;

#[test]
fn collector_holds_no_ipc_mapping_after_each_ack() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("collector.sock");
    let out = dir.path().join("snapshots");
    let pauses = dir.path().join("pauses");
    std::fs::create_dir(&pauses).unwrap();
    let collector = Collector::start(&socket, &out);

    let mut app = ditto_run(&socket, "scale_values", "paused", &app("scale_twice"))
        .env("DITTO_STAGING_MIB", "0")
        .arg("--pause-dir")
        .arg(&pauses)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();

    for k in 0..2 {
        wait_for(
            &pauses.join(format!("synced-{k}")),
            &format!("the app's pause after dispatch {k}"),
        );
        // The dispatch was acknowledged: the snapshot has it...
        let manifest = snapshot_manifest(&out.join("paused"));
        assert_eq!(manifest["dispatches"].as_array().unwrap().len(), k + 1);
        // ...and the collector maps none of the application's memory.
        assert_eq!(
            pool_mappings(collector.pid()),
            0,
            "after the ack of dispatch {k}"
        );
        // The application itself maps its pool blocks: the count can see them.
        assert!(
            pool_mappings(app.id()) > 0,
            "the probe must see pool mappings where they exist"
        );
        std::fs::write(pauses.join(format!("resume-{k}")), b"").unwrap();
    }
    let status = app.wait().unwrap();
    assert!(status.success(), "scale_twice under the tool: {status:?}");
}
