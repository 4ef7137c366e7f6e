//! Which client requests open a WebSocket tunnel through the proxy, and the fields that carry
//! the offer upstream.
//!
//! `Upgrade` and `Connection` are hop-by-hop (RFC 9110 §7.6.1), so [`super::headers`] drops them
//! from every forwarded request; a WebSocket opening handshake (RFC 6455 §4.1: `GET`, HTTP/1.1,
//! `Connection: upgrade`, `Upgrade: websocket`, no body) gets them back here, as nginx does with
//! `proxy_set_header Upgrade $http_upgrade; proxy_set_header Connection "upgrade"`. The
//! `Sec-WebSocket-*` fields are end-to-end and cross as any field does.
//!
//! An HTTP/2 client asks with an extended CONNECT (RFC 8441): `:method CONNECT`, `:protocol
//! websocket`, no key. The upstream gets the HTTP/1.1 handshake all the same — a `GET` with the
//! fields above and a `Sec-WebSocket-Key` the proxy makes — and its `101` must carry the
//! matching accept value, which the proxy checks on the client's behalf.
//!
//! Only `websocket` is forwarded. Any other token — `h2c` above all — would let a client switch
//! the upstream connection to a protocol the proxy does not route or check ("h2c smuggling":
//! requests the proxy never saw reach the application), so such an offer loses its `Upgrade`
//! as before, and a `101` answering a request that offered nothing is refused (502).

use lowlat_http::body::BodyFraming;
use lowlat_http::request::{Method, Request};
use lowlat_http::Version;

/// Whether `req` is a WebSocket opening handshake the proxy forwards as one: HTTP/1.1's, or an
/// HTTP/2 client's extended CONNECT for `websocket` (RFC 8441 §4).
pub(crate) fn is_websocket_upgrade(req: &Request<'_, '_>) -> bool {
    if let Some(protocol) = req.protocol {
        return req.version == Version::Http2
            && req.method == Method::Connect
            && protocol.eq_ignore_ascii_case("websocket");
    }
    req.version == Version::Http11
        && req.method == Method::Get
        && matches!(req.framing, BodyFraming::None | BodyFraming::Length(0))
        && has_token(req, "connection", b"upgrade")
        && has_token(req, "upgrade", b"websocket")
}

/// Whether a comma-separated list field of `req` holds `token` (any case; for `Upgrade`, a
/// protocol's version after `/` is ignored).
fn has_token(req: &Request<'_, '_>, field: &str, token: &[u8]) -> bool {
    req.headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case(field))
        .flat_map(|h| h.value.split(|&b| b == b','))
        .any(|t| {
            let t = t.trim_ascii();
            let name = t.split(|&b| b == b'/').next().unwrap_or(t);
            name.eq_ignore_ascii_case(token)
        })
}

/// Adds the upgrade offer to a forwarded request head (`out` ends with its blank line; an
/// upgrade request has no body). With `key`, the handshake's `Sec-WebSocket-Key` too: an HTTP/2
/// client sends none (RFC 8441 §5), an HTTP/1.1 upstream needs one.
pub(crate) fn add_upgrade_fields(out: &mut Vec<u8>, key: Option<&str>) {
    debug_assert!(out.ends_with(b"\r\n\r\n"));
    out.truncate(out.len() - 2);
    out.extend_from_slice(b"Upgrade: websocket\r\nConnection: upgrade\r\n");
    if let Some(key) = key {
        out.extend_from_slice(b"Sec-WebSocket-Key: ");
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// Whether a `101`'s `Sec-WebSocket-Accept` is `expected` (RFC 6455 §4.2.2), when the proxy made
/// the key: the client behind an extended CONNECT cannot check it, so the proxy does.
pub(crate) fn accept_matches(fields: &[lowlat_http::client::Header<'_>], expected: &str) -> bool {
    fields
        .iter()
        .find(|f| f.name.eq_ignore_ascii_case("sec-websocket-accept"))
        .is_some_and(|f| f.value.trim_ascii() == expected.as_bytes())
}

/// Whether an upstream's `101` switched to what was offered: its `Upgrade` names `websocket`
/// (RFC 9110 §15.2.2: a 101 must say what it switched to).
pub(crate) fn switched_to_websocket(fields: &[lowlat_http::client::Header<'_>]) -> bool {
    fields
        .iter()
        .filter(|f| f.name.eq_ignore_ascii_case("upgrade"))
        .flat_map(|f| f.value.split(|&b| b == b','))
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"websocket"))
}

#[cfg(test)]
mod tests {
    use lowlat_http::request::{header_slots, parse_request, HeadLimits};
    use lowlat_http::Status;

    fn upgrade(raw: &str) -> bool {
        let mut slots = header_slots();
        let Ok(Status::Complete(req)) =
            parse_request(raw.as_bytes(), &mut slots, &HeadLimits::default())
        else {
            panic!("not a request: {raw:?}");
        };
        super::is_websocket_upgrade(&req)
    }

    #[test]
    fn which_requests_upgrade() {
        let cases = [
            ("GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", true),
            ("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, upgrade\r\nUpgrade: WebSocket\r\n\r\n", true),
            ("GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: foo, websocket/13\r\n\r\n", true),
            // No Connection: upgrade: the Upgrade field is only a hint to this hop.
            ("GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n", false),
            // h2c (or anything but websocket) is never forwarded.
            ("GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n", false),
            ("POST / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: websocket\r\nContent-Length: 2\r\n\r\nhi", false),
            ("GET / HTTP/1.0\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n", false),
        ];
        for (raw, want) in cases {
            assert_eq!(upgrade(raw), want, "{raw:?}");
        }
    }

    #[test]
    fn fields_go_before_the_blank_line() {
        let mut out = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec();
        super::add_upgrade_fields(&mut out, None);
        assert_eq!(
            out,
            b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n"
        );
        let mut out = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec();
        super::add_upgrade_fields(&mut out, Some("dGhlIHNhbXBsZSBub25jZQ=="));
        assert_eq!(
            out,
            &b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\
               Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"[..]
        );
    }
}
