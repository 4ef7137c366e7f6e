//! QPACK's static table (RFC 9204 Appendix A), indexed from 0, and the lookups the encoder
//! makes in it.

use std::sync::OnceLock;

use rustc_hash::FxHashMap;

/// The static table: entry `i` is index `i`.
pub const STATIC: [(&[u8], &[u8]); 99] = [
    (b":authority", b""),
    (b":path", b"/"),
    (b"age", b"0"),
    (b"content-disposition", b""),
    (b"content-length", b"0"),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"referer", b""),
    (b"set-cookie", b""),
    (b":method", b"CONNECT"),
    (b":method", b"DELETE"),
    (b":method", b"GET"),
    (b":method", b"HEAD"),
    (b":method", b"OPTIONS"),
    (b":method", b"POST"),
    (b":method", b"PUT"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"103"),
    (b":status", b"200"),
    (b":status", b"304"),
    (b":status", b"404"),
    (b":status", b"503"),
    (b"accept", b"*/*"),
    (b"accept", b"application/dns-message"),
    (b"accept-encoding", b"gzip, deflate, br"),
    (b"accept-ranges", b"bytes"),
    (b"access-control-allow-headers", b"cache-control"),
    (b"access-control-allow-headers", b"content-type"),
    (b"access-control-allow-origin", b"*"),
    (b"cache-control", b"max-age=0"),
    (b"cache-control", b"max-age=2592000"),
    (b"cache-control", b"max-age=604800"),
    (b"cache-control", b"no-cache"),
    (b"cache-control", b"no-store"),
    (b"cache-control", b"public, max-age=31536000"),
    (b"content-encoding", b"br"),
    (b"content-encoding", b"gzip"),
    (b"content-type", b"application/dns-message"),
    (b"content-type", b"application/javascript"),
    (b"content-type", b"application/json"),
    (b"content-type", b"application/x-www-form-urlencoded"),
    (b"content-type", b"image/gif"),
    (b"content-type", b"image/jpeg"),
    (b"content-type", b"image/png"),
    (b"content-type", b"text/css"),
    (b"content-type", b"text/html; charset=utf-8"),
    (b"content-type", b"text/plain"),
    (b"content-type", b"text/plain;charset=utf-8"),
    (b"range", b"bytes=0-"),
    (b"strict-transport-security", b"max-age=31536000"),
    (
        b"strict-transport-security",
        b"max-age=31536000; includesubdomains",
    ),
    (
        b"strict-transport-security",
        b"max-age=31536000; includesubdomains; preload",
    ),
    (b"vary", b"accept-encoding"),
    (b"vary", b"origin"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-xss-protection", b"1; mode=block"),
    (b":status", b"100"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"302"),
    (b":status", b"400"),
    (b":status", b"403"),
    (b":status", b"421"),
    (b":status", b"425"),
    (b":status", b"500"),
    (b"accept-language", b""),
    (b"access-control-allow-credentials", b"FALSE"),
    (b"access-control-allow-credentials", b"TRUE"),
    (b"access-control-allow-headers", b"*"),
    (b"access-control-allow-methods", b"get"),
    (b"access-control-allow-methods", b"get, post, options"),
    (b"access-control-allow-methods", b"options"),
    (b"access-control-expose-headers", b"content-length"),
    (b"access-control-request-headers", b"content-type"),
    (b"access-control-request-method", b"get"),
    (b"access-control-request-method", b"post"),
    (b"alt-svc", b"clear"),
    (b"authorization", b""),
    (
        b"content-security-policy",
        b"script-src 'none'; object-src 'none'; base-uri 'none'",
    ),
    (b"early-data", b"1"),
    (b"expect-ct", b""),
    (b"forwarded", b""),
    (b"if-range", b""),
    (b"origin", b""),
    (b"purpose", b"prefetch"),
    (b"server", b""),
    (b"timing-allow-origin", b"*"),
    (b"upgrade-insecure-requests", b"1"),
    (b"user-agent", b""),
    (b"x-forwarded-for", b""),
    (b"x-frame-options", b"deny"),
    (b"x-frame-options", b"sameorigin"),
];

/// Where a field stands in the static table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// Name and value: an indexed field line.
    Full(u8),
    /// The name only: a literal with a name reference.
    Name(u8),
}

/// Entries by name: the first index with that name, and every (value, index). Hashed with
/// FxHash: the keys are the table's own (a lookup of a name not in it costs one probe whatever
/// its bytes), and SipHash made each field of a response cost ~500 instructions more.
type ByName = FxHashMap<&'static [u8], (u8, Vec<(&'static [u8], u8)>)>;

fn by_name() -> &'static ByName {
    static MAP: OnceLock<ByName> = OnceLock::new();
    MAP.get_or_init(|| {
        let mut m: ByName = FxHashMap::default();
        for (i, &(n, v)) in STATIC.iter().enumerate() {
            let i = i as u8;
            m.entry(n).or_insert_with(|| (i, Vec::new())).1.push((v, i));
        }
        m
    })
}

/// Looks a field up in the static table.
#[must_use]
pub fn find(name: &[u8], value: &[u8]) -> Option<Match> {
    let (first, values) = by_name().get(name)?;
    Some(
        values
            .iter()
            .find(|(v, _)| *v == value)
            .map_or(Match::Name(*first), |&(_, i)| Match::Full(i)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups() {
        assert_eq!(STATIC[98], (&b"x-frame-options"[..], &b"sameorigin"[..]));
        assert_eq!(find(b":path", b"/"), Some(Match::Full(1)));
        assert_eq!(find(b":path", b"/index.html"), Some(Match::Name(1)));
        assert_eq!(find(b":status", b"500"), Some(Match::Full(71)));
        assert_eq!(find(b":status", b"201"), Some(Match::Name(24)));
        assert_eq!(find(b"content-type", b"text/plain"), Some(Match::Full(53)));
        assert_eq!(find(b"x-unknown", b""), None);
        for (i, &(n, v)) in STATIC.iter().enumerate() {
            assert_eq!(find(n, v), Some(Match::Full(i as u8)), "{i}");
        }
    }
}
