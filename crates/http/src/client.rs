//! The client side of the codec: parsing response heads and delimiting response bodies, for the
//! load generator. Like the rest of the crate it does no I/O and borrows from the caller's buffer.
//!
//! [`parse_response_head`] runs `httparse` over one head and decides how its body is delimited
//! (RFC 9112 §6.3), whether the connection stays open (RFC 9112 §9.3) and whether it is an
//! interim `1xx` response. [`ResponseReader`] is the state machine a connection keeps between
//! reads: it walks heads and bodies of pipelined responses in order, counts body bytes without
//! copying them (chunked bodies go through [`ChunkedDecoder`] with a counting callback), and says
//! how many input bytes each step consumed, so the caller keeps only an incomplete head.
//!
//! It is strict where leniency would desynchronise pipelined responses: `Content-Length` must be
//! decimal digits (identical duplicates allowed), `Transfer-Encoding` together with
//! `Content-Length` or on HTTP/1.0 is refused (RFC 9112 §6.1, §6.3 ¶3), chunked framing is the
//! strict decoder's, and `101 Switching Protocols` (never asked for) is an error — except through
//! [`parse_upgrade_response`], for a caller that did ask for an upgrade (a proxy forwarding a
//! WebSocket handshake).

use std::mem::MaybeUninit;

use crate::body::ChunkedDecoder;
use crate::limits::{MAX_HEADERS, MAX_HEAD_BYTES};
use crate::{Status, Version};

pub use httparse::Header;

/// Why a response cannot be read. After any of these the connection's framing is lost, so the
/// caller closes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ResponseError {
    /// The status line or a header field is not valid HTTP/1.x syntax.
    #[error("malformed response head")]
    Malformed,
    /// An `HTTP/x.y` version other than 1.0 and 1.1.
    #[error("unsupported HTTP version in response")]
    Version,
    /// The head is larger than [`MAX_HEAD_BYTES`].
    #[error("response head too large")]
    HeadTooLarge,
    /// More header fields than [`MAX_HEADERS`].
    #[error("too many header fields in response")]
    TooManyHeaders,
    /// `Content-Length` that is not a decimal number, or duplicates that differ.
    #[error("invalid Content-Length in response")]
    BadContentLength,
    /// `Transfer-Encoding` with `Content-Length`, or on an HTTP/1.0 response.
    #[error("invalid Transfer-Encoding in response")]
    BadTransferEncoding,
    /// A chunked body that breaks RFC 9112 §7.1.
    #[error("invalid chunked body in response")]
    BadChunk,
    /// `101 Switching Protocols`, which a load generator never asks for.
    #[error("unexpected 101 Switching Protocols")]
    UnexpectedUpgrade,
    /// The connection ended inside a head or a length-delimited or chunked body.
    #[error("connection closed inside a response")]
    Truncated,
}

/// How a response body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseBody {
    /// No body: a response to HEAD, `1xx`, `204`, `304`, or `Content-Length: 0`.
    None,
    /// Exactly this many bytes follow the head.
    Length(u64),
    /// `Transfer-Encoding` ending in `chunked`.
    Chunked,
    /// Everything until the server closes the connection (no length given, or a transfer coding
    /// other than a final `chunked`).
    UntilClose,
}

/// A parsed response head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHead {
    pub version: Version,
    pub status: u16,
    pub body: ResponseBody,
    /// Whether the connection may carry another response after this one (RFC 9112 §9.3):
    /// HTTP/1.1 unless `Connection: close`, HTTP/1.0 only with `Connection: keep-alive`, and
    /// never after a close-delimited body.
    pub keep_alive: bool,
    /// Length of the head in bytes, including the final blank line.
    pub head_len: usize,
    /// The `Content-Length` the head announced (checked: digits only, every copy the same),
    /// also where the response has no body (`HEAD`, `304`), whose length a proxy passes on.
    pub content_length: Option<u64>,
}

impl ResponseHead {
    /// Whether this is an interim (`1xx`) response, to be followed by the final one.
    #[must_use]
    pub fn is_interim(&self) -> bool {
        (100..200).contains(&self.status)
    }
}

/// Storage for parsed header fields: on the caller's stack, uninitialised until parsed.
pub type ResponseHeaderSlots<'b> = [MaybeUninit<Header<'b>>; MAX_HEADERS];

/// Parses one response head from the start of `buf`. `request_was_head` says whether the request
/// it answers used `HEAD`, which makes the body empty whatever the head declares.
///
/// Returns [`Status::Partial`] while the head is incomplete and shorter than [`MAX_HEAD_BYTES`].
///
/// # Errors
/// Any [`ResponseError`] but `BadChunk` and `Truncated`.
pub fn parse_response_head(
    buf: &[u8],
    request_was_head: bool,
) -> Result<Status<ResponseHead>, ResponseError> {
    // Uninitialised slots: zeroing 100 headers (3.2 KB) per response would cost more than
    // parsing a typical 4-field head.
    let mut slots: ResponseHeaderSlots<'_> = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    Ok(match parse_response(buf, request_was_head, &mut slots)? {
        Status::Complete(parsed) => Status::Complete(parsed.head),
        Status::Partial => Status::Partial,
    })
}

/// A response head with its fields, for a caller that passes them on (a proxy): borrowed from
/// the input and the caller's slots.
#[derive(Debug)]
pub struct ParsedResponse<'h, 'b> {
    pub head: ResponseHead,
    /// The reason phrase (may be empty).
    pub reason: &'b str,
    /// The header fields in order, as received (names and values checked by `httparse`: no
    /// CR, LF or NUL, no obsolete line folding).
    pub fields: &'h [Header<'b>],
}

/// [`parse_response_head`], keeping the reason phrase and the fields in `slots`.
///
/// # Errors
/// Any [`ResponseError`] but `BadChunk` and `Truncated`.
pub fn parse_response<'h, 'b>(
    buf: &'b [u8],
    request_was_head: bool,
    slots: &'h mut ResponseHeaderSlots<'b>,
) -> Result<Status<ParsedResponse<'h, 'b>>, ResponseError> {
    parse_any_response(buf, request_was_head, false, slots)
}

/// [`parse_response`] for a request that asked to switch protocols (`Upgrade`, RFC 9110 §7.8):
/// `101 Switching Protocols` is the final answer here, with no body and the connection no
/// longer HTTP (`keep_alive` false); anything else parses as [`parse_response`] would.
///
/// # Errors
/// Any [`ResponseError`] but `BadChunk`, `Truncated` and `UnexpectedUpgrade`.
pub fn parse_upgrade_response<'h, 'b>(
    buf: &'b [u8],
    slots: &'h mut ResponseHeaderSlots<'b>,
) -> Result<Status<ParsedResponse<'h, 'b>>, ResponseError> {
    parse_any_response(buf, false, true, slots)
}

fn parse_any_response<'h, 'b>(
    buf: &'b [u8],
    request_was_head: bool,
    upgrade_asked: bool,
    slots: &'h mut ResponseHeaderSlots<'b>,
) -> Result<Status<ParsedResponse<'h, 'b>>, ResponseError> {
    let mut resp = httparse::Response::new(&mut []);
    let parsed =
        httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut resp, buf, slots);
    let head_len = match parsed {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            return if buf.len() > MAX_HEAD_BYTES {
                Err(ResponseError::HeadTooLarge)
            } else {
                Ok(Status::Partial)
            };
        }
        Err(httparse::Error::TooManyHeaders) => return Err(ResponseError::TooManyHeaders),
        // httparse says "version" for anything that does not start `HTTP/1.`.
        Err(httparse::Error::Version) if buf.starts_with(b"HTTP/") => {
            return Err(ResponseError::Version)
        }
        Err(_) => return Err(ResponseError::Malformed),
    };
    if head_len > MAX_HEAD_BYTES {
        return Err(ResponseError::HeadTooLarge);
    }
    let (Some(minor), Some(status)) = (resp.version, resp.code) else {
        return Err(ResponseError::Malformed);
    };
    let version = if minor == 0 {
        Version::Http10
    } else {
        Version::Http11
    };
    if status == 101 && !upgrade_asked {
        return Err(ResponseError::UnexpectedUpgrade);
    }
    // httparse accepts any three digits; RFC 9110 §15 defines 100..=599.
    if !(100..=599).contains(&status) {
        return Err(ResponseError::Malformed);
    }
    let fields = scan_fields(resp.headers, version)?;
    let no_body =
        request_was_head || (100..200).contains(&status) || status == 204 || status == 304;
    let body = if no_body {
        ResponseBody::None
    } else if let Some(chunked) = fields.transfer_encoding {
        if chunked {
            ResponseBody::Chunked
        } else {
            ResponseBody::UntilClose
        }
    } else {
        match fields.content_length {
            Some(0) => ResponseBody::None,
            Some(n) => ResponseBody::Length(n),
            None => ResponseBody::UntilClose,
        }
    };
    // After a 101 the connection speaks the new protocol: never another HTTP response.
    let keep_alive = fields.keep_alive && body != ResponseBody::UntilClose && status != 101;
    Ok(Status::Complete(ParsedResponse {
        head: ResponseHead {
            version,
            status,
            body,
            keep_alive,
            head_len,
            content_length: fields.content_length,
        },
        reason: resp.reason.unwrap_or(""),
        fields: resp.headers,
    }))
}

/// What the client needs from the header fields, found in one pass.
struct Fields {
    content_length: Option<u64>,
    /// `Some(true)` when `Transfer-Encoding` ends in `chunked`, `Some(false)` for other codings.
    transfer_encoding: Option<bool>,
    keep_alive: bool,
}

fn scan_fields(headers: &[Header<'_>], version: Version) -> Result<Fields, ResponseError> {
    let mut content_length = None;
    let mut chunked_last = None;
    let mut close = false;
    let mut keep_alive_token = false;
    for h in headers {
        if h.name.eq_ignore_ascii_case("content-length") {
            let n = parse_content_length(h.value)?;
            if content_length.is_some_and(|prev| prev != n) {
                return Err(ResponseError::BadContentLength);
            }
            content_length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            // Codings may be split over several fields; only the last one decides.
            for coding in h.value.split(|&b| b == b',').map(trim) {
                if !coding.is_empty() {
                    chunked_last = Some(coding.eq_ignore_ascii_case(b"chunked"));
                }
            }
            if chunked_last.is_none() {
                return Err(ResponseError::BadTransferEncoding);
            }
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|&b| b == b',').map(trim) {
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive_token |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        }
    }
    if chunked_last.is_some() && (content_length.is_some() || version == Version::Http10) {
        return Err(ResponseError::BadTransferEncoding);
    }
    let keep_alive = !close && (version == Version::Http11 || keep_alive_token);
    Ok(Fields {
        content_length,
        transfer_encoding: chunked_last,
        keep_alive,
    })
}

fn parse_content_length(value: &[u8]) -> Result<u64, ResponseError> {
    let value = trim(value);
    if value.is_empty() || value.len() > 19 {
        return Err(ResponseError::BadContentLength);
    }
    let mut n: u64 = 0;
    for &b in value {
        if !b.is_ascii_digit() {
            return Err(ResponseError::BadContentLength);
        }
        n = n * 10 + u64::from(b - b'0');
    }
    Ok(n)
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

/// A complete final response, as [`ResponseReader`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// Whether the connection may carry another response.
    pub keep_alive: bool,
    /// Body bytes after chunked decoding (the bytes were counted, never copied).
    pub body_len: u64,
}

/// What one [`ResponseReader::read`] call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// All of `consumed` belonged to a response that is not complete yet. When the reader waits
    /// for a head ([`ResponseReader::wants_head`]), the unconsumed rest of the input is an
    /// incomplete head: keep it and call again with it and more bytes.
    NeedMore { consumed: usize },
    /// A final response ended after `consumed` bytes of the input.
    Complete { consumed: usize, response: Response },
}

/// Where the reader is within the current response.
#[derive(Debug, Clone)]
enum ReaderState {
    Head,
    Length { remaining: u64 },
    Chunked(ChunkedDecoder),
    UntilClose,
}

/// The last final head parsed and what it decided, shared by the readers of many connections.
///
/// A server answering the same URL sends byte-identical heads (bar a `Date` that changes once a
/// second), and parsing is a pure function of the head's bytes (and of whether the request was
/// `HEAD`): when the next head starts with the same bytes, its parse is reused instead of
/// recomputed. Measured at 16-deep pipelining against the ceiling responder: httparse was ~9% of
/// the loader's CPU; a ~90-byte `memcmp` costs a tenth of that. One cache per thread rather than
/// per connection: with 1024 connections it stays in L1 instead of adding a cache miss per
/// response.
#[derive(Debug, Clone, Default)]
pub struct HeadCache {
    bytes: Vec<u8>,
    request_was_head: bool,
    head: Option<ResponseHead>,
}

impl HeadCache {
    /// An empty cache.
    #[must_use]
    pub const fn new() -> Self {
        Self {
            bytes: Vec::new(),
            request_was_head: false,
            head: None,
        }
    }

    fn lookup(&self, input: &[u8], request_was_head: bool) -> Option<ResponseHead> {
        let head = self.head?;
        (self.request_was_head == request_was_head && input.starts_with(&self.bytes))
            .then_some(head)
    }

    fn remember(&mut self, bytes: &[u8], request_was_head: bool, head: ResponseHead) {
        self.bytes.clear();
        self.bytes.extend_from_slice(bytes);
        self.request_was_head = request_was_head;
        self.head = Some(head);
    }
}

/// The response side of one connection: heads and bodies of successive responses, in order.
#[derive(Debug, Clone)]
pub struct ResponseReader {
    state: ReaderState,
    /// Status and keep-alive of the response whose body is being read.
    status: u16,
    keep_alive: bool,
    body_len: u64,
}

impl Default for ResponseReader {
    fn default() -> Self {
        Self::new()
    }
}

impl ResponseReader {
    /// A reader waiting for the first head.
    #[must_use]
    pub const fn new() -> Self {
        Self {
            state: ReaderState::Head,
            status: 0,
            keep_alive: true,
            body_len: 0,
        }
    }

    /// Whether the reader is between responses (waiting for a head).
    #[must_use]
    pub fn wants_head(&self) -> bool {
        matches!(self.state, ReaderState::Head)
    }

    /// Consumes bytes of at most one final response (interim `1xx` heads before it are consumed
    /// and skipped). `request_was_head` says whether the request this response answers was
    /// `HEAD`.
    ///
    /// # Errors
    /// Any [`ResponseError`]; the connection cannot be used afterwards.
    pub fn read(&mut self, input: &[u8], request_was_head: bool) -> Result<Step, ResponseError> {
        self.read_cached(input, request_was_head, None)
    }

    /// [`ResponseReader::read`], reusing the parse of a head identical to the one in `cache`
    /// (and remembering each new final head there).
    ///
    /// # Errors
    /// As [`ResponseReader::read`].
    pub fn read_cached(
        &mut self,
        input: &[u8],
        request_was_head: bool,
        mut cache: Option<&mut HeadCache>,
    ) -> Result<Step, ResponseError> {
        let mut i = 0;
        loop {
            match &mut self.state {
                ReaderState::Head => {
                    let rest = &input[i..];
                    let cached = cache
                        .as_deref()
                        .and_then(|c| c.lookup(rest, request_was_head));
                    let head = match cached {
                        Some(head) => head,
                        None => match parse_response_head(rest, request_was_head)? {
                            Status::Complete(head) => {
                                if let Some(c) = cache.as_deref_mut() {
                                    if !head.is_interim() {
                                        c.remember(&rest[..head.head_len], request_was_head, head);
                                    }
                                }
                                head
                            }
                            Status::Partial => return Ok(Step::NeedMore { consumed: i }),
                        },
                    };
                    i += head.head_len;
                    if head.is_interim() {
                        continue;
                    }
                    self.status = head.status;
                    self.keep_alive = head.keep_alive;
                    self.body_len = 0;
                    match head.body {
                        ResponseBody::None => return Ok(self.complete(i)),
                        ResponseBody::Length(n) => {
                            self.state = ReaderState::Length { remaining: n };
                        }
                        ResponseBody::Chunked => {
                            self.state = ReaderState::Chunked(ChunkedDecoder::new(u64::MAX));
                        }
                        ResponseBody::UntilClose => self.state = ReaderState::UntilClose,
                    }
                }
                ReaderState::Length { remaining } => {
                    let available = (input.len() - i) as u64;
                    let take = (*remaining).min(available);
                    *remaining -= take;
                    self.body_len += take;
                    // `take` is at most `available`, a usize.
                    i += usize::try_from(take).unwrap_or(usize::MAX);
                    if *remaining == 0 {
                        self.state = ReaderState::Head;
                        return Ok(self.complete(i));
                    }
                    return Ok(Step::NeedMore { consumed: i });
                }
                ReaderState::Chunked(decoder) => {
                    let d = decoder
                        .decode(&input[i..], |_| {})
                        .map_err(|_| ResponseError::BadChunk)?;
                    i += d.consumed;
                    if d.done {
                        self.body_len = decoder.decoded_len();
                        self.state = ReaderState::Head;
                        return Ok(self.complete(i));
                    }
                    return Ok(Step::NeedMore { consumed: i });
                }
                ReaderState::UntilClose => {
                    self.body_len += (input.len() - i) as u64;
                    return Ok(Step::NeedMore {
                        consumed: input.len(),
                    });
                }
            }
        }
    }

    /// The connection ended. Returns the response that a close completes (a close-delimited
    /// body), `None` when it ended cleanly between responses, and `pending_head_bytes` says how
    /// many bytes of an incomplete head the caller still held.
    ///
    /// # Errors
    /// [`ResponseError::Truncated`] when it ended inside a head or a delimited body.
    pub fn eof(&mut self, pending_head_bytes: usize) -> Result<Option<Response>, ResponseError> {
        match self.state {
            ReaderState::Head if pending_head_bytes == 0 => Ok(None),
            ReaderState::UntilClose => {
                self.state = ReaderState::Head;
                let Step::Complete { response, .. } = self.complete(0) else {
                    return Err(ResponseError::Truncated);
                };
                Ok(Some(response))
            }
            _ => Err(ResponseError::Truncated),
        }
    }

    fn complete(&mut self, consumed: usize) -> Step {
        Step::Complete {
            consumed,
            response: Response {
                status: self.status,
                keep_alive: self.keep_alive,
                body_len: self.body_len,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `input` to a fresh reader as the caller would (keeping an incomplete head), either
    /// whole or in pieces of `piece` bytes, and returns the responses or the first error.
    fn read_all(
        input: &[u8],
        piece: usize,
        head: bool,
        mut cache: Option<&mut HeadCache>,
    ) -> Result<Vec<Response>, ResponseError> {
        let mut reader = ResponseReader::new();
        let mut out = Vec::new();
        let mut pending: Vec<u8> = Vec::new();
        for chunk in input.chunks(piece.max(1)) {
            pending.extend_from_slice(chunk);
            let mut i = 0;
            while i < pending.len() {
                match reader.read_cached(&pending[i..], head, cache.as_deref_mut())? {
                    Step::NeedMore { consumed } => {
                        i += consumed;
                        break;
                    }
                    Step::Complete { consumed, response } => {
                        i += consumed;
                        out.push(response);
                    }
                }
            }
            pending.drain(..i);
        }
        let held = if reader.wants_head() {
            pending.len()
        } else {
            0
        };
        if let Some(r) = reader.eof(held)? {
            out.push(r);
        }
        Ok(out)
    }

    /// Runs a case whole and one byte at a time, without a head cache and with one (shared by
    /// the runs, so the later ones may hit it); all must agree.
    fn check(input: &[u8], head: bool) -> Result<Vec<Response>, ResponseError> {
        let whole = read_all(input, input.len(), head, None);
        let bytewise = read_all(input, 1, head, None);
        assert_eq!(whole, bytewise, "{:?}", String::from_utf8_lossy(input));
        let mut cache = HeadCache::new();
        for piece in [input.len(), 1, input.len()] {
            let cached = read_all(input, piece, head, Some(&mut cache));
            assert_eq!(whole, cached, "{:?}", String::from_utf8_lossy(input));
        }
        whole
    }

    fn ok(status: u16, keep_alive: bool, body_len: u64) -> Response {
        Response {
            status,
            keep_alive,
            body_len,
        }
    }

    macro_rules! cases {
        ($($(#[$doc:meta])* $name:ident: $input:expr, head: $head:expr => $expected:expr;)*) => {$(
            $(#[$doc])*
            #[test]
            fn $name() {
                assert_eq!(check($input, $head), $expected);
            }
        )*};
    }

    cases! {
        /// The ceiling responder's answer.
        plain_length: b"HTTP/1.1 200 OK\r\nServer: C\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!",
            head: false => Ok(vec![ok(200, true, 13)]);
        pipelined_three: b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiHTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\nHTTP/1.1 500 X\r\nContent-Length: 1\r\n\r\n!",
            head: false => Ok(vec![ok(200, true, 2), ok(404, true, 0), ok(500, true, 1)]);
        chunked: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
            head: false => Ok(vec![ok(200, true, 11), ok(204, true, 0)]);
        chunked_after_gzip: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n",
            head: false => Ok(vec![ok(200, true, 1)]);
        connection_close: b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx",
            head: false => Ok(vec![ok(200, false, 1)]);
        connection_close_token_list: b"HTTP/1.1 200 OK\r\nConnection: upgrade, Close\r\nContent-Length: 0\r\n\r\n",
            head: false => Ok(vec![ok(200, false, 0)]);
        http10_default_close: b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx",
            head: false => Ok(vec![ok(200, false, 1)]);
        http10_keep_alive: b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx",
            head: false => Ok(vec![ok(200, true, 1)]);
        until_close: b"HTTP/1.1 200 OK\r\n\r\nall of this until EOF",
            head: false => Ok(vec![ok(200, false, 21)]);
        until_close_other_coding: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nabc",
            head: false => Ok(vec![ok(200, false, 3)]);
        head_request_ignores_length: b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n",
            head: true => Ok(vec![ok(200, true, 0), ok(200, true, 0)]);
        not_modified_has_no_body: b"HTTP/1.1 304 Not Modified\r\nContent-Length: 50\r\n\r\n",
            head: false => Ok(vec![ok(304, true, 0)]);
        interim_skipped: b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n",
            head: false => Ok(vec![ok(201, true, 0)]);
        identical_duplicate_length: b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
            head: false => Ok(vec![ok(200, true, 1)]);
        empty_is_clean: b"", head: false => Ok(vec![]);
        bad_status_line: b"HTTP/1.1 2OO OK\r\n\r\n", head: false => Err(ResponseError::Malformed);
        not_http: b"SSH-2.0-OpenSSH\r\n\r\n", head: false => Err(ResponseError::Malformed);
        status_out_of_range: b"HTTP/1.1 999 What\r\nContent-Length: 0\r\n\r\n", head: false => Err(ResponseError::Malformed);
        space_in_header_name: b"HTTP/1.1 200 OK\r\nBad Header: x\r\n\r\n", head: false => Err(ResponseError::Malformed);
        http2_version: b"HTTP/2.0 200 OK\r\n\r\n", head: false => Err(ResponseError::Version);
        differing_lengths: b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx", head: false => Err(ResponseError::BadContentLength);
        signed_length: b"HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\nx", head: false => Err(ResponseError::BadContentLength);
        list_length: b"HTTP/1.1 200 OK\r\nContent-Length: 1, 1\r\n\r\nx", head: false => Err(ResponseError::BadContentLength);
        huge_length: b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n", head: false => Err(ResponseError::BadContentLength);
        te_and_length: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", head: false => Err(ResponseError::BadTransferEncoding);
        te_on_http10: b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", head: false => Err(ResponseError::BadTransferEncoding);
        empty_te: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: \r\n\r\n", head: false => Err(ResponseError::BadTransferEncoding);
        bad_chunk: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nZ\r\n", head: false => Err(ResponseError::BadChunk);
        upgrade: b"HTTP/1.1 101 Switching Protocols\r\n\r\n", head: false => Err(ResponseError::UnexpectedUpgrade);
        truncated_body: b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", head: false => Err(ResponseError::Truncated);
        truncated_head: b"HTTP/1.1 200 OK\r\nContent-Le", head: false => Err(ResponseError::Truncated);
        truncated_chunked: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", head: false => Err(ResponseError::Truncated);
    }

    #[test]
    fn head_too_large() {
        let mut input = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
        input.extend_from_slice(&vec![b'a'; MAX_HEAD_BYTES]);
        assert_eq!(
            parse_response_head(&input, false),
            Err(ResponseError::HeadTooLarge)
        );
    }

    #[test]
    fn too_many_headers() {
        let mut input = b"HTTP/1.1 200 OK\r\n".to_vec();
        for _ in 0..=MAX_HEADERS {
            input.extend_from_slice(b"A: b\r\n");
        }
        input.extend_from_slice(b"\r\n");
        assert_eq!(
            parse_response_head(&input, false),
            Err(ResponseError::TooManyHeaders)
        );
    }

    #[test]
    fn partial_head_consumes_nothing() {
        let mut reader = ResponseReader::new();
        assert_eq!(
            reader.read(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n", false),
            Ok(Step::NeedMore { consumed: 0 })
        );
        assert!(reader.wants_head());
        // Interim heads before an incomplete final head are consumed.
        assert_eq!(
            reader.read(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 2", false),
            Ok(Step::NeedMore { consumed: 25 })
        );
    }

    #[test]
    fn cached_heads_decide_like_parsed_ones() {
        // The same head twice (the second from the cache), then one differing only in its
        // length, then the first again as the answer to a HEAD request: each decided afresh.
        let a = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";
        let b = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nhey";
        let mut reader = ResponseReader::new();
        let mut cache = HeadCache::new();
        for (input, head, body) in [
            (&a[..], false, 2),
            (a, false, 2),
            (b, false, 3),
            (a, true, 0),
        ] {
            let step = reader.read_cached(input, head, Some(&mut cache)).unwrap();
            let Step::Complete { consumed, response } = step else {
                panic!("{step:?}")
            };
            assert_eq!(response.body_len, body);
            assert_eq!(consumed, input.len() - if head { 2 } else { 0 });
        }
        // A cached head followed by a malformed one is still refused.
        let pair = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiHTTP/1.1 2OO X\r\n\r\n";
        let Ok(Step::Complete { consumed, .. }) = reader.read_cached(pair, false, Some(&mut cache))
        else {
            panic!("first of the pair")
        };
        assert_eq!(
            reader.read_cached(&pair[consumed..], false, Some(&mut cache)),
            Err(ResponseError::Malformed)
        );
    }

    #[test]
    fn head_reports_framing() {
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n";
        assert_eq!(
            parse_response_head(head, false),
            Ok(Status::Complete(ResponseHead {
                version: Version::Http11,
                status: 200,
                body: ResponseBody::Length(13),
                keep_alive: true,
                head_len: head.len(),
                content_length: Some(13),
            }))
        );
    }

    proptest::proptest! {
        /// Random bytes, in random pieces, never panic the reader; consumed counts stay in bounds.
        #[test]
        fn random_bytes_never_panic(
            input in proptest::collection::vec(proptest::num::u8::ANY, 0..512),
            piece in 1usize..64,
            head in proptest::bool::ANY,
        ) {
            let mut cache = HeadCache::new();
            let _ = read_all(&input, piece, head, Some(&mut cache));
            let _ = read_all(&input, piece, head, None);
        }

        /// Pipelined valid responses with one byte mutated: never a panic, and whole, bytewise
        /// and cached runs agree on the outcome.
        #[test]
        fn mutated_responses_agree(pos in 0usize..200, byte in proptest::num::u8::ANY) {
            let mut input = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello".to_vec();
            let pos = pos % input.len();
            input[pos] = byte;
            let _ = check(&input, false);
        }
    }
}

#[cfg(test)]
mod upgrade_tests {
    use super::*;

    fn upgrade(buf: &[u8]) -> Result<Option<(u16, bool, ResponseBody, usize)>, ResponseError> {
        let mut slots: ResponseHeaderSlots<'_> = [const { MaybeUninit::uninit() }; MAX_HEADERS];
        Ok(match parse_upgrade_response(buf, &mut slots)? {
            Status::Complete(p) => Some((
                p.head.status,
                p.head.keep_alive,
                p.head.body,
                p.fields.len(),
            )),
            Status::Partial => None,
        })
    }

    /// A 101 answers an upgrade: no body, no further HTTP on the connection; bytes after its
    /// head belong to the new protocol.
    #[test]
    fn switching_protocols_when_asked() {
        let raw = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x81\x02hi";
        assert_eq!(upgrade(raw), Ok(Some((101, false, ResponseBody::None, 2))));
        // Fed a byte at a time, it is partial until the blank line.
        let head_len = raw.len() - 4;
        for n in 0..head_len {
            assert_eq!(upgrade(&raw[..n]), Ok(None), "{n} bytes");
        }
    }

    /// Any other answer to an upgrade is an ordinary response.
    #[test]
    fn refused_upgrade_is_a_response() {
        let raw = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 3\r\n\r\nno!";
        assert_eq!(
            upgrade(raw),
            Ok(Some((400, true, ResponseBody::Length(3), 1)))
        );
    }

    /// Without an upgrade asked for, 101 stays an error (a proxy answers it 502: relaying it
    /// would let a server switch a connection the client never offered).
    #[test]
    fn unasked_101_is_refused() {
        let raw = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n";
        let mut slots: ResponseHeaderSlots<'_> = [const { MaybeUninit::uninit() }; MAX_HEADERS];
        assert_eq!(
            parse_response(raw, false, &mut slots).map(|_| ()),
            Err(ResponseError::UnexpectedUpgrade)
        );
    }
}
