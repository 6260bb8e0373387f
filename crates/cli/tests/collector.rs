//! The collector over its real Unix socket, with a fake BufferSource:
//! protocol handling, attach → copy → detach before the ack, fingerprint
//! checks, rejection, dropped and stalled connections.

mod support;

use ditto_cli::collector::{
    Collector, CollectorConfig, ConnectionEnd, ConnectionReport, SnapshotLayout, SocketPlace,
};
use ditto_cli::store::Snapshot;
use ditto_protocol::{CollectorMessage, MissReason, ToolMessage, write_frame};
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use support::*;

struct Setup {
    source: Arc<FakeSource>,
    collector: Collector,
    dir: tempfile::TempDir,
}

fn setup_with(layout_per_run: bool, tweak: impl FnOnce(&mut CollectorConfig)) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let layout = if layout_per_run {
        SnapshotLayout::PerRun(dir.path().to_path_buf())
    } else {
        SnapshotLayout::Single(dir.path().join("snap"))
    };
    let mut config = CollectorConfig::new(layout);
    tweak(&mut config);
    let source = Arc::new(FakeSource::default());
    let collector = Collector::start(source.clone(), config, SocketPlace::Private).unwrap();
    Setup {
        source,
        collector,
        dir,
    }
}

fn setup() -> Setup {
    setup_with(false, |_| {})
}

fn finish(s: Setup) -> (Vec<ConnectionReport>, tempfile::TempDir, Arc<FakeSource>) {
    assert!(
        s.collector.settle(Duration::from_secs(5)),
        "connections ended"
    );
    let reports = s.collector.stop();
    (reports, s.dir, s.source)
}

/// No attachment of `source` is live, and each was detached once.
fn assert_every_attachment_detached(source: &FakeSource) {
    assert_eq!(source.live.load(Ordering::SeqCst), 0);
    assert_eq!(
        source.attaches.load(Ordering::SeqCst),
        source.detaches.load(Ordering::SeqCst)
    );
}

#[test]
fn dispatch_is_stored_and_acked_only_after_every_mapping_is_detached() {
    let s = setup();
    let input = f32_bytes(&[0.0, 1.0, 2.0, 3.0]);
    let output = f32_bytes(&[9.0, 0.0, 2.0, 4.0, 6.0, 9.0]);
    let hi = s.source.allocate(input.clone());
    let ho = s.source.allocate(output.clone());
    let mut tool = Tool::greet(s.collector.socket_path(), "ref");
    // Output argument: 16 bytes at offset 4 of its allocation.
    let ack = tool.dispatch(dispatch(
        0,
        vec![
            buffer(0, &hi, &input, 0, 16),
            buffer(1, &ho, &output, 4, 16),
        ],
    ));
    assert_eq!(ack.index, 0);
    assert_eq!(ack.result, Ok(()));
    // The ack is only sent after the detaches.
    assert_eq!(s.source.live.load(Ordering::SeqCst), 0);
    assert_eq!(s.collector.live_attachments(), 0);
    assert_eq!(s.source.attaches.load(Ordering::SeqCst), 2);
    assert_eq!(s.source.detaches.load(Ordering::SeqCst), 2);
    tool.goodbye(1);

    let (reports, dir, _) = finish(s);
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].end, ConnectionEnd::Goodbye);
    assert_eq!(
        (
            reports[0].dispatches_captured,
            reports[0].arrays_captured,
            reports[0].bytes_captured
        ),
        (1, 2, 32)
    );
    let snap = Snapshot::load(&dir.path().join("snap")).unwrap();
    assert_eq!(snap.manifest.dispatched_kernels[0].count, 1);
    assert_eq!(snap.manifest.runs[0].pid, 4242);
    let d = &snap.manifest.dispatches[0];
    assert_eq!((d.rank, d.index, d.buffers[1].offset), (0, 0, 4));
    let arrays = snap.load_dispatch(d).unwrap();
    assert_eq!(arrays[0].1.bytes, input);
    assert_eq!(arrays[1].1.bytes, f32_bytes(&[0.0, 2.0, 4.0, 6.0]));
}

#[test]
fn fingerprint_mismatch_is_an_error_ack_naming_argument_and_dispatch_and_nothing_is_stored() {
    let s = setup();
    let input = f32_bytes(&[1.0; 8]);
    let output = f32_bytes(&[2.0; 8]);
    let hi = s.source.allocate(input.clone());
    let ho = s.source.allocate(output.clone());
    s.source.stale.lock().unwrap().push(ho.clone());
    let mut tool = Tool::greet(s.collector.socket_path(), "ref");
    let ack = tool.dispatch(dispatch(
        3,
        vec![
            buffer(0, &hi, &input, 0, 32),
            buffer(1, &ho, &output, 0, 32),
        ],
    ));
    let err = ack.result.unwrap_err();
    assert!(
        err.contains("dispatch 3") && err.contains("argument 1") && err.contains("fingerprint"),
        "{err}"
    );
    assert_every_attachment_detached(&s.source);
    tool.goodbye(1);
    let (reports, dir, _) = finish(s);
    assert!(reports[0].failed());
    assert_eq!(reports[0].dispatches_captured, 0);
    let snap = Snapshot::load(&dir.path().join("snap")).unwrap();
    assert!(snap.manifest.dispatches.is_empty());
    assert!(
        !dir.path()
            .join("snap/dispatch-0-00003.safetensors")
            .exists()
    );
}

#[test]
fn a_failed_copy_is_still_detached_before_the_error_ack() {
    let s = setup();
    let data = f32_bytes(&[5.0; 4]);
    let h = s.source.allocate(data.clone());
    s.source.copy_fails.lock().unwrap().push(h.clone());
    let mut tool = Tool::greet(s.collector.socket_path(), "ref");
    let ack = tool.dispatch(dispatch(0, vec![buffer(1, &h, &data, 0, 16)]));
    let err = ack.result.unwrap_err();
    assert!(
        err.contains("argument 1") && err.contains("simulated copy failure"),
        "{err}"
    );
    assert_eq!(s.source.live.load(Ordering::SeqCst), 0);
    assert_eq!(s.source.detaches.load(Ordering::SeqCst), 1);
    assert_eq!(s.collector.live_attachments(), 0);
    tool.goodbye(1);
    finish(s);
}

#[test]
fn a_panic_while_capturing_is_detached_and_answered_with_an_error_ack() {
    let s = setup();
    let data = f32_bytes(&[5.0; 4]);
    let bad = s.source.allocate(data.clone());
    let good = s.source.allocate(data.clone());
    s.source.copy_panics.lock().unwrap().push(bad.clone());
    let mut tool = Tool::greet(s.collector.socket_path(), "ref");
    let err = tool
        .dispatch(dispatch(0, vec![buffer(1, &bad, &data, 0, 16)]))
        .result
        .unwrap_err();
    assert!(
        err.contains("dispatch 0") && err.contains("internal error"),
        "{err}"
    );
    assert_eq!(s.source.live.load(Ordering::SeqCst), 0);
    assert_eq!(s.collector.live_attachments(), 0);
    // The connection survives and serves the next dispatch.
    let ack = tool.dispatch(dispatch(1, vec![buffer(1, &good, &data, 0, 16)]));
    assert_eq!(ack.result, Ok(()));
    tool.goodbye(2);
    let (reports, _, _) = finish(s);
    assert_eq!(reports.len(), 1);
    assert!(reports[0].failed(), "{}", reports[0]);
    assert_eq!(reports[0].dispatches_captured, 1);
}

#[test]
fn an_extent_too_large_to_allocate_is_an_error_ack_without_attaching() {
    let s = setup();
    let data = f32_bytes(&[5.0; 4]);
    let h = s.source.allocate(data.clone());
    // Inputs (before the kernel) wait for the After part; a large one read
    // through IPC waits in a file beside the snapshot, for which no file
    // system has room.
    let mut b = buffer(1, &h, &data, 0, 16);
    b.phase = ditto_protocol::Phase::Before;
    b.alloc_size = 1 << 62;
    b.extent = 1 << 62;
    let mut tool = Tool::greet(s.collector.socket_path(), "ref");
    let err = tool.dispatch(dispatch(0, vec![b])).result.unwrap_err();
    assert!(
        err.contains("argument 1")
            && err.contains("cannot hold 4611686018427387904 bytes")
            && err.contains("are free on the file system of"),
        "{err}"
    );
    assert_eq!(s.source.attaches.load(Ordering::SeqCst), 0);
    // An output of that size is streamed, not allocated: the runtime
    // refuses to map it, and the collector lives on.
    let mut b = buffer(1, &h, &data, 0, 16);
    b.alloc_size = 1 << 62;
    b.extent = 1 << 62;
    let err = tool.dispatch(dispatch(1, vec![b])).result.unwrap_err();
    assert!(
        err.contains("argument 1") && err.contains("cannot map the allocation"),
        "{err}"
    );
    assert_eq!(s.source.live.load(Ordering::SeqCst), 0);
    assert_eq!(s.source.largest_copy.load(Ordering::SeqCst), 0);
    tool.goodbye(2);
    finish(s);
}

/// A large allocation (`len` bytes) whose f32 values are all different.
fn large(len: usize) -> Vec<u8> {
    (0..len / 4)
        .flat_map(|i| (i as f32).to_le_bytes())
        .collect()
}

#[test]
fn a_large_buffer_is_streamed_into_its_file_in_chunks_and_reads_back_exactly() {
    let s = setup();
    let small = f32_bytes(&[1.0, 2.0, 3.0, 4.0]);
    let big = large((9 << 20) + 64);
    let hs = s.source.allocate(small.clone());
    let hb = s.source.allocate(big.clone());
    let extent = (9 << 20) + 36;
    let mut tool = Tool::greet(s.collector.socket_path(), "ref");
    let ack = tool.dispatch(dispatch(
        0,
        vec![
            buffer(0, &hs, &small, 0, 16),
            buffer(2, &hb, &big, 12, extent as u64),
        ],
    ));
    assert_eq!(ack.result, Ok(()));
    assert_eq!(s.source.live.load(Ordering::SeqCst), 0);
    assert_eq!(s.source.detaches.load(Ordering::SeqCst), 2);
    // Copied through a chunk, never as one whole copy of the extent.
    assert_eq!(s.source.largest_copy.load(Ordering::SeqCst), 8 << 20);
    tool.goodbye(1);
    let (reports, dir, _) = finish(s);
    assert_eq!(
        (reports[0].arrays_captured, reports[0].bytes_captured),
        (2, 16 + extent as u64)
    );
    let snap = Snapshot::load(&dir.path().join("snap")).unwrap();
    let d = &snap.manifest.dispatches[0];
    assert_eq!((d.buffers[1].arg, d.buffers[1].extent), (2, extent as u64));
    let arrays = snap.load_dispatch(d).unwrap();
    assert_eq!(arrays[0].1.bytes, small);
    assert!(
        arrays[1].1.bytes == big[12..12 + extent],
        "the streamed buffer reads back different bytes"
    );
}

/// 64 MiB or more of memory the collector cannot read in place (device
/// memory): copied out in pieces of at most 8 MiB, each byte once, and
/// checked against its fingerprint (a stale mapping stores nothing).
#[test]
fn a_device_buffer_of_64_mib_or_more_is_copied_out_once_in_pieces_and_checked() {
    let s = setup();
    let big = large((65 << 20) + 8192);
    let good = s.source.allocate(big.clone());
    let stale = s.source.allocate(big.clone());
    s.source.stale.lock().unwrap().push(stale.clone());
    let (offset, extent) = (4100, (64 << 20) + 4100);
    let mut tool = Tool::greet(s.collector.socket_path(), "ref");
    let ack = tool.dispatch(dispatch(0, vec![buffer(1, &good, &big, offset, extent)]));
    assert_eq!(ack.result, Ok(()));
    assert_eq!(s.source.copied.load(Ordering::SeqCst), extent as usize);
    assert!(s.source.largest_copy.load(Ordering::SeqCst) <= 8 << 20);
    let err = tool
        .dispatch(dispatch(1, vec![buffer(1, &stale, &big, offset, extent)]))
        .result
        .unwrap_err();
    assert!(
        err.contains("dispatch 1") && err.contains("fingerprint"),
        "{err}"
    );
    assert_every_attachment_detached(&s.source);
    tool.goodbye(2);
    let (reports, dir, _) = finish(s);
    assert_eq!(reports[0].dispatches_captured, 1);
    let snap = Snapshot::load(&dir.path().join("snap")).unwrap();
    assert_eq!(snap.manifest.dispatches.len(), 1);
    let arrays = snap.load_dispatch(&snap.manifest.dispatches[0]).unwrap();
    let (offset, extent) = (offset as usize, extent as usize);
    assert!(
        arrays[0].1.bytes == big[offset..offset + extent],
        "the device buffer reads back different bytes"
    );
}

#[test]
fn a_streamed_buffer_whose_fingerprint_differs_stores_nothing_and_is_recorded_missing() {
    let s = setup();
    let big = large(3 << 20);
    let good = s.source.allocate(big.clone());
    let stale = s.source.allocate(big.clone());
    s.source.stale.lock().unwrap().push(stale.clone());
    let mut tool = Tool::greet(s.collector.socket_path(), "ref");
    let err = tool
        .dispatch(dispatch(
            0,
            vec![
                buffer(0, &good, &big, 0, 3 << 20),
                buffer(1, &stale, &big, 0, 3 << 20),
            ],
        ))
        .result
        .unwrap_err();
    assert!(
        err.contains("dispatch 0") && err.contains("argument 1") && err.contains("fingerprint"),
        "{err}"
    );
    assert_every_attachment_detached(&s.source);
    tool.goodbye(1);
    let (reports, dir, _) = finish(s);
    assert_eq!(reports[0].dispatches_captured, 0);
    let snap = Snapshot::load(&dir.path().join("snap")).unwrap();
    assert!(snap.manifest.dispatches.is_empty());
    assert_eq!(snap.manifest.missing.len(), 1);
    assert_eq!(
        (
            snap.manifest.missing[0].index,
            snap.manifest.missing[0].reason
        ),
        (0, ditto_protocol::MissReason::Error)
    );
    let mut names: Vec<String> = std::fs::read_dir(dir.path().join("snap"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["dispatches.jsonl", "manifest.json"]);
}

#[test]
fn a_range_outside_the_allocation_is_refused_without_attaching() {
    let s = setup();
    let data = f32_bytes(&[5.0; 4]);
    let h = s.source.allocate(data.clone());
    let mut b = buffer(2, &h, &data, 8, 8);
    b.extent = 16; // 8 + 16 > 16
    let mut tool = Tool::greet(s.collector.socket_path(), "ref");
    let err = tool.dispatch(dispatch(0, vec![b])).result.unwrap_err();
    assert!(
        err.contains("argument 2") && err.contains("exceed"),
        "{err}"
    );
    assert_eq!(s.source.attaches.load(Ordering::SeqCst), 0);
    tool.goodbye(1);
    finish(s);
}

#[test]
fn wrong_protocol_version_is_rejected_with_the_reason() {
    let s = setup();
    let mut tool = Tool::connect(s.collector.socket_path());
    let mut h = hello("ref");
    h.version = 99;
    tool.send(&ToolMessage::Hello(h));
    match tool.receive() {
        CollectorMessage::Reject { reason } => {
            assert!(
                reason.contains("version 99")
                    && reason.contains(&format!("version {}", ditto_protocol::PROTOCOL_VERSION)),
                "{reason}"
            )
        }
        other => panic!("expected Reject, got {other:?}"),
    }
    let (reports, _, _) = finish(s);
    assert!(matches!(&reports[0].end, ConnectionEnd::Rejected(r) if r.contains("99")));
}

#[test]
fn a_tool_of_the_previous_version_whose_hello_lacks_a_field_is_told_the_versions() {
    // Version 8's Hello, field for field: no `api`.
    #[derive(serde::Serialize)]
    struct HelloV8 {
        version: u32,
        pid: u32,
        run: String,
        kernel_query: String,
        command_line: Vec<String>,
        working_directory: String,
        rank: Option<u32>,
    }
    #[derive(serde::Serialize)]
    enum ToolMessageV8 {
        Hello(HelloV8),
    }
    let s = setup();
    let mut tool = Tool::connect(s.collector.socket_path());
    let old = ToolMessageV8::Hello(HelloV8 {
        version: 8,
        pid: 4242,
        run: "ref".into(),
        kernel_query: "scale_values".into(),
        command_line: vec![],
        working_directory: "/".into(),
        rank: None,
    });
    write_frame(&mut tool.stream, &old).unwrap();
    match tool.receive() {
        CollectorMessage::Reject { reason } => assert!(
            reason.contains("protocol version 8")
                && reason.contains(&format!("version {}", ditto_protocol::PROTOCOL_VERSION))
                && reason.contains("built together"),
            "{reason}"
        ),
        other => panic!("expected Reject, got {other:?}"),
    }
    finish(s);
}

#[test]
fn a_peer_of_another_uid_is_rejected() {
    // SAFETY: getuid cannot fail.
    let ours = unsafe { libc::getuid() };
    let s = setup_with(false, |c| c.allowed_uid = ours.wrapping_add(1));
    let mut tool = Tool::connect(s.collector.socket_path());
    // The collector may answer and close before reading anything from a
    // foreign peer, so the Hello may find the socket closed: that is fine.
    let _ = write_frame(&mut tool.stream, &ToolMessage::Hello(hello("ref")));
    match tool.receive() {
        CollectorMessage::Reject { reason } => {
            assert!(reason.contains(&format!("uid {ours}")), "{reason}")
        }
        other => panic!("expected Reject, got {other:?}"),
    }
    finish(s);
}

#[test]
fn the_socket_lives_in_a_private_directory() {
    use std::os::unix::fs::PermissionsExt;
    let s = setup();
    let dir = s.collector.socket_path().parent().unwrap().to_path_buf();
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    finish(s);
    assert!(!dir.exists(), "private directory removed at stop");
}

#[test]
fn a_connection_dropped_mid_dispatch_is_reported_with_the_dispatch_in_flight() {
    let s = setup();
    let data = f32_bytes(&[1.0; 4]);
    let h = s.source.allocate(data.clone());
    let mut tool = Tool::greet(s.collector.socket_path(), "ref");
    assert_eq!(
        tool.dispatch(dispatch(0, vec![buffer(0, &h, &data, 0, 16)]))
            .result,
        Ok(())
    );
    // Half of dispatch 1, then the process dies.
    let mut frame = Vec::new();
    write_frame(
        &mut frame,
        &ToolMessage::Dispatch(dispatch(1, vec![buffer(0, &h, &data, 0, 16)])),
    )
    .unwrap();
    tool.stream.write_all(&frame[..frame.len() / 2]).unwrap();
    drop(tool);
    let (reports, dir, source) = finish(s);
    match &reports[0].end {
        ConnectionEnd::Dropped { in_flight, reason } => {
            assert_eq!(*in_flight, Some(1));
            assert!(reason.contains("middle of a message"), "{reason}");
        }
        other => panic!("expected Dropped, got {other:?}"),
    }
    assert!(reports[0].failed());
    assert_eq!(source.live.load(Ordering::SeqCst), 0);
    // What was acknowledged stays.
    assert_eq!(
        Snapshot::load(&dir.path().join("snap"))
            .unwrap()
            .manifest
            .dispatches
            .len(),
        1
    );
}

#[test]
fn a_process_that_exits_without_goodbye_keeps_its_dispatches_and_is_reported() {
    let s = setup();
    let data = f32_bytes(&[1.0; 4]);
    let h = s.source.allocate(data.clone());
    let mut tool = Tool::greet(s.collector.socket_path(), "ref");
    assert_eq!(
        tool.dispatch(dispatch(0, vec![buffer(0, &h, &data, 0, 16)]))
            .result,
        Ok(())
    );
    drop(tool);
    let (reports, _, _) = finish(s);
    match &reports[0].end {
        ConnectionEnd::Dropped {
            in_flight: None,
            reason,
        } => assert!(
            reason.contains("without Goodbye after dispatch 0"),
            "{reason}"
        ),
        other => panic!("expected Dropped, got {other:?}"),
    }
    assert!(!reports[0].failed());
    assert_eq!(reports[0].dispatches_captured, 1);
}

#[test]
fn a_stalled_message_times_out_instead_of_hanging() {
    let s = setup_with(false, |c| c.frame_timeout = Duration::from_millis(300));
    let mut tool = Tool::greet(s.collector.socket_path(), "ref");
    tool.stream.write_all(&[200, 0]).unwrap(); // half a length prefix, then silence
    let start = Instant::now();
    assert!(s.collector.settle(Duration::from_secs(5)));
    assert!(start.elapsed() < Duration::from_secs(3));
    let reports = s.collector.stop();
    match &reports[0].end {
        ConnectionEnd::Dropped { reason, .. } => {
            assert!(reason.contains("no complete message"), "{reason}")
        }
        other => panic!("expected Dropped, got {other:?}"),
    }
    drop(tool);
}

#[test]
fn a_connection_that_never_says_hello_times_out() {
    let s = setup_with(false, |c| c.frame_timeout = Duration::from_millis(200));
    let _tool = Tool::connect(s.collector.socket_path());
    assert!(s.collector.settle(Duration::from_secs(5)));
    let reports = s.collector.stop();
    assert!(
        matches!(&reports[0].end, ConnectionEnd::Dropped { reason, .. } if reason.contains("Hello"))
    );
}

#[test]
fn stopping_ends_an_idle_connection_promptly() {
    let s = setup();
    let tool = Tool::greet(s.collector.socket_path(), "ref");
    let start = Instant::now();
    let reports = s.collector.stop();
    assert!(start.elapsed() < Duration::from_secs(2));
    assert_eq!(reports[0].end, ConnectionEnd::Stopped);
    drop(tool);
}

#[test]
fn runs_with_the_same_name_share_a_directory_with_increasing_rank() {
    let s = setup_with(true, |_| {});
    let data = f32_bytes(&[1.0, 2.0]);
    let h = s.source.allocate(data.clone());
    for _ in 0..2 {
        let mut tool = Tool::greet(s.collector.socket_path(), "ref");
        assert_eq!(
            tool.dispatch(dispatch(0, vec![buffer(0, &h, &data, 0, 8)]))
                .result,
            Ok(())
        );
        tool.goodbye(1);
        assert!(s.collector.settle(Duration::from_secs(5)));
    }
    let mut other = Tool::greet(s.collector.socket_path(), "opt");
    assert_eq!(
        other
            .dispatch(dispatch(0, vec![buffer(0, &h, &data, 0, 8)]))
            .result,
        Ok(())
    );
    other.goodbye(1);
    let (reports, dir, _) = finish(s);
    assert_eq!(reports.len(), 3);
    let refs = Snapshot::load(&dir.path().join("ref")).unwrap();
    let ranks: Vec<u32> = refs.manifest.dispatches.iter().map(|d| d.rank).collect();
    assert_eq!(ranks, vec![0, 1]);
    assert!(dir.path().join("ref/dispatch-1-00000.safetensors").exists());
    assert_eq!(refs.manifest.dispatched_kernels[0].count, 2);
    assert_eq!(
        Snapshot::load(&dir.path().join("opt"))
            .unwrap()
            .manifest
            .runs
            .len(),
        1
    );
}

#[test]
fn a_run_name_with_a_slash_is_rejected() {
    let s = setup_with(true, |_| {});
    let mut tool = Tool::connect(s.collector.socket_path());
    tool.send(&ToolMessage::Hello(hello("../escape")));
    assert!(
        matches!(tool.receive(), CollectorMessage::Reject { reason } if reason.contains("DITTO_RUN_NAME"))
    );
    finish(s);
}

#[test]
fn a_given_socket_path_that_exists_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sock");
    std::fs::write(&path, "").unwrap();
    let config = CollectorConfig::new(SnapshotLayout::PerRun(dir.path().to_path_buf()));
    let err = Collector::start(
        Arc::new(FakeSource::default()),
        config,
        SocketPlace::At(path.clone()),
    )
    .err()
    .expect("refused");
    assert!(err.to_string().contains("already exists"), "{err}");
}

#[test]
fn an_argument_sent_twice_is_an_error_ack_and_nothing_is_stored() {
    // Issue 21, item 9: two tensors of one name gave a safetensors file
    // Python refuses, while ditto kept the last one.
    let s = setup();
    let data = f32_bytes(&[1.0, 2.0, 3.0, 4.0]);
    let h = s.source.allocate(data.clone());
    let mut tool = Tool::greet(s.collector.socket_path(), "ref");
    let ack = tool.dispatch(dispatch(
        0,
        vec![buffer(1, &h, &data, 0, 16), buffer(1, &h, &data, 0, 16)],
    ));
    let err = ack.result.unwrap_err();
    assert!(
        err.contains("argument 1 (After) is sent twice; nothing stored"),
        "{err}"
    );
    tool.goodbye(1);
    let (reports, dir, _) = finish(s);
    assert_eq!(reports[0].dispatches_captured, 0);
    let snap = Snapshot::load(&dir.path().join("snap")).unwrap();
    assert!(snap.manifest.dispatches.is_empty());
}

#[test]
fn inputs_waiting_for_their_outputs_are_bounded_per_connection() {
    // Issue 21, item 9: inputs-only frames piled up without bound.
    let s = setup();
    let data = f32_bytes(&[1.0, 2.0, 3.0, 4.0]);
    let h = s.source.allocate(data.clone());
    let mut tool = Tool::greet(s.collector.socket_path(), "ref");
    let inputs_of = |index: u64| {
        let mut b = buffer(0, &h, &data, 0, 16);
        b.phase = ditto_protocol::Phase::Before;
        dispatch(index, vec![b])
    };
    for index in 0..16 {
        assert_eq!(
            tool.dispatch(inputs_of(index)).result,
            Ok(()),
            "inputs {index}"
        );
    }
    let err = tool.dispatch(inputs_of(16)).result.unwrap_err();
    assert!(
        err.contains("the inputs of 16 dispatch(es)") && err.contains("at most 16"),
        "{err}"
    );
    // The same dispatch's inputs twice.
    let err = tool.dispatch(inputs_of(3)).result.unwrap_err();
    assert!(err.contains("its inputs are sent twice"), "{err}");
    tool.goodbye(17);
    finish(s);
}

#[test]
fn matched_dispatches_neither_captured_nor_reported_are_recorded_lost_at_goodbye() {
    // Issue 21, item 3: a Missed lost on the way left captured + missing
    // short of what matched, and nobody said so.
    let s = setup();
    let data = f32_bytes(&[1.0, 2.0]);
    let h = s.source.allocate(data.clone());
    let mut tool = Tool::greet(s.collector.socket_path(), "ref");
    for index in [0, 1, 5] {
        assert_eq!(
            tool.dispatch(dispatch(index, vec![buffer(0, &h, &data, 0, 8)]))
                .result,
            Ok(())
        );
    }
    tool.send(&ToolMessage::Missed(ditto_protocol::Missed {
        index: 3,
        count: 1,
        arg: None,
        phase: ditto_protocol::Phase::After,
        reason: MissReason::Selection,
        detail: "not chosen".into(),
    }));
    tool.goodbye(8);
    let (reports, dir, _) = finish(s);
    let snap = Snapshot::load(&dir.path().join("snap")).unwrap();
    let lost: Vec<(u64, u64)> = snap
        .manifest
        .missing
        .iter()
        .filter(|m| m.reason == MissReason::Lost)
        .map(|m| (m.index, m.count))
        .collect();
    assert_eq!(
        lost,
        vec![(2, 1), (4, 1), (6, 2)],
        "{:?}",
        snap.manifest.missing
    );
    assert!(
        snap.manifest.missing[0]
            .detail
            .contains("neither captured nor reported missing"),
        "{:?}",
        snap.manifest.missing
    );
    assert!(
        reports[0].missing.contains(&(MissReason::Lost, 4)),
        "{:?}",
        reports[0]
    );
    assert!(reports[0].missed_some());
    assert_eq!(snap.manifest.runs[0].unaccounted, None);
}

#[test]
fn a_connection_that_ends_without_goodbye_leaves_its_run_marked_unaccounted() {
    // Issue 21, item 3: a tool that could not say Goodbye left a snapshot
    // that looked complete.
    let s = setup();
    let data = f32_bytes(&[1.0, 2.0]);
    let h = s.source.allocate(data.clone());
    let mut tool = Tool::greet(s.collector.socket_path(), "ref");
    for index in [0, 2] {
        assert_eq!(
            tool.dispatch(dispatch(index, vec![buffer(0, &h, &data, 0, 8)]))
                .result,
            Ok(())
        );
    }
    drop(tool);
    let (reports, dir, _) = finish(s);
    assert!(
        matches!(
            reports[0].end,
            ConnectionEnd::Dropped {
                in_flight: None,
                ..
            }
        ),
        "{:?}",
        reports[0].end
    );
    let snap = Snapshot::load(&dir.path().join("snap")).unwrap();
    // Below the highest index seen: dispatch 1 is known to be lost.
    let lost: Vec<(u64, u64, MissReason)> = snap
        .manifest
        .missing
        .iter()
        .map(|m| (m.index, m.count, m.reason))
        .collect();
    assert_eq!(lost, vec![(1, 1, MissReason::Lost)]);
    // From 3 on, nobody knows.
    let unaccounted = snap.manifest.runs[0].unaccounted.as_ref().unwrap();
    assert_eq!(unaccounted.from_index, 3);
    assert!(
        unaccounted
            .reason
            .contains("without Goodbye after dispatch 2"),
        "{}",
        unaccounted.reason
    );
    assert_eq!(
        snap.manifest.unaccounted(),
        vec![format!(
            "pid {} (rank 0): its dispatches from index 3 on are unaccounted ({})",
            snap.manifest.runs[0].pid, unaccounted.reason
        )]
    );
}

#[test]
fn a_connection_that_sends_no_hello_is_closed_after_the_hello_deadline_and_reported() {
    // Issue 36, item 3: idle connections held a thread each until the
    // 30 s frame timeout; a Hello is due within a few seconds.
    let s = setup();
    let _idle = Tool::connect(s.collector.socket_path());
    assert!(
        s.collector.settle(Duration::from_secs(15)),
        "the idle connection was not closed"
    );
    let reports = s.collector.stop();
    match &reports[0].end {
        ConnectionEnd::Dropped {
            in_flight: None,
            reason,
        } => assert!(
            reason.contains("no Hello within 5s of connecting"),
            "{reason}"
        ),
        other => panic!("expected Dropped, got {other:?}"),
    }
}

#[test]
fn connections_over_the_limit_are_rejected_with_a_reason_naming_it() {
    // Issue 36, item 3: 200 idle connections cost 202 threads, with no
    // limit.
    let s = setup();
    let open: Vec<Tool> = (0..256)
        .map(|i| Tool::greet(s.collector.socket_path(), &format!("p{i}")))
        .collect();
    let mut over = Tool::connect(s.collector.socket_path());
    over.send(&ToolMessage::Hello(hello("over")));
    match over.receive() {
        CollectorMessage::Reject { reason } => assert!(
            reason.contains("256 connections") && reason.contains("limit"),
            "{reason}"
        ),
        other => panic!("expected Reject, got {other:?}"),
    }
    drop(over);
    drop(open);
    assert!(s.collector.settle(Duration::from_secs(10)));
    // Below the limit again: served.
    let again = Tool::greet(s.collector.socket_path(), "again");
    again.goodbye(0);
    let (reports, _, _) = finish(s);
    let rejected: Vec<&ConnectionReport> = reports
        .iter()
        .filter(|r| matches!(r.end, ConnectionEnd::Rejected(_)))
        .collect();
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert!(rejected[0].failed());
    assert!(
        reports
            .iter()
            .any(|r| r.run.as_deref() == Some("again") && r.end == ConnectionEnd::Goodbye)
    );
}

#[test]
fn kernel_names_past_the_limit_are_an_error_ack_naming_the_limit_and_nothing_keeps_them() {
    // Issue 36, item 3: 3 MiB kernel names were stored and kept.
    let s = setup();
    let data = f32_bytes(&[1.0, 2.0]);
    let h = s.source.allocate(data.clone());
    let long = ditto_protocol::KernelName {
        mangled: format!("_Z{}v", "k".repeat(3 << 20)),
        demangled: format!("{}()", "k".repeat(3 << 20)),
    };
    let mut tool = Tool::greet(s.collector.socket_path(), "ref");
    let mut d = dispatch(0, vec![buffer(0, &h, &data, 0, 8)]);
    d.kernel = long.clone();
    let reason = tool.dispatch(d).result.unwrap_err();
    assert!(
        reason.contains("dispatch 0")
            && reason.contains("kernel name")
            && reason.contains(&format!("{} bytes", (3 << 20) + 3))
            && reason.contains("65536"),
        "{reason}"
    );
    assert!(reason.len() < 1024, "{} bytes of reason", reason.len());
    assert_eq!(s.source.attaches.load(Ordering::SeqCst), 0);
    // A well-named dispatch of the same connection is stored.
    assert_eq!(
        tool.dispatch(dispatch(1, vec![buffer(0, &h, &data, 0, 8)]))
            .result,
        Ok(())
    );
    tool.send(&ToolMessage::Goodbye(ditto_protocol::Goodbye {
        dispatched: vec![(long, 1), (kernel(), 1)],
        matched: 2,
    }));
    let (reports, dir, _) = finish(s);
    let r = &reports[0];
    assert_eq!(r.end, ConnectionEnd::Goodbye);
    assert_eq!(r.dispatches_captured, 1);
    assert!(
        r.errors
            .iter()
            .any(|e| e.contains("Goodbye") && e.contains("65536")),
        "{:?}",
        r.errors
    );
    assert!(r.errors.iter().all(|e| e.len() < 1024), "{:?}", r.errors);
    let snap = Snapshot::load(&dir.path().join("snap")).unwrap();
    let missing: Vec<(u64, MissReason, usize)> = snap
        .manifest
        .missing
        .iter()
        .map(|m| (m.index, m.reason, m.detail.len().min(1024)))
        .collect();
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert_eq!((missing[0].0, missing[0].1), (0, MissReason::Error));
    assert!(missing[0].2 < 1024);
    assert!(
        snap.manifest
            .dispatched_kernels
            .iter()
            .all(|k| k.mangled.len() < 1024 && k.demangled.len() < 1024),
        "a long name was recorded"
    );
    assert_eq!(snap.manifest.dispatches.len(), 1);
}

#[test]
fn a_dispatch_counted_error_then_timeout_is_reported_once() {
    // Issue 36, item 6: a collector stopped past the tool's timeout read
    // dispatch 0 late (its copy failed: an error) and then the tool's
    // timeout for it; the report said "1 (error), 2000 (timeout)" for 2000
    // dispatches lost.
    let s = setup();
    let data = f32_bytes(&[1.0, 2.0]);
    let gone = vec![0xee; 32];
    let mut tool = Tool::greet(s.collector.socket_path(), "ref");
    let ack = tool.dispatch(dispatch(0, vec![buffer(0, &gone, &data, 0, 8)]));
    assert!(ack.result.is_err());
    for (index, count, detail) in [
        (0, 1, "no Ack within 300 ms; released uncaptured"),
        (
            1,
            1999,
            "capture stopped at dispatch 0: no Ack within 300 ms",
        ),
    ] {
        tool.send(&ToolMessage::Missed(ditto_protocol::Missed {
            index,
            count,
            arg: None,
            phase: ditto_protocol::Phase::After,
            reason: MissReason::Timeout,
            detail: detail.into(),
        }));
    }
    tool.goodbye(2000);
    let (reports, dir, _) = finish(s);
    assert_eq!(reports[0].missing, vec![(MissReason::Timeout, 2000)]);
    let line = reports[0].to_string();
    assert!(
        line.contains("not captured: 2000 (timeout) dispatch(es)") && !line.contains("(error)"),
        "{line}"
    );
    let snap = Snapshot::load(&dir.path().join("snap")).unwrap();
    assert_eq!(
        ditto_cli::store::missing::count_by_reason(&snap.manifest),
        vec![(MissReason::Timeout, 2000)]
    );
}

#[test]
fn a_dispatch_that_finds_no_room_in_the_memory_budget_within_the_wait_is_refused_naming_it() {
    let s = setup_with(false, |c| {
        c.memory_budget = 2 << 20;
        c.memory_wait = Duration::from_millis(300);
    });
    // Inputs copied into shared memory wait in memory (large ones read
    // through IPC wait in a file: a replay capture's images).
    let data = large(3 << 19);
    let h = s.source.allocate(data.clone());
    let inputs = |tool: &mut Tool, index: u64| {
        let b = shared_memory_buffer(0, ditto_protocol::Phase::Before, &data);
        tool.send_with_files(dispatch(index, vec![b]), vec![memfd("inputs", &data)]);
        tool.ack()
    };
    let mut first = Tool::greet(s.collector.socket_path(), "first");
    let mut second = Tool::greet(s.collector.socket_path(), "second");
    assert_eq!(inputs(&mut first, 0).result, Ok(()));
    assert_eq!(s.collector.memory().used, 3 << 19);
    let err = inputs(&mut second, 0).result.unwrap_err();
    assert!(
        err.contains("dispatch 0")
            && err.contains("argument 0: cannot allocate 1572864 bytes")
            && err.contains("its inputs")
            && err.contains("other captures held 1572864 bytes")
            && err.contains("memory budget of 2097152 bytes")
            && err.contains("DITTO_COLLECTOR_MEMORY_MIB"),
        "{err}"
    );
    // The first dispatch's outputs come: it is stored, its inputs given back.
    assert_eq!(
        first
            .dispatch(dispatch(0, vec![buffer(1, &h, &data, 0, 16)]))
            .result,
        Ok(())
    );
    assert_eq!(s.collector.memory().used, 0);
    // Now the second's fit.
    assert_eq!(inputs(&mut second, 1).result, Ok(()));
    first.goodbye(1);
    drop(second);
    assert!(s.collector.settle(Duration::from_secs(5)));
    let memory = s.collector.memory();
    assert_eq!((memory.total, memory.used), (2 << 20, 0));
    // The first's inputs and outputs while it was stored; never both inputs.
    assert_eq!(memory.peak, (3 << 19) + 16);
    let (reports, dir, _) = finish(s);
    let snap = Snapshot::load(&dir.path().join("snap")).unwrap();
    assert_eq!(snap.manifest.dispatches.len(), 1);
    assert_eq!(snap.manifest.dispatches[0].buffers.len(), 2);
    assert!(
        reports
            .iter()
            .any(|r| r.run.as_deref() == Some("second") && r.failed())
    );
}
