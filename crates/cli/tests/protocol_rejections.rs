//! The collector against peers that break the protocol: a truncated frame,
//! an oversized length prefix, bytes that do not decode, a message out of
//! place. Each ends that connection with a reason that says what was wrong;
//! the collector keeps serving the next connection; nothing hangs.
//! (Wrong version and a foreign uid: tests/collector.rs.)

mod support;

use ditto_cli::collector::{
    Collector, CollectorConfig, ConnectionEnd, SnapshotLayout, SocketPlace,
};
use ditto_protocol::{CollectorMessage, MAX_FRAME_BYTES, ToolMessage, read_frame, write_frame};
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;
use support::*;

fn collector(dir: &tempfile::TempDir) -> Collector {
    let config = CollectorConfig::new(SnapshotLayout::Single(dir.path().join("snap")));
    Collector::start(
        Arc::new(FakeSource::default()),
        config,
        SocketPlace::Private,
    )
    .unwrap()
}

/// Runs `peer` against a fresh collector, then checks that a well-behaved
/// tool is still served, and returns how the misbehaving connection ended.
fn end_of(peer: impl FnOnce(&mut Tool)) -> ConnectionEnd {
    let dir = tempfile::tempdir().unwrap();
    let c = collector(&dir);
    let mut bad = Tool::connect(c.socket_path());
    peer(&mut bad);
    // The collector closes a broken connection: the peer reads EOF (or an
    // answer), never blocks for good (the read timeout is 10 s).
    let mut rest = Vec::new();
    let _ = bad.stream.read_to_end(&mut rest);
    drop(bad);
    let good = Tool::greet(c.socket_path(), "after");
    good.goodbye(0);
    assert!(c.settle(Duration::from_secs(10)), "connections ended");
    let reports = c.stop();
    assert_eq!(reports.len(), 2, "{reports:?}");
    let after = reports
        .iter()
        .find(|r| r.run.as_deref() == Some("after"))
        .expect("the well-behaved tool was served");
    assert_eq!(after.end, ConnectionEnd::Goodbye);
    reports
        .into_iter()
        .find(|r| r.run.as_deref() != Some("after"))
        .unwrap()
        .end
}

fn dropped_reason(end: ConnectionEnd) -> String {
    match end {
        ConnectionEnd::Dropped { reason, .. } => reason,
        ConnectionEnd::Rejected(reason) => reason,
        other => panic!("expected the connection to be dropped or rejected, got {other:?}"),
    }
}

#[test]
fn an_oversized_length_prefix_is_refused_without_reading_or_allocating_it() {
    let end = end_of(|t| {
        t.stream
            .write_all(&(MAX_FRAME_BYTES + 1).to_le_bytes())
            .unwrap();
    });
    let reason = dropped_reason(end);
    assert!(
        reason.contains(&(MAX_FRAME_BYTES + 1).to_string()) || reason.contains("too large"),
        "{reason}"
    );
}

#[test]
fn a_frame_that_does_not_decode_ends_the_connection_with_a_decode_error() {
    let end = end_of(|t| {
        let garbage = [0xffu8; 12];
        t.stream
            .write_all(&(garbage.len() as u32).to_le_bytes())
            .unwrap();
        t.stream.write_all(&garbage).unwrap();
    });
    let reason = dropped_reason(end);
    assert!(reason.contains("waiting for Hello"), "{reason}");
}

#[test]
fn a_truncated_hello_ends_the_connection_as_cut_in_the_middle() {
    let end = end_of(|t| {
        let mut frame = Vec::new();
        write_frame(&mut frame, &ToolMessage::Hello(hello("cut"))).unwrap();
        t.stream.write_all(&frame[..frame.len() - 3]).unwrap();
        t.stream.shutdown(std::net::Shutdown::Write).unwrap();
    });
    let reason = dropped_reason(end);
    assert!(reason.contains("middle of a message"), "{reason}");
}

#[test]
fn a_dispatch_before_hello_is_rejected_naming_what_came() {
    let end = end_of(|t| {
        t.send(&ToolMessage::Dispatch(dispatch(0, vec![])));
        match read_frame::<_, CollectorMessage>(&mut t.stream) {
            Ok(CollectorMessage::Reject { reason }) => {
                assert!(reason.contains("expected Hello first"), "{reason}")
            }
            other => panic!("expected a Reject, got {other:?}"),
        }
    });
    assert!(matches!(end, ConnectionEnd::Rejected(r) if r.contains("Dispatch")));
}

#[test]
fn a_second_hello_ends_the_connection_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let c = collector(&dir);
    let mut t = Tool::greet(c.socket_path(), "twice");
    t.send(&ToolMessage::Hello(hello("twice")));
    let mut rest = Vec::new();
    let _ = t.stream.read_to_end(&mut rest);
    drop(t);
    assert!(c.settle(Duration::from_secs(10)), "connection ended");
    let reports = c.stop();
    let reason = dropped_reason(reports[0].end.clone());
    assert!(reason.contains("Hello"), "{reason}");
}

#[test]
fn a_missed_report_past_the_largest_index_is_ignored_with_a_reason() {
    // Issue 21, item 7: such a record made `ditto compare` loop for ever.
    let dir = tempfile::tempdir().unwrap();
    let c = collector(&dir);
    let mut t = Tool::greet(c.socket_path(), "absurd");
    for (index, count) in [(1, u64::MAX), (0, 0)] {
        t.send(&ToolMessage::Missed(ditto_protocol::Missed {
            index,
            count,
            arg: None,
            phase: ditto_protocol::Phase::After,
            reason: ditto_protocol::MissReason::Selection,
            detail: "crafted".into(),
        }));
    }
    t.goodbye(0);
    assert!(c.settle(Duration::from_secs(10)), "connections ended");
    let reports = c.stop();
    assert_eq!(reports.len(), 1);
    let errors = &reports[0].errors;
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0].contains("runs past the largest index; the report is ignored"),
        "{errors:?}"
    );
    assert!(
        errors[1].contains("covers no dispatch (count 0)"),
        "{errors:?}"
    );
    assert!(reports[0].missing.is_empty(), "{:?}", reports[0].missing);
}

#[test]
fn a_hello_with_a_string_past_the_limit_is_rejected_naming_it() {
    // Issue 36, item 3: strings from the tool are kept (the run record);
    // they are bounded like kernel names.
    let end = end_of(|t| {
        let mut h = hello("long");
        h.kernel_query = "q".repeat(3 << 20);
        t.send(&ToolMessage::Hello(h));
        match read_frame::<_, CollectorMessage>(&mut t.stream) {
            Ok(CollectorMessage::Reject { reason }) => assert!(
                reason.contains("kernel query")
                    && reason.contains(&(3u64 << 20).to_string())
                    && reason.contains("65536"),
                "{reason}"
            ),
            other => panic!("expected a Reject, got {other:?}"),
        }
    });
    assert!(matches!(end, ConnectionEnd::Rejected(r) if r.contains("65536") && r.len() < 1024));
}
