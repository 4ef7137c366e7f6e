//! QUIC for `lowlat serve --h3-listen`: the transport under HTTP/3, driven by quinn-proto (a
//! sans-I/O state machine) from each worker's own epoll loop — no second runtime, no thread hop,
//! as rustls is for TLS over TCP.
//!
//! Each worker has its own UDP socket on the one port (`SO_REUSEPORT`), its own quinn-proto
//! endpoint and the connections it accepted. A connection stays on its worker: the connection
//! IDs we issue start with the worker's index (`cid`), and a BPF program on the socket group
//! hands each packet to the socket that index names (`steer`). docs/DESIGN.md explains the
//! design and what happens without the program.
//!
//! What it does not do: HTTP. Streams go up as byte streams (`streams`) to the protocol the
//! handshake's ALPN chose.
//!
//! # Layout
//! - [`config`]: the limits and their defaults (`--h3-*`).
//! - `cid`: connection IDs that carry the worker's index.
//! - `steer`: the BPF program that steers packets to that worker's socket.
//! - `udp`: the socket, GSO and GRO, detected at start, with a one-datagram-per-call fallback.
//! - `endpoint`: one worker's endpoint: datagrams in and out, connections, timers, Retry.
//! - `streams`: the interface up: streams as byte streams with back-pressure.
//! - `echo`: an echo protocol, for testing the transport alone.

pub mod config;

mod cid;
mod echo;
mod endpoint;
mod steer;
mod streams;
mod udp;

use std::net::SocketAddr;
use std::sync::Arc;

use quinn_proto::{IdleTimeout, MtuDiscoveryConfig, TransportConfig, VarInt};
use rustls::crypto::SecureRandom;

pub(crate) use endpoint::QuicWorker;
pub(crate) use streams::{is_bidi, QuicProtocol, Read, StreamError, StreamIo};

use config::QuicConfig;

/// Streams the client may open one way (HTTP/3 needs three: its control stream and QPACK's
/// encoder and decoder streams; a few more for extensions it may try).
const MAX_UNI_STREAMS: u32 = 8;
/// Datagrams of Initials not yet accepted that are held per connection attempt, and in all.
const INCOMING_BUFFER: u64 = 64 * 1024;
const INCOMING_BUFFER_TOTAL: u64 = 4 << 20;

/// What every worker's endpoint is built from: the configurations quinn-proto takes (one
/// token key for all workers, so a Retry token one issued is good on another), and the offload
/// found at start.
pub(crate) struct QuicShared {
    pub(crate) cfg: QuicConfig,
    pub(crate) server: Arc<quinn_proto::ServerConfig>,
    pub(crate) endpoint: quinn_proto::EndpointConfig,
    pub(crate) random: &'static dyn SecureRandom,
    pub(crate) offload: udp::Offload,
}

/// The bound sockets (one per worker) and what they share.
pub(crate) struct Bound {
    pub(crate) sockets: Vec<std::net::UdpSocket>,
    pub(crate) addr: SocketAddr,
    pub(crate) shared: Arc<QuicShared>,
}

/// Why QUIC could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum QuicError {
    #[error("cannot bind UDP {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("QUIC setup: {0}")]
    Setup(String),
}

/// The ALPN protocols offered over QUIC: HTTP/3, and the echo protocol when the environment
/// asks for it (`LOWLAT_QUIC_ECHO=1`, the transport's tests).
#[must_use]
pub fn alpn() -> Vec<&'static [u8]> {
    let mut alpn = vec![crate::h3::ALPN];
    if std::env::var_os("LOWLAT_QUIC_ECHO").is_some_and(|v| v == "1") {
        alpn.push(echo::ALPN);
    }
    alpn
}

/// The transport's own test protocol for a negotiated ALPN (HTTP/3 is `crate::h3`'s).
pub(crate) fn test_protocol(alpn: &[u8]) -> Option<Box<dyn QuicProtocol>> {
    match alpn {
        echo::ALPN => Some(Box::new(echo::Echo::default())),
        _ => None,
    }
}

/// Binds one socket per worker, attaches the steering program, and builds the configuration
/// every worker's endpoint shares from `tls` (TLS 1.3 only, see `TlsContext::quic_config`).
///
/// # Errors
/// A socket that cannot be bound; a TLS configuration QUIC cannot use.
pub(crate) fn bind(
    cfg: &QuicConfig,
    workers: usize,
    tls: Arc<rustls::ServerConfig>,
) -> Result<Bound, QuicError> {
    let random = tls.crypto_provider().secure_random;
    let crypto = quinn_proto::crypto::rustls::QuicServerConfig::try_from(tls)
        .map_err(|e| QuicError::Setup(e.to_string()))?;
    let (sockets, addr, offload) = udp::bind_all(cfg.listen, workers, cfg.batching)
        .map_err(|source| QuicError::Bind {
            addr: cfg.listen,
            source,
        })?;
    let steered = cfg.steering
        && match steer::attach(&sockets[0], workers) {
            Ok(()) => true,
            Err(e) => {
                if workers > 1 {
                    tracing::warn!(
                        "quic: cannot steer packets to their connection's worker ({e}): the kernel's \
                         address hash chooses, and a client whose address changes loses its connection"
                    );
                }
                false
            }
        };
    tracing::info!(
        "quic: GSO {}, GRO {}, steering by connection ID {}",
        if offload.gso { "on" } else { "off" },
        if offload.gro { "on" } else { "off" },
        if steered { "on" } else { "off" },
    );
    let mut transport = TransportConfig::default();
    transport
        .max_concurrent_bidi_streams(VarInt::from_u32(cfg.max_streams))
        .max_concurrent_uni_streams(VarInt::from_u32(MAX_UNI_STREAMS))
        .stream_receive_window(VarInt::from_u32(cfg.stream_window))
        .receive_window(VarInt::from_u32(cfg.conn_window))
        .send_window(u64::from(cfg.conn_window))
        .max_idle_timeout(Some(
            IdleTimeout::try_from(cfg.idle_timeout).map_err(|e| QuicError::Setup(e.to_string()))?,
        ))
        .enable_segmentation_offload(offload.gso);
    let mut mtud = MtuDiscoveryConfig::default();
    mtud.upper_bound(cfg.max_udp_payload);
    transport.mtu_discovery_config(Some(mtud));
    let mut server = quinn_proto::ServerConfig::with_crypto(Arc::new(crypto));
    server
        .transport_config(Arc::new(transport))
        .max_incoming(cfg.max_conns_per_worker)
        .incoming_buffer_size(INCOMING_BUFFER)
        .incoming_buffer_size_total(INCOMING_BUFFER_TOTAL);
    let mut endpoint = quinn_proto::EndpointConfig::default();
    endpoint
        .max_udp_payload_size(cfg.max_udp_payload)
        .map_err(|e| QuicError::Setup(e.to_string()))?;
    Ok(Bound {
        sockets,
        addr,
        shared: Arc::new(QuicShared {
            cfg: cfg.clone(),
            server: Arc::new(server),
            endpoint,
            random,
            offload,
        }),
    })
}
