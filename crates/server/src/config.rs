//! Everything `lowlat serve` can be told, with its defaults: one struct, built by the CLI or by
//! tests, read-only once the server starts.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use lowlat_http::request::HeadLimits;

use crate::proxy::config::Cidr;
use crate::tls::TlsContext;

/// Default address: loopback, so a fresh `lowlat serve` is not exposed to the network.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
/// Listen backlog; the kernel caps it at `net.core.somaxconn`.
pub const DEFAULT_BACKLOG: u32 = 4096;
/// Open connections per worker; at the limit, new ones wait in the listen backlog.
pub const DEFAULT_MAX_CONNS_PER_WORKER: usize = 65_536;
/// How long an idle keep-alive connection is kept (nginx: `keepalive_timeout 75s`).
pub const DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(75);
/// How long the whole request head may take from its first byte (nginx's
/// `client_header_timeout` is 60s between reads; a total deadline stops slowloris).
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest pause between two reads of a request body (nginx: `client_body_timeout 60s`).
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest pause between two writes that make progress (nginx: `send_timeout 60s`).
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a TLS handshake may take from accept (nginx bounds it by `client_header_timeout`).
pub const DEFAULT_TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for requests in flight.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// The server's configuration.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Addresses to listen on in clear; every worker gets its own `SO_REUSEPORT` socket for each.
    pub listen: Vec<SocketAddr>,
    /// Addresses to listen on with TLS, likewise; they need [`ServerConfig::tls`].
    pub tls_listen: Vec<SocketAddr>,
    /// Certificates and the rustls configuration for `tls_listen`, shared by every worker.
    pub tls: Option<Arc<TlsContext>>,
    /// Longest time from accept to a finished TLS handshake.
    pub tls_handshake_timeout: Duration,
    /// Where and how requests are logged; `None`: no access log (the default, as the peers'
    /// benchmark configurations run).
    pub access_log: Option<Arc<crate::access_log::AccessLogConfig>>,
    /// Where the workers publish their counters for `--metrics`; `None`: not published.
    pub metrics: Option<Arc<crate::metrics::Registry>>,
    /// Worker threads, each with its own event loop.
    pub workers: usize,
    /// Pin worker `i` to the `i`-th CPU this process may run on.
    pub pin: bool,
    pub backlog: u32,
    pub max_conns_per_worker: usize,
    /// Limits on the request head.
    pub head: HeadLimits,
    /// Largest request body (bytes, after chunked decoding).
    pub max_body_bytes: u64,
    pub keepalive_timeout: Duration,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub write_timeout: Duration,
    /// How long a graceful shutdown waits for requests in flight.
    pub grace: Duration,
    /// HTTP/2: whether it is offered, and its limits.
    pub h2: crate::h2::config::H2Config,
    /// HTTP/3 over QUIC: its UDP address and limits; `None`: off (the default). Needs
    /// [`ServerConfig::tls`] for its certificates.
    pub quic: Option<crate::quic::config::QuicConfig>,
    /// The PROXY protocol on the listeners behind an L4 balancer; off by default.
    pub proxy_protocol: ProxyProtocolIn,
}

/// Which listeners read a PROXY protocol header first, and from whom.
#[derive(Debug, Clone, Default)]
pub struct ProxyProtocolIn {
    /// The balancers' networks. A connection from one of them on a listener below must start
    /// with a header; one from anywhere else is served as the client it is (a header it sends
    /// is not believed: it is the start of a bad request).
    pub from: Vec<Cidr>,
    /// The addresses in clear (as in [`ServerConfig::listen`]) that read it.
    pub clear: Vec<SocketAddr>,
    /// The TLS addresses (as in [`ServerConfig::tls_listen`]) that read it, before TLS.
    pub tls: Vec<SocketAddr>,
}

impl ProxyProtocolIn {
    /// Whether a connection from `ip` on a listener that reads headers must send one.
    #[must_use]
    pub fn expected_from(&self, ip: std::net::IpAddr) -> bool {
        self.from.iter().any(|net| net.contains(ip))
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: vec![DEFAULT_LISTEN.parse().expect("valid default address")],
            tls_listen: Vec::new(),
            tls: None,
            tls_handshake_timeout: DEFAULT_TLS_HANDSHAKE_TIMEOUT,
            access_log: None,
            metrics: None,
            workers: std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
            pin: false,
            backlog: DEFAULT_BACKLOG,
            max_conns_per_worker: DEFAULT_MAX_CONNS_PER_WORKER,
            head: HeadLimits::default(),
            max_body_bytes: lowlat_http::limits::MAX_BODY_BYTES,
            keepalive_timeout: DEFAULT_KEEPALIVE_TIMEOUT,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            write_timeout: DEFAULT_WRITE_TIMEOUT,
            grace: DEFAULT_GRACE,
            h2: crate::h2::config::H2Config::default(),
            quic: None,
            proxy_protocol: ProxyProtocolIn::default(),
        }
    }
}

impl ServerConfig {
    /// The shortest of the timeouts: the sweep for expired connections runs a few times per it.
    #[must_use]
    pub fn shortest_timeout(&self) -> Duration {
        [
            self.keepalive_timeout,
            self.header_timeout,
            self.body_timeout,
            self.write_timeout,
            self.tls_handshake_timeout,
            self.h2.settings_timeout,
        ]
        .into_iter()
        .min()
        .unwrap_or(DEFAULT_HEADER_TIMEOUT)
    }
}
