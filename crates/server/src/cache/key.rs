//! Cache keys. The primary key is what nginx's default `proxy_cache_key` holds — scheme, host
//! and the request-target's path and query, as sent (`https://example.com/a?b`) — with the host
//! lower-cased (RFC 9110 §4.2.3: host names are case-insensitive). `GET` and `HEAD` share it
//! (a `HEAD` is answered from a stored `GET`). A variant (RFC 9111 §4.1) is stored under the
//! primary key, a zero byte, the id of the `Vary` marker it belongs to, and its secondary key:
//! a new marker gets a new id, so the variants of an invalidated one can never be found again.
//!
//! A rule may give its own key as a template (`$scheme$host$uri$is_args$args$cookie_lang`):
//! its expansion is the primary key, and what it leaves out (the query, say) no longer tells
//! requests apart. Keys of rules that share a template share entries, as in nginx.

use lowlat_http::request::Request;

/// Writes the primary key of `req` into `out` (cleared first), by `template` when the rule
/// gives one. False when the template cannot be expanded (no `Host` for `$host`): the request
/// then goes past the cache.
pub(crate) fn primary_by(
    template: Option<&crate::template::Template>,
    req: &Request<'_, '_>,
    asked: &super::asked::Asked<'_>,
    tls: bool,
    out: &mut Vec<u8>,
) -> bool {
    let Some(t) = template else {
        primary(req, asked, tls, out);
        return true;
    };
    out.clear();
    t.expand(req, &super::rules::context(tls), out).is_ok()
}

/// Writes the default primary key of `req` into `out` (cleared first): `asked` holds its
/// `Host` and `X-Forwarded-Host`.
pub(crate) fn primary(
    req: &Request<'_, '_>,
    asked: &super::asked::Asked<'_>,
    tls: bool,
    out: &mut Vec<u8>,
) {
    out.clear();
    out.extend_from_slice(if tls { b"https://" } else { b"http://" });
    let host = asked.host.unwrap_or_default();
    let at = out.len();
    out.extend_from_slice(host);
    out[at..].make_ascii_lowercase();
    out.extend_from_slice(req.path.as_bytes());
    if let Some(q) = req.query {
        out.push(b'?');
        out.extend_from_slice(q.as_bytes());
    }
    // Passed upstream from a trusted proxy, it changes the links an application writes: a
    // response to one value is not one to another.
    if let Some(h) = asked.forwarded_host {
        out.extend_from_slice(b"\0xfh=");
        out.extend_from_slice(h);
    }
}

/// Writes a variant's key into `out`: the primary key, `\0`, the marker's id, the secondary key.
pub(crate) fn variant(primary: &[u8], marker: u64, secondary: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(primary);
    out.push(0);
    out.extend_from_slice(&marker.to_be_bytes());
    out.extend_from_slice(secondary);
}

/// The host-and-scheme part of a primary key (`https://example.com`), where a path of the
/// same site is appended to make its key.
pub(crate) fn origin(primary: &[u8]) -> &[u8] {
    let after_scheme = primary
        .windows(3)
        .position(|w| w == b"://")
        .map_or(0, |p| p + 3);
    let end = primary[after_scheme..]
        .iter()
        .position(|&b| b == b'/')
        .map_or(primary.len(), |p| after_scheme + p);
    &primary[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use lowlat_http::request::{header_slots, parse_request, HeadLimits};
    use lowlat_http::Status;

    #[test]
    fn keys() {
        let cases: &[(&[u8], bool, &str)] = &[
            (
                b"GET /a?b=1 HTTP/1.1\r\nHost: Example.COM\r\n\r\n",
                false,
                "http://example.com/a?b=1",
            ),
            (
                b"HEAD /a HTTP/1.1\r\nHost: example.com:8080\r\n\r\n",
                true,
                "https://example.com:8080/a",
            ),
            (b"GET /a? HTTP/1.1\r\nHost: h\r\n\r\n", false, "http://h/a?"),
        ];
        for (raw, tls, want) in cases {
            let mut slots = header_slots();
            let Ok(Status::Complete(req)) = parse_request(raw, &mut slots, &HeadLimits::default())
            else {
                panic!("not a request");
            };
            let mut out = Vec::new();
            primary(
                &req,
                &super::super::asked::Asked::of(req.headers),
                *tls,
                &mut out,
            );
            assert_eq!(String::from_utf8(out.clone()).unwrap(), *want);
            assert!(want.starts_with(std::str::from_utf8(origin(&out)).unwrap()));
        }
        assert_eq!(origin(b"http://h/a/b"), b"http://h");
        assert_eq!(origin(b"http://h"), b"http://h");
        let mut v = Vec::new();
        variant(b"http://h/a", 7, b"accept:x\n", &mut v);
        assert_eq!(v, b"http://h/a\0\0\0\0\0\0\0\0\x07accept:x\n");
    }
}
