//! The copy transport at the collector, over its real Unix socket: buffers
//! whose bytes arrive as memfds attached to the Dispatch frame are read,
//! checked, stored and their fds closed before the ack; bad input (an fd
//! count that does not match, a file shorter than the extent, too many fds,
//! changed bytes) is an error ack naming the dispatch, never a crash, and
//! leaves no fd behind. The collector runs in this process, so
//! /proc/self/fd shows what it holds; each test names its memfds uniquely.

mod support;

use ditto_cli::collector::{Collector, CollectorConfig, SnapshotLayout, SocketPlace};
use ditto_cli::store::{Snapshot, TransportKind};
use ditto_protocol::{
    Ack, Buffer, CollectorMessage, MAX_FDS_PER_FRAME, ToolMessage, Transport, fingerprint,
    write_frame_with_fds,
};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, FromRawFd};
use std::sync::Arc;
use std::time::Duration;
use support::*;

/// A memfd named `name` holding `bytes`.
fn memfd(name: &str, bytes: &[u8]) -> File {
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid C string; the result is checked.
    let fd = unsafe { libc::memfd_create(c.as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create");
    // SAFETY: fd is new and ours.
    let mut f = unsafe { File::from_raw_fd(fd) };
    f.write_all(bytes).unwrap();
    f
}

/// Fds and mappings of this process that refer to memfds named `name`.
fn held(name: &str) -> (usize, usize) {
    let target = format!("/memfd:{name} (deleted)");
    let fds = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|t| t.to_string_lossy() == target)
        .count();
    let maps = std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains(&format!("/memfd:{name} ")))
        .count();
    (fds, maps)
}

/// A shared-memory buffer describing `bytes` as argument `arg`.
fn copied(arg: u32, bytes: &[u8]) -> Buffer {
    let mut b = buffer(arg, &[], bytes, 0, bytes.len() as u64);
    b.transport = Transport::SharedMemory;
    b
}

/// Sends a Dispatch with `files` attached (closing the sender's copies, as
/// the tool does) and returns its Ack.
fn send(tool: &mut Tool, d: ditto_protocol::Dispatch, files: Vec<File>) -> Ack {
    let fds: Vec<_> = files.iter().map(|f| f.as_fd()).collect();
    write_frame_with_fds(&tool.stream, &ToolMessage::Dispatch(d), &fds).unwrap();
    drop(fds);
    drop(files);
    match tool.receive() {
        CollectorMessage::Ack(a) => a,
        other => panic!("expected an Ack, got {other:?}"),
    }
}

fn start() -> (Arc<FakeSource>, Collector, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let source = Arc::new(FakeSource::default());
    let collector = Collector::start(
        source.clone(),
        CollectorConfig::new(SnapshotLayout::Single(dir.path().join("snap"))),
        SocketPlace::Private,
    )
    .unwrap();
    (source, collector, dir)
}

#[test]
fn shared_memory_buffers_are_stored_beside_ipc_ones_and_no_fd_or_mapping_outlives_the_ack() {
    const NAME: &str = "ditto-test-collector-copy";
    let (source, collector, dir) = start();
    let input = f32_bytes(&[1.0, 2.0, 3.0]);
    let first = f32_bytes(&[4.0, 5.0]);
    let second = f32_bytes(&[6.0, 7.0, 8.0, 9.0]);
    let handle = source.allocate(input.clone());
    let mut tool = Tool::greet(collector.socket_path(), "ref");
    let ack = send(
        &mut tool,
        dispatch(
            0,
            vec![
                copied(2, &first),
                buffer(0, &handle, &input, 0, 12),
                copied(1, &second),
            ],
        ),
        vec![memfd(NAME, &first), memfd(NAME, &second)],
    );
    assert_eq!(ack.result, Ok(()));
    assert_eq!(held(NAME), (0, 0), "no fd and no mapping after the ack");
    tool.goodbye(1);
    assert!(collector.settle(Duration::from_secs(5)));
    collector.stop();

    let snap = Snapshot::load(&dir.path().join("snap")).unwrap();
    let d = &snap.manifest.dispatches[0];
    let transports: Vec<_> = d.buffers.iter().map(|b| (b.arg, b.transport)).collect();
    assert_eq!(
        transports,
        vec![
            (2, TransportKind::SharedMemory),
            (0, TransportKind::Ipc),
            (1, TransportKind::SharedMemory)
        ]
    );
    assert!(d.buffers[0].handle.is_none());
    let arrays = snap.load_dispatch(d).unwrap();
    let by_arg = |arg: u32| {
        arrays
            .iter()
            .find(|(a, _)| *a == arg)
            .map(|(_, x)| x.bytes.clone())
            .unwrap()
    };
    assert_eq!(by_arg(2), first, "fds are matched to buffers in order");
    assert_eq!(by_arg(1), second);
    assert_eq!(by_arg(0), input);
}

#[test]
fn an_fd_count_that_does_not_match_is_an_error_ack_naming_the_dispatch() {
    const NAME: &str = "ditto-test-collector-count";
    let (_source, collector, _dir) = start();
    let bytes = f32_bytes(&[1.0]);
    let mut tool = Tool::greet(collector.socket_path(), "ref");
    let missing = send(&mut tool, dispatch(0, vec![copied(1, &bytes)]), vec![]);
    let reason = missing.result.unwrap_err();
    assert!(
        reason.contains("dispatch 0")
            && reason.contains("1 buffer(s)")
            && reason.contains("0 file"),
        "{reason}"
    );
    let extra = send(
        &mut tool,
        dispatch(1, vec![copied(1, &bytes)]),
        vec![memfd(NAME, &bytes), memfd(NAME, &bytes)],
    );
    let reason = extra.result.unwrap_err();
    assert!(
        reason.contains("dispatch 1") && reason.contains("2 file"),
        "{reason}"
    );
    assert_eq!(
        held(NAME),
        (0, 0),
        "the fds of a refused dispatch are closed"
    );
    // The connection goes on.
    let ok = send(
        &mut tool,
        dispatch(2, vec![copied(1, &bytes)]),
        vec![memfd(NAME, &bytes)],
    );
    assert_eq!(ok.result, Ok(()));
    tool.goodbye(3);
    assert!(collector.settle(Duration::from_secs(5)));
    let reports = collector.stop();
    assert_eq!(reports[0].dispatches_captured, 1);
    assert_eq!(reports[0].errors.len(), 2);
}

#[test]
fn a_copy_shorter_than_the_extent_is_an_error_ack_naming_the_buffer() {
    const NAME: &str = "ditto-test-collector-short";
    let (_source, collector, _dir) = start();
    let bytes = f32_bytes(&[1.0, 2.0, 3.0, 4.0]);
    let mut tool = Tool::greet(collector.socket_path(), "ref");
    let ack = send(
        &mut tool,
        dispatch(0, vec![copied(3, &bytes)]),
        vec![memfd(NAME, &bytes[..10])],
    );
    let reason = ack.result.unwrap_err();
    assert!(
        reason.contains("dispatch 0")
            && reason.contains("argument 3")
            && reason.contains("10 bytes"),
        "{reason}"
    );
    assert_eq!(held(NAME), (0, 0));
    tool.goodbye(1);
    assert!(collector.settle(Duration::from_secs(5)));
    assert_eq!(collector.stop()[0].dispatches_captured, 0);
}

#[test]
fn a_copy_whose_bytes_differ_from_the_tools_fingerprint_is_refused() {
    const NAME: &str = "ditto-test-collector-changed";
    let (_source, collector, _dir) = start();
    let bytes = f32_bytes(&[1.0, 2.0]);
    let mut b = copied(1, &bytes);
    b.fingerprint = fingerprint(&f32_bytes(&[1.0, 2.5]));
    let mut tool = Tool::greet(collector.socket_path(), "ref");
    let ack = send(&mut tool, dispatch(0, vec![b]), vec![memfd(NAME, &bytes)]);
    let reason = ack.result.unwrap_err();
    assert!(
        reason.contains("fingerprint mismatch") && reason.contains("shared-memory copy"),
        "{reason}"
    );
    assert_eq!(held(NAME), (0, 0));
    tool.goodbye(1);
    assert!(collector.settle(Duration::from_secs(5)));
    collector.stop();
}

#[test]
fn a_frame_with_more_fds_than_allowed_is_an_error_ack_and_every_fd_is_closed() {
    const NAME: &str = "ditto-test-collector-many";
    let (_source, collector, _dir) = start();
    let bytes = [7u8; 4];
    let mut tool = Tool::greet(collector.socket_path(), "ref");
    let buffers: Vec<_> = (0..=MAX_FDS_PER_FRAME as u32)
        .map(|i| copied(i, &bytes))
        .collect();
    let files: Vec<_> = (0..=MAX_FDS_PER_FRAME)
        .map(|_| memfd(NAME, &bytes))
        .collect();
    // write_frame_with_fds refuses to send so many: send the raw frame.
    let mut frame = Vec::new();
    ditto_protocol::write_frame(&mut frame, &ToolMessage::Dispatch(dispatch(0, buffers))).unwrap();
    let fds: Vec<_> = files.iter().map(|f| f.as_fd()).collect();
    let sent = ditto_protocol::fd_passing::send_with_fds(&tool.stream, &frame, &fds).unwrap();
    (&tool.stream).write_all(&frame[sent..]).unwrap();
    drop(fds);
    drop(files);
    let CollectorMessage::Ack(ack) = tool.receive() else {
        panic!("expected an Ack")
    };
    let reason = ack.result.unwrap_err();
    assert!(
        reason.contains("dispatch 0") && reason.contains("file descriptors"),
        "{reason}"
    );
    assert_eq!(held(NAME), (0, 0));
    tool.goodbye(1);
    assert!(collector.settle(Duration::from_secs(5)));
    collector.stop();
}
