//! Encoding a response head into an output buffer (RFC 9112 §4, §6).
//!
//! Every response carries `Server`, `Date` and `Content-Length` (so keep-alive and pipelining
//! never depend on closing the connection to delimit a body). The head is appended to the
//! caller's buffer — one per connection, shared by all pipelined responses of a batch so that the
//! whole batch leaves in one write.

/// How the response tells the client about the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionHeader {
    /// HTTP/1.1 persistent: no header needed.
    None,
    /// `Connection: keep-alive`, for HTTP/1.0 clients that asked for it.
    KeepAlive,
    /// `Connection: close`: the server closes after this response.
    Close,
}

/// A response head to encode.
#[derive(Debug, Clone, Copy)]
pub struct ResponseHead<'a> {
    pub status: u16,
    /// `Content-Type` value, if any.
    pub content_type: Option<&'a [u8]>,
    /// `Content-Length` value: the length of the representation even when the body is omitted
    /// (HEAD, 304 aside), as RFC 9110 §8.6 allows.
    pub content_length: u64,
    /// Whether to send `Content-Length` (not on 304 or 1xx).
    pub send_length: bool,
    pub connection: ConnectionHeader,
    /// More header lines, already formatted, each ending in CRLF.
    pub extra: &'a [u8],
}

impl<'a> ResponseHead<'a> {
    /// A head with status, content type and length, and no extra fields.
    #[must_use]
    pub fn new(status: u16, content_type: Option<&'a [u8]>, content_length: u64) -> Self {
        Self {
            status,
            content_type,
            content_length,
            send_length: true,
            connection: ConnectionHeader::None,
            extra: b"",
        }
    }

    /// Appends the encoded head, ending with the blank line, to `out`.
    pub fn encode(&self, date: &[u8], out: &mut Vec<u8>) {
        if self.status == 200 {
            out.extend_from_slice(b"HTTP/1.1 200 OK\r\nServer: lowlat\r\nDate: ");
        } else {
            out.extend_from_slice(b"HTTP/1.1 ");
            out.extend_from_slice(itoa::Buffer::new().format(self.status).as_bytes());
            out.push(b' ');
            out.extend_from_slice(reason(self.status).as_bytes());
            out.extend_from_slice(b"\r\nServer: lowlat\r\nDate: ");
        }
        out.extend_from_slice(date);
        if let Some(ct) = self.content_type {
            out.extend_from_slice(b"\r\nContent-Type: ");
            out.extend_from_slice(ct);
        }
        if self.send_length {
            out.extend_from_slice(b"\r\nContent-Length: ");
            out.extend_from_slice(itoa::Buffer::new().format(self.content_length).as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(self.extra);
        match self.connection {
            ConnectionHeader::None => {}
            ConnectionHeader::KeepAlive => out.extend_from_slice(b"Connection: keep-alive\r\n"),
            ConnectionHeader::Close => out.extend_from_slice(b"Connection: close\r\n"),
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// Appends one `name: value` header line to a block of extra fields.
pub fn push_header(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// The reason phrase for a status code (RFC 9110 §15).
#[must_use]
pub const fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        103 => "Early Hints",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        425 => "Too Early",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DATE: &[u8] = b"Sun, 06 Nov 1994 08:49:37 GMT";

    #[test]
    fn encodes_plaintext_head() {
        let mut out = Vec::new();
        ResponseHead::new(200, Some(b"text/plain"), 13).encode(DATE, &mut out);
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\nServer: lowlat\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
Content-Type: text/plain\r\nContent-Length: 13\r\n\r\n"
        );
    }

    #[test]
    fn encodes_error_with_close_and_extra() {
        let mut out = b"prefix".to_vec();
        let mut extra = Vec::new();
        push_header(&mut extra, "Allow", b"GET, HEAD");
        let head = ResponseHead {
            connection: ConnectionHeader::Close,
            extra: &extra,
            ..ResponseHead::new(405, None, 0)
        };
        head.encode(DATE, &mut out);
        assert_eq!(
            out,
            b"prefixHTTP/1.1 405 Method Not Allowed\r\nServer: lowlat\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
Content-Length: 0\r\nAllow: GET, HEAD\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn not_modified_has_no_length() {
        let mut out = Vec::new();
        let head = ResponseHead {
            send_length: false,
            connection: ConnectionHeader::KeepAlive,
            ..ResponseHead::new(304, None, 0)
        };
        head.encode(DATE, &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.1 304 Not Modified\r\n"));
        assert!(!text.contains("Content-Length"));
        assert!(text.ends_with("Connection: keep-alive\r\n\r\n"));
    }
}
