//! FastCGI (the 1996 specification, version 1), the web server's side: the records a request is
//! sent in and the records its response comes back in, as php-fpm and every FastCGI application
//! server speak it. No I/O: the caller owns the connection and its buffers.
//!
//! A request is one `FCGI_BEGIN_REQUEST` (role responder, `FCGI_KEEP_CONN` to keep the
//! connection for the next one), its CGI/1.1 variables as `FCGI_PARAMS` records closed by an
//! empty one, and its body as `FCGI_STDIN` records closed by an empty one. The response is a CGI
//! response (RFC 3875 §6: header lines, an empty line, the body) spread over `FCGI_STDOUT`
//! records, messages for the error log on `FCGI_STDERR`, and one `FCGI_END_REQUEST`.
//!
//! Why no crate: the FastCGI crates published are clients or servers that own a socket (tokio's
//! or std's); the server drives its upstream sockets from its own event loop and needs only the
//! 8-byte record head, the name-value pairs and the CGI response head, which are here.
//!
//! # Layout
//! - [`record`]: record heads, the request's records written, the response's read
//!   ([`record::Decoder`]: one event at a time, padding and foreign request ids handled,
//!   every length checked).
//! - [`params`]: the name-value pairs of `FCGI_PARAMS`, and request fields as `HTTP_*` names.
//! - [`cgi`]: the CGI response head on `FCGI_STDOUT`: `Status`, `Location`, the other fields.

pub mod cgi;
pub mod params;
pub mod record;

/// Why the application's bytes cannot be used. The connection to it is closed after any of
/// these (its framing is in doubt), and the client gets a 502.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FastCgiError {
    /// A record head with a version other than 1.
    #[error("FastCGI record of version {0}, not 1")]
    Version(u8),
    /// A record type a responder's server never receives (or an unknown one).
    #[error("unexpected FastCGI record type {0}")]
    RecordType(u8),
    /// A record for a request id other than the one in flight.
    #[error("FastCGI record for request {0}, not the one sent")]
    RequestId(u16),
    /// An `FCGI_END_REQUEST` whose body is not the 8 bytes it must be.
    #[error("malformed FastCGI end-of-request record")]
    EndRequest,
    /// The CGI response head is not header lines and an empty line.
    #[error("malformed CGI response head")]
    Head,
    /// The CGI response head is longer than the limit.
    #[error("CGI response head too large")]
    HeadTooLarge,
    /// A `Status` field that is not a three-digit code from 100 to 999 (RFC 3875 §6.3.3).
    #[error("invalid Status in a CGI response")]
    Status,
}
