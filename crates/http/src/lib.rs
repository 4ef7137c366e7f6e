//! lowlat's HTTP/1.1 and HTTP/2 codec: pure functions and small state machines over byte slices.
//!
//! Nothing here does I/O or owns a socket; the server and the load generator drive it over their
//! own buffers. Parsing borrows from the caller's buffer and never allocates; "not enough bytes
//! yet" is [`Status::Partial`], not an error. Every way a request can be refused is one variant of
//! the small `Copy` enum [`ParseError`], mapped to its status code in exactly one `match`.
//!
//! # Layout
//! - [`request`]: the request head (RFC 9112 §3–§6): method, target, version, and the framing
//!   decision — which refuses the request-smuggling shapes of RFC 9112 §6.3.
//! - [`response`]: encoding a response head into an output buffer; status reason phrases.
//! - [`cache`]: HTTP caching semantics (RFC 9111): storability, freshness, age, `Vary`,
//!   revalidation, invalidation, `Cache-Status`; the caller owns storage and the clock.
//! - [`body`]: body framing — [`body::ChunkedDecoder`] for `Transfer-Encoding: chunked`.
//! - [`h2`]: HTTP/2 frames, request header blocks (HPACK) and the response header block.
//! - [`head`]: the request head HTTP/2 and HTTP/3 decode into, and the checks they share.
//! - [`h3`]: HTTP/3 frames, QPACK, and field sections to and from heads; QUIC is the caller's.
//! - [`client`]: the other side — parsing response heads, for the load generator.
//! - [`fields`]: the connection-specific and hop-by-hop fields, named once.
//! - [`fastcgi`]: FastCGI records, parameters and the CGI response head, the web server's side.
//! - [`proxy_protocol`]: the PROXY protocol header (v1 text, v2 binary) an L4 balancer puts
//!   before a connection's bytes, parsed and written.
//! - [`ws`]: WebSocket frame heads (RFC 6455 §5), the client's side, for the load generator.
//! - [`date`]: the `Date` header value, formatted at most once per second.
//! - [`limits`]: the default size limits, each a named constant.
//! - `prefix_int`: the prefixed integers HPACK and QPACK share (RFC 7541 §5.1).
//! - [`error`]: [`ParseError`] and its status mapping.
//! - [`units`]: humane durations, sizes and counts (`250us`, `1.5m`, `10k`), parsed the one way
//!   every command line and spec file shares.

pub mod body;
pub mod cache;
pub mod client;
pub mod date;
pub mod error;
pub mod fastcgi;
pub mod fields;
pub mod h2;
pub mod h3;
pub mod head;
pub mod limits;
mod prefix_int;
pub mod proxy_protocol;
pub mod request;
pub mod response;
pub mod units;
pub mod ws;

pub use error::ParseError;

/// The outcome of feeding bytes to a parser that may need more of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status<T> {
    /// A whole item was parsed.
    Complete(T),
    /// The input ends before the item does; call again with more bytes.
    Partial,
}

/// The HTTP version of a message. HTTP/0.9 never gets this far (505 or 400); HTTP/2 and
/// HTTP/3 requests come from the [`h2`] and [`h3`] codecs, not from the HTTP/1.1 parser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
    Http2,
    Http3,
}
