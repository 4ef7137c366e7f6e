//! What a limit counts by: a key made of parts of the request (the client's address, a field,
//! a cookie, the Host, the path), hashed with a per-process random seed so that no one can aim
//! two keys at one counter. Rate limits and connection limits key the same way.

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

/// The key of `req` from a client at `client`: every part, together, hashed with `seed`.
pub(super) fn hash(
    parts: &[KeyPart],
    seed: &foldhash::quality::RandomState,
    req: &Request<'_, '_>,
    client: std::net::IpAddr,
) -> u64 {
    let mut h = seed.build_hasher();
    for part in parts {
        match part {
            KeyPart::Addr => client.hash(&mut h),
            KeyPart::Header(name) => req.header(name).unwrap_or_default().hash(&mut h),
            KeyPart::Cookie(name) => cookie(req, name).unwrap_or_default().hash(&mut h),
            KeyPart::Host => {
                for b in req.header("host").unwrap_or_default() {
                    h.write_u8(b.to_ascii_lowercase());
                }
            }
            KeyPart::Path => req.path.hash(&mut h),
        }
    }
    h.finish()
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
