//! The wire protocol between the tool library (inside the application) and
//! the collector (`ditto collect`, or the collector inside `ditto run` /
//! `ditto validate`). It never does I/O policy (timeouts, retries):
//! callers own their sockets.
//!
//! A module map; every item is re-exported here, so users name
//! `ditto_protocol::X`:
//! - [`messages`]: what each side says and in which order, the types inside
//!   the messages and the protocol version;
//! - [`framing`]: the wire format (length-prefixed postcard frames), its
//!   limits and errors;
//! - [`fd_passing`]: file descriptors travelling with a frame (SCM_RIGHTS);
//! - [`fingerprint`](mod@fingerprint): the buffer fingerprint both sides compute;
//! - [`selection`]: which dispatches and arguments the user asked to capture;
//! - [`index_runs`]: sets of dispatch indices, for accounting;
//! - [`peer`]: who is at the other end of a socket.
//!
//! The vocabulary inside the messages ([`DType`], [`KernelName`]) is
//! `ditto-types`', re-exported here.

pub mod fd_passing;
pub mod fingerprint;
pub mod framing;
pub mod index_runs;
pub mod messages;
pub mod peer;
pub mod selection;

pub use fd_passing::{read_frame_with_fds, write_frame_with_fds};
pub use fingerprint::{
    fingerprint, fingerprint_of_windows, fingerprint_windows, legacy_fingerprint,
};
pub use framing::{
    FrameError, MAX_FDS_PER_FRAME, MAX_FRAME_BYTES, decode_frame, hello_version, read_frame,
    read_frame_body, read_frame_len, write_frame,
};
pub use index_runs::IndexRuns;
pub use messages::{
    Ack, Api, Buffer, CUDA_IPC_HANDLE_BYTES, CUDA_UUID_BYTES, CodeObject, CollectorMessage,
    Dispatch, Goodbye, Hello, Launch, MissReason, Missed, NeverLoaded, PROTOCOL_VERSION, Phase,
    STAGING_HEADER_BYTES, ToolMessage, Transport,
};
pub use peer::peer_credentials;
pub use selection::{CaptureError, CaptureSet, DispatchSelection, Replay, SelectionError};
// Moved to the leaf crate shared with `ditto-kernels`; re-exported so that
// users of the wire types keep one import.
pub use ditto_types::{ALL_DTYPES, DType, KernelName};
