//! The connection to the collector: one Unix-stream connection per
//! process, Hello → Welcome (→ Staging), then Dispatch → Ack per captured
//! dispatch, and a final Goodbye; Missed reports whenever a matched
//! dispatch is not captured. Frames go out through `sendmsg` with
//! MSG_NOSIGNAL (only what the socket could not take at once is written
//! plainly): a collector that died is an error here, not a SIGPIPE in the
//! application. Owns framing use and timeouts, the shared-memory copies of
//! a dispatch until they are sent with it (then closed: the collector holds
//! the only fds left), the connection's staging file, and the outbox of
//! frames of released dispatches that the socket could not take yet (sent
//! before anything else). Only a dispatch read through IPC is answered (an
//! Ack, awaited at once); the others are followed through the staging
//! file's progress counter. Used only by the worker thread (it blocks),
//! never by a hook.

use crate::capture::kernel_code::CodeObjectCopy;
use crate::capture::shared_memory::copy_to_sealed_memfd;
use crate::capture::staging::StagingFile;
use crate::log::log_info;
use ditto_protocol::{
    Ack, CodeObject, CollectorMessage, Dispatch, FrameError, Goodbye, Hello, Missed, NeverLoaded,
    PROTOCOL_VERSION, ToolMessage, read_frame, write_frame_with_fds,
};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Why talking to the collector failed; every one of them makes the tool
/// fail open.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to the collector at {socket}: {error} (is `ditto collect` running?)")]
    Connect {
        socket: String,
        error: std::io::Error,
    },
    #[error("the collector rejected this process: {0}")]
    Rejected(String),
    /// The listener at the socket runs as another uid than the one trusted.
    #[error(
        "the collector at {socket} runs as uid {uid}, not as uid {trusted}: nothing is \
         sent to it (run ditto as the application's user, or set \
         DITTO_COLLECTOR_UID={uid} to trust it)"
    )]
    ForeignCollector {
        socket: String,
        uid: u32,
        trusted: u32,
    },
    #[error(
        "no {waiting_for} from the collector within {} ms (DITTO_TIMEOUT_MS)",
        .timeout.as_millis()
    )]
    Timeout {
        waiting_for: &'static str,
        timeout: Duration,
    },
    #[error("protocol error with the collector: {0}")]
    Protocol(String),
}

/// The collector's answer to a dispatch it could not take, in its words
/// (an `Ack` whose result is an error: an attach failure, a fingerprint
/// mismatch); the connection stays usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CollectorRefusal(pub String);

fn frame_error(e: FrameError, waiting_for: &'static str, timeout: Duration) -> ClientError {
    match e {
        FrameError::Io(io)
            if matches!(
                io.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            ClientError::Timeout {
                waiting_for,
                timeout,
            }
        }
        FrameError::Closed => {
            ClientError::Protocol(format!("connection closed while waiting for {waiting_for}"))
        }
        other => ClientError::Protocol(other.to_string()),
    }
}

/// Most Dispatch frames the collector may have left to finish (the staging
/// file's progress counter): one more waits for it to catch up.
const MAX_UNFINISHED: usize = 4096;

/// Unsent bytes of released dispatches' frames that are written at once.
const OUTBOX_BATCH: usize = 4096;

/// How often the progress counter is looked at while waiting for it.
const PROGRESS_POLL: Duration = Duration::from_micros(200);

pub struct CollectorConnection {
    stream: UnixStream,
    timeout: Duration,
    /// A write failed (maybe part of a frame went out) or the stream ended:
    /// nothing more may be sent. A read that timed out, or an outbox the
    /// socket had no room for in time, leaves it usable.
    broken: bool,
    staging: Option<StagingFile>,
    /// Dispatch frames sent (or queued in the outbox) so far.
    dispatches_sent: u64,
    /// Digests of the code objects sent ([`Self::code_object`]).
    code_objects_sent: std::collections::HashSet<String>,
    /// Whole frames (without fds) of released dispatches not yet taken by
    /// the socket, from byte `outbox_sent` on: the worker goes on while the
    /// collector catches up. Sent before anything else is sent or awaited.
    outbox: Vec<u8>,
    outbox_sent: usize,
}

impl CollectorConnection {
    /// Connects, checks that the listener runs as `trusted_uid`
    /// (SO_PEERCRED; another uid is sent nothing, not even the Hello),
    /// sends `hello` and waits for Welcome (at most `timeout`), then shares
    /// a staging file of `staging_bytes` (0: none; one that cannot be made
    /// is logged and left out: buffers then travel by IPC).
    pub fn open(
        socket: &Path,
        hello: &Hello,
        timeout: Duration,
        staging_bytes: u64,
        trusted_uid: u32,
    ) -> Result<CollectorConnection, ClientError> {
        let stream = UnixStream::connect(socket).map_err(|error| ClientError::Connect {
            socket: socket.display().to_string(),
            error,
        })?;
        let uid = ditto_protocol::peer_credentials(&stream)
            .map(|c| c.uid)
            .map_err(|e| {
                ClientError::Protocol(format!("cannot identify the collector (SO_PEERCRED): {e}"))
            })?;
        if uid != trusted_uid {
            return Err(ClientError::ForeignCollector {
                socket: socket.display().to_string(),
                uid,
                trusted: trusted_uid,
            });
        }
        stream
            .set_read_timeout(Some(timeout))
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        stream
            .set_write_timeout(Some(timeout))
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        let mut conn = CollectorConnection {
            stream,
            timeout,
            broken: false,
            staging: None,
            dispatches_sent: 0,
            code_objects_sent: Default::default(),
            outbox: Vec::new(),
            outbox_sent: 0,
        };
        conn.send(&ToolMessage::Hello(hello.clone()), "Hello")?;
        match conn.receive("Welcome")? {
            CollectorMessage::Welcome { version } if version == PROTOCOL_VERSION => {
                if staging_bytes > 0 {
                    conn.share_staging(staging_bytes)?;
                }
                Ok(conn)
            }
            CollectorMessage::Welcome { version } => Err(ClientError::Protocol(format!(
                "collector speaks protocol version {version}, this tool {PROTOCOL_VERSION}"
            ))),
            CollectorMessage::Reject { reason } => Err(ClientError::Rejected(reason)),
            other => Err(ClientError::Protocol(format!(
                "expected Welcome, got {other:?}"
            ))),
        }
    }

    fn share_staging(&mut self, size: u64) -> Result<(), ClientError> {
        let staging = match StagingFile::create(size) {
            Ok(s) => s,
            Err(e) => {
                log_info!("{e}; every buffer travels by IPC");
                return Ok(());
            }
        };
        self.send_with_fds(&ToolMessage::Staging { size }, &[staging.fd()], "Staging")?;
        self.staging = Some(staging);
        Ok(())
    }

    /// The staging file, when the collector has one.
    pub fn staging(&mut self) -> Option<&mut StagingFile> {
        self.staging.as_mut()
    }

    /// Says this process's HSA runtime never started the tool (the last
    /// message of the connection).
    pub fn never_loaded(&mut self, report: &NeverLoaded) -> Result<(), ClientError> {
        self.send(&ToolMessage::NeverLoaded(report.clone()), "NeverLoaded")
    }

    /// Sends a code object a replay capture refers to, once per
    /// connection: its bytes in a sealed memfd attached to the frame.
    /// Already sent: nothing to do.
    pub fn code_object(&mut self, code: &CodeObjectCopy) -> Result<(), ClientError> {
        if self.code_objects_sent.contains(&code.digest) {
            return Ok(());
        }
        let bytes = &code.bytes;
        let fd = copy_to_sealed_memfd(bytes.as_ptr() as u64, bytes.len() as u64)
            .map_err(|e| ClientError::Protocol(format!("cannot copy a code object: {e}")))?;
        let message = ToolMessage::CodeObject(CodeObject {
            digest: code.digest.clone(),
            size: bytes.len() as u64,
        });
        self.send_with_fds(&message, &[fd.as_fd()], "CodeObject")?;
        self.code_objects_sent.insert(code.digest.clone());
        Ok(())
    }

    fn send(&mut self, msg: &ToolMessage, what: &'static str) -> Result<(), ClientError> {
        self.send_with_fds(msg, &[], what)
    }

    fn send_with_fds(
        &mut self,
        msg: &ToolMessage,
        fds: &[BorrowedFd],
        what: &'static str,
    ) -> Result<(), ClientError> {
        if self.broken {
            return Err(ClientError::Protocol(format!(
                "cannot send {what}: an earlier write to the collector failed"
            )));
        }
        self.flush(true)?;
        write_frame_with_fds(&self.stream, msg, fds).map_err(|e| {
            self.broken = true;
            frame_error(e, what, self.timeout)
        })
    }

    /// Sends what the outbox holds: all of it (`block`, at most the
    /// timeout), or what the socket takes now.
    pub fn flush(&mut self, block: bool) -> Result<(), ClientError> {
        while self.outbox_sent < self.outbox.len() {
            if self.broken {
                return Err(ClientError::Protocol(
                    "cannot send a Dispatch: an earlier write to the collector failed".into(),
                ));
            }
            let rest = &self.outbox[self.outbox_sent..];
            // SAFETY: `rest` is a live buffer for the call.
            let n = unsafe {
                libc::send(
                    self.stream.as_raw_fd(),
                    rest.as_ptr() as *const libc::c_void,
                    rest.len(),
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                )
            };
            if n > 0 {
                self.outbox_sent += n as usize;
                continue;
            }
            let e = std::io::Error::last_os_error();
            match e.kind() {
                std::io::ErrorKind::Interrupted => continue,
                std::io::ErrorKind::WouldBlock if !block => return Ok(()),
                std::io::ErrorKind::WouldBlock => {
                    // The outbox holds whole frames and remembers how far it
                    // got: a collector that was only slow (stopped, swapped
                    // out) takes the rest later, the misses and the Goodbye
                    // after it. The stream stays usable.
                    if !wait_writable(&self.stream, self.timeout) {
                        return Err(ClientError::Timeout {
                            waiting_for: "room for a Dispatch",
                            timeout: self.timeout,
                        });
                    }
                }
                _ => {
                    self.broken = true;
                    return Err(frame_error(FrameError::Io(e), "Dispatch", self.timeout));
                }
            }
        }
        self.outbox.clear();
        self.outbox_sent = 0;
        Ok(())
    }

    /// Whether frames wait in the outbox.
    pub fn has_unsent(&self) -> bool {
        self.outbox_sent < self.outbox.len()
    }

    fn receive(&mut self, waiting_for: &'static str) -> Result<CollectorMessage, ClientError> {
        self.flush(true)?;
        read_frame(&mut self.stream).map_err(|e| {
            let error = frame_error(e, waiting_for, self.timeout);
            if !matches!(error, ClientError::Timeout { .. }) {
                self.broken = true;
            }
            error
        })
    }

    /// Whether frames may still be sent (no write failed, the stream did
    /// not end).
    pub fn writable(&self) -> bool {
        !self.broken
    }

    /// Reports dispatches (or a buffer) not captured; no answer is awaited.
    pub fn missed(&mut self, missed: &Missed) -> Result<(), ClientError> {
        self.send(&ToolMessage::Missed(missed.clone()), "Missed")
    }

    /// Sends one captured dispatch with the fds of its shared-memory
    /// buffers (in buffer order; closed here once sent). When it
    /// [`Dispatch::needs_ack`] (a buffer is not staged: the caller holds
    /// the dispatch until then), waits for its Ack: `Ok(Err(reason))` when the
    /// collector answered but could not take it (it says why; the
    /// connection stays usable). Otherwise the caller has released it
    /// already: the frame may wait in the outbox while the collector
    /// catches up (it is written once `OUTBOX_BATCH` bytes wait, or by
    /// [`CollectorConnection::flush`]), and `Ok(Ok(()))` means queued; blocks only when
    /// `MAX_UNFINISHED` frames are unfinished.
    pub fn dispatch(
        &mut self,
        dispatch: Dispatch,
        copies: Vec<OwnedFd>,
    ) -> Result<Result<(), CollectorRefusal>, ClientError> {
        let index = dispatch.index;
        if dispatch.needs_ack() {
            self.send_dispatch(dispatch, copies)?;
            return self.await_ack(index);
        }
        if copies.is_empty() && self.staging.is_some() {
            ditto_protocol::write_frame(&mut self.outbox, &ToolMessage::Dispatch(dispatch))
                .map_err(|e| ClientError::Protocol(format!("cannot encode a Dispatch: {e}")))?;
            self.record_sent();
            // In batches: one write (and one wake-up of the collector) for
            // several dispatches. The worker sends the rest before it waits.
            if self.outbox.len() - self.outbox_sent >= OUTBOX_BATCH {
                self.flush(false)?;
            }
        } else {
            self.send_dispatch(dispatch, copies)?;
        }
        self.wait_for_room()?;
        Ok(Ok(()))
    }

    fn send_dispatch(
        &mut self,
        dispatch: Dispatch,
        copies: Vec<OwnedFd>,
    ) -> Result<(), ClientError> {
        let fds: Vec<BorrowedFd> = copies.iter().map(|f| f.as_fd()).collect();
        let sent = self.send_with_fds(&ToolMessage::Dispatch(dispatch), &fds, "Dispatch");
        drop(fds);
        drop(copies);
        sent?;
        self.record_sent();
        Ok(())
    }

    /// The staging file learns that every region staged so far belongs to
    /// the frame just sent.
    fn record_sent(&mut self) {
        if let Some(staging) = self.staging.as_mut() {
            staging.sent(self.dispatches_sent);
        }
        self.dispatches_sent += 1;
    }

    /// Waits, at most the timeout, while the collector has more than
    /// [`MAX_UNFINISHED`] frames left to finish.
    fn wait_for_room(&mut self) -> Result<(), ClientError> {
        let Some(staging) = self.staging.as_mut() else {
            return Ok(());
        };
        if staging.unfinished() < MAX_UNFINISHED || staging.reclaim() < MAX_UNFINISHED {
            return Ok(());
        }
        self.flush(true)?;
        let start = std::time::Instant::now();
        loop {
            let staging = self.staging.as_mut().expect("checked above");
            if staging.reclaim() < MAX_UNFINISHED {
                return Ok(());
            }
            if start.elapsed() > self.timeout {
                return Err(ClientError::Timeout {
                    waiting_for: "progress",
                    timeout: self.timeout,
                });
            }
            std::thread::sleep(PROGRESS_POLL);
        }
    }

    /// Reads the Ack of dispatch `index`.
    fn await_ack(&mut self, index: u64) -> Result<Result<(), CollectorRefusal>, ClientError> {
        let reply = self.receive("Ack")?;
        if !matches!(&reply, CollectorMessage::Ack(Ack { index: got, .. }) if *got == index) {
            // A collector that answers out of protocol is told nothing more.
            self.broken = true;
        }
        match reply {
            CollectorMessage::Ack(Ack { index: got, result }) if got == index => {
                Ok(result.map_err(CollectorRefusal))
            }
            CollectorMessage::Ack(Ack { index: got, .. }) => Err(ClientError::Protocol(format!(
                "Ack for dispatch {got} while waiting for dispatch {index}"
            ))),
            other => Err(ClientError::Protocol(format!(
                "expected Ack, got {other:?}"
            ))),
        }
    }

    pub fn goodbye(&mut self, goodbye: &Goodbye) -> Result<(), ClientError> {
        self.send(&ToolMessage::Goodbye(goodbye.clone()), "Goodbye")?;
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
        Ok(())
    }
}

/// Waits at most `timeout` until `stream` can take more bytes.
fn wait_writable(stream: &UnixStream, timeout: Duration) -> bool {
    let mut pollfd = libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    loop {
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pollfd, 1, ms) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return n > 0;
    }
}
