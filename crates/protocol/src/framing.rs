//! How a message travels over a stream, the wire format: one frame is a
//! little-endian u32 length, then the message's postcard bytes (the
//! layout of the messages themselves is [`crate::messages`]'). Owns writing
//! and reading frames, the limits either side accepts in one frame
//! ([`MAX_FRAME_BYTES`], [`MAX_FDS_PER_FRAME`]), the errors of framing and
//! decoding, and reading the version a Hello claims before decoding it, so
//! that a tool of another version is told what is wrong. The file
//! descriptors that ride with a frame are [`crate::fd_passing`]'s. Never
//! sets I/O policy (timeouts, retries): callers own their sockets.
//!
//! Its tests send the messages through frames and pin the bytes a
//! dispatch frame keeps.

use serde::Serialize;
use std::io::{self, Read, Write};

/// Largest frame either side accepts (16 MiB); larger is a protocol error.
pub const MAX_FRAME_BYTES: u32 = 16 << 20;
/// Most file descriptors one frame may carry (Linux allows 253 per
/// message); a frame with more is refused and all of them are closed.
pub const MAX_FDS_PER_FRAME: usize = 64;

/// Errors of framing and decoding.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("connection closed")]
    Closed,
    #[error("frame of {0} bytes exceeds the {MAX_FRAME_BYTES}-byte limit")]
    TooLarge(u32),
    #[error(
        "a frame carries {0} file descriptors, more than the {MAX_FDS_PER_FRAME} allowed; all closed"
    )]
    TooManyFds(usize),
    /// Said in full here (not a `source`): an error chain prints it once.
    #[error("malformed message: {0}")]
    Decode(postcard::Error),
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl From<postcard::Error> for FrameError {
    fn from(e: postcard::Error) -> Self {
        FrameError::Decode(e)
    }
}

/// Writes one frame: a little-endian u32 length, then the postcard bytes.
pub fn write_frame<W: Write, T: Serialize>(w: &mut W, msg: &T) -> Result<(), FrameError> {
    let body = postcard::to_stdvec(msg)?;
    let len = u32::try_from(body.len()).map_err(|_| FrameError::TooLarge(u32::MAX))?;
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge(len));
    }
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&body);
    w.write_all(&frame)?;
    w.flush()?;
    Ok(())
}

/// Reads one frame written by [`write_frame`]. A clean end of stream before
/// the length is [`FrameError::Closed`]; a length over the limit is rejected
/// before anything is allocated.
pub fn read_frame<R: Read, T: serde::de::DeserializeOwned>(r: &mut R) -> Result<T, FrameError> {
    let body = read_frame_body(r)?;
    Ok(postcard::from_bytes(&body)?)
}

/// Decodes the body of a frame ([`read_frame_body`]).
pub fn decode_frame<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, FrameError> {
    Ok(postcard::from_bytes(body)?)
}

/// The protocol version a [`ToolMessage::Hello`] frame's body claims, read
/// from its first two fields alone (the message's variant and
/// [`Hello::version`], which every version keeps first), so that a tool
/// of another version, whose Hello may hold other fields, is told what is
/// wrong. `None` for another message or bytes that do not start so.
///
/// [`ToolMessage::Hello`]: crate::messages::ToolMessage::Hello
/// [`Hello::version`]: crate::messages::Hello::version
pub fn hello_version(body: &[u8]) -> Option<u32> {
    let ((variant, version), _) = postcard::take_from_bytes::<(u32, u32)>(body).ok()?;
    (variant == 0).then_some(version)
}

/// Reads the length that starts a frame written by [`write_frame`]: a clean
/// end of stream before it is [`FrameError::Closed`], a length over
/// [`MAX_FRAME_BYTES`] is [`FrameError::TooLarge`]; the body is not read.
pub fn read_frame_len<R: Read>(r: &mut R) -> Result<u32, FrameError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_le_bytes(len);
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge(len));
    }
    Ok(len)
}

/// Reads the body of one frame written by [`write_frame`], as
/// [`read_frame`] does, without decoding it.
pub fn read_frame_body<R: Read>(r: &mut R) -> Result<Vec<u8>, FrameError> {
    let len = read_frame_len(r)?;
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body)?;
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::tests::sample_dispatch;
    use crate::messages::{
        Api, CUDA_IPC_HANDLE_BYTES, CUDA_UUID_BYTES, Goodbye, Hello, MissReason, Missed,
        NeverLoaded, Phase, ToolMessage, Transport,
    };

    #[test]
    fn a_hello_of_another_layout_still_tells_its_version() {
        let hello = Hello {
            version: 8,
            pid: 1,
            run: "ref".into(),
            kernel_query: "k".into(),
            command_line: vec![],
            working_directory: "/".into(),
            rank: None,
            api: Api::Cuda,
        };
        let body = postcard::to_stdvec(&ToolMessage::Hello(hello)).unwrap();
        assert_eq!(hello_version(&body), Some(8));
        // Version 8's Hello had no `api`: its bytes end before it.
        let older = &body[..body.len() - 1];
        assert!(decode_frame::<ToolMessage>(older).is_err());
        assert_eq!(hello_version(older), Some(8));
        let goodbye = postcard::to_stdvec(&ToolMessage::Goodbye(Goodbye::default())).unwrap();
        assert_eq!(hello_version(&goodbye), None);
    }

    #[test]
    fn dispatch_survives_a_frame_round_trip() {
        let msg = ToolMessage::Dispatch(sample_dispatch());
        let mut wire = Vec::new();
        write_frame(&mut wire, &msg).unwrap();
        let back: ToolMessage = read_frame(&mut wire.as_slice()).unwrap();
        assert_eq!(back, msg);
    }

    #[test]
    fn staging_and_a_staged_buffer_survive_a_frame_round_trip() {
        let staging = ToolMessage::Staging { size: 64 << 20 };
        let mut d = sample_dispatch();
        d.buffers[1].transport = Transport::Staged { at: 12_288 };
        let dispatch = ToolMessage::Dispatch(d);
        for msg in [staging, dispatch] {
            let mut wire = Vec::new();
            write_frame(&mut wire, &msg).unwrap();
            let back: ToolMessage = read_frame(&mut wire.as_slice()).unwrap();
            assert_eq!(back, msg);
        }
    }

    #[test]
    fn missed_survives_a_frame_round_trip_and_older_variants_keep_their_encoding() {
        let msg = ToolMessage::Missed(Missed {
            index: 4,
            count: 3,
            arg: Some(1),
            phase: Phase::After,
            reason: MissReason::Timeout,
            detail: "no Ack".into(),
        });
        let mut wire = Vec::new();
        write_frame(&mut wire, &msg).unwrap();
        let back: ToolMessage = read_frame(&mut wire.as_slice()).unwrap();
        assert_eq!(back, msg);
        // Added last: Hello, Dispatch and Goodbye are still variants 0, 1, 2.
        let goodbye = postcard::to_stdvec(&ToolMessage::Goodbye(Goodbye::default())).unwrap();
        assert_eq!(goodbye[0], 2);
        assert_eq!(postcard::to_stdvec(&msg).unwrap()[0], 3);
        let never = ToolMessage::NeverLoaded(NeverLoaded {
            runtime: "/opt/rocm/lib/libhsa-runtime64.so.1".into(),
            reason: "HSA_TOOLS_LIB is not set".into(),
        });
        let mut wire = Vec::new();
        write_frame(&mut wire, &never).unwrap();
        assert_eq!(
            read_frame::<_, ToolMessage>(&mut wire.as_slice()).unwrap(),
            never
        );
        assert_eq!(postcard::to_stdvec(&never).unwrap()[0], 5);
    }

    #[test]
    fn oversized_length_is_rejected_before_allocation() {
        let mut wire = (MAX_FRAME_BYTES + 1).to_le_bytes().to_vec();
        wire.extend_from_slice(&[0; 8]);
        let err = read_frame::<_, ToolMessage>(&mut wire.as_slice()).unwrap_err();
        assert!(matches!(err, FrameError::TooLarge(n) if n == MAX_FRAME_BYTES + 1));
    }

    #[test]
    fn end_of_stream_before_a_frame_is_closed() {
        let err = read_frame::<_, ToolMessage>(&mut [].as_slice()).unwrap_err();
        assert!(matches!(err, FrameError::Closed));
    }

    #[test]
    fn truncated_frame_is_an_io_error() {
        let mut wire = Vec::new();
        write_frame(&mut wire, &ToolMessage::Dispatch(sample_dispatch())).unwrap();
        wire.truncate(wire.len() - 5);
        let err = read_frame::<_, ToolMessage>(&mut wire.as_slice()).unwrap_err();
        assert!(matches!(err, FrameError::Io(_)));
    }

    #[test]
    fn a_cuda_ipc_buffer_survives_a_frame_round_trip() {
        let mut d = sample_dispatch();
        d.buffers[0].transport = Transport::CudaIpc {
            handle: (0..CUDA_IPC_HANDLE_BYTES as u8).collect(),
            device_uuid: Some([0xa5; CUDA_UUID_BYTES]),
        };
        let msg = ToolMessage::Dispatch(d);
        let mut wire = Vec::new();
        write_frame(&mut wire, &msg).unwrap();
        let back: ToolMessage = read_frame(&mut wire.as_slice()).unwrap();
        assert_eq!(back, msg);
        let ToolMessage::Dispatch(back) = back else {
            unreachable!()
        };
        let Transport::CudaIpc {
            handle,
            device_uuid,
        } = &back.buffers[0].transport
        else {
            panic!("transport changed: {:?}", back.buffers[0].transport);
        };
        assert_eq!(handle[63], 63);
        assert_eq!(device_uuid.map(|u| u[15]), Some(0xa5));
    }

    #[test]
    fn a_dispatch_frame_keeps_its_bytes() {
        let mut wire = Vec::new();
        write_frame(&mut wire, &ToolMessage::Dispatch(sample_dispatch())).unwrap();
        let hex: String = wire.iter().map(|b| format!("{b:02x}")).collect();
        // Pinned: a tool and a collector built from different commits of
        // one PROTOCOL_VERSION must understand each other, so moving or
        // refactoring message types must not change a byte. (Version 12
        // added the last byte: `launch`, None.)
        assert_eq!(
            hex,
            concat!(
                "b400000001031e5f5a31327363616c655f76616c7565734966457650545f5331",
                "5f53305f6934766f6964207363616c655f76616c7565733c666c6f61743e2866",
                "6c6f61742a2c20666c6f61742a2c20666c6f61742c20696e7429800801018002",
                "010101dc0b02010001066f757470757402002007070707070707070707070707",
                "07070707070707070707070707070707070707010292218080808080e01f8020",
                "008020b42402010008019221808080a805640a5af8ac0100",
            )
        );
    }
}
