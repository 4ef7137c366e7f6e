//! What is known of a request beyond its head, for every handler: who sent it
//! ([`ClientInfo`]) and how a body that is still arriving is framed ([`StreamedBody`]). Nearly a
//! leaf: the handler interface, the router and the proxy all name these, and it imports none of
//! them (only the leaf `client_cert`).

use std::net::SocketAddr;
use std::rc::Rc;

use crate::client_cert::ClientCert;

/// Who sent a request: what a handler that passes it on (the proxy) reports of the client.
/// Made once per connection (HTTP/1.1, HTTP/2) and lent to each of its requests.
#[derive(Debug, Clone)]
pub struct ClientInfo {
    pub peer: SocketAddr,
    /// The request came over TLS.
    pub tls: bool,
    /// The request came as early data (QUIC 0-RTT), which anyone who captured it can replay:
    /// the upstream is told with `Early-Data: 1` (RFC 8470 §5.1), so that it can answer
    /// `425 Too Early` to what it must not process twice.
    pub early_data: bool,
    /// The certificate the client presented in the TLS handshake, verified against a
    /// `--client-ca` (which one it says): whether it counts for a request is its site's
    /// to decide (`crate::client_auth`). Shared, not copied, by the connection's requests.
    pub cert: Option<Rc<ClientCert>>,
}

impl ClientInfo {
    /// A client without TLS, early data or certificate.
    #[must_use]
    pub fn plain(peer: SocketAddr) -> Self {
        Self {
            peer,
            tls: false,
            early_data: false,
            cert: None,
        }
    }
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
