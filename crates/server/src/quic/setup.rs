//! What every worker's QUIC endpoint is built from: the sockets bound (one per worker, the
//! steering program attached), quinn-proto's server, transport and endpoint configurations
//! from the `--h3-*` limits, the offload the kernel has, and the hand-off channels between the
//! processes of an upgrade (`super::handoff`).

use std::net::SocketAddr;
use std::sync::Arc;

use quinn_proto::{IdleTimeout, MtuDiscoveryConfig, TransportConfig, VarInt};
use rustls::crypto::SecureRandom;

use super::config::QuicConfig;
use super::handoff::{HandedChannel, Handoff, Inbox};
use super::{steer, udp};

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
    /// This process's generation and the older processes' channels.
    pub(crate) handoff: Handoff,
}

/// The bound sockets (one per worker), each worker's hand-off inbox, and what they share.
pub(crate) struct Bound {
    pub(crate) sockets: Vec<std::net::UdpSocket>,
    pub(crate) inboxes: Vec<Inbox>,
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

/// Binds one socket per worker, attaches the steering program, makes the hand-off channels
/// (routes to the older processes in `channels`, handed over with the sockets), and builds the
/// configuration every worker's endpoint shares from `tls` (TLS 1.3 only, see
/// `TlsContext::quic_config`).
///
/// # Errors
/// A socket that cannot be bound; a TLS configuration QUIC cannot use.
pub(crate) fn bind(
    cfg: &QuicConfig,
    workers: usize,
    tls: Arc<rustls::ServerConfig>,
    handed: Vec<std::net::UdpSocket>,
    channels: Vec<HandedChannel>,
) -> Result<Bound, QuicError> {
    let random = tls.crypto_provider().secure_random;
    let crypto = quinn_proto::crypto::rustls::QuicServerConfig::try_from(tls)
        .map_err(|e| QuicError::Setup(e.to_string()))?;
    let (sockets, addr, offload) = udp::bind_all(cfg.listen, workers, cfg.batching, handed)
        .map_err(|source| QuicError::Bind {
            addr: cfg.listen,
            source,
        })?;
    let steered = match steer::attach(&sockets[0], workers) {
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
    let (handoff, inboxes) = Handoff::new(workers, channels)
        .map_err(|e| QuicError::Setup(format!("cannot make the hand-off channels: {e}")))?;
    tracing::info!(
        "quic: GSO {}, GRO {}, steering by connection ID {}",
        if offload.gso { "on" } else { "off" },
        if offload.gro { "on" } else { "off" },
        if steered { "on" } else { "off" },
    );
    let older = handoff.older();
    if !older.is_empty() {
        tracing::info!(
            "quic: generation {}; datagrams of generation {older:?} go to the process that owns them",
            handoff.generation
        );
    }
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
        inboxes,
        addr,
        shared: Arc::new(QuicShared {
            cfg: cfg.clone(),
            server: Arc::new(server),
            endpoint,
            random,
            offload,
            handoff,
        }),
    })
}
