//! Why a request was refused, and which status code says so.
//!
//! One small `Copy` enum for every refusal, so that the mapping to status codes lives in exactly
//! one `match` ([`ParseError::status`]) and nowhere else.

/// A request that cannot be served as sent. After any of these the connection is closed: once
/// framing is in doubt, nothing after it on the wire can be trusted (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Syntax error in the request line or a header field (including whitespace before a colon,
    /// obs-fold and bare CR, which `httparse` refuses).
    #[error("malformed request")]
    Malformed,
    /// The request-target is longer than the limit.
    #[error("request-target too long")]
    UriTooLong,
    /// The head is larger than the limit.
    #[error("request head too large")]
    HeadTooLarge,
    /// More header fields than the limit.
    #[error("too many header fields")]
    TooManyHeaders,
    /// A well-formed `HTTP/x.y` other than 1.0 and 1.1.
    #[error("HTTP version not supported")]
    VersionNotSupported,
    /// `Content-Length` that is not a decimal number, or duplicates that differ.
    #[error("invalid Content-Length")]
    BadContentLength,
    /// `Transfer-Encoding` with `Content-Length`, any coding but one final `chunked`, or on HTTP/1.0.
    #[error("invalid Transfer-Encoding")]
    BadTransferEncoding,
    /// A chunk-size line, chunk terminator or trailer section that breaks RFC 9112 §7.1.
    #[error("invalid chunked body")]
    BadChunk,
    /// HTTP/1.1 request without exactly one `Host` (RFC 9112 §3.2).
    #[error("missing or repeated Host")]
    BadHost,
    /// A body (declared or decoded so far) larger than the limit.
    #[error("request body too large")]
    BodyTooLarge,
    /// The client took longer than allowed to send the head or the body.
    #[error("request timed out")]
    Timeout,
    /// Plain HTTP sent to a port that expects TLS (answered in clear, as nginx does).
    #[error("plain HTTP request sent to a TLS port")]
    PlainHttpOnTls,
}

impl ParseError {
    /// The status code that answers this error. The only place that decides it.
    #[must_use]
    pub const fn status(self) -> u16 {
        match self {
            Self::Malformed
            | Self::BadContentLength
            | Self::BadTransferEncoding
            | Self::BadChunk
            | Self::BadHost
            | Self::PlainHttpOnTls => 400,
            Self::Timeout => 408,
            Self::BodyTooLarge => 413,
            Self::UriTooLong => 414,
            Self::HeadTooLarge | Self::TooManyHeaders => 431,
            Self::VersionNotSupported => 505,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ParseError::*;

    #[test]
    fn every_error_has_its_status() {
        let cases = [
            (Malformed, 400),
            (UriTooLong, 414),
            (HeadTooLarge, 431),
            (TooManyHeaders, 431),
            (VersionNotSupported, 505),
            (BadContentLength, 400),
            (BadTransferEncoding, 400),
            (BadChunk, 400),
            (BadHost, 400),
            (BodyTooLarge, 413),
            (Timeout, 408),
            (PlainHttpOnTls, 400),
        ];
        for (err, status) in cases {
            assert_eq!(err.status(), status, "{err:?}");
        }
    }
}
