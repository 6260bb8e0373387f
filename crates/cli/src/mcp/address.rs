//! Where `ditto mcp --http` listens: the value of `--http` (a port, or
//! HOST:PORT with an IP address or `localhost`) and the policy that keeps
//! the server on loopback unless `--allow-remote` is given.
//!
//! Owns parsing that value and the loopback policy only; binding and
//! serving are `http`'s. A tool call runs programs on this machine, so
//! an address that other machines can reach is never taken silently.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Why a `--http` value was refused.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum AddressError {
    #[error(
        "--http {given}: not a port or HOST:PORT with an IP address or localhost \
         (examples: --http 8080, --http 127.0.0.1:8080, --http [::1]:8080; port 0 picks a free port)"
    )]
    Unparsable { given: String },
    #[error(
        "--http {address}: {ip} is not a loopback address, so other machines could reach the \
         server and run programs on this one through its tools; serve on 127.0.0.1 or [::1], \
         or give --allow-remote to serve on {address} anyway"
    )]
    NotLoopback { address: SocketAddr, ip: IpAddr },
}

/// The address to listen on for `--http GIVEN`: a bare port is on
/// 127.0.0.1; an address that is not loopback needs `allow_remote`.
pub fn listen_address(given: &str, allow_remote: bool) -> Result<SocketAddr, AddressError> {
    let address = parse(given.trim()).ok_or_else(|| AddressError::Unparsable {
        given: given.to_string(),
    })?;
    let ip = address.ip();
    if !allow_remote && !is_loopback(ip) {
        return Err(AddressError::NotLoopback { address, ip });
    }
    Ok(address)
}

fn parse(given: &str) -> Option<SocketAddr> {
    if let Ok(port) = given.parse::<u16>() {
        return Some(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port));
    }
    if let Ok(address) = given.parse::<SocketAddr>() {
        return Some(address);
    }
    let (host, port) = given.rsplit_once(':')?;
    if host.eq_ignore_ascii_case("localhost") {
        return Some(SocketAddr::new(
            Ipv4Addr::LOCALHOST.into(),
            port.parse().ok()?,
        ));
    }
    None
}

/// 127.0.0.0/8, ::1, and 127.0.0.0/8 written as IPv4-mapped IPv6.
fn is_loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(given: &str, allow_remote: bool) -> String {
        listen_address(given, allow_remote)
            .unwrap_or_else(|e| panic!("{given}: {e}"))
            .to_string()
    }

    #[test]
    fn a_bare_port_listens_on_ipv4_loopback() {
        assert_eq!(ok("8080", false), "127.0.0.1:8080");
        assert_eq!(ok("0", false), "127.0.0.1:0");
        assert_eq!(ok(" 41234 ", false), "127.0.0.1:41234");
    }

    #[test]
    fn loopback_addresses_are_taken_as_given() {
        assert_eq!(ok("127.0.0.1:9000", false), "127.0.0.1:9000");
        assert_eq!(ok("127.1.2.3:9000", false), "127.1.2.3:9000");
        assert_eq!(ok("[::1]:9000", false), "[::1]:9000");
        assert_eq!(
            ok("[::ffff:127.0.0.1]:9000", false),
            "[::ffff:127.0.0.1]:9000"
        );
        assert_eq!(ok("localhost:9000", false), "127.0.0.1:9000");
        assert_eq!(ok("LocalHost:0", false), "127.0.0.1:0");
    }

    #[test]
    fn a_remote_address_is_refused_naming_it_and_allow_remote() {
        for given in [
            "0.0.0.0:8080",
            "192.0.2.7:8080",
            "[::]:8080",
            "[2001:db8::1]:80",
        ] {
            let e = listen_address(given, false).unwrap_err();
            assert!(
                matches!(e, AddressError::NotLoopback { .. }),
                "{given}: {e:?}"
            );
            let message = e.to_string();
            assert!(
                message.starts_with(&format!("--http {given}: ")),
                "{message}"
            );
            assert!(message.contains("--allow-remote"), "{message}");
            assert!(message.contains("127.0.0.1"), "{message}");
        }
    }

    #[test]
    fn allow_remote_takes_any_address() {
        assert_eq!(ok("0.0.0.0:8080", true), "0.0.0.0:8080");
        assert_eq!(ok("[::]:0", true), "[::]:0");
        assert_eq!(ok("8080", true), "127.0.0.1:8080");
    }

    #[test]
    fn what_is_no_address_is_refused_with_examples() {
        for given in [
            "",
            "http",
            "65536",
            "-1",
            "example.com:80",
            "127.0.0.1",
            "localhost",
            "localhost:x",
            "::1:80",
            "127.0.0.1:80/mcp",
        ] {
            let e = listen_address(given, true).unwrap_err();
            assert_eq!(
                e,
                AddressError::Unparsable {
                    given: given.to_string()
                },
                "{given}"
            );
            assert!(e.to_string().contains("--http 127.0.0.1:8080"), "{e}");
        }
    }
}
