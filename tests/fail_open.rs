//! Fail-open (issue 4, item 8): with no collector listening, a collector
//! killed in the middle of a capture, one that never answers, or one that
//! answers a Dispatch with something other than its Ack, the tool logs one
//! warning, releases every held dispatch and the application runs on with
//! its own exit code and output, promptly.

use crate::common::*;
use ditto_protocol::{
    Ack, CollectorMessage, MissReason, PROTOCOL_VERSION, ToolMessage, read_frame, write_frame,
};
use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::{Command, Output};
use std::thread::JoinHandle;
use std::time::Duration;

#[test]
fn application_without_collector_prints_what_it_prints_without_the_tool() {
    let plain = run_plain(&app("scale_twice"), &[]);
    assert!(
        plain.status.success(),
        "plain run failed: {}",
        stderr(&plain)
    );

    let dir = tempfile::tempdir().unwrap();
    let under_tool = Command::new(app("scale_twice"))
        .env("LD_LIBRARY_PATH", cpu_runtime_dir())
        .env("LD_PRELOAD", tool_lib())
        .env("DITTO_KERNEL", "scale_values")
        .env("DITTO_SOCKET", dir.path().join("nobody-listens.sock"))
        .env("DITTO_TIMEOUT_MS", "2000")
        .output()
        .unwrap();
    assert_eq!(
        under_tool.status.code(),
        Some(0),
        "stderr:\n{}",
        stderr(&under_tool)
    );
    assert_eq!(
        stdout(&under_tool),
        stdout(&plain),
        "the tool changed the application's output"
    );
    let log = stderr(&under_tool);
    assert_eq!(log.matches("ditto:").count(), 1, "logs once, got:\n{log}");
}

#[test]
fn held_inputs_are_released_too_when_no_collector_listens() {
    let plain = run_plain(&app("scale_twice"), &[]);
    let dir = tempfile::tempdir().unwrap();
    let under_tool = Command::new(app("scale_twice"))
        .env("LD_LIBRARY_PATH", cpu_runtime_dir())
        .env("LD_PRELOAD", tool_lib())
        .env("DITTO_KERNEL", "scale_values")
        .env("DITTO_CAPTURE", "all")
        .env("DITTO_SOCKET", dir.path().join("nobody-listens.sock"))
        .env("DITTO_TIMEOUT_MS", "2000")
        .output()
        .unwrap();
    assert_eq!(under_tool.status.code(), Some(0), "{}", stderr(&under_tool));
    assert_eq!(stdout(&under_tool), stdout(&plain));
}

/// scale_twice (two target dispatches) under the tool, capturing
/// scale_values through `socket`.
fn scale_twice_under_tool(socket: &Path, timeout_ms: u32) -> Command {
    let mut c = Command::new(app("scale_twice"));
    c.env("LD_LIBRARY_PATH", cpu_runtime_dir())
        .env("LD_PRELOAD", tool_lib())
        .env("DITTO_KERNEL", "scale_values")
        .env("DITTO_SOCKET", socket)
        .env("DITTO_TIMEOUT_MS", timeout_ms.to_string())
        // Each dispatch waits for its Ack: every buffer through IPC.
        .env("DITTO_STAGING_MIB", "0");
    c
}

/// The tool's log lines.
fn ditto_lines(o: &Output) -> Vec<String> {
    stderr(o)
        .lines()
        .filter(|l| l.starts_with("ditto:"))
        .map(str::to_string)
        .collect()
}

/// scale_twice against a real `ditto collect` that is killed (SIGKILL)
/// once dispatch `k` has been acknowledged; asserts the application ends
/// promptly with its own exit code and output, and one warning.
fn collector_killed_after_ack(k: u32) {
    let dir = tempfile::tempdir().unwrap();
    let plain_pause = dir.path().join("plain-pause");
    std::fs::create_dir(&plain_pause).unwrap();
    for i in 0..2 {
        std::fs::write(plain_pause.join(format!("resume-{i}")), "").unwrap();
    }
    let plain = run_plain(
        &app("scale_twice"),
        &["--pause-dir", plain_pause.to_str().unwrap()],
    );
    assert!(plain.status.success(), "{}", stderr(&plain));

    let socket = dir.path().join("socket");
    let pause = dir.path().join("pause");
    std::fs::create_dir(&pause).unwrap();
    for i in (0..2).filter(|i| *i != k) {
        std::fs::write(pause.join(format!("resume-{i}")), "").unwrap();
    }
    let mut collector = Collector::start(&socket, &dir.path().join("snap"));
    let mut cmd = scale_twice_under_tool(&socket, 60_000);
    cmd.arg("--pause-dir").arg(&pause);
    let app_thread =
        std::thread::spawn(move || output_within(&mut cmd, Duration::from_secs(30), "scale_twice"));
    // Dispatch k has been acknowledged once the application says synced-k.
    wait_for(
        &pause.join(format!("synced-{k}")),
        "scale_twice's synced file",
    );
    collector.kill_now();
    std::fs::write(pause.join(format!("resume-{k}")), "").unwrap();
    let under_tool = app_thread.join().unwrap();

    assert_eq!(under_tool.status.code(), Some(0), "{}", stderr(&under_tool));
    assert_eq!(stdout(&under_tool), stdout(&plain));
    let lines = ditto_lines(&under_tool);
    assert_eq!(lines.len(), 1, "one warning, got {lines:?}");
    assert!(lines[0].contains("collector"), "{lines:?}");
}

#[test]
fn a_collector_killed_after_the_first_ack_leaves_the_application_unchanged() {
    // The next Dispatch meets a closed connection.
    collector_killed_after_ack(0);
}

#[test]
fn a_collector_killed_after_the_last_ack_leaves_the_application_unchanged() {
    // The Goodbye meets a closed connection (no SIGPIPE may kill the app).
    collector_killed_after_ack(1);
}

/// What a misbehaving collector sends in place of the Ack of dispatch 0.
#[derive(Clone, Copy, Debug)]
enum BadAnswer {
    /// Nothing: the connection stays open and silent.
    Silence,
    /// Text instead of a frame: its first four bytes read as a huge length.
    Garbage,
    /// A length prefix past the 16 MiB limit, and nothing after it.
    OversizedLength,
    /// A frame of the right length whose body is no CollectorMessage.
    Undecodable,
    /// A well-formed Ack, for a dispatch the tool did not send.
    AckForAnotherDispatch,
    /// A well-formed message that is not an Ack.
    WelcomeAgain,
    /// Half a frame, then the connection closes.
    TruncatedThenClosed,
}

/// A collector in the test: welcomes one process, reads its first Dispatch,
/// answers it with `answer`, then reads until the tool closes the
/// connection (or 30 s pass). Returns the bytes the tool sent after that
/// first Dispatch.
fn misbehaving_collector(socket: &Path, answer: BadAnswer) -> JoinHandle<Vec<u8>> {
    let listener = UnixListener::bind(socket).unwrap();
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let hello: ToolMessage = read_frame(&mut s).unwrap();
        assert!(matches!(hello, ToolMessage::Hello(_)), "{hello:?}");
        let welcome = CollectorMessage::Welcome {
            version: PROTOCOL_VERSION,
        };
        write_frame(&mut s, &welcome).unwrap();
        let first: ToolMessage = read_frame(&mut s).unwrap();
        assert!(
            matches!(&first, ToolMessage::Dispatch(d) if d.index == 0),
            "{first:?}"
        );
        match answer {
            BadAnswer::Silence => {}
            BadAnswer::Garbage => s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").unwrap(),
            BadAnswer::OversizedLength => s.write_all(&u32::MAX.to_le_bytes()).unwrap(),
            BadAnswer::Undecodable => s.write_all(&[4, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]).unwrap(),
            BadAnswer::AckForAnotherDispatch => write_frame(
                &mut s,
                &CollectorMessage::Ack(Ack {
                    index: 7,
                    result: Ok(()),
                }),
            )
            .unwrap(),
            BadAnswer::WelcomeAgain => write_frame(&mut s, &welcome).unwrap(),
            BadAnswer::TruncatedThenClosed => {
                s.write_all(&[100, 0, 0, 0, 1, 2, 3]).unwrap();
                return Vec::new();
            }
        }
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        rest
    })
}

/// Runs scale_twice against a collector answering `answer`; asserts the
/// application's exit code and output are those of a plain run, that the
/// tool logged exactly one warning containing `says`, and that it sent
/// nothing more once it had failed open (no second Dispatch, no Goodbye),
/// except after a timeout: the connection's frames are intact then, and it
/// reports both dispatches missed (`timeout`) and says Goodbye.
fn fails_open_on(answer: BadAnswer, timeout_ms: u32, says: &str) {
    let plain = run_plain(&app("scale_twice"), &[]);
    assert!(plain.status.success(), "{}", stderr(&plain));
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("socket");
    let collector = misbehaving_collector(&socket, answer);
    let under_tool = output_within(
        &mut scale_twice_under_tool(&socket, timeout_ms),
        Duration::from_secs(30),
        &format!("scale_twice against a collector answering {answer:?}"),
    );
    let after_failure = collector.join().expect("the fake collector");
    assert_eq!(
        under_tool.status.code(),
        Some(0),
        "{answer:?}: {}",
        stderr(&under_tool)
    );
    assert_eq!(stdout(&under_tool), stdout(&plain), "{answer:?}");
    let lines = ditto_lines(&under_tool);
    assert_eq!(lines.len(), 1, "{answer:?}: one warning, got {lines:?}");
    assert!(
        lines[0].contains(says) && lines[0].contains("capture stops"),
        "{answer:?}: expected `{says}` in {lines:?}"
    );
    let mut rest = after_failure.as_slice();
    let mut sent = Vec::new();
    while !rest.is_empty() {
        let m: ToolMessage = read_frame(&mut rest).expect("whole frames after the failure");
        sent.push(m);
    }
    if matches!(answer, BadAnswer::Silence) {
        let missed: Vec<(u64, u64, MissReason)> = sent
            .iter()
            .filter_map(|m| match m {
                ToolMessage::Missed(m) => Some((m.index, m.count, m.reason)),
                _ => None,
            })
            .collect();
        assert_eq!(
            missed,
            vec![(0, 1, MissReason::Timeout), (1, 1, MissReason::Timeout)],
            "{sent:?}"
        );
        assert_eq!(sent.len(), 3, "two Missed, then Goodbye: {sent:?}");
        assert!(matches!(sent[2], ToolMessage::Goodbye(_)), "{sent:?}");
    } else {
        assert!(
            sent.is_empty(),
            "{answer:?}: the tool sent more after failing open: {sent:?}"
        );
    }
}

#[test]
fn a_collector_that_never_acks_times_out_and_the_application_runs_on() {
    fails_open_on(
        BadAnswer::Silence,
        1000,
        "no Ack from the collector within 1000 ms",
    );
}

#[test]
fn garbage_instead_of_an_ack_fails_open() {
    fails_open_on(BadAnswer::Garbage, 5000, "exceeds the 16777216-byte limit");
}

#[test]
fn an_oversized_length_prefix_fails_open_without_waiting_for_the_body() {
    fails_open_on(
        BadAnswer::OversizedLength,
        60_000,
        "frame of 4294967295 bytes exceeds the 16777216-byte limit",
    );
}

#[test]
fn a_frame_that_does_not_decode_fails_open() {
    fails_open_on(BadAnswer::Undecodable, 5000, "malformed message");
}

#[test]
fn an_ack_for_another_dispatch_fails_open() {
    fails_open_on(
        BadAnswer::AckForAnotherDispatch,
        5000,
        "Ack for dispatch 7 while waiting for dispatch 0",
    );
}

#[test]
fn a_reply_that_is_not_an_ack_fails_open() {
    fails_open_on(BadAnswer::WelcomeAgain, 5000, "expected Ack, got Welcome");
}

#[test]
fn a_collector_that_closes_in_the_middle_of_its_ack_fails_open() {
    fails_open_on(BadAnswer::TruncatedThenClosed, 60_000, "protocol error");
}
