//! The request head: request line and header fields (RFC 9112 §3, §5), parsed in place.
//!
//! [`parse_request`] runs `httparse` (strict request settings: no whitespace before a colon, no
//! obs-fold, no bare CR) over the caller's buffer and an uninitialised header array on the
//! caller's stack, then makes the decisions the server must not get wrong: the size limits, the
//! version, keep-alive, and body framing. Framing refuses every request-smuggling shape of RFC
//! 9112 §6.3 instead of guessing: `Transfer-Encoding` with `Content-Length`, any transfer coding
//! other than a single final `chunked`, `Transfer-Encoding` on HTTP/1.0, non-numeric or differing
//! duplicate `Content-Length`. Nothing here allocates.

use std::mem::MaybeUninit;

use crate::body::BodyFraming;
use crate::error::ParseError;
use crate::{Status, Version};

pub use httparse::Header;

/// Request methods the server distinguishes; anything else is [`Method::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Delete,
    Options,
    Patch,
    Trace,
    Connect,
    Other,
}

impl Method {
    /// Every method, `Other` included: what a route that answers whatever is asked (a proxy
    /// rule, a `return` rule) is mounted on.
    pub const ALL: [Method; 10] = [
        Method::Get,
        Method::Head,
        Method::Post,
        Method::Put,
        Method::Delete,
        Method::Options,
        Method::Patch,
        Method::Trace,
        Method::Connect,
        Method::Other,
    ];

    /// Classifies a method token (case-sensitive, RFC 9110 §9.1).
    #[must_use]
    pub fn from_token(token: &str) -> Self {
        match token {
            "GET" => Self::Get,
            "HEAD" => Self::Head,
            "POST" => Self::Post,
            "PUT" => Self::Put,
            "DELETE" => Self::Delete,
            "OPTIONS" => Self::Options,
            "PATCH" => Self::Patch,
            "TRACE" => Self::Trace,
            "CONNECT" => Self::Connect,
            _ => Self::Other,
        }
    }

    /// The method's token, for `Allow` lists.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::Head => "HEAD",
            Self::Post => "POST",
            Self::Put => "PUT",
            Self::Delete => "DELETE",
            Self::Options => "OPTIONS",
            Self::Patch => "PATCH",
            Self::Trace => "TRACE",
            Self::Connect => "CONNECT",
            Self::Other => "OTHER",
        }
    }
}

/// Limits applied while parsing a head.
#[derive(Debug, Clone, Copy)]
pub struct HeadLimits {
    /// Longest request-target (bytes).
    pub max_uri_bytes: usize,
    /// Largest head (bytes).
    pub max_head_bytes: usize,
    /// Most header fields; at most [`crate::limits::MAX_HEADERS`].
    pub max_headers: usize,
}

impl Default for HeadLimits {
    fn default() -> Self {
        Self {
            max_uri_bytes: crate::limits::MAX_URI_BYTES,
            max_head_bytes: crate::limits::MAX_HEAD_BYTES,
            max_headers: crate::limits::MAX_HEADERS,
        }
    }
}

/// Storage for the parsed header fields: lives on the caller's stack, uninitialised until parsed.
pub type HeaderSlots<'b> = [MaybeUninit<Header<'b>>; crate::limits::MAX_HEADERS];

/// Fresh, uninitialised header slots (costs nothing: no zeroing).
#[must_use]
pub const fn header_slots<'b>() -> HeaderSlots<'b> {
    [const { MaybeUninit::uninit() }; crate::limits::MAX_HEADERS]
}

/// A parsed request head, borrowing from the read buffer.
#[derive(Debug)]
pub struct Request<'h, 'b> {
    /// The method, classified.
    pub method: Method,
    /// The method token as sent.
    pub method_token: &'b str,
    /// The request-target as sent (origin-form, absolute-form, authority-form or `*`).
    pub target: &'b str,
    /// The path of the target: for origin-form the part before `?`; for absolute-form the path
    /// after the authority (`/` when empty); for other forms the target itself.
    pub path: &'b str,
    /// The query, without `?`.
    pub query: Option<&'b str>,
    pub version: Version,
    /// All header fields, in order.
    pub headers: &'h [Header<'b>],
    /// How the body is delimited.
    pub framing: BodyFraming,
    /// Whether the connection may carry another request after this one (RFC 9112 §9.3).
    pub keep_alive: bool,
    /// `Expect: 100-continue` was sent by an HTTP/1.1 client (an HTTP/1.0 one cannot be sent a
    /// 100, so its expectation is ignored, RFC 9110 §10.1.1).
    pub expect_continue: bool,
    /// Length of the head in bytes, including the final blank line.
    pub head_len: usize,
    /// The protocol an HTTP/2 extended CONNECT asks for (RFC 8441's `:protocol`, `websocket`);
    /// never set for HTTP/1.1, whose upgrades are header fields.
    pub protocol: Option<&'b str>,
}

impl<'b> Request<'_, 'b> {
    /// The value of the first header field named `name` (ASCII case-insensitive).
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&'b [u8]> {
        self.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    }

    /// Whether the method is `HEAD` (the response carries no body).
    #[must_use]
    pub fn is_head(&self) -> bool {
        self.method == Method::Head
    }
}

/// Parses one request head from the start of `buf`.
///
/// Returns [`Status::Partial`] while the head is incomplete and within `limits`.
///
/// # Errors
/// Any [`ParseError`] when the head is malformed, too large, or its framing is ambiguous.
pub fn parse_request<'h, 'b>(
    buf: &'b [u8],
    slots: &'h mut HeaderSlots<'b>,
    limits: &HeadLimits,
) -> Result<Status<Request<'h, 'b>>, ParseError> {
    let max_headers = limits.max_headers.min(slots.len());
    let mut req = httparse::Request::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_request_with_uninit_headers(
        &mut req,
        buf,
        &mut slots[..max_headers],
    );
    let head_len = match parsed {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            return if buf.len() > limits.max_head_bytes {
                Err(oversize_error(buf, limits))
            } else {
                Ok(Status::Partial)
            };
        }
        Err(httparse::Error::TooManyHeaders) => return Err(ParseError::TooManyHeaders),
        Err(httparse::Error::Version) => return Err(version_error(buf)),
        Err(_) => return Err(ParseError::Malformed),
    };
    let (Some(method_token), Some(target), Some(minor)) = (req.method, req.path, req.version)
    else {
        return Err(ParseError::Malformed);
    };
    if target.len() > limits.max_uri_bytes {
        return Err(ParseError::UriTooLong);
    }
    if head_len > limits.max_head_bytes {
        return Err(ParseError::HeadTooLarge);
    }
    let version = if minor == 0 {
        Version::Http10
    } else {
        Version::Http11
    };
    let headers: &'h [Header<'b>] = req.headers;
    let fields = scan_fields(headers, version)?;
    let (path, query) = split_target(target)?;
    Ok(Status::Complete(Request {
        method: Method::from_token(method_token),
        method_token,
        target,
        path,
        query,
        version,
        headers,
        framing: fields.framing,
        keep_alive: fields.keep_alive,
        expect_continue: fields.expect_continue && version == Version::Http11,
        head_len,
        protocol: None,
    }))
}

/// What the server needs from the header fields, found in one pass.
struct Fields {
    framing: BodyFraming,
    keep_alive: bool,
    expect_continue: bool,
}

fn scan_fields(headers: &[Header<'_>], version: Version) -> Result<Fields, ParseError> {
    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    let mut transfer_encoding = false;
    let mut close = false;
    let mut keep_alive_token = false;
    let mut expect_continue = false;
    let mut hosts = 0u32;
    for h in headers {
        // Dispatch on length first: one compare rejects most fields.
        match h.name.len() {
            4 if h.name.eq_ignore_ascii_case("host") => hosts += 1,
            6 if h.name.eq_ignore_ascii_case("expect") => {
                expect_continue = trim(h.value).eq_ignore_ascii_case(b"100-continue");
            }
            10 if h.name.eq_ignore_ascii_case("connection") => {
                for token in h.value.split(|&b| b == b',') {
                    let token = trim(token);
                    if token.eq_ignore_ascii_case(b"close") {
                        close = true;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") {
                        keep_alive_token = true;
                    }
                }
            }
            14 if h.name.eq_ignore_ascii_case("content-length") => {
                let n = parse_content_length(h.value)?;
                if content_length.is_some_and(|prev| prev != n) {
                    return Err(ParseError::BadContentLength);
                }
                content_length = Some(n);
            }
            17 if h.name.eq_ignore_ascii_case("transfer-encoding") => {
                // Codings accumulate over repeated fields (RFC 9110 §5.3); the only one we accept
                // is a single `chunked`, and it must be the last.
                transfer_encoding = true;
                for coding in h.value.split(|&b| b == b',') {
                    let coding = trim(coding);
                    if chunked || !coding.eq_ignore_ascii_case(b"chunked") {
                        return Err(ParseError::BadTransferEncoding);
                    }
                    chunked = true;
                }
            }
            _ => {}
        }
    }
    if version == Version::Http11 && hosts != 1 || hosts > 1 {
        return Err(ParseError::BadHost);
    }
    let framing = if transfer_encoding {
        if content_length.is_some() || version == Version::Http10 || !chunked {
            return Err(ParseError::BadTransferEncoding);
        }
        BodyFraming::Chunked
    } else {
        match content_length {
            None | Some(0) => BodyFraming::None,
            Some(n) => BodyFraming::Length(n),
        }
    };
    let keep_alive = match version {
        Version::Http11 | Version::Http2 | Version::Http3 => !close,
        Version::Http10 => keep_alive_token && !close,
    };
    Ok(Fields {
        framing,
        keep_alive,
        expect_continue,
    })
}

/// `Content-Length = 1*DIGIT` (RFC 9110 §8.6): no sign, no list, no whitespace inside.
fn parse_content_length(value: &[u8]) -> Result<u64, ParseError> {
    let digits = trim(value);
    if digits.is_empty() || digits.len() > 19 {
        return Err(ParseError::BadContentLength);
    }
    let mut n: u64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return Err(ParseError::BadContentLength);
        }
        n = n * 10 + u64::from(b - b'0');
    }
    Ok(n)
}

/// Splits a request-target into path and query (RFC 9112 §3.2).
fn split_target(target: &str) -> Result<(&str, Option<&str>), ParseError> {
    let path_and_query = if target.starts_with('/') {
        target
    } else if let Some(rest) = strip_prefix_ignore_case(target, "http://")
        .or_else(|| strip_prefix_ignore_case(target, "https://"))
    {
        // absolute-form: the authority ends at the first '/', '?' or end.
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        if end == 0 {
            return Err(ParseError::Malformed);
        }
        let tail = &rest[end..];
        if tail.is_empty() || tail.starts_with('?') {
            // No path: it is "/" (RFC 9112 §3.2.2).
            return Ok(("/", tail.strip_prefix('?')));
        }
        tail
    } else {
        // asterisk-form and authority-form: no path to split.
        return Ok((target, None));
    };
    Ok(split_path(path_and_query))
}

/// Splits an origin-form target (`/` first) at its `?` into path and query: the request line
/// of HTTP/1.1 and the `:path` of HTTP/2 and HTTP/3 both come through here.
///
/// A byte search rather than `split_once('?')`: LTO has left the char searcher behind that as
/// a call, about 100 instructions a request on `/plaintext` (callgrind). `?` is ASCII, so both
/// slices end on character boundaries.
#[must_use]
#[inline]
pub fn split_path(target: &str) -> (&str, Option<&str>) {
    match target.as_bytes().iter().position(|&b| b == b'?') {
        Some(i) => (&target[..i], Some(&target[i + 1..])),
        None => (target, None),
    }
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

/// Trims optional whitespace (SP / HTAB) at both ends.
fn trim(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// Which limit an incomplete head that outgrew `max_head_bytes` broke: the request line alone
/// (414) or the header section (431).
fn oversize_error(buf: &[u8], limits: &HeadLimits) -> ParseError {
    let line_end = buf.iter().position(|&b| b == b'\n').unwrap_or(buf.len());
    let line = &buf[..line_end];
    // The target is the second space-separated word; if it is already over its own limit (or the
    // line never ended), the URI is the culprit.
    let target_len = line
        .split(|&b| b == b' ')
        .nth(1)
        .map_or(line.len(), <[u8]>::len);
    if line_end == buf.len() || target_len > limits.max_uri_bytes {
        ParseError::UriTooLong
    } else {
        ParseError::HeadTooLarge
    }
}

/// `httparse` says "version" for anything after the target that is not `HTTP/1.0` or `HTTP/1.1`.
/// A well-formed `HTTP/x.y` is a version we do not support (505); anything else is malformed (400).
fn version_error(buf: &[u8]) -> ParseError {
    let line_end = buf
        .iter()
        .position(|&b| b == b'\r' || b == b'\n')
        .unwrap_or(buf.len());
    let version = buf[..line_end]
        .splitn(3, |&b| b == b' ')
        .nth(2)
        .unwrap_or(&[]);
    match version {
        [b'H', b'T', b'T', b'P', b'/', first, rest @ ..]
            if first.is_ascii_digit() && rest.iter().all(|&b| b.is_ascii_digit() || b == b'.') =>
        {
            ParseError::VersionNotSupported
        }
        _ => ParseError::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `input` whole and fed one byte at a time; both must agree. Returns what the whole
    /// parse returned, reduced to comparable fields.
    fn parse(input: &[u8]) -> Result<Option<Summary>, ParseError> {
        let limits = HeadLimits::default();
        let whole = parse_summary(input, &limits);
        // Every proper prefix must be Partial (or an error equal to the whole's error).
        for end in 0..input.len() {
            let prefix = parse_summary(&input[..end], &limits);
            match (&prefix, &whole) {
                (Ok(None), _) => {}
                (Err(e), Err(w)) if e == w => {}
                (Ok(Some(p)), Ok(Some(w))) if p == w => {}
                _ => panic!(
                    "prefix {end} of {:?} gave {prefix:?}, whole gave {whole:?}",
                    String::from_utf8_lossy(input)
                ),
            }
        }
        whole
    }

    #[derive(Debug, PartialEq, Eq)]
    struct Summary {
        method: Method,
        path: String,
        query: Option<String>,
        version: Version,
        framing: BodyFraming,
        keep_alive: bool,
        head_len: usize,
    }

    fn parse_summary(input: &[u8], limits: &HeadLimits) -> Result<Option<Summary>, ParseError> {
        let mut slots = header_slots();
        Ok(match parse_request(input, &mut slots, limits)? {
            Status::Partial => None,
            Status::Complete(r) => Some(Summary {
                method: r.method,
                path: r.path.to_owned(),
                query: r.query.map(str::to_owned),
                version: r.version,
                framing: r.framing,
                keep_alive: r.keep_alive,
                head_len: r.head_len,
            }),
        })
    }

    macro_rules! ok {
        ($name:ident, $input:expr, $method:expr, $path:expr, $query:expr, $version:expr, $framing:expr, $ka:expr) => {
            #[test]
            fn $name() {
                let input: &[u8] = $input;
                let s = parse(input).unwrap().expect("complete");
                assert_eq!(s.method, $method);
                assert_eq!(s.path, $path);
                assert_eq!(s.query.as_deref(), $query);
                assert_eq!(s.version, $version);
                assert_eq!(s.framing, $framing);
                assert_eq!(s.keep_alive, $ka);
                assert_eq!(s.head_len, input.len());
            }
        };
    }

    macro_rules! err {
        ($name:ident, $input:expr, $err:expr) => {
            #[test]
            fn $name() {
                assert_eq!(parse($input).map(|_| ()), Err($err));
            }
        };
    }

    use BodyFraming::{Chunked, Length};
    use Version::{Http10, Http11};

    ok!(
        simple_get,
        b"GET /plaintext HTTP/1.1\r\nHost: a\r\n\r\n",
        Method::Get,
        "/plaintext",
        None,
        Http11,
        BodyFraming::None,
        true
    );
    ok!(
        query,
        b"GET /a/b?x=1&y HTTP/1.1\r\nHost: a\r\n\r\n",
        Method::Get,
        "/a/b",
        Some("x=1&y"),
        Http11,
        BodyFraming::None,
        true
    );
    ok!(
        close,
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        Method::Get,
        "/",
        None,
        Http11,
        BodyFraming::None,
        false
    );
    ok!(
        close_in_list,
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, CLOSE\r\n\r\n",
        Method::Get,
        "/",
        None,
        Http11,
        BodyFraming::None,
        false
    );
    ok!(
        http10_closes,
        b"GET / HTTP/1.0\r\n\r\n",
        Method::Get,
        "/",
        None,
        Http10,
        BodyFraming::None,
        false
    );
    ok!(
        http10_keep_alive,
        b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n",
        Method::Get,
        "/",
        None,
        Http10,
        BodyFraming::None,
        true
    );
    ok!(
        content_length,
        b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n\r\n",
        Method::Post,
        "/x",
        None,
        Http11,
        Length(12),
        true
    );
    ok!(
        content_length_zero,
        b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
        Method::Post,
        "/x",
        None,
        Http11,
        BodyFraming::None,
        true
    );
    ok!(
        same_duplicate_cl,
        b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\ncontent-length: 3\r\n\r\n",
        Method::Post,
        "/x",
        None,
        Http11,
        Length(3),
        true
    );
    ok!(
        chunked,
        b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n",
        Method::Post,
        "/x",
        None,
        Http11,
        Chunked,
        true
    );
    ok!(
        absolute_form,
        b"GET http://example.com:8080/p?q HTTP/1.1\r\nHost: example.com\r\n\r\n",
        Method::Get,
        "/p",
        Some("q"),
        Http11,
        BodyFraming::None,
        true
    );
    ok!(
        absolute_form_no_path,
        b"GET http://example.com HTTP/1.1\r\nHost: example.com\r\n\r\n",
        Method::Get,
        "/",
        None,
        Http11,
        BodyFraming::None,
        true
    );
    ok!(
        other_method,
        b"BREW /pot HTTP/1.1\r\nHost: a\r\n\r\n",
        Method::Other,
        "/pot",
        None,
        Http11,
        BodyFraming::None,
        true
    );
    ok!(
        leading_empty_line,
        b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
        Method::Get,
        "/",
        None,
        Http11,
        BodyFraming::None,
        true
    );

    err!(
        te_and_cl,
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        ParseError::BadTransferEncoding
    );
    err!(
        cl_and_te,
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
        ParseError::BadTransferEncoding
    );
    err!(
        te_not_final_chunked,
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
        ParseError::BadTransferEncoding
    );
    err!(
        te_gzip_chunked,
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        ParseError::BadTransferEncoding
    );
    err!(te_twice_chunked, b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", ParseError::BadTransferEncoding);
    err!(
        te_identity,
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n",
        ParseError::BadTransferEncoding
    );
    err!(
        te_on_http10,
        b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
        ParseError::BadTransferEncoding
    );
    err!(
        te_garbage,
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n",
        ParseError::BadTransferEncoding
    );
    err!(
        cl_differing,
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        ParseError::BadContentLength
    );
    err!(
        cl_list,
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n",
        ParseError::BadContentLength
    );
    err!(
        cl_sign,
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n",
        ParseError::BadContentLength
    );
    err!(
        cl_hex,
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x5\r\n\r\n",
        ParseError::BadContentLength
    );
    err!(
        cl_empty,
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: \r\n\r\n",
        ParseError::BadContentLength
    );
    err!(
        cl_overflow,
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n",
        ParseError::BadContentLength
    );
    err!(
        space_before_colon,
        b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length : 5\r\n\r\n",
        ParseError::Malformed
    );
    err!(
        obs_fold,
        b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n",
        ParseError::Malformed
    );
    err!(
        bare_cr_in_value,
        b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\rc\r\n\r\n",
        ParseError::Malformed
    );
    err!(
        bare_cr_line_end,
        b"GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n",
        ParseError::Malformed
    );
    err!(
        nul_in_value,
        b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\0c\r\n\r\n",
        ParseError::Malformed
    );
    err!(missing_host, b"GET / HTTP/1.1\r\n\r\n", ParseError::BadHost);
    err!(
        two_hosts,
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        ParseError::BadHost
    );
    err!(
        http2,
        b"GET / HTTP/2.0\r\nHost: a\r\n\r\n",
        ParseError::VersionNotSupported
    );
    err!(
        http12,
        b"GET / HTTP/1.2\r\nHost: a\r\n\r\n",
        ParseError::VersionNotSupported
    );
    err!(
        bad_version,
        b"GET / HTPT/1.1\r\nHost: a\r\n\r\n",
        ParseError::Malformed
    );
    err!(no_version, b"GET /\r\n\r\n", ParseError::Malformed);
    err!(
        space_in_target,
        b"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n",
        ParseError::Malformed
    );
    err!(
        bad_method_char,
        b"G(T / HTTP/1.1\r\nHost: a\r\n\r\n",
        ParseError::Malformed
    );

    #[test]
    fn expect_continue_only_from_http11() {
        let expect = |raw: &[u8]| {
            let mut slots = header_slots();
            match parse_request(raw, &mut slots, &HeadLimits::default()) {
                Ok(Status::Complete(r)) => r.expect_continue,
                other => panic!("{other:?}"),
            }
        };
        assert!(expect(
            b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n"
        ));
        assert!(!expect(
            b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n"
        ));
        assert!(!expect(
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\n"
        ));
    }

    #[test]
    fn uri_too_long() {
        let limits = HeadLimits {
            max_uri_bytes: 100,
            max_head_bytes: 200,
            max_headers: 10,
        };
        let mut slots = header_slots();
        let long = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(150));
        assert_eq!(
            parse_request(long.as_bytes(), &mut slots, &limits).map(|_| ()),
            Err(ParseError::UriTooLong)
        );
        // Still incomplete, but already longer than the head limit without a line end: 414.
        let mut slots = header_slots();
        let partial = format!("GET /{}", "a".repeat(300));
        assert_eq!(
            parse_request(partial.as_bytes(), &mut slots, &limits).map(|_| ()),
            Err(ParseError::UriTooLong)
        );
    }

    #[test]
    fn head_too_large_and_too_many_headers() {
        let limits = HeadLimits {
            max_uri_bytes: 100,
            max_head_bytes: 200,
            max_headers: 3,
        };
        let mut slots = header_slots();
        let big = format!("GET / HTTP/1.1\r\nHost: a\r\nX: {}", "b".repeat(300));
        assert_eq!(
            parse_request(big.as_bytes(), &mut slots, &limits).map(|_| ()),
            Err(ParseError::HeadTooLarge)
        );
        let mut slots = header_slots();
        let many = b"GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
        assert_eq!(
            parse_request(many, &mut slots, &limits).map(|_| ()),
            Err(ParseError::TooManyHeaders)
        );
    }

    #[test]
    fn header_lookup() {
        let mut slots = header_slots();
        let input = b"GET / HTTP/1.1\r\nHost: a\r\nAccept: text/html\r\n\r\n";
        let Status::Complete(r) = parse_request(input, &mut slots, &HeadLimits::default()).unwrap()
        else {
            panic!("partial")
        };
        assert_eq!(r.header("accept"), Some(&b"text/html"[..]));
        assert_eq!(r.header("ACCEPT"), Some(&b"text/html"[..]));
        assert_eq!(r.header("x-missing"), None);
    }

    proptest::proptest! {
        /// Random bytes never panic the parser.
        #[test]
        fn random_bytes_never_panic(input in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let mut slots = header_slots();
            let _ = parse_request(&input, &mut slots, &HeadLimits::default());
        }

        /// A valid request with one byte mutated never panics, and what parses keeps the limits.
        #[test]
        fn mutated_requests_never_panic(pos in 0usize..80, byte in proptest::num::u8::ANY) {
            let mut input = b"POST /a?b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello".to_vec();
            let pos = pos % input.len();
            input[pos] = byte;
            let mut slots = header_slots();
            if let Ok(Status::Complete(r)) = parse_request(&input, &mut slots, &HeadLimits::default()) {
                proptest::prop_assert!(r.head_len <= input.len());
            }
        }
    }
}
