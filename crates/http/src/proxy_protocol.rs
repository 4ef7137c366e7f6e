//! The PROXY protocol (haproxy's `proxy-protocol.txt`, versions 1 and 2): the header an L4
//! balancer puts before a connection's first byte to say whose connection it relays. Parsed by
//! the server on listeners that expect it, written by the proxy to upstreams that expect it.
//!
//! A pure function over bytes, like the request parser: [`parse`] returns
//! [`Status::Partial`] until the whole header is there and then the header with its length, so
//! that the caller can take exactly that many bytes off the socket and hand the rest (a TLS
//! ClientHello, a request) to the next layer untouched. What it does not do: read sockets,
//! decide whom to believe (the server's `--accept-proxy-protocol` networks), or interpret v2's
//! TLVs (their framing is checked, their contents skipped, as the spec allows: "a receiver may
//! choose to skip over and ignore the TLVs it is not interested in").
//!
//! Hand-written rather than taken from a crate: the two crates that do this (`ppp`,
//! `proxy-header`) are not in the offline registry this project builds from, and the codec is
//! two small formats whose every byte is specified; keeping it here also gives it the codec's
//! shape (`Status`, a `Copy` error, no allocation) and the same fuzz target as every other
//! decoder of untrusted bytes.
//!
//! Strictness, from the spec: a v1 line is at most 107 bytes with its CRLF, single spaces,
//! addresses of the family named (`TCP4` with an IPv4 address), ports in decimal without a
//! sign; anything after `UNKNOWN` is ignored. A v2 header has version 2, command `LOCAL` or
//! `PROXY`, an address block at least as long as its family needs, and TLVs that exactly fill
//! what is left. `LOCAL` (the balancer's own health check), `UNKNOWN`, `AF_UNSPEC`, `AF_UNIX`
//! and datagram addresses carry no TCP client: [`ProxyHeader::addresses`] is `None`, and the
//! connection is the balancer's own.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::Status;

/// The twelve bytes that open a v2 header (spec §2.2): chosen so that no HTTP, TLS or SSH first
/// bytes look like them.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// The longest v1 header, CRLF included (spec §2.1: "the maximum line length is 107 bytes").
pub const MAX_V1_BYTES: usize = 107;

/// The longest v2 header taken (16 fixed bytes and the address block with its TLVs). The
/// format allows 64 KiB of TLVs; balancers send tens of bytes (AWS's VPC endpoint id, Azure's
/// link id, a TLS summary), so 4 KiB is generous and bounds what a connection may make the
/// server buffer before it has said anything.
pub const MAX_V2_BYTES: usize = 4096;

/// The most bytes [`parse`] may need to see to decide: a caller that peeks this many has
/// either a whole header or an error.
pub const MAX_HEADER_BYTES: usize = MAX_V2_BYTES;

/// The fixed part of a v2 header: signature, version and command, family and protocol, length.
const V2_FIXED: usize = 16;
const V1_PREFIX: &[u8] = b"PROXY ";

/// A connection's addresses as the balancer saw them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addresses {
    /// The client.
    pub source: SocketAddr,
    /// Where the client connected to (the balancer's listening address).
    pub destination: SocketAddr,
}

/// A parsed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyHeader {
    /// 1 (text) or 2 (binary).
    pub version: u8,
    /// The relayed connection's addresses; `None` when the header carries none that name a TCP
    /// client (`LOCAL`, `UNKNOWN`, unspecified or Unix addresses).
    pub addresses: Option<Addresses>,
    /// The header's length in bytes: what to consume before the connection's own bytes.
    pub len: usize,
}

/// Why bytes are not a PROXY header. Every one ends the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProxyError {
    /// Neither `PROXY ` nor the v2 signature: the connection did not start with a header.
    #[error("no PROXY protocol header")]
    Missing,
    /// A v1 line that breaks the grammar (fields, spaces, addresses, ports, characters).
    #[error("malformed PROXY protocol v1 header")]
    MalformedV1,
    /// A v1 line without its CRLF within 107 bytes.
    #[error("PROXY protocol v1 header longer than 107 bytes")]
    V1TooLong,
    /// A v2 header whose version is not 2 or whose command is neither LOCAL nor PROXY.
    #[error("unsupported PROXY protocol v2 version or command")]
    V2Unsupported,
    /// A v2 header whose address block is shorter than its family needs, or whose TLVs do not
    /// exactly fill the rest.
    #[error("malformed PROXY protocol v2 header")]
    MalformedV2,
    /// A v2 header longer than [`MAX_V2_BYTES`].
    #[error("PROXY protocol v2 header longer than 4096 bytes")]
    V2TooLong,
}

/// Parses the header at the start of `buf`.
///
/// # Errors
/// [`ProxyError`] as soon as the bytes seen cannot begin a valid header.
pub fn parse(buf: &[u8]) -> Result<Status<ProxyHeader>, ProxyError> {
    let Some(&first) = buf.first() else {
        return Ok(Status::Partial);
    };
    match first {
        b'P' => parse_v1(buf),
        b'\r' => parse_v2(buf),
        _ => Err(ProxyError::Missing),
    }
}

fn parse_v1(buf: &[u8]) -> Result<Status<ProxyHeader>, ProxyError> {
    let seen = buf.len().min(V1_PREFIX.len());
    if buf[..seen] != V1_PREFIX[..seen] {
        return Err(ProxyError::Missing);
    }
    let window = &buf[..buf.len().min(MAX_V1_BYTES)];
    let Some(cr) = window.iter().position(|&b| b == b'\r') else {
        // Fail early on what no line may hold, rather than wait for 107 bytes of garbage.
        if window.iter().any(|&b| !(b == b' ' || b.is_ascii_graphic())) {
            return Err(ProxyError::MalformedV1);
        }
        return if window.len() >= MAX_V1_BYTES {
            Err(ProxyError::V1TooLong)
        } else {
            Ok(Status::Partial)
        };
    };
    if cr < V1_PREFIX.len() {
        return Err(ProxyError::Missing);
    }
    match window.get(cr + 1) {
        None if buf.len() < MAX_V1_BYTES => return Ok(Status::Partial),
        Some(b'\n') => {}
        _ => return Err(ProxyError::MalformedV1),
    }
    let line = &window[V1_PREFIX.len()..cr];
    if line.iter().any(|&b| !(b == b' ' || b.is_ascii_graphic())) {
        return Err(ProxyError::MalformedV1);
    }
    let line = std::str::from_utf8(line).map_err(|_| ProxyError::MalformedV1)?;
    let addresses = v1_addresses(line)?;
    Ok(Status::Complete(ProxyHeader {
        version: 1,
        addresses,
        len: cr + 2,
    }))
}

/// The addresses of a v1 line after `PROXY `.
fn v1_addresses(line: &str) -> Result<Option<Addresses>, ProxyError> {
    if line == "UNKNOWN" || line.starts_with("UNKNOWN ") {
        return Ok(None);
    }
    let mut fields = line.split(' ');
    let (Some(proto), Some(src), Some(dst), Some(sport), Some(dport), None) = (
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
    ) else {
        return Err(ProxyError::MalformedV1);
    };
    let (src, dst): (IpAddr, IpAddr) = match proto {
        "TCP4" => (
            IpAddr::V4(src.parse().map_err(|_| ProxyError::MalformedV1)?),
            IpAddr::V4(dst.parse().map_err(|_| ProxyError::MalformedV1)?),
        ),
        "TCP6" => (
            IpAddr::V6(src.parse().map_err(|_| ProxyError::MalformedV1)?),
            IpAddr::V6(dst.parse().map_err(|_| ProxyError::MalformedV1)?),
        ),
        _ => return Err(ProxyError::MalformedV1),
    };
    Ok(Some(Addresses {
        source: SocketAddr::new(src, v1_port(sport)?),
        destination: SocketAddr::new(dst, v1_port(dport)?),
    }))
}

/// A port as v1 writes it: 1 to 5 decimal digits, at most 65535 (no sign, which `u16::parse`
/// would take).
fn v1_port(text: &str) -> Result<u16, ProxyError> {
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ProxyError::MalformedV1);
    }
    text.parse().map_err(|_| ProxyError::MalformedV1)
}

fn parse_v2(buf: &[u8]) -> Result<Status<ProxyHeader>, ProxyError> {
    let seen = buf.len().min(V2_SIGNATURE.len());
    if buf[..seen] != V2_SIGNATURE[..seen] {
        return Err(ProxyError::Missing);
    }
    if let Some(&ver_cmd) = buf.get(12) {
        // Version 2 in the high nibble; command LOCAL (0) or PROXY (1) in the low one.
        if ver_cmd >> 4 != 2 || ver_cmd & 0x0f > 1 {
            return Err(ProxyError::V2Unsupported);
        }
    }
    if buf.len() < V2_FIXED {
        return Ok(Status::Partial);
    }
    let local = buf[12] & 0x0f == 0;
    let family = buf[13] >> 4;
    let protocol = buf[13] & 0x0f;
    let body_len = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    let len = V2_FIXED + body_len;
    if len > MAX_V2_BYTES {
        return Err(ProxyError::V2TooLong);
    }
    // The address block's length by family (spec §2.2): INET 12, INET6 36, UNIX 216.
    let addr_len = match family {
        0 => 0,
        1 => 12,
        2 => 36,
        3 => 216,
        _ => return Err(ProxyError::MalformedV2),
    };
    if body_len < addr_len {
        return Err(ProxyError::MalformedV2);
    }
    if buf.len() < len {
        return Ok(Status::Partial);
    }
    let body = &buf[V2_FIXED..len];
    check_tlvs(&body[addr_len..])?;
    // Only a relayed stream over IP names a TCP client; LOCAL's addresses are to be ignored.
    let addresses = if local || protocol != 1 {
        None
    } else {
        match family {
            1 => {
                let ip = |at: usize| {
                    IpAddr::V4(Ipv4Addr::new(
                        body[at],
                        body[at + 1],
                        body[at + 2],
                        body[at + 3],
                    ))
                };
                Some(Addresses {
                    source: SocketAddr::new(ip(0), u16::from_be_bytes([body[8], body[9]])),
                    destination: SocketAddr::new(ip(4), u16::from_be_bytes([body[10], body[11]])),
                })
            }
            2 => {
                let ip = |at: usize| {
                    let mut octets = [0u8; 16];
                    octets.copy_from_slice(&body[at..at + 16]);
                    IpAddr::V6(Ipv6Addr::from(octets))
                };
                Some(Addresses {
                    source: SocketAddr::new(ip(0), u16::from_be_bytes([body[32], body[33]])),
                    destination: SocketAddr::new(ip(16), u16::from_be_bytes([body[34], body[35]])),
                })
            }
            _ => None,
        }
    };
    Ok(Status::Complete(ProxyHeader {
        version: 2,
        addresses,
        len,
    }))
}

/// TLVs (type, 16-bit length, value) must exactly fill what follows the addresses.
fn check_tlvs(mut tlvs: &[u8]) -> Result<(), ProxyError> {
    while !tlvs.is_empty() {
        if tlvs.len() < 3 {
            return Err(ProxyError::MalformedV2);
        }
        let value_len = usize::from(u16::from_be_bytes([tlvs[1], tlvs[2]]));
        tlvs = tlvs.get(3 + value_len..).ok_or(ProxyError::MalformedV2)?;
    }
    Ok(())
}

/// Both addresses in one family: IPv4 when both are, else IPv6 (an IPv4 address mapped), as
/// both formats carry one family per header.
fn same_family(a: Addresses) -> (IpAddr, IpAddr) {
    let v6 = |ip: IpAddr| match ip {
        IpAddr::V4(v4) => IpAddr::V6(v4.to_ipv6_mapped()),
        v6 @ IpAddr::V6(_) => v6,
    };
    let (s, d) = (
        a.source.ip().to_canonical(),
        a.destination.ip().to_canonical(),
    );
    if s.is_ipv4() && d.is_ipv4() {
        (s, d)
    } else {
        (v6(s), v6(d))
    }
}

/// Appends a v1 header: `PROXY TCP4 …`/`TCP6 …`, or `PROXY UNKNOWN` without addresses.
pub fn write_v1(out: &mut Vec<u8>, addresses: Option<Addresses>) {
    use std::io::Write as _;
    let Some(a) = addresses else {
        out.extend_from_slice(b"PROXY UNKNOWN\r\n");
        return;
    };
    let (s, d) = same_family(a);
    let proto = if s.is_ipv4() { "TCP4" } else { "TCP6" };
    // Writing into a Vec cannot fail.
    let _ = write!(
        out,
        "PROXY {proto} {s} {d} {} {}\r\n",
        a.source.port(),
        a.destination.port()
    );
}

/// Appends a v2 header without TLVs: command PROXY over TCP with the addresses, or LOCAL
/// (unspecified family, no addresses) without them.
pub fn write_v2(out: &mut Vec<u8>, addresses: Option<Addresses>) {
    out.extend_from_slice(&V2_SIGNATURE);
    let Some(a) = addresses else {
        out.extend_from_slice(&[0x20, 0x00, 0, 0]);
        return;
    };
    match same_family(a) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out.extend_from_slice(&[0x21, 0x11, 0, 12]);
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
        }
        (s, d) => {
            let v6 = |ip: IpAddr| match ip {
                IpAddr::V6(v6) => v6.octets(),
                IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            };
            out.extend_from_slice(&[0x21, 0x21, 0, 36]);
            out.extend_from_slice(&v6(s));
            out.extend_from_slice(&v6(d));
        }
    }
    out.extend_from_slice(&a.source.port().to_be_bytes());
    out.extend_from_slice(&a.destination.port().to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(src: &str, dst: &str) -> Option<Addresses> {
        Some(Addresses {
            source: src.parse().unwrap(),
            destination: dst.parse().unwrap(),
        })
    }

    /// A v2 header from its version/command, family/protocol and body.
    fn v2(ver_cmd: u8, fam: u8, body: &[u8]) -> Vec<u8> {
        let mut out = V2_SIGNATURE.to_vec();
        out.push(ver_cmd);
        out.push(fam);
        out.extend_from_slice(&u16::try_from(body.len()).unwrap().to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    fn v4_body() -> Vec<u8> {
        let mut b = vec![192, 0, 2, 7, 10, 0, 0, 1];
        b.extend_from_slice(&51234u16.to_be_bytes());
        b.extend_from_slice(&443u16.to_be_bytes());
        b
    }

    /// Every valid case parses whole, and every strict prefix of it is partial (fed a byte at a
    /// time, as a socket may deliver it); bytes after the header are not taken.
    #[test]
    fn valid_headers() {
        let mut v6_body = Vec::new();
        v6_body.extend_from_slice(&"2001:db8::7".parse::<Ipv6Addr>().unwrap().octets());
        v6_body.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        v6_body.extend_from_slice(&[0, 80, 1, 187]);
        let mut with_tlvs = v4_body();
        with_tlvs.extend_from_slice(&[0x20, 0, 1, 0x05, 0x04, 0, 2, b'h', b'2']);
        let cases: Vec<(&str, Vec<u8>, Option<Addresses>)> = vec![
            (
                "v1 tcp4",
                b"PROXY TCP4 192.0.2.7 10.0.0.1 51234 443\r\n".to_vec(),
                addrs("192.0.2.7:51234", "10.0.0.1:443"),
            ),
            (
                "v1 tcp6",
                b"PROXY TCP6 2001:db8::7 ::1 1 65535\r\n".to_vec(),
                addrs("[2001:db8::7]:1", "[::1]:65535"),
            ),
            ("v1 unknown", b"PROXY UNKNOWN\r\n".to_vec(), None),
            (
                "v1 unknown with addresses",
                b"PROXY UNKNOWN ffff:f::1 ffff:f::2 1 2\r\n".to_vec(),
                None,
            ),
            (
                "v2 tcp4",
                v2(0x21, 0x11, &v4_body()),
                addrs("192.0.2.7:51234", "10.0.0.1:443"),
            ),
            (
                "v2 tcp6",
                v2(0x21, 0x21, &v6_body),
                addrs("[2001:db8::7]:80", "[2001:db8::1]:443"),
            ),
            (
                "v2 tcp4 with tlvs",
                v2(0x21, 0x11, &with_tlvs),
                addrs("192.0.2.7:51234", "10.0.0.1:443"),
            ),
            ("v2 local", v2(0x20, 0x00, &[]), None),
            ("v2 local with addresses", v2(0x20, 0x11, &v4_body()), None),
            ("v2 udp", v2(0x21, 0x12, &v4_body()), None),
            ("v2 unix", v2(0x21, 0x31, &[0; 216]), None),
            ("v2 unspec", v2(0x21, 0x00, &[]), None),
        ];
        for (name, bytes, want) in cases {
            let mut input = bytes.clone();
            input.extend_from_slice(b"\x16\x03\x01GET / HTTP/1.1\r\n");
            let Ok(Status::Complete(h)) = parse(&input) else {
                panic!("{name}: {:?}", parse(&input));
            };
            assert_eq!(h.addresses, want, "{name}");
            assert_eq!(h.len, bytes.len(), "{name}");
            assert_eq!(h.version, if bytes[0] == b'P' { 1 } else { 2 }, "{name}");
            for cut in 0..bytes.len() {
                assert_eq!(
                    parse(&bytes[..cut]),
                    Ok(Status::Partial),
                    "{name} cut at {cut}"
                );
            }
        }
    }

    #[test]
    fn refused() {
        let long_tlvs = {
            let mut b = v4_body();
            b.extend_from_slice(&[0x20, 0, 10, 1]);
            b
        };
        let too_long = {
            let mut h = V2_SIGNATURE.to_vec();
            h.extend_from_slice(&[0x21, 0x11, 0x10, 0x00]);
            h
        };
        let cases: Vec<(&str, Vec<u8>, ProxyError)> = vec![
            ("http", b"GET / HTTP/1.1\r\n".to_vec(), ProxyError::Missing),
            ("tls", b"\x16\x03\x01\x02\x00".to_vec(), ProxyError::Missing),
            ("lowercase", b"proxy TCP4".to_vec(), ProxyError::Missing),
            ("http crlf", b"\r\nGET".to_vec(), ProxyError::Missing),
            ("PROXY method", b"PROXY\r\n".to_vec(), ProxyError::Missing),
            (
                "v1 two spaces",
                b"PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n".to_vec(),
                ProxyError::MalformedV1,
            ),
            (
                "v1 family mismatch",
                b"PROXY TCP4 ::1 ::1 1 2\r\n".to_vec(),
                ProxyError::MalformedV1,
            ),
            (
                "v1 tcp6 with v4",
                b"PROXY TCP6 1.2.3.4 5.6.7.8 1 2\r\n".to_vec(),
                ProxyError::MalformedV1,
            ),
            (
                "v1 port too big",
                b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n".to_vec(),
                ProxyError::MalformedV1,
            ),
            (
                "v1 signed port",
                b"PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n".to_vec(),
                ProxyError::MalformedV1,
            ),
            (
                "v1 missing port",
                b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n".to_vec(),
                ProxyError::MalformedV1,
            ),
            (
                "v1 extra field",
                b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n".to_vec(),
                ProxyError::MalformedV1,
            ),
            (
                "v1 leading zero address",
                b"PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n".to_vec(),
                ProxyError::MalformedV1,
            ),
            (
                "v1 udp",
                b"PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n".to_vec(),
                ProxyError::MalformedV1,
            ),
            (
                "v1 bare cr",
                b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX".to_vec(),
                ProxyError::MalformedV1,
            ),
            (
                "v1 bare lf",
                b"PROXY TCP4 1.2.3.4\n".to_vec(),
                ProxyError::MalformedV1,
            ),
            ("v1 nul", b"PROXY TCP4\0".to_vec(), ProxyError::MalformedV1),
            (
                "v1 too long",
                [b"PROXY UNKNOWN ".as_slice(), &[b'x'; 100]].concat(),
                ProxyError::V1TooLong,
            ),
            (
                "v2 version 1",
                v2(0x11, 0x11, &v4_body()),
                ProxyError::V2Unsupported,
            ),
            (
                "v2 command 2",
                v2(0x22, 0x11, &v4_body()),
                ProxyError::V2Unsupported,
            ),
            (
                "v2 short addresses",
                v2(0x21, 0x21, &v4_body()),
                ProxyError::MalformedV2,
            ),
            (
                "v2 family 4",
                v2(0x21, 0x41, &v4_body()),
                ProxyError::MalformedV2,
            ),
            (
                "v2 tlv overruns",
                v2(0x21, 0x11, &long_tlvs),
                ProxyError::MalformedV2,
            ),
            (
                "v2 tlv cut",
                v2(0x21, 0x11, &[v4_body(), vec![1, 0]].concat()),
                ProxyError::MalformedV2,
            ),
            ("v2 too long", too_long, ProxyError::V2TooLong),
        ];
        for (name, bytes, want) in cases {
            assert_eq!(parse(&bytes), Err(want), "{name}");
        }
    }

    /// What the proxy writes for an upstream reads back as what it meant.
    #[test]
    fn written_headers_read_back() {
        let cases = [
            addrs("192.0.2.7:51234", "10.0.0.1:443"),
            addrs("[2001:db8::7]:80", "[::1]:8080"),
            // Mixed families go as IPv6, the IPv4 one mapped.
            addrs("192.0.2.7:1", "[::1]:2"),
            None,
        ];
        for want in cases {
            for v in [1, 2] {
                let mut out = Vec::new();
                if v == 1 {
                    write_v1(&mut out, want);
                } else {
                    write_v2(&mut out, want);
                }
                let Ok(Status::Complete(h)) = parse(&out) else {
                    panic!("v{v} {want:?}: {:?}", parse(&out));
                };
                assert_eq!(h.len, out.len());
                let canonical = |a: Option<Addresses>| {
                    a.map(|a| {
                        (
                            a.source.ip().to_canonical(),
                            a.source.port(),
                            a.destination.port(),
                        )
                    })
                };
                assert_eq!(canonical(h.addresses), canonical(want), "v{v}");
            }
        }
        let mut out = Vec::new();
        write_v1(&mut out, addrs("192.0.2.7:51234", "10.0.0.1:443"));
        assert_eq!(out, b"PROXY TCP4 192.0.2.7 10.0.0.1 51234 443\r\n");
    }
}
