//! What is known of a request beyond its head, for every handler: who sent it
//! ([`ClientInfo`]) and how a body that is still arriving is framed ([`StreamedBody`]). A leaf:
//! the handler interface, the router and the proxy all name these, and it imports none of them.

use std::net::SocketAddr;

/// Who sent a request: what a handler that passes it on (the proxy) reports of the client.
#[derive(Debug, Clone, Copy)]
pub struct ClientInfo {
    pub peer: SocketAddr,
    /// The request came over TLS.
    pub tls: bool,
    /// The request came as early data (QUIC 0-RTT), which anyone who captured it can replay:
    /// the upstream is told with `Early-Data: 1` (RFC 8470 §5.1), so that it can answer
    /// `425 Too Early` to what it must not process twice.
    pub early_data: bool,
}

/// How a body that is still arriving is framed for the handler that takes it as it comes (the
/// proxy, for its upstream: it follows the head, see `proxy::upload`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamedBody {
    /// `Content-Length`: the bytes as they come.
    Length(u64),
    /// Chunked: each piece the client's decoder hands over becomes one chunk (the client's own
    /// chunk sizes, extensions and trailers are not passed on).
    Chunked,
}
