//! QUIC for `lowlat serve --h3-listen`: the transport under HTTP/3, driven by quinn-proto (a
//! sans-I/O state machine) from each worker's own epoll loop — no second runtime, no thread hop,
//! as rustls is for TLS over TCP.
//!
//! Each worker has its own UDP socket on the one port (`SO_REUSEPORT`), its own quinn-proto
//! endpoint and the connections it accepted. A connection stays on its worker: the connection
//! IDs we issue start with the worker's index (`cid`), and a BPF program on the socket group
//! hands each packet to the socket that index names (`steer`). docs/DESIGN.md explains the
//! design and what happens without the program. Across a binary upgrade, the IDs also name the
//! process (its generation), and the newest process passes an older one's datagrams to it
//! (`handoff`).
//!
//! What it does not do: HTTP. Streams go up as byte streams (`streams`) to the protocol the
//! handshake's ALPN chose.
//!
//! # Layout
//! - [`config`]: the limits and their defaults (`--h3-*`).
//! - `cid`: connection IDs that carry the worker's index and the process's generation.
//! - `handoff`: an upgrade's processes sharing the UDP sockets: the newest reads, and passes
//!   each older one its connections' datagrams.
//! - `steer`: the BPF program that steers packets to that worker's socket.
//! - `udp`: the socket, GSO and GRO, detected at start, with a one-datagram-per-call fallback.
//! - `setup`: the sockets bound and the configuration every worker's endpoint is built from.
//! - `endpoint`: one worker's endpoint: datagrams in and out, connections, timers, Retry.
//! - `streams`: the interface up: streams as byte streams with back-pressure.
//! - `echo`: an echo protocol, for testing the transport alone.

pub mod config;

mod cid;
mod echo;
mod endpoint;
mod handoff;
mod setup;
mod steer;
mod streams;
mod udp;

pub(crate) use endpoint::{owns_client, QuicWorker};
pub(crate) use handoff::{
    parse_name as parse_handoff_name, HandedChannel, Inbox, NAME_PREFIX as HANDOFF_PREFIX,
};
pub(crate) use setup::{bind, Bound, QuicError, QuicShared};
pub(crate) use streams::{
    is_bidi, proxy_stream, request_stream, QuicProtocol, Read, StreamError, StreamIo,
};

/// The transport's test protocol's ALPN, when the environment asks for it
/// (`LOWLAT_QUIC_ECHO=1`, the transport's tests).
#[must_use]
pub fn test_alpn() -> Option<&'static [u8]> {
    std::env::var_os("LOWLAT_QUIC_ECHO")
        .is_some_and(|v| v == "1")
        .then_some(echo::ALPN)
}

/// The transport's own test protocol for a negotiated ALPN (HTTP/3 is `crate::h3`'s).
pub(crate) fn test_protocol(alpn: &[u8]) -> Option<Box<dyn QuicProtocol>> {
    match alpn {
        echo::ALPN => Some(Box::new(echo::Echo::default())),
        _ => None,
    }
}
