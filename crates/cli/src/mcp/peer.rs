//! Which uid holds the other end of a loopback TCP connection: the
//! kernel lists every TCP socket of this network namespace with its
//! owner in `/proc/net/tcp` and `/proc/net/tcp6`; the client's socket is
//! the one whose local address is the connection's peer and whose remote
//! address is the connection's local one.
//!
//! Owns that lookup only, and reads nothing else. It is a second check
//! beside the token, never the only one: a socket gone by the time it is
//! looked up (or one the kernel keeps only for its closing handshake,
//! listed with no owner) is "unknown", and the token alone decides.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The tables that list TCP sockets with their owners.
const TABLES: [&str; 2] = ["/proc/net/tcp", "/proc/net/tcp6"];

/// The uid that owns the client's end of the connection `local` ←
/// `peer` (both as the server sees them), where the kernel lists it.
pub fn uid_of_peer(local: SocketAddr, peer: SocketAddr) -> Option<u32> {
    TABLES.iter().find_map(|table| {
        let text = std::fs::read_to_string(table).ok()?;
        owner_in(&text, local, peer)
    })
}

/// The owner of the socket in `table` (a `/proc/net/tcp` or `tcp6` text)
/// whose local address is `peer` and remote address `local`; IPv4
/// addresses match their IPv4-mapped IPv6 form. A socket without an
/// inode (a closed one the kernel keeps for TIME_WAIT or FIN_WAIT2,
/// listed as uid 0) has no owner.
fn owner_in(table: &str, local: SocketAddr, peer: SocketAddr) -> Option<u32> {
    let canonical = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
    let (local, peer) = (canonical(local), canonical(peer));
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (own, remote, uid, inode) = (
            fields.get(1)?,
            fields.get(2)?,
            fields.get(7)?,
            fields.get(9)?,
        );
        if canonical(address(own)?) != peer || canonical(address(remote)?) != local {
            return None;
        }
        if *inode == "0" {
            return None;
        }
        uid.parse().ok()
    })
}

/// An address as the tables write it: `0100007F:1F90` (IPv4) or 32 hex
/// digits and the port (IPv6), each 32-bit word in this machine's byte
/// order.
fn address(field: &str) -> Option<SocketAddr> {
    let (ip, port) = field.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        let hex = ip.get(i * 8..i * 8 + 8)?;
        Some(u32::from_str_radix(hex, 16).ok()?.to_ne_bytes())
    };
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut octets = [0u8; 16];
            for i in 0..4 {
                octets[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(octets))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    // SAFETY: getuid cannot fail.
    fn uid() -> u32 {
        unsafe { libc::getuid() }
    }

    #[test]
    fn the_client_of_a_loopback_connection_is_this_uid() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, peer) = listener.accept().unwrap();
        let local = accepted.local_addr().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        assert_eq!(uid_of_peer(local, peer), Some(uid()));
        // The server's own end is no client: the other direction is not it.
        let unknown: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(uid_of_peer(local, unknown), None);
    }

    #[test]
    fn an_ipv6_loopback_client_is_found_too() {
        let Ok(listener) = TcpListener::bind("[::1]:0") else {
            eprintln!(
                "no IPv6 loopback on this machine: the tcp6 table is checked by its parser test only"
            );
            return;
        };
        let _client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, peer) = listener.accept().unwrap();
        assert_eq!(
            uid_of_peer(accepted.local_addr().unwrap(), peer),
            Some(uid())
        );
    }

    const TABLE: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1001 1 0 100 0 0 10 0
   1: 0100007F:A2B4 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 2002 1 0 20 4 30 10 -1
   2: 0100007F:1F90 0100007F:A2B4 01 00000000:00000000 00:00000000 00000000     0        0 2003 1 0 20 4 30 10 -1
   3: 0100007F:A2B5 0100007F:1F90 06 00000000:00000000 03:00000F3A 00000000     0        0 0 3 0
";

    fn at(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn the_owner_is_the_row_whose_local_end_is_the_peer() {
        if cfg!(target_endian = "big") {
            return;
        }
        let server = at("127.0.0.1:8080");
        assert_eq!(owner_in(TABLE, server, at("127.0.0.1:41652")), Some(1000));
        // Written as IPv4-mapped IPv6 (a server bound to [::ffff:127.0.0.1]).
        assert_eq!(
            owner_in(
                TABLE,
                at("[::ffff:127.0.0.1]:8080"),
                at("[::ffff:127.0.0.1]:41652")
            ),
            Some(1000)
        );
        // TIME_WAIT: listed as uid 0 with no inode, so no owner.
        assert_eq!(owner_in(TABLE, server, at("127.0.0.1:41653")), None);
        assert_eq!(owner_in(TABLE, server, at("127.0.0.2:41652")), None);
        assert_eq!(owner_in("", server, at("127.0.0.1:41652")), None);
    }

    #[test]
    fn addresses_are_read_as_the_kernel_writes_them() {
        if cfg!(target_endian = "big") {
            return;
        }
        assert_eq!(address("0100007F:1F90"), Some(at("127.0.0.1:8080")));
        assert_eq!(
            address("00000000000000000000000001000000:0050"),
            Some(at("[::1]:80"))
        );
        assert_eq!(
            address("0000000000000000FFFF00000100007F:0050"),
            Some(at("[::ffff:127.0.0.1]:80"))
        );
        for bad in [
            "",
            "0100007F",
            "0100007F:",
            "XX00007F:0050",
            "01007F:0050",
            "0100007F:10000",
        ] {
            assert_eq!(address(bad), None, "{bad}");
        }
    }
}
