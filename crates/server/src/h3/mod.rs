//! The HTTP/3 protocol layer (RFC 9114): one QUIC connection's requests answered through the
//! same router and handlers as HTTP/1.1 and HTTP/2, on the stream interface of `crate::quic`
//! (the codec — frames, QPACK, request heads — is `lowlat_http::h3`).
//!
//! Per connection: our control stream (SETTINGS), the client's control and QPACK streams read
//! as they come, and one state per request stream — its frames decoded as they arrive, the head
//! through QPACK, the body collected up to `--max-body`; at the stream's end the request is
//! answered: the handler's HTTP/1.1-form head becomes a HEADERS frame, the body DATA, a file is
//! read in 64 KiB pieces as the stream takes them (the stream's window is the back-pressure).
//!
//! QPACK: this side announces a dynamic table of 0 bytes, so the client's encoder uses the
//! static table and literals only, no request head ever waits for the encoder stream, and no
//! decoder stream is needed (RFC 9204 §4.2); our encoder is static-only as well.
//!
//! 0-RTT: requests read while the handshake is still under way came as early data, which can be
//! replayed; only safe methods are answered then, others get `425 Too Early` (RFC 8470).
//!
//! Forwarding: a request a proxy rule takes goes to the worker's upstream side as HTTP/1.1's
//! and HTTP/2's do; a body that is long or of unknown length, and not all here when the head is,
//! streams to the upstream as its DATA frames come (the stream is not read while the upload is
//! full: QUIC's flow control holds the client back). The response is relayed onto the stream as
//! it arrives (`relay`). A request that came as 0-RTT data is forwarded with `Early-Data: 1`.
//!
//! What it does not do (answered, never left hanging): server push, extended CONNECT (so no
//! WebSocket over HTTP/3).
//!
//! # Layout
//! - `conn`: one connection's state, the client's control and QPACK streams, GOAWAY.
//! - `request`: a request stream read, held back or answered through the router, or forwarded.
//! - `send`: a response written as its stream takes it (HEADERS, DATA, a file's pieces).
//! - `stream`: one request stream's state, and one client unidirectional stream's.
//! - `protocol`: the connection as QUIC's protocol above it (`QuicProtocol`).
//! - `relay`: a request stream receiving a forwarded request's response (`Downstream`).

mod conn;
mod protocol;
mod relay;
mod request;
mod send;
mod stream;

use crate::quic::QuicProtocol;

/// ALPN of HTTP/3 (RFC 9114 §3.1).
pub const ALPN: &[u8] = b"h3";

/// The ALPN protocols offered over QUIC: HTTP/3, and the transport's test protocol when the
/// environment asks for it.
#[must_use]
pub fn alpn() -> Vec<&'static [u8]> {
    let mut alpn = vec![ALPN];
    alpn.extend(crate::quic::test_alpn());
    alpn
}

/// The protocol for an ALPN the QUIC handshake agreed on: HTTP/3, else the transport's test
/// protocol.
pub(crate) fn protocol_for(alpn: &[u8]) -> Option<Box<dyn QuicProtocol>> {
    if alpn == ALPN {
        return Some(Box::new(conn::H3Conn::default()));
    }
    crate::quic::test_protocol(alpn)
}
