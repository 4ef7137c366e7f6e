//! The FastCGI request a forwarded request becomes: `FCGI_BEGIN_REQUEST` (keeping the
//! connection for the next request), the CGI/1.1 variables of RFC 3875 §4.1 under the names
//! nginx's `fastcgi_params` gives them as `FCGI_PARAMS`, and the body as `FCGI_STDIN` when it is
//! here whole. A body that streams follows through the upload, framed as `FCGI_STDIN` records
//! there (`super::upload`). Pure: a request in, bytes out, tested on their own.
//!
//! Where the script is (`SCRIPT_FILENAME`, `SCRIPT_NAME`, `PATH_INFO`) is the caller's to say
//! ([`Script`]): the PHP front door finds it under its document root, a `--proxy` rule to a
//! FastCGI group takes its prefix as the script and the rest of the path as `PATH_INFO`.

use std::net::{IpAddr, SocketAddr};

use lowlat_http::fastcgi::{params, record};
use lowlat_http::request::{Method, Request};
use lowlat_http::Version;

use super::headers::{ClientInfo, StreamedBody};
use crate::client_cert::{is_client_cert_field, CertReport, VERIFY_NONE, VERIFY_SUCCESS};

/// The request id of every request: a connection carries one request at a time (php-fpm does not
/// multiplex), so the id never needs to tell two apart.
pub(crate) const REQUEST_ID: u16 = 1;

/// What the server says of itself in `SERVER_*`: the same for every request of a site.
#[derive(Debug, Clone, Default)]
pub struct ServerVars {
    /// `SERVER_NAME`: the site's first name; without one, the name the request's `Host` gives.
    pub name: Option<String>,
    /// The first listener in clear and the first with TLS: `SERVER_ADDR` and `SERVER_PORT` of
    /// a request, by the scheme it came with.
    pub clear: Option<SocketAddr>,
    pub tls: Option<SocketAddr>,
}

/// The script a request runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Script<'a> {
    /// `SCRIPT_NAME`: the script's path in the URL space, decoded (`/index.php`).
    pub(crate) name: &'a [u8],
    /// `PATH_INFO`: what follows the script in the path, decoded (`/2024/hello`), or empty.
    pub(crate) path_info: &'a [u8],
    /// `SCRIPT_FILENAME`, when the server knows the file (the PHP front door).
    pub(crate) filename: Option<&'a [u8]>,
    /// `DOCUMENT_ROOT`, when there is one.
    pub(crate) root: Option<&'a [u8]>,
}

/// Writes the FastCGI request for `req` into `out`: its records up to the body, and the body too
/// when it is here whole (`streamed` is `None`): then the request is complete. `pairs` is a
/// reused buffer for the variables before they are framed.
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_request(
    out: &mut Vec<u8>,
    pairs: &mut Vec<u8>,
    req: &Request<'_, '_>,
    body: &[u8],
    streamed: Option<StreamedBody>,
    script: &Script<'_>,
    client: (&ClientInfo, CertReport<'_>),
    server: &ServerVars,
    extra: &[(String, String)],
) {
    record::begin_request(out, REQUEST_ID, true);
    pairs.clear();
    write_params(pairs, req, body, streamed, script, client, server, extra);
    record::stream(out, record::kind::PARAMS, REQUEST_ID, pairs);
    record::end_stream(out, record::kind::PARAMS, REQUEST_ID);
    if streamed.is_none() {
        record::stream(out, record::kind::STDIN, REQUEST_ID, body);
        record::end_stream(out, record::kind::STDIN, REQUEST_ID);
    }
}

/// Rewrites the `FCGI_PARAMS` of the FastCGI request at the start of `request` for forward
/// authentication: the `HTTP_*` variable of every field named in `copy` dropped (what the client
/// sent under those names), then `copied` (`Name: value` CRLF lines) added as such variables.
/// A request that does not read as records is left as it is.
pub(crate) fn replace_http_params(request: &mut Vec<u8>, copy: &[Box<str>], copied: &[u8]) {
    use lowlat_http::fastcgi::record::{Head, HEAD_LEN};
    let mut at = 0;
    let mut begin = None;
    let mut pairs = Vec::new();
    // The records up to the empty `FCGI_PARAMS` that ends the variables.
    let rest = loop {
        let Ok(lowlat_http::Status::Complete(h)) = Head::parse(&request[at..]) else {
            return;
        };
        let len = usize::from(h.content_len);
        let end = at + HEAD_LEN + len + usize::from(h.padding_len);
        if end > request.len() {
            return;
        }
        match h.kind {
            record::kind::PARAMS if len == 0 => break end,
            record::kind::PARAMS => {
                pairs.extend_from_slice(&request[at + HEAD_LEN..at + HEAD_LEN + len]);
            }
            _ if begin.is_none() => begin = Some(at..end),
            _ => return,
        }
        at = end;
    };
    let Some(begin) = begin else {
        return;
    };
    let Some(decoded) = params::decode(&pairs) else {
        return;
    };
    // `X-Auth-User` → `HTTP_X_AUTH_USER`, as `params::push_field` names it.
    let variables: Vec<Vec<u8>> = copy
        .iter()
        .map(|c| {
            let mut v = b"HTTP_".to_vec();
            v.extend(c.bytes().map(|b| {
                if b == b'-' {
                    b'_'
                } else {
                    b.to_ascii_uppercase()
                }
            }));
            v
        })
        .collect();
    let mut kept = Vec::with_capacity(pairs.len() + copied.len());
    for (name, value) in decoded {
        if !variables.iter().any(|v| v == name) {
            params::push(&mut kept, name, value);
        }
    }
    for line in copied.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(colon) = memchr::memchr(b':', line) {
            let value = &line[colon + 1..];
            let value = value.strip_prefix(b" ").unwrap_or(value);
            params::push_field(&mut kept, &line[..colon], value);
        }
    }
    let mut out = Vec::with_capacity(request.len() + copied.len());
    out.extend_from_slice(&request[begin]);
    record::stream(&mut out, record::kind::PARAMS, REQUEST_ID, &kept);
    record::end_stream(&mut out, record::kind::PARAMS, REQUEST_ID);
    out.extend_from_slice(&request[rest..]);
    *request = out;
}

/// The CGI/1.1 variables of `req` as name-value pairs, the `extra` ones last and instead of any
/// of the same name.
#[allow(clippy::too_many_arguments)]
fn write_params(
    out: &mut Vec<u8>,
    req: &Request<'_, '_>,
    body: &[u8],
    streamed: Option<StreamedBody>,
    script: &Script<'_>,
    (client, cert): (&ClientInfo, CertReport<'_>),
    server: &ServerVars,
    extra: &[(String, String)],
) {
    let put = |name: &str, value: &[u8], out: &mut Vec<u8>| {
        if !extra.iter().any(|(n, _)| n == name) {
            params::push(out, name.as_bytes(), value);
        }
    };
    let mut num = itoa::Buffer::new();
    put("GATEWAY_INTERFACE", b"CGI/1.1", out);
    put(
        "SERVER_SOFTWARE",
        concat!("lowlat/", env!("CARGO_PKG_VERSION")).as_bytes(),
        out,
    );
    put("SERVER_PROTOCOL", protocol(req.version), out);
    let method = if req.protocol.is_some() {
        "CONNECT"
    } else {
        req.method_token
    };
    put("REQUEST_METHOD", method.as_bytes(), out);
    // Values made of parts are written part by part (`put_parts`), not joined first: three
    // allocations a request fewer.
    let put_parts = |name: &str, parts: &[&[u8]], out: &mut Vec<u8>| {
        if !extra.iter().any(|(n, _)| n == name) {
            params::push_parts(out, name.as_bytes(), parts);
        }
    };
    // As the client sent it: still encoded, with its query (nginx's `$request_uri`).
    match req.query {
        Some(q) => put_parts(
            "REQUEST_URI",
            &[req.path.as_bytes(), b"?", q.as_bytes()],
            out,
        ),
        None => put("REQUEST_URI", req.path.as_bytes(), out),
    }
    put_parts("DOCUMENT_URI", &[script.name, script.path_info], out);
    put("QUERY_STRING", req.query.unwrap_or("").as_bytes(), out);
    put("SCRIPT_NAME", script.name, out);
    if let Some(file) = script.filename {
        put("SCRIPT_FILENAME", file, out);
    }
    if let Some(root) = script.root {
        put("DOCUMENT_ROOT", root, out);
    }
    if !script.path_info.is_empty() {
        put("PATH_INFO", script.path_info, out);
        if let Some(root) = script.root {
            put_parts("PATH_TRANSLATED", &[root, script.path_info], out);
        }
    }
    let length = match streamed {
        Some(StreamedBody::Length(n)) => Some(n),
        // Never sent so (`takes_streamed_body` refuses it): a body of unknown length is read
        // whole first, as CGI needs its length.
        Some(StreamedBody::Chunked) => None,
        None => {
            let has_body = !body.is_empty()
                || matches!(req.method, Method::Post | Method::Put | Method::Patch);
            has_body.then_some(body.len() as u64)
        }
    };
    if let Some(n) = length {
        put("CONTENT_LENGTH", num.format(n).as_bytes(), out);
    }
    if let Some(ct) = req.header("content-type") {
        put("CONTENT_TYPE", ct, out);
    }
    let ip = match client.peer.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 @ IpAddr::V4(_) => v4,
    };
    let mut text = [0; IP_TEXT_MAX];
    put("REMOTE_ADDR", ip_text(ip, &mut text), out);
    put(
        "REMOTE_PORT",
        num.format(client.peer.port()).as_bytes(),
        out,
    );
    let host = req.header("host").map(split_host);
    let listener = if client.tls { server.tls } else { server.clear };
    if let Some(addr) = listener.filter(|a| !a.ip().is_unspecified()) {
        put("SERVER_ADDR", ip_text(addr.ip(), &mut text), out);
    }
    let port = listener
        .map(|a| a.port())
        .filter(|&p| p > 0)
        .or_else(|| host.and_then(|(_, p)| p))
        .unwrap_or(if client.tls { 443 } else { 80 });
    put("SERVER_PORT", num.format(port).as_bytes(), out);
    let name = server
        .name
        .as_deref()
        .filter(|n| !n.starts_with("*."))
        .map(str::as_bytes)
        .or(host.map(|(h, _)| h))
        .unwrap_or(b"localhost");
    put("SERVER_NAME", name, out);
    put(
        "REQUEST_SCHEME",
        if client.tls { b"https" } else { b"http" },
        out,
    );
    if client.tls {
        put("HTTPS", b"on", out);
    }
    // The client certificate, under the names nginx's users give its variables in
    // `fastcgi_param` (and Apache's mod_ssl sets), on a site that asks for one.
    match cert {
        CertReport::NotAsked => {}
        CertReport::Absent => put("SSL_CLIENT_VERIFY", VERIFY_NONE.as_bytes(), out),
        CertReport::Verified(c) => {
            put("SSL_CLIENT_VERIFY", VERIFY_SUCCESS.as_bytes(), out);
            put("SSL_CLIENT_S_DN", c.subject.as_bytes(), out);
            put("SSL_CLIENT_I_DN", c.issuer.as_bytes(), out);
            put("SSL_CLIENT_SERIAL", c.serial.as_bytes(), out);
            put("SSL_CLIENT_FINGERPRINT", c.fingerprint.as_bytes(), out);
        }
    }
    // PHP built with force-cgi-redirect runs only with it (nginx's fastcgi_params sets it).
    put("REDIRECT_STATUS", b"200", out);
    write_fields(out, req, extra);
    for (name, value) in extra {
        params::push(out, name.as_bytes(), value.as_bytes());
    }
}

/// The longest text of an IP address (an IPv6 address with an IPv4 tail).
const IP_TEXT_MAX: usize = 45;

/// `ip` as text in `buf`, as its `Display` writes it, without allocating. By hand for IPv4
/// (every request from a local balancer): `to_string()` went through the formatter and a
/// `String`, about 1 500 instructions a PHP request for the two addresses (callgrind).
fn ip_text(ip: IpAddr, buf: &mut [u8; IP_TEXT_MAX]) -> &[u8] {
    match ip {
        IpAddr::V4(v4) => {
            let mut len = 0;
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    buf[len] = b'.';
                    len += 1;
                }
                let mut num = itoa::Buffer::new();
                let digits = num.format(octet).as_bytes();
                buf[len..len + digits.len()].copy_from_slice(digits);
                len += digits.len();
            }
            &buf[..len]
        }
        IpAddr::V6(v6) => {
            use std::io::Write;
            let mut cursor = std::io::Cursor::new(&mut buf[..]);
            // Never fails: no IPv6 address is longer than the buffer.
            let _ = write!(cursor, "{v6}");
            let len = usize::try_from(cursor.position()).unwrap_or(0);
            &buf[..len]
        }
    }
}

/// The request's fields as `HTTP_*` variables: every field of one name once (RFC 3875
/// §4.1.18: several are joined with `, `, cookies with `; ` as HTTP/2 splits them), `Proxy` and
/// the body's framing never (see [`params::push_field`]).
fn write_fields(out: &mut Vec<u8>, req: &Request<'_, '_>, extra: &[(String, String)]) {
    let mut joined = Vec::new();
    for (i, h) in req.headers.iter().enumerate() {
        if req.headers[..i]
            .iter()
            .any(|e| e.name.eq_ignore_ascii_case(h.name))
        {
            continue;
        }
        let mut same = req.headers[i + 1..]
            .iter()
            .filter(|e| e.name.eq_ignore_ascii_case(h.name))
            .peekable();
        let value = if same.peek().is_none() {
            h.value
        } else {
            let sep: &[u8] = if h.name.eq_ignore_ascii_case("cookie") {
                b"; "
            } else {
                b", "
            };
            joined.clear();
            joined.extend_from_slice(h.value);
            for e in same {
                joined.extend_from_slice(sep);
                joined.extend_from_slice(e.value);
            }
            &joined[..]
        };
        // The server's to say (`SSL_CLIENT_*` above), never the client's.
        if overridden(h.name, extra) || is_client_cert_field(h.name) {
            continue;
        }
        params::push_field(out, h.name.as_bytes(), value);
    }
}

/// Whether the `HTTP_*` variable of field `name` is one of the `extra` parameters.
fn overridden(name: &str, extra: &[(String, String)]) -> bool {
    extra.iter().any(|(n, _)| {
        n.len() == 5 + name.len()
            && n.starts_with("HTTP_")
            && n.bytes().skip(5).zip(name.bytes()).all(|(a, b)| {
                a == if b == b'-' {
                    b'_'
                } else {
                    b.to_ascii_uppercase()
                }
            })
    })
}

/// `SERVER_PROTOCOL` as nginx gives it.
fn protocol(version: Version) -> &'static [u8] {
    match version {
        Version::Http10 => b"HTTP/1.0",
        Version::Http11 => b"HTTP/1.1",
        Version::Http2 => b"HTTP/2.0",
        Version::Http3 => b"HTTP/3.0",
    }
}

/// A `Host` value's name and port (`example.com:8080`, `[::1]:8080`).
fn split_host(host: &[u8]) -> (&[u8], Option<u16>) {
    let colon = if host.first() == Some(&b'[') {
        host.iter()
            .position(|&b| b == b']')
            .and_then(|end| (host.get(end + 1) == Some(&b':')).then_some(end + 1))
    } else {
        host.iter().rposition(|&b| b == b':')
    };
    match colon {
        Some(at) => {
            let port = std::str::from_utf8(&host[at + 1..])
                .ok()
                .and_then(|p| p.parse().ok());
            (&host[..at], port)
        }
        None => (host, None),
    }
}

/// Parses `NAME=VALUE` for a FastCGI parameter: a name of letters, digits and `_`, a value
/// without NUL.
///
/// # Errors
/// A message for clap.
pub fn parse_fastcgi_param(text: &str) -> Result<(String, String), String> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not NAME=VALUE (e.g. SCRIPT_FILENAME=/srv/app.php)"))?;
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(format!(
            "{text:?}: a parameter's name is letters, digits and _ (HTTPS, APP_ENV)"
        ));
    }
    if value.contains('\0') {
        return Err(format!("{text:?}: the value holds a NUL byte"));
    }
    Ok((name.to_owned(), value.to_owned()))
}

/// Percent-decodes `raw` (a path, still encoded) into `out`, for `PATH_INFO`. `false` for a
/// malformed escape or an encoded NUL, which no variable may carry.
pub(crate) fn decode_path(raw: &[u8], out: &mut Vec<u8>) -> bool {
    out.clear();
    let hex = |b: u8| char::from(b).to_digit(16);
    let mut i = 0;
    while i < raw.len() {
        let b = if raw[i] == b'%' {
            let (Some(hi), Some(lo)) = (
                raw.get(i + 1).and_then(|&b| hex(b)),
                raw.get(i + 2).and_then(|&b| hex(b)),
            ) else {
                return false;
            };
            i += 3;
            u8::try_from(hi * 16 + lo).unwrap_or(0)
        } else {
            i += 1;
            raw[i - 1]
        };
        if b == 0 {
            return false;
        }
        out.push(b);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use lowlat_http::fastcgi::record::{kind, Head, HEAD_LEN};
    use lowlat_http::request::{header_slots, parse_request, HeadLimits};
    use lowlat_http::Status;

    #[test]
    fn addresses_are_written_as_display_writes_them() {
        for text in [
            "0.0.0.0",
            "127.0.0.1",
            "10.200.3.45",
            "255.255.255.255",
            "::1",
            "2001:db8::8a2e:370:7334",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "::ffff:255.255.255.255",
            "fe80::1:255.255.255.255",
        ] {
            let ip: IpAddr = text.parse().unwrap();
            let mut buf = [0; IP_TEXT_MAX];
            assert_eq!(ip_text(ip, &mut buf), ip.to_string().as_bytes(), "{text}");
        }
    }

    /// The records of `bytes`: (type, content).
    fn records(mut bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let Ok(Status::Complete(h)) = Head::parse(bytes) else {
                panic!("bad record");
            };
            let len = usize::from(h.content_len);
            out.push((h.kind, bytes[HEAD_LEN..HEAD_LEN + len].to_vec()));
            bytes = &bytes[HEAD_LEN + len + usize::from(h.padding_len)..];
        }
        out
    }

    fn request(raw: &[u8], tls: bool, extra: &[(String, String)]) -> Vec<(u8, Vec<u8>)> {
        request_with(raw, tls, CertReport::NotAsked, extra)
    }

    fn request_with(
        raw: &[u8],
        tls: bool,
        cert: CertReport<'_>,
        extra: &[(String, String)],
    ) -> Vec<(u8, Vec<u8>)> {
        records(&encoded(raw, tls, cert, extra))
    }

    /// The FastCGI request `raw` becomes, from a client at 10.1.2.3 to `/index.php` under
    /// `/srv/www`, through listeners on 0.0.0.0:8080 and 127.0.0.1:8443.
    fn encoded(raw: &[u8], tls: bool, cert: CertReport<'_>, extra: &[(String, String)]) -> Vec<u8> {
        let mut slots = header_slots();
        let Ok(Status::Complete(req)) = parse_request(raw, &mut slots, &HeadLimits::default())
        else {
            panic!("not a request");
        };
        let body = &raw[req.head_len..];
        let client = ClientInfo {
            peer: "[::ffff:10.1.2.3]:50000".parse().unwrap(),
            tls,
            early_data: false,
            cert: None,
        };
        let server = ServerVars {
            name: None,
            clear: Some("0.0.0.0:8080".parse().unwrap()),
            tls: Some("127.0.0.1:8443".parse().unwrap()),
        };
        let script = Script {
            name: b"/index.php",
            path_info: b"/a b",
            filename: Some(b"/srv/www/index.php"),
            root: Some(b"/srv/www"),
        };
        let (mut out, mut pairs) = (Vec::new(), Vec::new());
        write_request(
            &mut out,
            &mut pairs,
            &req,
            body,
            None,
            &script,
            (&client, cert),
            &server,
            extra,
        );
        out
    }

    fn var<'a>(params: &'a [(&[u8], &[u8])], name: &str) -> Option<&'a str> {
        params
            .iter()
            .rev()
            .find(|(n, _)| *n == name.as_bytes())
            .map(|(_, v)| std::str::from_utf8(v).unwrap())
    }

    #[test]
    fn a_request_becomes_its_records_and_variables() {
        let raw = b"POST /index.php/a%20b?x=1&y=2 HTTP/1.1\r\nHost: example.com:8080\r\n\
                    Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 3\r\n\
                    Cookie: a=1\r\nX-Thing: 1\r\nx-thing: 2\r\nProxy: http://evil\r\n\r\nq=1";
        let recs = request(raw, false, &[]);
        let kinds: Vec<u8> = recs.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            kinds,
            [
                kind::BEGIN_REQUEST,
                kind::PARAMS,
                kind::PARAMS,
                kind::STDIN,
                kind::STDIN
            ]
        );
        assert_eq!(recs[0].1, [0, 1, 1, 0, 0, 0, 0, 0], "responder, keep-conn");
        assert!(recs[2].1.is_empty() && recs[4].1.is_empty());
        assert_eq!(recs[3].1, b"q=1");
        let p = params::decode(&recs[1].1).unwrap();
        for (name, value) in [
            ("REQUEST_METHOD", "POST"),
            ("REQUEST_URI", "/index.php/a%20b?x=1&y=2"),
            ("QUERY_STRING", "x=1&y=2"),
            ("SCRIPT_NAME", "/index.php"),
            ("SCRIPT_FILENAME", "/srv/www/index.php"),
            ("PATH_INFO", "/a b"),
            ("PATH_TRANSLATED", "/srv/www/a b"),
            ("DOCUMENT_ROOT", "/srv/www"),
            ("DOCUMENT_URI", "/index.php/a b"),
            ("CONTENT_LENGTH", "3"),
            ("CONTENT_TYPE", "application/x-www-form-urlencoded"),
            ("REMOTE_ADDR", "10.1.2.3"),
            ("REMOTE_PORT", "50000"),
            ("SERVER_PORT", "8080"),
            ("SERVER_NAME", "example.com"),
            ("SERVER_PROTOCOL", "HTTP/1.1"),
            ("REQUEST_SCHEME", "http"),
            ("HTTP_HOST", "example.com:8080"),
            ("HTTP_COOKIE", "a=1"),
            ("HTTP_X_THING", "1, 2"),
        ] {
            assert_eq!(var(&p, name), Some(value), "{name}");
        }
        assert_eq!(var(&p, "HTTPS"), None);
        assert_eq!(var(&p, "HTTP_PROXY"), None, "httpoxy");
        assert_eq!(var(&p, "SERVER_ADDR"), None, "a wildcard listener");
        assert_eq!(var(&p, "HTTP_CONTENT_LENGTH"), None);
        assert_eq!(
            p.iter().filter(|(n, _)| *n == b"HTTP_X_THING").count(),
            1,
            "one variable per field name"
        );
    }

    #[test]
    fn tls_extra_parameters_and_a_get_without_body() {
        let raw = b"GET / HTTP/1.1\r\nHost: [::1]\r\nX-Mode: a\r\n\r\n";
        let extra = vec![
            ("APP_ENV".to_owned(), "test".to_owned()),
            ("SERVER_NAME".to_owned(), "forced".to_owned()),
            ("HTTP_X_MODE".to_owned(), "b".to_owned()),
        ];
        let recs = request(raw, true, &extra);
        let p = params::decode(&recs[1].1).unwrap();
        assert_eq!(var(&p, "HTTPS"), Some("on"));
        assert_eq!(var(&p, "SERVER_PORT"), Some("8443"));
        assert_eq!(var(&p, "SERVER_ADDR"), Some("127.0.0.1"));
        assert_eq!(var(&p, "APP_ENV"), Some("test"));
        assert_eq!(var(&p, "CONTENT_LENGTH"), None);
        for name in ["SERVER_NAME", "HTTP_X_MODE"] {
            assert_eq!(p.iter().filter(|(n, _)| *n == name.as_bytes()).count(), 1);
        }
        assert_eq!(var(&p, "SERVER_NAME"), Some("forced"));
        assert_eq!(var(&p, "HTTP_X_MODE"), Some("b"));
        assert_eq!(recs[3].1, b"", "an empty body ends at once");
    }

    /// A client certificate verified for the site is the `SSL_CLIENT_*` variables nginx's users
    /// set; without one, `SSL_CLIENT_VERIFY` is `NONE`; a site that asks for none says nothing;
    /// and a client's own `X-Client-*` fields never become variables.
    #[test]
    fn client_certificate_variables() {
        use crate::client_cert::ClientCert;
        use lowlat_testkit::pki::{DnType, Pki};
        let pki = Pki::new();
        let files = pki.client("alice", &[(DnType::CommonName, "alice")]);
        let ca: std::sync::Arc<std::path::Path> = std::sync::Arc::from(pki.ca_path().as_path());
        let cert = ClientCert::new(&files.leaf_der, ca, &|_| vec![0xab, 0xcd]);
        let raw = b"GET / HTTP/1.1\r\nHost: a\r\nX-Client-Verify: SUCCESS\r\nX-Client-Cert-Subject: CN=root\r\n\r\n";
        let vars = |report| {
            let recs = request_with(raw, true, report, &[]);
            let p = params::decode(&recs[1].1).unwrap();
            p.iter()
                .map(|(n, v)| {
                    (
                        String::from_utf8(n.to_vec()).unwrap(),
                        String::from_utf8(v.to_vec()).unwrap(),
                    )
                })
                .collect::<Vec<_>>()
        };
        let get = |p: &[(String, String)], name: &str| {
            p.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
        };
        let verified = vars(CertReport::Verified(&cert));
        assert_eq!(
            get(&verified, "SSL_CLIENT_VERIFY").as_deref(),
            Some("SUCCESS")
        );
        assert_eq!(
            get(&verified, "SSL_CLIENT_S_DN").as_deref(),
            Some("CN=alice")
        );
        assert_eq!(
            get(&verified, "SSL_CLIENT_I_DN").as_deref(),
            Some("CN=lowlat test CA")
        );
        assert_eq!(
            get(&verified, "SSL_CLIENT_FINGERPRINT").as_deref(),
            Some("abcd")
        );
        assert!(get(&verified, "SSL_CLIENT_SERIAL").is_some());
        let absent = vars(CertReport::Absent);
        assert_eq!(get(&absent, "SSL_CLIENT_VERIFY").as_deref(), Some("NONE"));
        assert_eq!(get(&absent, "SSL_CLIENT_S_DN"), None);
        let not_asked = vars(CertReport::NotAsked);
        for p in [&verified, &absent, &not_asked] {
            assert_eq!(get(p, "HTTP_X_CLIENT_VERIFY"), None);
            assert_eq!(get(p, "HTTP_X_CLIENT_CERT_SUBJECT"), None);
            assert_eq!(get(p, "HTTP_HOST").as_deref(), Some("a"));
        }
        assert_eq!(get(&not_asked, "SSL_CLIENT_VERIFY"), None);
    }

    #[test]
    fn hosts_and_paths() {
        assert_eq!(split_host(b"a.test:81"), (&b"a.test"[..], Some(81)));
        assert_eq!(split_host(b"[::1]:81"), (&b"[::1]"[..], Some(81)));
        assert_eq!(split_host(b"[::1]"), (&b"[::1]"[..], None));
        assert_eq!(split_host(b"a.test"), (&b"a.test"[..], None));
        let mut out = Vec::new();
        assert!(decode_path(b"/a%20b/%C3%A9", &mut out));
        assert_eq!(out, "/a b/é".as_bytes());
        assert!(!decode_path(b"/a%00", &mut out));
        assert!(!decode_path(b"/a%2", &mut out));
    }

    #[test]
    fn forward_auth_fields_replace_the_clients_variables() {
        let raw = b"POST /index.php HTTP/1.1\r\nHost: a\r\nX-Auth-User: forged\r\nX-Keep: 1\r\nContent-Length: 2\r\n\r\nhi";
        let mut out = encoded(raw, false, CertReport::NotAsked, &[]);
        let copy: Vec<Box<str>> = vec!["X-Auth-User".into(), "X-Auth-Email".into()];
        replace_http_params(&mut out, &copy, b"X-Auth-User: alice\r\n");
        let got = records(&out);
        let kinds: Vec<u8> = got.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            kinds,
            [
                kind::BEGIN_REQUEST,
                kind::PARAMS,
                kind::PARAMS,
                kind::STDIN,
                kind::STDIN
            ]
        );
        let vars = params::decode(&got[1].1).unwrap();
        let value = |name: &[u8]| {
            vars.iter()
                .filter(|(n, _)| *n == name)
                .map(|(_, v)| v.to_vec())
                .collect::<Vec<_>>()
        };
        assert_eq!(value(b"HTTP_X_AUTH_USER"), [b"alice".to_vec()]);
        assert_eq!(value(b"HTTP_X_KEEP"), [b"1".to_vec()]);
        assert_eq!(value(b"REQUEST_METHOD"), [b"POST".to_vec()]);
        assert_eq!(got[3].1, b"hi");
    }
}
