//! What crosses the proxy in the headers: the request as the upstream gets it (the path
//! rewritten, hop-by-hop fields dropped, `X-Forwarded-*`, `Forwarded` and a request id set, the
//! client certificate's `X-Client-*` fields set — the client's own always dropped —, the
//! framing made one `Content-Length`), and which response fields go on to the client. Pure
//! functions over bytes, tested on their own.
//!
//! Hop-by-hop fields (RFC 9110 §7.6.1) belong to one connection and are never forwarded:
//! `Connection` and every field it names, `Keep-Alive`, `TE`, `Trailer`, `Transfer-Encoding`,
//! `Upgrade`, and `Proxy-*`.

use std::net::IpAddr;

use lowlat_http::body::BodyFraming;
use lowlat_http::request::{Method, Request};
use lowlat_http::Version;

use super::config::Cidr;
use crate::client_cert::{is_client_cert_field, CertReport};
// Defined with what every handler sees (`crate::incoming`, re-exported by `crate::handler`);
// named here too, where the proxy reads them.
pub use crate::incoming::{ClientInfo, StreamedBody};

/// Fields that are the proxy's to set, or belong to one hop only: the hop-by-hop ones,
/// `Trailer` (a relayed body is framed again, its trailers announced anew) and every `Proxy-*`.
///
/// Asked of every field of every forwarded request and relayed response, so by length first
/// and the `proxy-` prefix by its first byte: most names have no listed length and do not
/// start with `p` (held to the codec's list by `hop_by_hop_is_the_codecs_and_more`).
#[inline]
fn is_hop_by_hop(name: &str) -> bool {
    let b = name.as_bytes();
    let is = |n: &str| name.eq_ignore_ascii_case(n);
    let listed = match b.len() {
        2 => is("te"),
        7 => is("upgrade") || is("trailer"),
        10 => is("connection") || is("keep-alive"),
        17 => is("transfer-encoding"),
        _ => false,
    };
    listed || b.len() > 6 && b[0] | 0x20 == b'p' && b[..6].eq_ignore_ascii_case(b"proxy-")
}

/// Whether `name` is listed in one of the `Connection` field values.
fn named_by_connection<'a>(name: &str, connection: impl IntoIterator<Item = &'a [u8]>) -> bool {
    connection.into_iter().any(|v| {
        v.split(|&b| b == b',')
            .any(|t| trim(t).eq_ignore_ascii_case(name.as_bytes()))
    })
}

fn trim(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// Where a request goes: the part of the path after `prefix` appended to `rewrite`, or the
/// target as it is.
pub struct Target<'a> {
    pub prefix: &'a str,
    pub rewrite: Option<&'a str>,
    /// `Host` for a request that has none (HTTP/1.0): the upstream's name, as nginx's
    /// `$proxy_host`.
    pub default_host: &'a str,
}

/// How a request whose head came without its body (HTTP/2, HTTP/3) is framed for the handlers:
/// as it streams (`streamed`), else by the `body_len` bytes read whole.
#[must_use]
pub(crate) fn request_framing(
    streamed: Option<StreamedBody>,
    body_len: usize,
) -> lowlat_http::body::BodyFraming {
    use lowlat_http::body::BodyFraming;
    match streamed {
        Some(StreamedBody::Length(n)) => BodyFraming::Length(n),
        Some(StreamedBody::Chunked) => BodyFraming::Chunked,
        None if body_len == 0 => BodyFraming::None,
        None => BodyFraming::Length(body_len as u64),
    }
}

/// Writes the request as the upstream gets it into `out`: `req` (already parsed and checked by
/// the server: ambiguous framing never gets here) with its `body` (whole, decoded), for the
/// client `client`, whose certificate is reported as `cert` says. `request_id` is used when
/// the request has no `X-Request-Id`. With `streamed`, only the head is written, framed as it
/// says: the body follows separately.
#[allow(clippy::too_many_arguments)]
pub fn write_request(
    out: &mut Vec<u8>,
    req: &Request<'_, '_>,
    body: &[u8],
    streamed: Option<StreamedBody>,
    target: &Target<'_>,
    client: &ClientInfo,
    cert: CertReport<'_>,
    trusted: &[Cidr],
    request_id: &[u8],
) {
    // An HTTP/2 extended CONNECT (RFC 8441) reaches an HTTP/1.1 upstream as the WebSocket
    // handshake's GET (`super::upgrade` adds the rest).
    let method = match req.protocol {
        Some(_) => "GET",
        None => req.method_token,
    };
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    // Always origin form (RFC 9112 §3.2.1), from the path the rule matched: an absolute-form
    // target's authority becomes the Host below (§3.2.2: the received Host is then ignored).
    match target.rewrite {
        Some(to) => {
            out.extend_from_slice(to.as_bytes());
            let rest = req.path.get(target.prefix.len()..).unwrap_or("");
            out.extend_from_slice(rest.as_bytes());
        }
        None => out.extend_from_slice(req.path.as_bytes()),
    }
    if let Some(q) = req.query {
        out.push(b'?');
        out.extend_from_slice(q.as_bytes());
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let authority = req
        .target
        .split_once("://")
        .map(|(_, rest)| rest.split(['/', '?']).next().unwrap_or(rest))
        .filter(|a| !a.is_empty());

    // Looked up again where needed rather than gathered: no allocation per request.
    let connection = || {
        req.headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case("connection"))
            .map(|h| h.value)
    };
    let list = |field: &'static str| {
        req.headers
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(field))
            .map(|h| h.value)
    };
    let believed = trusted.iter().any(|c| c.contains(client.peer.ip()));
    let mut proto: Option<&[u8]> = None;
    let mut fwd_host: Option<&[u8]> = None;
    let mut host: Option<&[u8]> = None;
    let mut has_id = false;
    let mut has_early_data = false;
    let mut cookies = 0;
    for h in req.headers {
        let name = h.name;
        if is_hop_by_hop(name)
            || name.eq_ignore_ascii_case("content-length")
            || named_by_connection(name, connection())
        {
            continue;
        }
        if name.eq_ignore_ascii_case("x-forwarded-for") || name.eq_ignore_ascii_case("forwarded") {
            continue;
        }
        // The server's to say, on every site: an upstream may trust them.
        if is_client_cert_field(name) {
            continue;
        }
        if name.eq_ignore_ascii_case("x-forwarded-proto") {
            proto = Some(h.value);
            continue;
        }
        if name.eq_ignore_ascii_case("x-forwarded-host") {
            fwd_host = Some(h.value);
            continue;
        }
        if name.eq_ignore_ascii_case("host") {
            if authority.is_some() {
                continue;
            }
            host = Some(h.value);
        }
        if name.eq_ignore_ascii_case("x-request-id") {
            has_id = true;
        }
        // A client's own (another proxy's, RFC 8470 §5.2) is passed on as it is.
        if name.eq_ignore_ascii_case("early-data") {
            has_early_data = true;
        }
        // HTTP/2 may split Cookie into several fields; HTTP/1.1 wants one (RFC 9113 §8.2.3).
        if matches!(req.version, Version::Http2 | Version::Http3)
            && name.eq_ignore_ascii_case("cookie")
        {
            cookies += 1;
            continue;
        }
        field(out, name.as_bytes(), h.value);
    }
    if cookies > 0 {
        out.extend_from_slice(b"cookie: ");
        let mut first = true;
        for h in req
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case("cookie"))
        {
            if !first {
                out.extend_from_slice(b"; ");
            }
            first = false;
            out.extend_from_slice(h.value);
        }
        out.extend_from_slice(b"\r\n");
    }

    // Host: the absolute-form target's authority, else the client's (passed above in its
    // place), else — an HTTP/1.0 request without one — the upstream's name.
    if let Some(a) = authority {
        field(out, b"Host", a.as_bytes());
        host = Some(a.as_bytes());
    } else if host.is_none() {
        field(out, b"Host", target.default_host.as_bytes());
    }

    // X-Forwarded-For and Forwarded: a trusted proxy's list is extended, anyone else's replaced.
    let ip = client.peer.ip();
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 @ IpAddr::V4(_) => v4,
    };
    let mut ip_text = [0u8; 64];
    let ip_text = fmt_ip(ip, &mut ip_text);
    out.extend_from_slice(b"X-Forwarded-For: ");
    if believed {
        // Several lines of a list field are one list (RFC 9110 §5.3): all kept, in order.
        for prev in list("x-forwarded-for") {
            out.extend_from_slice(prev);
            out.extend_from_slice(b", ");
        }
    }
    out.extend_from_slice(ip_text);
    out.extend_from_slice(b"\r\n");
    let scheme: &[u8] = if client.tls { b"https" } else { b"http" };
    let proto = match (believed, proto) {
        (true, Some(p)) => p,
        _ => scheme,
    };
    field(out, b"X-Forwarded-Proto", proto);
    let fhost = match (believed, fwd_host) {
        (true, Some(h)) => Some(h),
        _ => host,
    };
    if let Some(h) = fhost {
        field(out, b"X-Forwarded-Host", h);
    }
    out.extend_from_slice(b"Forwarded: ");
    if believed {
        for prev in list("forwarded") {
            out.extend_from_slice(prev);
            out.extend_from_slice(b", ");
        }
    }
    // RFC 7239 §6: an IPv6 address is quoted and bracketed.
    if ip.is_ipv6() {
        out.extend_from_slice(b"for=\"[");
        out.extend_from_slice(ip_text);
        out.extend_from_slice(b"]\"");
    } else {
        out.extend_from_slice(b"for=");
        out.extend_from_slice(ip_text);
    }
    out.extend_from_slice(b";proto=");
    out.extend_from_slice(scheme);
    if let Some(h) = host.filter(|h| h.iter().all(|&b| b.is_ascii_graphic() && b != b'"')) {
        out.extend_from_slice(b";host=\"");
        out.extend_from_slice(h);
        out.push(b'"');
    }
    out.extend_from_slice(b"\r\n");
    if client.early_data && !has_early_data {
        field(out, b"Early-Data", b"1");
    }
    if !has_id {
        field(out, b"X-Request-Id", request_id);
    }
    out.extend_from_slice(cert.upstream_fields());

    match streamed {
        Some(StreamedBody::Length(n)) => {
            out.extend_from_slice(b"Content-Length: ");
            out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            out.extend_from_slice(b"\r\n\r\n");
            return;
        }
        Some(StreamedBody::Chunked) => {
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
            return;
        }
        None => {}
    }
    // One framing, whatever the client used: the body is whole here.
    let has_body = !body.is_empty()
        || !matches!(req.framing, BodyFraming::None)
        || matches!(req.method, Method::Post | Method::Put | Method::Patch);
    if has_body {
        out.extend_from_slice(b"Content-Length: ");
        out.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
}

fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// `ip` as text into `buf`. IPv4, the common case, without `core::fmt` (it showed in profiles
/// of proxied requests); IPv6 through `Display`.
fn fmt_ip(ip: IpAddr, buf: &mut [u8; 64]) -> &[u8] {
    match ip {
        IpAddr::V4(v4) => {
            let mut n = 0;
            for (i, octet) in v4.octets().iter().enumerate() {
                if i > 0 {
                    buf[n] = b'.';
                    n += 1;
                }
                let mut digits = itoa::Buffer::new();
                let d = digits.format(*octet).as_bytes();
                buf[n..n + d.len()].copy_from_slice(d);
                n += d.len();
            }
            &buf[..n]
        }
        IpAddr::V6(_) => {
            use std::io::Write;
            let mut cursor = std::io::Cursor::new(&mut buf[..]);
            let _ = write!(cursor, "{ip}");
            let n = usize::try_from(cursor.position()).unwrap_or(0);
            &buf[..n]
        }
    }
}

/// Whether a response field from the upstream goes on to the client: not hop-by-hop, not named
/// by the response's `Connection`, and not the framing (the proxy frames the body itself).
#[must_use]
pub fn response_field_passes<'a>(
    name: &str,
    connection: impl IntoIterator<Item = &'a [u8]>,
) -> bool {
    !(is_hop_by_hop(name)
        || name.len() == 14 && name.eq_ignore_ascii_case("content-length")
        || named_by_connection(name, connection))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lowlat_http::request::{header_slots, parse_request, HeadLimits};
    use lowlat_http::Status;

    fn forward(raw: &[u8], peer: &str, tls: bool, trusted: &[Cidr], target: &Target<'_>) -> String {
        let mut slots = header_slots();
        let Ok(Status::Complete(req)) = parse_request(raw, &mut slots, &HeadLimits::default())
        else {
            panic!("not a request");
        };
        let body = &raw[req.head_len..];
        let mut out = Vec::new();
        let client = ClientInfo {
            peer: peer.parse().unwrap(),
            tls,
            early_data: false,
            cert: None,
        };
        write_request(
            &mut out,
            &req,
            body,
            None,
            target,
            &client,
            CertReport::NotAsked,
            trusted,
            b"id-1",
        );
        String::from_utf8(out).unwrap()
    }

    const AS_IS: Target<'static> = Target {
        prefix: "/api/",
        rewrite: None,
        default_host: "app",
    };

    #[test]
    fn early_data_is_said_once() {
        let early = |raw: &[u8]| {
            let mut slots = header_slots();
            let Ok(Status::Complete(req)) = parse_request(raw, &mut slots, &HeadLimits::default())
            else {
                panic!("not a request");
            };
            let mut out = Vec::new();
            let client = ClientInfo {
                peer: "192.0.2.7:5000".parse().unwrap(),
                tls: true,
                early_data: true,
                cert: None,
            };
            write_request(
                &mut out,
                &req,
                b"",
                None,
                &AS_IS,
                &client,
                CertReport::NotAsked,
                &[],
                b"id-1",
            );
            String::from_utf8(out).unwrap()
        };
        let out = early(b"GET /api/x HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!(out.matches("Early-Data: 1\r\n").count(), 1, "{out}");
        // An earlier hop's is kept, not doubled.
        let out = early(b"GET /api/x HTTP/1.1\r\nHost: h\r\nEarly-Data: 1\r\n\r\n");
        assert_eq!(
            out.to_ascii_lowercase().matches("early-data").count(),
            1,
            "{out}"
        );
        let out = forward(
            b"GET /api/x HTTP/1.1\r\nHost: h\r\n\r\n",
            "192.0.2.7:1",
            true,
            &[],
            &AS_IS,
        );
        assert!(!out.contains("Early-Data"), "{out}");
    }

    /// The client certificate's fields are the server's: a client's own are dropped on every
    /// site, and the site's report is added once.
    #[test]
    fn client_certificate_fields_are_the_servers() {
        use crate::client_cert::ClientCert;
        use lowlat_testkit::pki::{DnType, Pki};
        let pki = Pki::new();
        let files = pki.client("alice", &[(DnType::CommonName, "alice")]);
        let ca: std::sync::Arc<std::path::Path> = std::sync::Arc::from(pki.ca_path().as_path());
        let cert = ClientCert::new(&files.leaf_der, ca, &|_| vec![1, 2]);
        let raw = b"GET /api/x HTTP/1.1\r\nHost: h\r\nX-Client-Verify: SUCCESS\r\n\
                    x-client-cert-subject: CN=root\r\nX-Client-Cert: abc\r\nClient-Cert: :AA:\r\n\
                    Client-Cert-Chain: :AA:\r\nX-Client-Id: 7\r\n\r\n";
        let mut slots = header_slots();
        let Ok(Status::Complete(req)) = parse_request(raw, &mut slots, &HeadLimits::default())
        else {
            panic!("not a request");
        };
        let client = ClientInfo::plain("192.0.2.7:5000".parse().unwrap());
        let write = |report| {
            let mut out = Vec::new();
            write_request(
                &mut out,
                &req,
                b"",
                None,
                &AS_IS,
                &client,
                report,
                &[],
                b"id-1",
            );
            String::from_utf8(out).unwrap()
        };
        let plain = write(CertReport::NotAsked);
        let lower = plain.to_ascii_lowercase();
        for gone in [
            "x-client-verify",
            "x-client-cert",
            "client-cert:",
            "client-cert-chain",
        ] {
            assert!(!lower.contains(gone), "{gone} in {plain}");
        }
        assert!(plain.contains("X-Client-Id: 7\r\n"), "{plain}");
        let absent = write(CertReport::Absent);
        assert_eq!(
            absent.matches("X-Client-Verify: NONE\r\n").count(),
            1,
            "{absent}"
        );
        assert!(!absent.contains("CN=root"), "{absent}");
        let verified = write(CertReport::Verified(&cert));
        assert_eq!(verified.matches("X-Client-Verify: SUCCESS\r\n").count(), 1);
        assert!(
            verified.contains("X-Client-Cert-Subject: CN=alice\r\n"),
            "{verified}"
        );
        assert!(
            verified.contains("X-Client-Cert-Fingerprint: 0102\r\n"),
            "{verified}"
        );
        assert!(verified.ends_with("\r\n\r\n") && !verified.contains("CN=root"));
    }

    #[test]
    fn hop_by_hop_fields_are_dropped() {
        let out = forward(
            b"GET /api/x?q=1 HTTP/1.1\r\nHost: example.com\r\nConnection: keep-alive, X-Secret\r\nKeep-Alive: timeout=5\r\nX-Secret: s\r\nTE: trailers\r\nProxy-Authorization: p\r\nUpgrade: h2c\r\nAccept: */*\r\n\r\n",
            "192.0.2.7:5000",
            false,
            &[],
            &AS_IS,
        );
        assert!(
            out.starts_with("GET /api/x?q=1 HTTP/1.1\r\nHost: example.com\r\n"),
            "{out}"
        );
        for gone in [
            "Connection",
            "Keep-Alive",
            "X-Secret",
            "TE:",
            "Proxy-",
            "Upgrade",
        ] {
            assert!(!out.contains(gone), "{gone} in {out}");
        }
        assert!(out.contains("Accept: */*\r\n"));
        assert!(out.contains("X-Forwarded-For: 192.0.2.7\r\n"), "{out}");
        assert!(out.contains("X-Forwarded-Proto: http\r\n"));
        assert!(out.contains("X-Forwarded-Host: example.com\r\n"));
        assert!(
            out.contains("Forwarded: for=192.0.2.7;proto=http;host=\"example.com\"\r\n"),
            "{out}"
        );
        assert!(out.contains("X-Request-Id: id-1\r\n"));
        assert!(!out.contains("Content-Length"), "{out}");
        assert!(out.ends_with("\r\n\r\n"));
    }

    #[test]
    fn forwarding_headers_are_replaced_unless_the_peer_is_trusted() {
        let raw = b"GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: https\r\nForwarded: for=6.6.6.6\r\nX-Request-Id: abc\r\n\r\n";
        let out = forward(raw, "[::1]:5000", false, &[], &AS_IS);
        assert!(out.contains("X-Forwarded-For: ::1\r\n"), "{out}");
        assert!(!out.contains("6.6.6.6"), "{out}");
        assert!(out.contains("X-Forwarded-Proto: http\r\n"));
        assert!(
            out.contains("Forwarded: for=\"[::1]\";proto=http;host=\"h\"\r\n"),
            "{out}"
        );
        assert!(out.contains("X-Request-Id: abc\r\n") && !out.contains("id-1"));
        let trusted = [Cidr {
            addr: "10.0.0.0".parse().unwrap(),
            bits: 8,
        }];
        let out = forward(raw, "10.1.2.3:5000", true, &trusted, &AS_IS);
        assert!(
            out.contains("X-Forwarded-For: 6.6.6.6, 10.1.2.3\r\n"),
            "{out}"
        );
        assert!(out.contains("X-Forwarded-Proto: https\r\n"));
        assert!(
            out.contains("Forwarded: for=6.6.6.6, for=10.1.2.3;proto=https"),
            "{out}"
        );
    }

    #[test]
    fn bodies_get_one_content_length_and_paths_are_rewritten() {
        let out = forward(
            b"POST /api/v1/items HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello",
            "127.0.0.1:1",
            false,
            &[],
            &Target {
                prefix: "/api/",
                rewrite: Some("/"),
                default_host: "app",
            },
        );
        assert!(out.starts_with("POST /v1/items HTTP/1.1\r\n"), "{out}");
        assert!(out.ends_with("Content-Length: 5\r\n\r\nhello"), "{out}");
        let out = forward(
            b"POST /api/ HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n",
            "127.0.0.1:1",
            false,
            &[],
            &AS_IS,
        );
        assert!(out.ends_with("Content-Length: 0\r\n\r\n"), "{out}");
    }

    #[test]
    fn host_and_origin_form() {
        let out = forward(
            b"GET http://other.test/api/x?y=1 HTTP/1.1\r\nHost: p\r\n\r\n",
            "127.0.0.1:1",
            false,
            &[],
            &AS_IS,
        );
        assert!(out.starts_with("GET /api/x?y=1 HTTP/1.1\r\n"), "{out}");
        assert!(
            out.contains("Host: other.test\r\n") && !out.contains("Host: p"),
            "{out}"
        );
        let out = forward(
            b"GET /api/x HTTP/1.0\r\n\r\n",
            "127.0.0.1:1",
            false,
            &[],
            &AS_IS,
        );
        assert!(out.contains("\r\nHost: app\r\n"), "{out}");
        let trusted = [Cidr {
            addr: "127.0.0.1".parse().unwrap(),
            bits: 32,
        }];
        let out = forward(
            b"GET /api/ HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 1.1.1.1\r\nX-Forwarded-For: 2.2.2.2\r\n\r\n",
            "127.0.0.1:1",
            false,
            &trusted,
            &AS_IS,
        );
        assert!(
            out.contains("X-Forwarded-For: 1.1.1.1, 2.2.2.2, 127.0.0.1\r\n"),
            "{out}"
        );
    }

    #[test]
    fn response_fields() {
        let conn: [&[u8]; 1] = [b"close, X-Internal"];
        for (name, passes) in [
            ("Content-Type", true),
            ("Set-Cookie", true),
            ("Connection", false),
            ("Transfer-Encoding", false),
            ("Content-Length", false),
            ("Keep-Alive", false),
            ("X-Internal", false),
            ("Proxy-Authenticate", false),
        ] {
            assert_eq!(response_field_passes(name, conn), passes, "{name}");
        }
    }

    #[test]
    fn hop_by_hop_is_the_codecs_and_more() {
        for name in [
            "te",
            "TE",
            "tE",
            "ta",
            "upgrade",
            "Upgrade",
            "trailer",
            "Trailers",
            "connection",
            "Keep-Alive",
            "keep-alivE",
            "proxy-connection",
            "Proxy-Connection",
            "transfer-encoding",
            "Transfer-Encoding",
            "proxy-x",
            "Proxy-Authorization",
            "PROXY-AUTHENTICATE",
            "proxy",
            "proxy-",
            "proxyx-a",
            "pragma",
            "content-type",
            "x",
            "",
            "p",
            "Set-Cookie",
            "upgradE",
            "connectio",
            "x-proxy-a",
        ] {
            let want = lowlat_http::fields::is_hop_by_hop(name)
                || name.eq_ignore_ascii_case("trailer")
                || name.len() > 6 && name.as_bytes()[..6].eq_ignore_ascii_case(b"proxy-");
            assert_eq!(is_hop_by_hop(name), want, "{name}");
        }
    }
}
