//! File descriptors travelling with frames over a Unix stream socket
//! (SCM_RIGHTS): the copy transport's shared-memory buffers.
//!
//! Owns the sending rule (the fds ride on the FIRST bytes of their frame, so
//! frame and fds arrive together or not at all), the receiving side (every
//! fd arrives close-on-exec, at most [`MAX_FDS_PER_FRAME`] per frame) and
//! the rule that a rejected frame's fds are closed, never leaked. Never
//! interprets what the fds hold and never keeps one beyond the value it
//! returns (an [`OwnedFd`] closes on drop).

use crate::framing::{FrameError, MAX_FDS_PER_FRAME, MAX_FRAME_BYTES};
use serde::Serialize;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

const FD_SIZE: usize = std::mem::size_of::<RawFd>();

/// Control-message buffer for [`MAX_FDS_PER_FRAME`] fds, aligned for cmsghdr.
#[repr(C, align(8))]
struct ControlBuffer([u8; control_space(MAX_FDS_PER_FRAME)]);

/// CMSG_SPACE for `n` fds (the libc macro is not const).
const fn control_space(n: usize) -> usize {
    let align = std::mem::size_of::<usize>();
    let header = (std::mem::size_of::<libc::cmsghdr>() + align - 1) & !(align - 1);
    header + ((n * FD_SIZE + align - 1) & !(align - 1))
}

/// Sends `bytes` with one sendmsg, attaching `fds` (SCM_RIGHTS) when there
/// are any; returns how many bytes went (at least one when `bytes` is not
/// empty: the fds are attached to those). Does not check the fd bound: see
/// [`write_frame_with_fds`].
pub fn send_with_fds(stream: &UnixStream, bytes: &[u8], fds: &[BorrowedFd]) -> io::Result<usize> {
    if fds.len() > 253 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} fds exceed what one message can carry", fds.len()),
        ));
    }
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    let mut control = vec![0u64; control_space(fds.len()).div_ceil(8)];
    if !fds.is_empty() {
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = control_space(fds.len()) as _;
        // SAFETY: msg_control points at a zeroed, 8-aligned buffer of
        // msg_controllen bytes, room for one header and fds.len() fds.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN((fds.len() * FD_SIZE) as u32) as _;
            let data = libc::CMSG_DATA(cmsg) as *mut RawFd;
            for (i, fd) in fds.iter().enumerate() {
                data.add(i).write_unaligned(fd.as_raw_fd());
            }
        }
    }
    loop {
        // SAFETY: msg describes live buffers (bytes, control) for the call.
        let n = unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Writes one frame exactly as [`crate::framing::write_frame`] does, its first bytes
/// carrying `fds`. More than [`MAX_FDS_PER_FRAME`] fds is an error and
/// nothing is sent. The caller still owns (and closes) its fds.
pub fn write_frame_with_fds<T: Serialize>(
    stream: &UnixStream,
    msg: &T,
    fds: &[BorrowedFd],
) -> Result<(), FrameError> {
    if fds.len() > MAX_FDS_PER_FRAME {
        return Err(FrameError::TooManyFds(fds.len()));
    }
    let mut frame = Vec::new();
    crate::framing::write_frame(&mut frame, msg)?;
    let sent = send_with_fds(stream, &frame, fds)?;
    let mut rest: &UnixStream = stream;
    io::Write::write_all(&mut rest, &frame[sent..])?;
    Ok(())
}

/// The fds that arrived with one frame, in arrival order. Counts every fd
/// the kernel delivered or dropped: more than [`MAX_FDS_PER_FRAME`] makes
/// [`ReceivedFds::take`] an error after closing all of them.
#[derive(Debug, Default)]
pub struct ReceivedFds {
    fds: Vec<OwnedFd>,
    overflowed: bool,
}

impl ReceivedFds {
    /// The frame's fds, leaving this empty for the next frame; an error
    /// (every fd closed) when the frame carried more than allowed.
    pub fn take(&mut self) -> Result<Vec<OwnedFd>, FrameError> {
        let fds = std::mem::take(&mut self.fds);
        if std::mem::take(&mut self.overflowed) {
            let n = fds.len();
            drop(fds);
            return Err(FrameError::TooManyFds(n.max(MAX_FDS_PER_FRAME + 1)));
        }
        Ok(fds)
    }

    /// Closes whatever arrived (for frames that may carry none).
    pub fn clear(&mut self) {
        self.fds.clear();
        self.overflowed = false;
    }

    pub fn len(&self) -> usize {
        self.fds.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fds.is_empty()
    }
}

/// One recvmsg into `buf`: fds that come with these bytes are added to
/// `received` (close-on-exec). Fds past the bound are closed at once.
/// Returns the byte count (0: end of stream); errors as read(2).
pub fn recv_with_fds(
    stream: &UnixStream,
    buf: &mut [u8],
    received: &mut ReceivedFds,
) -> io::Result<usize> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut control = ControlBuffer([0; control_space(MAX_FDS_PER_FRAME)]);
    // SAFETY: an all-zero msghdr is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = control.0.len() as _;
    // SAFETY: msg describes live buffers (buf, control) for the call.
    let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel filled msg_control up to msg_controllen; the CMSG
    // macros walk only within it.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg) as *const RawFd;
                let header = data as usize - cmsg as usize;
                let count = ((*cmsg).cmsg_len as usize).saturating_sub(header) / FD_SIZE;
                for i in 0..count {
                    // Each fd is new in this process and owned by nobody else.
                    let fd = OwnedFd::from_raw_fd(data.add(i).read_unaligned());
                    if received.fds.len() < MAX_FDS_PER_FRAME {
                        received.fds.push(fd);
                    } else {
                        received.overflowed = true;
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        // The kernel closed the fds that did not fit.
        received.overflowed = true;
    }
    Ok(n as usize)
}

/// A blocking reader over a Unix stream that keeps the fds arriving with
/// the bytes it reads.
pub struct FdReader<'a> {
    pub stream: &'a UnixStream,
    pub received: ReceivedFds,
}

impl Read for FdReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        recv_with_fds(self.stream, buf, &mut self.received)
    }
}

/// Reads one frame written by [`write_frame_with_fds`] and the fds that
/// came with it. On any error every fd received so far is closed.
pub fn read_frame_with_fds<T: serde::de::DeserializeOwned>(
    stream: &UnixStream,
) -> Result<(T, Vec<OwnedFd>), FrameError> {
    let mut reader = FdReader {
        stream,
        received: ReceivedFds::default(),
    };
    let msg = crate::framing::read_frame(&mut reader)?;
    let fds = reader.received.take()?;
    Ok((msg, fds))
}

const _: () = assert!(MAX_FDS_PER_FRAME * FD_SIZE < MAX_FRAME_BYTES as usize);

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, Write};
    use std::os::fd::AsFd;

    /// A memfd named `name` holding `bytes`.
    fn memfd(name: &str, bytes: &[u8]) -> std::fs::File {
        let c = std::ffi::CString::new(name).unwrap();
        // SAFETY: valid C string; the result is checked.
        let fd = unsafe { libc::memfd_create(c.as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0, "memfd_create: {}", io::Error::last_os_error());
        // SAFETY: fd is new and ours.
        let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
        f.write_all(bytes).unwrap();
        f
    }

    /// How many fds of this process point at memfds named `name`.
    fn open_memfds(name: &str) -> usize {
        let wanted = format!("/memfd:{name} (deleted)");
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target.to_string_lossy() == wanted)
            .count()
    }

    fn contents(fd: OwnedFd) -> Vec<u8> {
        let mut f = std::fs::File::from(fd);
        f.rewind().unwrap();
        let mut v = Vec::new();
        f.read_to_end(&mut v).unwrap();
        v
    }

    fn round_trip(name: &str, count: usize) {
        let (a, b) = UnixStream::pair().unwrap();
        let files: Vec<_> = (0..count)
            .map(|i| memfd(name, format!("buffer {i}").as_bytes()))
            .collect();
        let borrowed: Vec<_> = files.iter().map(|f| f.as_fd()).collect();
        write_frame_with_fds(&a, &format!("frame with {count} fds"), &borrowed).unwrap();
        drop(files);
        // A second frame without fds follows: nothing of the first leaks into it.
        write_frame_with_fds(&a, &"plain".to_string(), &[]).unwrap();
        let (msg, fds): (String, _) = read_frame_with_fds(&b).unwrap();
        assert_eq!(msg, format!("frame with {count} fds"));
        assert_eq!(fds.len(), count);
        for fd in &fds {
            // SAFETY: F_GETFD on an fd we own.
            let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
            assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC, "close-on-exec");
        }
        for (i, fd) in fds.into_iter().enumerate() {
            assert_eq!(contents(fd), format!("buffer {i}").as_bytes(), "in order");
        }
        let (plain, none): (String, _) = read_frame_with_fds(&b).unwrap();
        assert_eq!((plain.as_str(), none.len()), ("plain", 0));
        assert_eq!(open_memfds(name), 0, "every fd closed once dropped");
    }

    #[test]
    fn a_frame_carries_no_fd() {
        round_trip("ditto-fd-test-zero", 0);
    }

    #[test]
    fn a_frame_carries_one_fd() {
        round_trip("ditto-fd-test-one", 1);
    }

    #[test]
    fn a_frame_carries_several_fds_in_order() {
        round_trip("ditto-fd-test-several", 5);
    }

    #[test]
    fn fds_arrive_with_a_frame_larger_than_the_socket_buffer() {
        let (a, b) = UnixStream::pair().unwrap();
        let big = vec![7u8; 1 << 20];
        let f = memfd("ditto-fd-test-big", b"x");
        let writer = std::thread::spawn(move || {
            write_frame_with_fds(&a, &big, &[f.as_fd()]).unwrap();
        });
        let (got, fds): (Vec<u8>, _) = read_frame_with_fds(&b).unwrap();
        writer.join().unwrap();
        assert_eq!(got.len(), 1 << 20);
        assert_eq!(contents(fds.into_iter().next().unwrap()), b"x");
    }

    #[test]
    fn more_fds_than_allowed_is_refused_by_the_sender() {
        let (a, _b) = UnixStream::pair().unwrap();
        let f = memfd("ditto-fd-test-sender-bound", b"");
        let many = vec![f.as_fd(); MAX_FDS_PER_FRAME + 1];
        let err = write_frame_with_fds(&a, &"x".to_string(), &many).unwrap_err();
        assert!(matches!(err, FrameError::TooManyFds(n) if n == MAX_FDS_PER_FRAME + 1));
    }

    #[test]
    fn a_frame_with_more_fds_than_allowed_is_an_error_and_leaks_none() {
        const NAME: &str = "ditto-fd-test-too-many";
        let (a, b) = UnixStream::pair().unwrap();
        for extra in [1, 20] {
            let f = memfd(NAME, b"");
            let many = vec![f.as_fd(); MAX_FDS_PER_FRAME + extra];
            let mut frame = Vec::new();
            crate::framing::write_frame(&mut frame, &"too many".to_string()).unwrap();
            let sent = send_with_fds(&a, &frame, &many).unwrap();
            (&a).write_all(&frame[sent..]).unwrap();
            drop(f);
            let err = read_frame_with_fds::<String>(&b).unwrap_err();
            assert!(
                matches!(err, FrameError::TooManyFds(n) if n > MAX_FDS_PER_FRAME),
                "{err}"
            );
            assert_eq!(open_memfds(NAME), 0, "{extra} over the bound: none kept");
        }
        // The stream is still in step: the next frame reads fine.
        write_frame_with_fds(&a, &"next".to_string(), &[]).unwrap();
        let (next, _): (String, _) = read_frame_with_fds(&b).unwrap();
        assert_eq!(next, "next");
    }

    #[test]
    fn fds_of_a_frame_that_fails_to_decode_are_closed() {
        const NAME: &str = "ditto-fd-test-bad-frame";
        let (a, b) = UnixStream::pair().unwrap();
        let f = memfd(NAME, b"");
        // A frame whose body is not a valid u64 for postcard (empty).
        let frame = 0u32.to_le_bytes();
        let sent = send_with_fds(&a, &frame, &[f.as_fd()]).unwrap();
        assert_eq!(sent, 4);
        drop(f);
        assert!(read_frame_with_fds::<u64>(&b).is_err());
        assert_eq!(open_memfds(NAME), 0);
    }
}
