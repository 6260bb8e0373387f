//! Patient reads of one connection's frames: [`FrameReader`] waits
//! indefinitely for a message to start (the application may compute for
//! hours) but a started message must finish within the frame timeout (the
//! Hello within its own deadline from connecting), notices the collector's
//! shutdown within [`super::POLL_INTERVAL`], keeps the file descriptors
//! that arrive with a message, and makes a large frame wait for room in
//! the memory budget before it is read. Owns the reading of bytes and fds;
//! decides nothing about the messages.

use super::Shared;
use super::memory_budget::Reservation;
use ditto_protocol::fd_passing::{ReceivedFds, recv_with_fds};
use ditto_protocol::{FrameError, ToolMessage, decode_frame, read_frame_len};
use std::io::{self, Read};
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
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
pub(super) struct FrameReader<'a> {
    stream: &'a UnixStream,
    shared: &'a Shared,
    deadline: Option<Instant>,
    /// While the Hello is awaited: the time it was given from connecting.
    hello_within: Option<Duration>,
    /// Whether a byte of the current message has come.
    pub(super) started: bool,
    /// The file descriptors that came with the current message.
    pub(super) fds: ReceivedFds,
}

impl<'a> FrameReader<'a> {
    /// A reader of `stream` awaiting a Hello within `hello_within` of now.
    pub(super) fn awaiting_hello(
        stream: &'a UnixStream,
        shared: &'a Shared,
        hello_within: Duration,
    ) -> FrameReader<'a> {
        let mut reader = FrameReader {
            stream,
            shared,
            deadline: None,
            hello_within: None,
            started: false,
            fds: ReceivedFds::default(),
        };
        reader.next_frame(Some(Instant::now() + hello_within));
        reader.hello_within = Some(hello_within);
        reader
    }

    /// Starts the next frame: a started one must finish by `deadline`
    /// (by the frame timeout from its first byte when `None`).
    pub(super) fn next_frame(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
        self.hello_within = None;
        self.started = false;
        self.fds.clear();
    }

    /// Reads one frame's body, as [`ditto_protocol::read_frame_body`]
    /// does; a frame larger than [`SMALL_FRAME_BYTES`] first reserves
    /// what it and its decoded message may take in the memory budget
    /// (waiting for room), held until the returned reservation is dropped.
    pub(super) fn read_body(&mut self) -> Result<(Vec<u8>, Option<Reservation>), FrameError> {
        let len = read_frame_len(self)?;
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
    pub(super) fn read_message(
        &mut self,
    ) -> Result<(ToolMessage, Option<Reservation>), FrameError> {
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
