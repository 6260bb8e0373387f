//! One connection, one application process: the protocol state machine
//! (Hello → Welcome/Reject; Dispatch → Ack; Goodbye) and the connection's
//! report. Never acks a dispatch before its capture (and every detach) is
//! finished; a panic while serving becomes an error ack or a failed
//! connection, never a missing report. A message whose strings exceed the
//! [`limits`] is refused with the reason. Its frames are read by
//! [`super::frame_reader`] (patient reads with a per-message deadline, and
//! a Hello deadline from connecting; a large frame waits for room in the
//! memory budget before it is read); what it captured, missed and lost is
//! counted by [`super::miss_accounting`], each missing dispatch once, as
//! the manifest does. Here the capture's error becomes the reason text the
//! Ack, the manifest and the report carry.

use super::Shared;
use super::admission::{BadRunName, check_peer, check_run_name, peer_uid};
use super::capture::{Origin, capture_dispatch};
use super::capture_error::{CaptureError, DispatchFailure};
use super::config::{POLL_INTERVAL, SnapshotLayout};
use super::copy_files::{CopyFiles, StagingFile};
use super::frame_reader::FrameReader;
use super::limits;
use super::miss_accounting::{
    Accounting, account_for_the_end, failed_capture_records, record_missing,
};
use super::report::{ConnectionEnd, ConnectionReport, LiveConnection};
use crate::store::missing::MissingRecord;
use crate::store::{SnapshotWriter, StoreError, parts};
use ditto_protocol::{
    Ack, Api, CollectorMessage, FrameError, Hello, PROTOCOL_VERSION, ToolMessage, decode_frame,
    hello_version, write_frame,
};
use ditto_types::panic_message;
use std::io;
use std::os::unix::net::UnixStream;
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Why a run's snapshot directory cannot be had: the Hello is rejected
/// with this reason.
#[derive(Debug, thiserror::Error)]
enum NoSnapshot {
    #[error(transparent)]
    RunName(#[from] BadRunName),
    #[error("cannot create the snapshot directory: {0}")]
    Create(StoreError),
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
    shared.record_report(report);
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
                return reject(stream, reason.to_string());
            }
        }
        Err(e) => {
            return reject(
                stream,
                format!("cannot identify the peer (SO_PEERCRED): {e}"),
            );
        }
    }
    let hello_within = shared.config.hello_timeout.min(shared.config.frame_timeout);
    let mut reader = FrameReader::awaiting_hello(stream, shared, hello_within);
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
    if let SnapshotLayout::PerRunPart { node, .. } = &shared.config.layout
        && hello.rank.is_none()
    {
        return reject(
            stream,
            format!(
                "this collector is node {node}'s of several (--node): a process is served only \
                 with its launcher's rank (OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID, or RANK \
                 with WORLD_SIZE), so that the ranks of different nodes never clash, and this \
                 one has none; start it through mpirun or srun, or capture it with a collector \
                 started without --node"
            ),
        );
    }
    let (dir, writer) = match snapshot_for(shared, &hello) {
        Ok(x) => x,
        Err(reason) => return reject(stream, reason.to_string()),
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
    report.api = Some(hello.api);
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
    // Whether the process's host build was looked for (with its first code object).
    let mut host_build_taken = false;
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
                    .map_err(|e| CaptureError::dispatch(&d, DispatchFailure::Fds(e)))
                    .and_then(|copies| {
                        // Names past the limits are not kept anywhere.
                        limits::check_dispatch(&d)
                            .map(|()| copies)
                            .map_err(|reason| {
                                CaptureError::dispatch(&d, DispatchFailure::Limits(reason))
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
                    Err(CaptureError::dispatch(
                        &d,
                        DispatchFailure::Panicked(panic_message(&*p)),
                    ))
                });
                // What the Ack, the manifest and the report say of a
                // dispatch not captured.
                let result = result.map_err(|e| e.to_string());
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
            ToolMessage::CodeObject(c) => {
                let fds = reader.fds.take().unwrap_or_default();
                if let Err(e) = super::code_objects::store_code_object(writer, &c, fds) {
                    report.errors.push(format!(
                        "{e}; the dispatches that name it cannot be replayed"
                    ));
                }
                // A replay capture: the process's host build, once.
                if !host_build_taken {
                    host_build_taken = true;
                    if let Err(e) = super::host_builds::store_host_build(writer, rank, stream) {
                        report.errors.push(format!(
                            "the program's host build was not stored ({e:#}): its dispatches \
                             replay on ditto's CPU runtime only with --host-build"
                        ));
                    }
                }
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

fn message_kind(m: &ToolMessage) -> &'static str {
    match m {
        ToolMessage::Hello(_) => "Hello",
        ToolMessage::Dispatch(_) => "Dispatch",
        ToolMessage::Goodbye(_) => "Goodbye",
        ToolMessage::Missed(_) => "Missed",
        ToolMessage::Staging { .. } => "Staging",
        ToolMessage::NeverLoaded(_) => "NeverLoaded",
        ToolMessage::CodeObject(_) => "CodeObject",
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
    let release_lock = !matches!(shared.config.layout, SnapshotLayout::Single(_));
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
) -> Result<(PathBuf, Arc<Mutex<SnapshotWriter>>), NoSnapshot> {
    let dir = match &shared.config.layout {
        SnapshotLayout::Single(dir) => dir.clone(),
        SnapshotLayout::PerRun(base) => {
            check_run_name(&hello.run)?;
            base.join(&hello.run)
        }
        SnapshotLayout::PerRunPart { base, node, .. } => {
            check_run_name(&hello.run)?;
            base.join(&hello.run)
                .join(format!("{}{node}", parts::PART_PREFIX))
        }
    };
    let mut map = shared.snapshots.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(w) = map.get(&dir) {
        return Ok((dir, w.clone()));
    }
    if let SnapshotLayout::PerRunPart { base, node, .. } = &shared.config.layout {
        // The run directory holds only parts, or is made by the writer.
        parts::part_dir(&base.join(&hello.run), node).map_err(NoSnapshot::Create)?;
    }
    let writer = match &shared.config.layout {
        SnapshotLayout::PerRunPart { job, collector, .. } => {
            SnapshotWriter::create_part(&dir, &hello.kernel_query, collector.clone(), job.clone())
        }
        _ => SnapshotWriter::create(&dir, &hello.kernel_query),
    }
    .map_err(NoSnapshot::Create)?;
    let w = Arc::new(Mutex::new(writer));
    map.insert(dir.clone(), w.clone());
    Ok((dir, w))
}
