//! Who is at the other end of a Unix stream socket: the credentials the
//! kernel recorded for it (SO_PEERCRED: the process that connected, or
//! the one that called listen). The collector serves only its own uid, the
//! tool sends only to a collector of the uid it trusts, and a snapshot
//! directory's lock names its holder by them. Owns that one query.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

/// The peer's pid, uid and gid.
pub fn peer_credentials(stream: &UnixStream) -> io::Result<libc::ucred> {
    // SAFETY: ucred is plain data; all-zero is a valid value.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: cred/len describe a writable ucred-sized buffer.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_pair_s_peer_is_this_process() {
        let (a, _b) = UnixStream::pair().unwrap();
        let c = peer_credentials(&a).unwrap();
        assert_eq!(c.pid as u32, std::process::id());
        // SAFETY: getuid cannot fail.
        assert_eq!(c.uid, unsafe { libc::getuid() });
    }
}
