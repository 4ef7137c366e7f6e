//! QUIC's settings and limits, with their defaults (`--h3-*` flags and `h3_*` config keys, parsed
//! and checked by `crate::settings::quic`).

use std::net::SocketAddr;
use std::time::Duration;

/// Bidirectional streams (requests) a client may have open at once on one connection (quinn's
/// default and nginx's `http3_max_concurrent_streams` are both 100).
pub const DEFAULT_MAX_STREAMS: u32 = 100;
/// Each stream's receive window: how much of a request body may arrive before it is read.
pub const DEFAULT_STREAM_WINDOW: u32 = 1 << 20;
/// The connection's receive window, over all its streams.
pub const DEFAULT_CONN_WINDOW: u32 = 8 << 20;
/// A connection with no packet for this long is closed (RFC 9000 §10.1; quinn's default is
/// 30 s, nginx's `quic` idle timeout 60 s).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest UDP payload we accept (RFC 9000 §18.2 `max_udp_payload_size`) and the ceiling of
/// path MTU discovery: by default none below UDP's own, so that discovery finds what each path
/// carries. Datagrams start at 1200 bytes (quinn-proto's `initial_mtu`); a probe larger than the
/// interface fails at once (`IP_PMTUDISC_PROBE`: EMSGSIZE) and one a router drops is lost, and
/// either way the search settles below it (an Ethernet path near 1472 after a dozen probe sizes,
/// none of them counted as congestion). Where a path carries more, fewer datagrams carry the
/// same bytes: loopback (MTU 65536) settles near 65 500, and a 100 MiB download costs the
/// server 0.34–0.43× the CPU per MB it did at 1472 (docs/PERFORMANCE.md, "HTTP/3: a large
/// download and a small request, before and after").
pub const DEFAULT_MAX_UDP_PAYLOAD: u16 = MAX_UDP_PAYLOAD;
/// QUIC connections per worker; a new one past it is refused (CONNECTION_REFUSED), so a flood
/// cannot grow a worker's memory without bound (each holds about 10–30 KiB at rest).
pub const DEFAULT_MAX_CONNS: usize = 10_000;
/// Handshakes in progress on one worker above which new clients must first prove their address
/// with a Retry (one round trip more, no state kept for them until they do).
pub const DEFAULT_RETRY_ABOVE: usize = 256;
/// The smallest `max_udp_payload_size` QUIC allows (RFC 9000 §18.2).
pub const MIN_UDP_PAYLOAD: u16 = 1200;
/// The largest UDP payload: over IPv6 (65535 less the UDP header; IPv4's IP header takes 20
/// more, so there a probe this large fails and discovery settles lower).
pub const MAX_UDP_PAYLOAD: u16 = 65_527;

/// The QUIC listener and its limits.
#[derive(Debug, Clone)]
pub struct QuicConfig {
    /// The UDP address; every worker binds its own `SO_REUSEPORT` socket to it.
    pub listen: SocketAddr,
    /// The port was not given: the first TLS listener's (resolved once that is bound).
    pub port_from_tls: bool,
    pub max_streams: u32,
    pub stream_window: u32,
    pub conn_window: u32,
    pub idle_timeout: Duration,
    pub max_udp_payload: u16,
    pub max_conns_per_worker: usize,
    /// Every new client must first answer a Retry.
    pub retry_always: bool,
    pub retry_above: usize,
    /// Batched UDP (GSO on send, GRO on receive) where the kernel has it; off: one datagram per
    /// system call (for measuring the difference, or for a kernel that misbehaves with them).
    pub batching: bool,
}

impl QuicConfig {
    /// The defaults, listening on `listen`.
    #[must_use]
    pub fn new(listen: SocketAddr) -> Self {
        Self {
            listen,
            port_from_tls: false,
            max_streams: DEFAULT_MAX_STREAMS,
            stream_window: DEFAULT_STREAM_WINDOW,
            conn_window: DEFAULT_CONN_WINDOW,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_udp_payload: DEFAULT_MAX_UDP_PAYLOAD,
            max_conns_per_worker: DEFAULT_MAX_CONNS,
            retry_always: false,
            retry_above: DEFAULT_RETRY_ABOVE,
            batching: true,
        }
    }
}
