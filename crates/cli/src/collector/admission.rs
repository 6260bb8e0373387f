//! Who and what a connection may be before anything it sends is kept:
//! the peer's uid (SO_PEERCRED) against the one the collector serves, and
//! a run name usable as a snapshot directory's name. Owns the two checks
//! and their reasons (sent to the tool in its Reject).

use std::io;
use std::os::unix::net::UnixStream;

/// The uid of the process at the other end (SO_PEERCRED).
pub fn peer_uid(stream: &UnixStream) -> io::Result<u32> {
    ditto_protocol::peer_credentials(stream).map(|c| c.uid)
}

/// A peer that runs as another user than the one the collector serves.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "peer runs as uid {peer_uid} but this collector serves only uid {allowed_uid}: run the \
     application as the same user as ditto"
)]
pub struct OtherUser {
    pub peer_uid: u32,
    pub allowed_uid: u32,
}

/// Why a peer is refused, if it is.
pub fn check_peer(peer_uid: u32, allowed_uid: u32) -> Result<(), OtherUser> {
    if peer_uid == allowed_uid {
        Ok(())
    } else {
        Err(OtherUser {
            peer_uid,
            allowed_uid,
        })
    }
}

/// A run name that cannot name a snapshot directory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "run name {0:?} cannot name a snapshot directory: set DITTO_RUN_NAME (or --run) to a plain name"
)]
pub struct BadRunName(pub String);

/// A run name usable as a directory name.
pub fn check_run_name(run: &str) -> Result<(), BadRunName> {
    if run.is_empty() || run == "." || run == ".." || run.contains('/') || run.contains('\0') {
        Err(BadRunName(run.to_string()))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_names_that_escape_the_base_directory_are_refused() {
        for bad in ["", ".", "..", "a/b", "/abs"] {
            assert!(check_run_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_run_name("ref").is_ok());
        assert!(check_run_name("1234").is_ok());
    }

    #[test]
    fn a_peer_with_another_uid_is_refused_with_both_uids_named() {
        assert!(check_peer(1000, 1000).is_ok());
        let e = check_peer(0, 1000).unwrap_err().to_string();
        assert!(e.contains("uid 0") && e.contains("uid 1000"), "{e}");
    }

    #[test]
    fn peer_uid_of_a_socketpair_is_our_uid() {
        let (a, _b) = UnixStream::pair().unwrap();
        // SAFETY: getuid cannot fail.
        assert_eq!(peer_uid(&a).unwrap(), unsafe { libc::getuid() });
    }
}
