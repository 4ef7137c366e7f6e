//! What a limit counts by: a key made of parts of the request (the client's address, a field,
//! a cookie, the Host, the path), hashed with a per-process random seed so that no one can aim
//! two keys at one counter. Rate limits and connection limits key the same way.
//!
//! A rate-limit zone kept in Redis also names each key the same way on every instance
//! ([`fleet_id`]): a seed would differ from process to process, so that name is a hash without
//! one — SHA-256, which no one can aim either — and always 16 bytes, whatever the parts' size.

use std::hash::{BuildHasher, Hash, Hasher};

use lowlat_http::request::Request;

/// One part of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPart {
    /// The client's address (after trusted proxies).
    Addr,
    /// A request field, by name (lower case); absent counts as empty.
    Header(String),
    /// A cookie, by name.
    Cookie(String),
    /// The `Host` (lower case, as sent).
    Host,
    /// The path, without the query.
    Path,
}

impl std::fmt::Display for KeyPart {
    /// As `key=` writes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Addr => f.write_str("addr"),
            Self::Header(name) => write!(f, "header:{name}"),
            Self::Cookie(name) => write!(f, "cookie:{name}"),
            Self::Host => f.write_str("host"),
            Self::Path => f.write_str("path"),
        }
    }
}

/// The key of `req` from a client at `client`: every part, together, hashed with `seed`.
/// `path` is the request's path in its normal form (`crate::scope`), so that another spelling
/// of a path counts as the path.
pub(super) fn hash(
    parts: &[KeyPart],
    seed: &foldhash::quality::RandomState,
    req: &Request<'_, '_>,
    path: &str,
    client: std::net::IpAddr,
) -> u64 {
    let mut h = seed.build_hasher();
    for part in parts {
        match part {
            // The address's bits in one write: `IpAddr`'s own `Hash` writes its variant and a
            // length-prefixed array, 107 instructions a request in all (callgrind).
            KeyPart::Addr => match client {
                std::net::IpAddr::V4(a) => h.write_u64(u64::from(a.to_bits()) | 1 << 32),
                std::net::IpAddr::V6(a) => h.write_u128(a.to_bits()),
            },
            KeyPart::Header(name) => req.header(name).unwrap_or_default().hash(&mut h),
            KeyPart::Cookie(name) => cookie(req, name).unwrap_or_default().hash(&mut h),
            KeyPart::Host => {
                for b in req.header("host").unwrap_or_default() {
                    h.write_u8(b.to_ascii_lowercase());
                }
            }
            KeyPart::Path => path.hash(&mut h),
        }
    }
    h.finish()
}

/// The key of `req` as every instance names it: SHA-256 of every part (each with its length,
/// so that parts cannot run into one another), its first 16 bytes. Costs a hash of a few
/// dozen bytes, paid once per key (when its bucket is made), not per request.
pub(super) fn fleet_id(
    parts: &[KeyPart],
    req: &Request<'_, '_>,
    path: &str,
    client: std::net::IpAddr,
) -> [u8; 16] {
    let mut h = ring::digest::Context::new(&ring::digest::SHA256);
    let mut part = |tag: u8, bytes: &[u8]| {
        h.update(&[tag]);
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    let mut host = Vec::new();
    for p in parts {
        match p {
            KeyPart::Addr => match client {
                std::net::IpAddr::V4(a) => part(b'4', &a.octets()),
                std::net::IpAddr::V6(a) => part(b'6', &a.octets()),
            },
            KeyPart::Header(name) => part(b'h', req.header(name).unwrap_or_default()),
            KeyPart::Cookie(name) => part(b'c', cookie(req, name).unwrap_or_default()),
            KeyPart::Host => {
                host.clear();
                host.extend(
                    req.header("host")
                        .unwrap_or_default()
                        .iter()
                        .map(u8::to_ascii_lowercase),
                );
                part(b'H', &host);
            }
            KeyPart::Path => part(b'p', path.as_bytes()),
        }
    }
    let digest = h.finish();
    let mut id = [0; 16];
    id.copy_from_slice(&digest.as_ref()[..16]);
    id
}

/// The value of cookie `name` in the request's `Cookie` fields.
fn cookie<'a>(req: &Request<'a, '_>, name: &str) -> Option<&'a [u8]> {
    req.headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("cookie"))
        .flat_map(|h| h.value.split(|&b| b == b';'))
        .find_map(|pair| {
            let pair = pair.trim_ascii_start();
            let (n, v) = pair.split_at(pair.iter().position(|&b| b == b'=')?);
            (n == name.as_bytes()).then(|| &v[1..])
        })
}
