//! The connection to the collector: one Unix-stream connection per
//! process, Hello → Welcome, then Dispatch → Ack per captured dispatch, and
//! a final Goodbye; Missed reports whenever a matched dispatch is not
//! captured. Frames go out through `sendmsg` with MSG_NOSIGNAL (only
//! what the socket could not take at once is written plainly): a collector
//! that died is an error here, not a SIGPIPE in the application. Owns framing use and timeouts, and the shared-memory
//! copies of a dispatch until they are sent with it (then closed: the
//! collector holds the only fds left); used only by the worker thread (it
//! blocks), never by a hook.

use ditto_protocol::{
    Ack, CollectorMessage, Dispatch, FrameError, Goodbye, Hello, Missed, PROTOCOL_VERSION,
    ToolMessage, read_frame, write_frame_with_fds,
};
use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Why talking to the collector failed; every one of them makes the tool
/// fail open.
#[derive(Debug)]
pub enum ClientError {
    Connect {
        socket: String,
        error: std::io::Error,
    },
    Rejected(String),
    Timeout {
        waiting_for: &'static str,
        timeout: Duration,
    },
    Protocol(String),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Connect { socket, error } => {
                write!(
                    f,
                    "cannot connect to the collector at {socket}: {error} (is `ditto collect` running?)"
                )
            }
            ClientError::Rejected(reason) => {
                write!(f, "the collector rejected this process: {reason}")
            }
            ClientError::Timeout {
                waiting_for,
                timeout,
            } => write!(
                f,
                "no {waiting_for} from the collector within {} ms (DITTO_TIMEOUT_MS)",
                timeout.as_millis()
            ),
            ClientError::Protocol(what) => write!(f, "protocol error with the collector: {what}"),
        }
    }
}

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

pub struct CollectorConnection {
    stream: UnixStream,
    timeout: Duration,
    /// A write failed (maybe part of a frame went out) or the stream ended:
    /// nothing more may be sent. A read that timed out leaves it usable.
    broken: bool,
}

impl CollectorConnection {
    /// Connects, sends `hello` and waits for Welcome (at most `timeout`).
    pub fn open(
        socket: &Path,
        hello: &Hello,
        timeout: Duration,
    ) -> Result<CollectorConnection, ClientError> {
        let stream = UnixStream::connect(socket).map_err(|error| ClientError::Connect {
            socket: socket.display().to_string(),
            error,
        })?;
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
        };
        conn.send(&ToolMessage::Hello(hello.clone()), "Hello")?;
        match conn.receive("Welcome")? {
            CollectorMessage::Welcome { version } if version == PROTOCOL_VERSION => Ok(conn),
            CollectorMessage::Welcome { version } => Err(ClientError::Protocol(format!(
                "collector speaks protocol version {version}, this tool {PROTOCOL_VERSION}"
            ))),
            CollectorMessage::Reject { reason } => Err(ClientError::Rejected(reason)),
            other => Err(ClientError::Protocol(format!(
                "expected Welcome, got {other:?}"
            ))),
        }
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
        write_frame_with_fds(&self.stream, msg, fds).map_err(|e| {
            self.broken = true;
            frame_error(e, what, self.timeout)
        })
    }

    fn receive(&mut self, waiting_for: &'static str) -> Result<CollectorMessage, ClientError> {
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
    /// buffers (in buffer order; closed here once sent) and waits for its
    /// Ack. `Ok(Err(reason))`: the collector answered but could not take
    /// this dispatch (it says why); the connection stays usable.
    pub fn dispatch(
        &mut self,
        dispatch: Dispatch,
        copies: Vec<OwnedFd>,
    ) -> Result<Result<(), String>, ClientError> {
        let index = dispatch.index;
        let fds: Vec<BorrowedFd> = copies.iter().map(|f| f.as_fd()).collect();
        let sent = self.send_with_fds(&ToolMessage::Dispatch(dispatch), &fds, "Dispatch");
        drop(fds);
        drop(copies);
        sent?;
        let reply = self.receive("Ack")?;
        if !matches!(&reply, CollectorMessage::Ack(Ack { index: got, .. }) if *got == index) {
            // A collector that answers out of protocol is told nothing more.
            self.broken = true;
        }
        match reply {
            CollectorMessage::Ack(Ack { index: got, result }) if got == index => Ok(result),
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
