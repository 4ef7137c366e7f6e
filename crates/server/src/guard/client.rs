//! Who the client is, for the rules that judge it: the connection's peer, or — when the peer is
//! a trusted proxy (`--proxy-trusted`) — the address it says it forwarded for. Read from the
//! right of `X-Forwarded-For`, skipping trusted proxies, as nginx's `real_ip_recursive`: the
//! first address no trusted hop vouches for is the client (anything left of it was written by
//! the client itself and proves nothing).

use std::net::IpAddr;

use lowlat_http::request::Header;

use crate::proxy::config::Cidr;

/// The client's address for access rules and limits.
#[must_use]
pub fn address(peer: IpAddr, headers: &[Header<'_>], trusted: &[Cidr]) -> IpAddr {
    let peer = peer.to_canonical();
    if !trusted.iter().any(|c| c.contains(peer)) {
        return peer;
    }
    let mut client = peer;
    // Right to left over every X-Forwarded-For field, last field first.
    for h in headers
        .iter()
        .rev()
        .filter(|h| h.name.eq_ignore_ascii_case("x-forwarded-for"))
    {
        for hop in h.value.rsplit(|&b| b == b',') {
            let Some(ip) = std::str::from_utf8(hop)
                .ok()
                .and_then(|s| s.trim().parse::<IpAddr>().ok())
            else {
                // Garbage where an address should be: trust stops at the last good hop.
                return client;
            };
            client = ip.to_canonical();
            if !trusted.iter().any(|c| c.contains(client)) {
                return client;
            }
        }
    }
    client
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header<'a>(name: &'a str, value: &'a str) -> Header<'a> {
        Header {
            name,
            value: value.as_bytes(),
        }
    }

    #[test]
    fn only_trusted_hops_are_believed() {
        let trusted = [Cidr {
            addr: "10.0.0.0".parse().unwrap(),
            bits: 8,
        }];
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let xff = [header("X-Forwarded-For", "6.6.6.6, 203.0.113.7, 10.0.0.2")];
        // From a trusted proxy: the first untrusted hop from the right.
        assert_eq!(address(ip("10.0.0.1"), &xff, &trusted), ip("203.0.113.7"));
        // From anyone else: the peer, whatever it claims.
        assert_eq!(
            address(ip("198.51.100.1"), &xff, &trusted),
            ip("198.51.100.1")
        );
        // Every hop trusted: the leftmost.
        let inner = [header("x-forwarded-for", "10.0.0.9, 10.0.0.8")];
        assert_eq!(address(ip("10.0.0.1"), &inner, &trusted), ip("10.0.0.9"));
        // Garbage stops the walk at the last hop believed.
        let bad = [header("x-forwarded-for", "6.6.6.6, junk, 10.0.0.3")];
        assert_eq!(address(ip("10.0.0.1"), &bad, &trusted), ip("10.0.0.3"));
        // Mapped addresses are their IPv4 selves.
        assert_eq!(
            address(ip("::ffff:198.51.100.1"), &[], &trusted),
            ip("198.51.100.1")
        );
    }
}
