//! One connection, one application process: the protocol state machine
//! (Hello → Welcome/Reject; Dispatch → Ack; Goodbye), patient reads with a
//! per-message deadline (and a Hello deadline from connecting), and the
//! connection's report. Never acks a dispatch before its capture (and
//! every detach) is finished; a panic while serving becomes an error ack or
//! a failed connection, never a missing report. A message whose strings
//! exceed the [`limits`] is refused with the reason, a large frame waits
//! for room in the memory budget before it is read, and the report counts
//! each missing dispatch once, as the manifest does.

use super::capture::{CopyFiles, Origin, StagingFile, capture_dispatch, kernel_of};
use super::memory_budget::Reservation;
use super::{
    ConnectionEnd, ConnectionReport, LiveConnection, POLL_INTERVAL, Shared, SnapshotLayout,
    check_peer, check_run_name, limits, peer_uid,
};
use crate::store::SnapshotWriter;
use crate::store::missing::MissingRecord;
use ditto_protocol::fd_passing::{ReceivedFds, recv_with_fds};
use ditto_protocol::{
    Ack, Api, CollectorMessage, FrameError, Hello, IndexRuns, MAX_FRAME_BYTES, MissReason,
    PROTOCOL_VERSION, Phase, ToolMessage, decode_frame, hello_version, write_frame,
};
use ditto_types::panic_message;
use std::io::{self, Read};
use std::os::unix::net::UnixStream;
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SHUTDOWN_MESSAGE: &str = "collector shutting down";

/// Frames up to this size are read without a reservation in the memory
/// budget (a Dispatch of a few buffers is a few hundred bytes).
const SMALL_FRAME_BYTES: u64 = 4 << 10;
/// Bytes of memory a decoded message may take per byte of its frame (an
/// empty string is one byte on the wire, 24 in memory).
const DECODED_BYTES_PER_FRAME_BYTE: u64 = 24;

/// Reads from a socket whose read timeout is [`POLL_INTERVAL`]: waits
/// indefinitely for a message to start (the application may compute for
/// hours), but a started message must finish before `deadline`. Keeps the
/// file descriptors that arrive with a message (the copy transport) in
/// `fds`, until taken or the next message starts (then closed).
struct FrameReader<'a> {
    stream: &'a UnixStream,
    shared: &'a Shared,
    deadline: Option<Instant>,
    /// While the Hello is awaited: the time it was given from connecting.
    hello_within: Option<Duration>,
    started: bool,
    fds: ReceivedFds,
}

impl FrameReader<'_> {
    fn next_frame(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
        self.hello_within = None;
        self.started = false;
        self.fds.clear();
    }

    /// Reads one frame's body, as [`ditto_protocol::read_frame_body`]
    /// does; a frame larger than [`SMALL_FRAME_BYTES`] first reserves
    /// what it and its decoded message may take in the memory budget
    /// (waiting for room), held until the returned reservation is dropped.
    fn read_body(&mut self) -> Result<(Vec<u8>, Option<Reservation>), FrameError> {
        let mut len = [0u8; 4];
        match self.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
            Err(e) => return Err(e.into()),
        }
        let len = u32::from_le_bytes(len);
        if len > MAX_FRAME_BYTES {
            return Err(FrameError::TooLarge(len));
        }
        let memory = if u64::from(len) > SMALL_FRAME_BYTES {
            let bytes = u64::from(len) * (1 + DECODED_BYTES_PER_FRAME_BYTE);
            let shared = self.shared;
            let reserved = shared
                .memory
                .reserve(bytes, shared.config.memory_wait, &shared.shutdown)
                .map_err(|refusal| {
                    io::Error::other(format!(
                        "cannot allocate {bytes} bytes ({}) to read and decode a message of {len} \
                         bytes: {}",
                        crate::units::human_bytes(bytes),
                        refusal.why()
                    ))
                })?;
            Some(reserved)
        } else {
            None
        };
        let mut body = vec![0u8; len as usize];
        self.read_exact(&mut body)?;
        Ok((body, memory))
    }

    /// The next message and the reservation its frame holds.
    fn read_message(&mut self) -> Result<(ToolMessage, Option<Reservation>), FrameError> {
        let (body, memory) = self.read_body()?;
        Ok((decode_frame(&body)?, memory))
    }
}

impl Read for FrameReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match recv_with_fds(self.stream, buf, &mut self.fds) {
                Ok(n) => {
                    if n > 0 && !self.started {
                        self.started = true;
                        self.deadline
                            .get_or_insert(Instant::now() + self.shared.config.frame_timeout);
                    }
                    return Ok(n);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    if self.shared.shutdown.load(Ordering::SeqCst) {
                        return Err(io::Error::other(SHUTDOWN_MESSAGE));
                    }
                    if self.deadline.is_some_and(|d| Instant::now() > d) {
                        let reason = match self.hello_within {
                            Some(within) => format!(
                                "no Hello within {within:?} of connecting (a tool sends it at \
                                 once)"
                            ),
                            None => format!(
                                "no complete message within {:?} (the tool stalled mid-message)",
                                self.shared.config.frame_timeout
                            ),
                        };
                        return Err(io::Error::new(io::ErrorKind::TimedOut, reason));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

struct ActiveGuard<'a>(&'a AtomicUsize);
impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Keeps the connection's entry in `Shared::live_connections` current and
/// removes it when the connection ends.
struct LiveEntry<'a> {
    shared: &'a Shared,
    id: u64,
}

impl LiveEntry<'_> {
    fn update(&self, f: impl FnOnce(&mut LiveConnection)) {
        let mut map = self
            .shared
            .live_connections
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        f(map.entry(self.id).or_default());
    }
}

impl Drop for LiveEntry<'_> {
    fn drop(&mut self) {
        self.shared
            .live_connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

pub(super) fn serve_connection(shared: &Shared, stream: UnixStream) {
    let _active = ActiveGuard(&shared.active);
    let live = LiveEntry {
        shared,
        id: shared.next_connection.fetch_add(1, Ordering::SeqCst),
    };
    live.update(|_| {});
    let mut report = ConnectionReport::new();
    // A bug must not make a connection vanish from the reports (a run that
    // looks complete): a panic ends it as a failed connection.
    let served = panic::catch_unwind(AssertUnwindSafe(|| {
        run_connection(shared, &stream, &mut report, &live)
    }));
    report.end = served.unwrap_or_else(|p| {
        let reason = format!("internal error in the collector: {}", panic_message(&*p));
        report.errors.push(reason.clone());
        ConnectionEnd::Dropped {
            in_flight: None,
            reason,
        }
    });
    let _ = stream.shutdown(std::net::Shutdown::Both);
    drop(live);
    release_idle_writers(shared);
    if let Some(observer) = &shared.config.on_connection_end {
        observer(&report);
    }
    shared
        .reports
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(report);
}

fn send(stream: &UnixStream, msg: &CollectorMessage) -> Result<(), FrameError> {
    write_frame(&mut &*stream, msg)
}

fn reject(stream: &UnixStream, reason: String) -> ConnectionEnd {
    let _ = send(
        stream,
        &CollectorMessage::Reject {
            reason: reason.clone(),
        },
    );
    ConnectionEnd::Rejected(reason)
}

fn run_connection(
    shared: &Shared,
    stream: &UnixStream,
    report: &mut ConnectionReport,
    live: &LiveEntry,
) -> ConnectionEnd {
    let setup = stream
        .set_nonblocking(false)
        .and_then(|_| stream.set_read_timeout(Some(POLL_INTERVAL)))
        .and_then(|_| stream.set_write_timeout(Some(shared.config.frame_timeout)));
    if let Err(e) = setup {
        return ConnectionEnd::Dropped {
            in_flight: None,
            reason: format!("socket setup failed: {e}"),
        };
    }
    match peer_uid(stream) {
        Ok(uid) => {
            if let Err(reason) = check_peer(uid, shared.config.allowed_uid) {
                return reject(stream, reason);
            }
        }
        Err(e) => {
            return reject(
                stream,
                format!("cannot identify the peer (SO_PEERCRED): {e}"),
            );
        }
    }
    let mut reader = FrameReader {
        stream,
        shared,
        deadline: None,
        hello_within: None,
        started: false,
        fds: ReceivedFds::default(),
    };
    let hello_within = shared.config.hello_timeout.min(shared.config.frame_timeout);
    reader.next_frame(Some(Instant::now() + hello_within));
    reader.hello_within = Some(hello_within);
    let other_version = |version: u32| {
        format!(
            "the tool speaks protocol version {version} but this collector speaks version \
             {PROTOCOL_VERSION}: use the libditto.so built together with this ditto"
        )
    };
    let (body, frame_memory) = match reader.read_body() {
        Ok(read) => read,
        Err(e) => return ended_by(shared, &reader, e, None, "waiting for Hello"),
    };
    let hello = match decode_frame::<ToolMessage>(&body) {
        Ok(ToolMessage::Hello(h)) => h,
        Ok(other) => {
            return reject(
                stream,
                format!("expected Hello first, got {}", message_kind(&other)),
            );
        }
        // A tool of another version may lay its Hello out otherwise.
        Err(e) => match hello_version(&body) {
            Some(version) if version != PROTOCOL_VERSION => {
                return reject(stream, other_version(version));
            }
            _ => return ended_by(shared, &reader, e, None, "waiting for Hello"),
        },
    };
    drop(body);
    report.pid = Some(hello.pid);
    if let Err(reason) = limits::check_hello(&hello) {
        report.run = Some(limits::short(&hello.run));
        return reject(stream, format!("the Hello is refused: {reason}"));
    }
    report.run = Some(hello.run.clone());
    if hello.version != PROTOCOL_VERSION {
        return reject(stream, other_version(hello.version));
    }
    let (dir, writer) = match snapshot_for(shared, &hello) {
        Ok(x) => x,
        Err(reason) => return reject(stream, reason),
    };
    report.snapshot_dir = Some(dir.clone());
    let rank = match writer
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .add_run(&hello)
    {
        Ok(r) => r,
        Err(e) => {
            return reject(
                stream,
                format!("cannot record the run in {}: {e}", dir.display()),
            );
        }
    };
    report.rank = Some(rank);
    if hello.api == Api::Hsa
        && let Some(hook) = &shared.config.on_hsa_connection
    {
        hook();
    }
    live.update(|l| {
        l.run = Some(hello.run.clone());
        l.pid = Some(hello.pid);
        l.rank = Some(rank);
    });
    drop(frame_memory);
    if let Err(e) = send(
        stream,
        &CollectorMessage::Welcome {
            version: PROTOCOL_VERSION,
        },
    ) {
        // The tool closed its end before the Welcome came: it gave up on
        // the collector (its DITTO_TIMEOUT_MS passed) and runs on
        // uncaptured. A failure of the capture, not an application that
        // dispatched nothing.
        report.errors.push(format!(
            "the tool stopped waiting for the collector's Welcome before it was sent \
             (cannot send it: {e}): the collector took longer to answer the process's Hello \
             than the tool's DITTO_TIMEOUT_MS allows, so nothing of it was captured; raise \
             DITTO_TIMEOUT_MS (default 30000) or unset it"
        ));
        return ConnectionEnd::Dropped {
            in_flight: None,
            reason: format!("cannot send Welcome: {e}"),
        };
    }
    let origin = Origin {
        writer: &writer,
        connection: live.id,
        rank,
        pid: hello.pid,
    };
    let mut accounting = Accounting::default();
    let end = serve_dispatches(
        shared,
        stream,
        &mut reader,
        report,
        live,
        &origin,
        &mut accounting,
    );
    account_for_the_end(&origin, report, &accounting, &end);
    end
}

/// Serves Dispatch, Missed and Staging messages until the connection
/// ends (Goodbye, or not); notes in `accounting` what was accounted for.
fn serve_dispatches(
    shared: &Shared,
    stream: &UnixStream,
    reader: &mut FrameReader,
    report: &mut ConnectionReport,
    live: &LiveEntry,
    origin: &Origin,
    accounting: &mut Accounting,
) -> ConnectionEnd {
    let (writer, rank, pid) = (origin.writer, origin.rank, origin.pid);
    let mut last_dispatch: Option<u64> = None;
    // The first dispatch whose Ack could not be sent, and why.
    let mut unacked: Option<(u64, String)> = None;
    // Inputs (Before buffers) of dispatches whose After part is still to come.
    let mut inputs = std::collections::HashMap::new();
    // The tool's staging file (Staged buffers), closed when the connection ends.
    let mut staging: Option<StagingFile> = None;
    // Dispatch frames finished (the staging file's progress counter).
    let mut dispatches_finished: u64 = 0;
    loop {
        reader.next_frame(None);
        // The frame's reservation is held while its message is handled.
        let (msg, _frame_memory) = match reader.read_message() {
            Ok(m) => m,
            Err(e) => {
                if let Some((index, reason)) = unacked {
                    return ConnectionEnd::Dropped {
                        in_flight: Some(index),
                        reason,
                    };
                }
                // A message that had started is a dispatch (or Goodbye) lost in transit.
                let in_flight = if reader.started {
                    Some(last_dispatch.map_or(0, |i| i + 1))
                } else {
                    None
                };
                let context = match last_dispatch {
                    Some(i) => format!("after dispatch {i}"),
                    None => "before any dispatch".to_string(),
                };
                return ended_by(shared, reader, e, in_flight, &context);
            }
        };
        match msg {
            ToolMessage::Dispatch(d) => {
                let index = d.index;
                accounting.seen(index, 1);
                if !d.is_inputs_part() {
                    accounting.accounted.insert(index, index.saturating_add(1));
                }
                live.update(|l| l.capturing = Some(index));
                // The message's shared-memory copies; too many: all closed.
                let copies = reader
                    .fds
                    .take()
                    .map_err(|e| {
                        format!("dispatch {index} of {}: {e}; nothing stored", kernel_of(&d))
                    })
                    .and_then(|copies| {
                        // Names past the limits are not kept anywhere.
                        limits::check_dispatch(&d)
                            .map(|()| copies)
                            .map_err(|reason| {
                                format!(
                                    "dispatch {index} of {}: refused: {reason}; nothing stored",
                                    kernel_of(&d)
                                )
                            })
                    });
                // A panic while capturing (the attachment guard detaches and
                // the fds close while unwinding) becomes an error ack: the
                // application is released now and the other connections go on.
                let result = panic::catch_unwind(AssertUnwindSafe(|| {
                    capture_dispatch(
                        shared,
                        origin,
                        &d,
                        CopyFiles {
                            copies: copies?,
                            staging: staging.as_ref(),
                        },
                        &mut inputs,
                    )
                }))
                .unwrap_or_else(|p| {
                    Err(format!(
                        "dispatch {index} of {}: internal error in the collector ({}); nothing stored",
                        kernel_of(&d),
                        panic_message(&*p)
                    ))
                });
                match &result {
                    Ok(stored) => {
                        report.dispatches_captured += stored.dispatches;
                        report.arrays_captured += stored.arrays;
                        report.bytes_captured += stored.bytes;
                        live.update(|l| {
                            l.dispatches_captured += stored.dispatches;
                            l.bytes_captured += stored.bytes;
                        });
                    }
                    Err(e) => {
                        report.errors.push(e.clone());
                        // Not stored: the manifest says why.
                        let records = failed_capture_records(rank, pid, &d, e);
                        for record in records {
                            record_missing(writer, report, record);
                        }
                    }
                }
                // Every mapping of this dispatch is detached by now, and
                // its staged regions read: the tool may reuse them.
                dispatches_finished += 1;
                if let Some(file) = &staging
                    && let Err(e) = file.record_progress(dispatches_finished)
                {
                    report.errors.push(format!("after dispatch {index}: {e}"));
                }
                // A dispatch whose buffers are all staged was released: no answer.
                let ack = Ack {
                    index,
                    result: result.map(|_| ()),
                };
                let acked = if d.needs_ack() {
                    send(stream, &CollectorMessage::Ack(ack))
                } else {
                    Ok(())
                };
                if let Err(e) = acked {
                    // The application went away, or stopped waiting (a
                    // timeout): what it sent before leaving is still read,
                    // its Missed reports and Goodbye included.
                    unacked.get_or_insert((
                        index,
                        format!("cannot send the ack (the application went away?): {e}"),
                    ));
                }
                last_dispatch = Some(index);
                live.update(|l| {
                    l.capturing = None;
                    l.last_dispatch = Some(index);
                });
            }
            ToolMessage::Goodbye(g) => {
                accounting.matched = Some(g.matched);
                if let Err(reason) = limits::check_goodbye(&g) {
                    report.errors.push(format!(
                        "protocol error: the Goodbye's list of dispatched kernels is refused: \
                         {reason}; it is not recorded"
                    ));
                } else if let Err(e) = writer
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .add_goodbye(&g)
                {
                    report
                        .errors
                        .push(format!("cannot record the dispatched kernels: {e}"));
                }
                return ConnectionEnd::Goodbye;
            }
            ToolMessage::Missed(m) => {
                if let Err(reason) = limits::check_missed(&m) {
                    report.errors.push(format!(
                        "protocol error: a report of dispatch {} not captured is refused: \
                         {reason}; the report is ignored",
                        m.index
                    ));
                    continue;
                }
                let record = MissingRecord {
                    rank,
                    pid,
                    index: m.index,
                    count: m.count,
                    arg: m.arg,
                    phase: m.arg.map(|_| m.phase),
                    reason: m.reason,
                    detail: m.detail,
                };
                if let Err(reason) = record.check() {
                    report
                        .errors
                        .push(format!("protocol error: {reason}; the report is ignored"));
                    continue;
                }
                accounting.seen(record.index, record.count);
                if record.arg.is_none() {
                    accounting
                        .accounted
                        .insert(record.index, record.index.saturating_add(record.count));
                }
                record_missing(writer, report, record);
            }
            ToolMessage::Staging { size } => {
                let fds = reader.fds.take().unwrap_or_default();
                match StagingFile::from_message(size, fds, staging.is_some()) {
                    Ok(file) => staging = Some(file),
                    // Its staged buffers will each be an error (recorded as
                    // missing, with this reason in the report).
                    Err(e) => report.errors.push(format!("protocol error: {e}")),
                }
            }
            ToolMessage::Hello(_) => {
                return ConnectionEnd::Dropped {
                    in_flight: None,
                    reason: "protocol error: a second Hello on one connection".into(),
                };
            }
            ToolMessage::NeverLoaded(n) => {
                if let Err(reason) = limits::check_never_loaded(&n) {
                    return ConnectionEnd::Dropped {
                        in_flight: None,
                        reason: format!(
                            "protocol error: a NeverLoaded message is refused: {reason}"
                        ),
                    };
                }
                return ConnectionEnd::NeverLoaded(format!(
                    "its HSA runtime ({}) never called the tool's OnLoad; {}",
                    n.runtime, n.reason
                ));
            }
        }
    }
}

/// What a connection's frames accounted for, to find at its end the
/// matched dispatches neither captured nor reported missing.
#[derive(Default)]
struct Accounting {
    /// Dispatches captured (their After part received) or reported
    /// missing whole.
    accounted: IndexRuns,
    /// One past the highest dispatch index any frame named.
    seen_end: u64,
    /// The Goodbye's count of matched dispatches.
    matched: Option<u64>,
}

impl Accounting {
    fn seen(&mut self, index: u64, count: u64) {
        self.seen_end = self.seen_end.max(index.saturating_add(count));
    }
}

/// At the end of a served connection, records as `lost` every matched
/// dispatch that was neither captured nor reported missing: of the
/// Goodbye's `matched` when it came, else of those below the highest
/// index seen; a connection that ended without Goodbye also leaves its
/// later dispatches unknown, which its run record says.
fn account_for_the_end(
    origin: &Origin,
    report: &mut ConnectionReport,
    accounting: &Accounting,
    end: &ConnectionEnd,
) {
    let (total, detail) = match end {
        ConnectionEnd::Goodbye => (
            accounting.matched.unwrap_or(0),
            format!(
                "the process said it dispatched {} matching dispatch(es), but this one was \
                 neither captured nor reported missing (its report was lost on the way)",
                accounting.matched.unwrap_or(0)
            ),
        ),
        ConnectionEnd::Dropped { reason, .. } => (
            accounting.seen_end,
            format!("neither captured nor reported missing before the connection ended: {reason}"),
        ),
        ConnectionEnd::Stopped => (
            accounting.seen_end,
            "neither captured nor reported missing before the collector stopped".to_string(),
        ),
        ConnectionEnd::Rejected(_) | ConnectionEnd::NeverLoaded(_) => return,
    };
    for (start, end) in accounting.accounted.gaps(total) {
        let record = MissingRecord {
            rank: origin.rank,
            pid: origin.pid,
            index: start,
            count: end - start,
            arg: None,
            phase: None,
            reason: MissReason::Lost,
            detail: detail.clone(),
        };
        record_missing(origin.writer, report, record);
    }
    let unknown_after = match end {
        ConnectionEnd::Goodbye => return,
        ConnectionEnd::Dropped { reason, .. } => reason.clone(),
        _ => "the collector stopped before the process said Goodbye".to_string(),
    };
    let recorded = origin
        .writer
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .set_unaccounted(origin.rank, accounting.seen_end, &unknown_after);
    if let Err(e) = recorded {
        report
            .errors
            .push(format!("cannot record that the run is incomplete: {e}"));
    }
}

fn message_kind(m: &ToolMessage) -> &'static str {
    match m {
        ToolMessage::Hello(_) => "Hello",
        ToolMessage::Dispatch(_) => "Dispatch",
        ToolMessage::Goodbye(_) => "Goodbye",
        ToolMessage::Missed(_) => "Missed",
        ToolMessage::Staging { .. } => "Staging",
        ToolMessage::NeverLoaded(_) => "NeverLoaded",
    }
}

/// What the manifest records for a dispatch the collector could not
/// capture: the whole dispatch (`error`), or for its inputs (a message of
/// `Before` buffers only, whose `After` part may still be captured) each
/// input buffer.
fn failed_capture_records(
    rank: u32,
    pid: u32,
    d: &ditto_protocol::Dispatch,
    error: &str,
) -> Vec<MissingRecord> {
    let record = |arg: Option<u32>, phase| MissingRecord {
        rank,
        pid,
        index: d.index,
        count: 1,
        arg,
        phase,
        reason: MissReason::Error,
        detail: error.to_string(),
    };
    let inputs_only = !d.buffers.is_empty() && d.buffers.iter().all(|b| b.phase == Phase::Before);
    if inputs_only {
        d.buffers
            .iter()
            .map(|b| record(Some(b.arg_index), Some(Phase::Before)))
            .collect()
    } else {
        vec![record(None, None)]
    }
}

/// Stores a missing record and counts it in the connection's report as
/// the manifest counts it ([`crate::store::missing::merge`]): a record the
/// manifest already holds adds nothing, and a later record of one whole
/// dispatch takes the place of an earlier one (the tool's `timeout` after
/// the collector's own `error` for a copy read too late): one dispatch is
/// counted once, under its last reason.
fn record_missing(writer: &Mutex<SnapshotWriter>, report: &mut ConnectionReport, r: MissingRecord) {
    let what = format!("dispatch {} ({})", r.indices(), r.reason.name());
    let mut w = writer.lock().unwrap_or_else(|e| e.into_inner());
    let known = &w.manifest().missing;
    let repeated = known.contains(&r);
    let replaced: Vec<MissReason> = if !repeated && r.arg.is_none() && r.count == 1 {
        known
            .iter()
            .filter(|m| m.arg.is_none() && m.count == 1 && m.covers(r.rank, r.index))
            .map(|m| m.reason)
            .collect()
    } else {
        Vec::new()
    };
    if !repeated {
        if r.arg.is_some() {
            report.buffers_missing += 1;
        } else {
            for reason in replaced {
                if let Some((_, n)) = report.missing.iter_mut().find(|(x, _)| *x == reason) {
                    *n = n.saturating_sub(1);
                }
            }
            match report
                .missing
                .iter_mut()
                .find(|(reason, _)| *reason == r.reason)
            {
                Some((_, n)) => *n += r.count,
                None => report.missing.push((r.reason, r.count)),
            }
            report.missing.retain(|&(_, n)| n > 0);
        }
    }
    let added = w.add_missing(r);
    drop(w);
    match added {
        // A stored dispatch the record covers (released uncaptured after
        // a timeout) is no longer in the snapshot: no longer counted.
        Ok(dropped) => {
            for d in dropped {
                report.dispatches_captured = report.dispatches_captured.saturating_sub(1);
                report.arrays_captured = report
                    .arrays_captured
                    .saturating_sub(d.buffers.len() as u64);
                let bytes = d
                    .buffers
                    .iter()
                    .fold(0u64, |n, b| n.saturating_add(b.extent));
                report.bytes_captured = report.bytes_captured.saturating_sub(bytes);
            }
        }
        Err(e) => report
            .errors
            .push(format!("cannot record the missing {what}: {e}")),
    }
}

fn ended_by(
    shared: &Shared,
    reader: &FrameReader,
    e: FrameError,
    in_flight: Option<u64>,
    context: &str,
) -> ConnectionEnd {
    if shared.shutdown.load(Ordering::SeqCst) && !reader.started {
        return ConnectionEnd::Stopped;
    }
    let reason = match e {
        FrameError::Closed if !reader.started => {
            format!(
                "the connection closed without Goodbye {context}: the process crashed or was \
                 killed, or it exited while the collector was not reading (stopped, or slower \
                 than DITTO_TIMEOUT_MS), and its last reports never arrived"
            )
        }
        FrameError::Closed => format!("the connection closed in the middle of a message {context}"),
        FrameError::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            format!("the connection closed in the middle of a message {context}")
        }
        other => format!("{other} ({context})"),
    };
    ConnectionEnd::Dropped { in_flight, reason }
}

/// Snapshot directories no connection writes to any more give back their
/// writer's thread and open files (the map holds the only reference); a
/// later connection to one reopens them.
fn release_idle_writers(shared: &Shared) {
    // One snapshot directory (`ditto run`) stays locked until the collector
    // stops; a collector of many keeps no fd per idle directory.
    let release_lock = matches!(shared.config.layout, SnapshotLayout::PerRun(_));
    let map = shared.snapshots.lock().unwrap_or_else(|e| e.into_inner());
    for writer in map.values().filter(|w| Arc::strong_count(w) == 1) {
        writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .release_idle_resources(release_lock);
    }
}

fn snapshot_for(
    shared: &Shared,
    hello: &Hello,
) -> Result<(PathBuf, Arc<Mutex<SnapshotWriter>>), String> {
    let dir = match &shared.config.layout {
        SnapshotLayout::Single(dir) => dir.clone(),
        SnapshotLayout::PerRun(base) => {
            check_run_name(&hello.run)?;
            base.join(&hello.run)
        }
    };
    let mut map = shared.snapshots.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(w) = map.get(&dir) {
        return Ok((dir, w.clone()));
    }
    let writer = SnapshotWriter::create(&dir, &hello.kernel_query)
        .map_err(|e| format!("cannot create the snapshot directory: {e}"))?;
    let w = Arc::new(Mutex::new(writer));
    map.insert(dir.clone(), w.clone());
    Ok((dir, w))
}
