//! The reverse proxy's settings, as the running server uses them: upstream groups (their servers,
//! weights, balancing, timeouts, pools and health checks) and the forwarding rules. Built and
//! checked by the settings layer; read-only once the workers have them.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// Where an upstream server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// One server of a group.
#[derive(Debug, Clone)]
pub struct UpstreamServer {
    pub addr: UpstreamAddr,
    /// As the access log and metrics name it (`127.0.0.1:3000`, `unix:/run/app.sock`).
    pub label: String,
    /// Share of the requests under round-robin, and of the ring under hashing.
    pub weight: u32,
    /// For an `https://` server: the group's TLS client and the name its certificate must have.
    pub tls: Option<super::upstream_tls::TlsTarget>,
    /// Spoken to in HTTP/2 (`h2c://`, or `protocol = "h2"`): requests multiplexed as streams.
    pub h2: bool,
    /// Spoken to in FastCGI (`fastcgi://`, `fastcgi+unix:`): php-fpm and other FastCGI
    /// application servers, one request per connection at a time.
    pub fastcgi: bool,
}

/// How a group shares requests among its servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Balance {
    /// Smooth weighted round-robin (nginx's): weights honoured, no bursts to one server.
    RoundRobin,
    /// The server with the fewest requests in flight from this worker, weights breaking ties.
    LeastConn,
    /// A consistent hash of a key: the same key goes to the same server while it is up, and a
    /// server leaving moves only its own keys.
    Hash(HashKey),
}

/// What a consistent hash is taken over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashKey {
    /// The client's IP address.
    Client,
    /// A request header (name in lower case).
    Header(String),
    /// A cookie, by name.
    Cookie(String),
}

/// An active health check: a request every `interval`; an answer with a status in `statuses`
/// within `timeout` means up.
#[derive(Debug, Clone)]
pub struct HealthCheck {
    pub path: String,
    pub interval: Duration,
    pub timeout: Duration,
    /// Inclusive status ranges that count as up.
    pub statuses: Vec<(u16, u16)>,
}

/// Timeouts of one upstream exchange.
#[derive(Debug, Clone, Copy)]
pub struct UpstreamTimeouts {
    /// From the start of a connect to the connection being usable.
    pub connect: Duration,
    /// From the request being written to the first byte of the response.
    pub first_byte: Duration,
    /// Longest pause between two reads of the response.
    pub read: Duration,
    /// Longest pause while writing the request.
    pub write: Duration,
    /// Longest time an upgraded connection (a WebSocket tunnel) may carry no byte either way:
    /// nginx closes one after `proxy_read_timeout`, 60 s by default.
    pub tunnel_idle: Duration,
}

/// A named group of servers that requests are forwarded to.
#[derive(Debug, Clone)]
pub struct UpstreamGroup {
    pub name: String,
    pub servers: Vec<UpstreamServer>,
    pub balance: Balance,
    pub timeouts: UpstreamTimeouts,
    /// Largest request body forwarded (413 beyond).
    pub max_body: u64,
    /// Idle keep-alive connections kept per server, per worker.
    pub keepalive: usize,
    /// How long an idle pooled connection is kept.
    pub keepalive_timeout: Duration,
    /// Failures within `fail_timeout` that take a server out for `fail_timeout` (passive
    /// health); 0 turns it off. A group of one server never takes it out.
    pub max_fails: u32,
    pub fail_timeout: Duration,
    pub health: Option<HealthCheck>,
    /// Its servers speak FastCGI (a group's servers all speak one protocol to requests: the
    /// request is written for it before a server is chosen).
    pub fastcgi: bool,
    /// FastCGI parameters set on every request to the group, after (and over) the CGI/1.1
    /// variables the request gives (nginx's `fastcgi_param`).
    pub fastcgi_params: Vec<(String, String)>,
    /// Each new connection to a server starts with a PROXY protocol header of this version (1
    /// or 2) naming the client; 0: none. Such a connection carries one client's requests only,
    /// so it is never pooled.
    pub send_proxy_protocol: u8,
}

/// A forwarding rule: requests whose path starts with `prefix` go to `group`; with `rewrite`,
/// the prefix is replaced by it (nginx's `proxy_pass http://app/new/;`), else the path is
/// passed as it is.
#[derive(Debug, Clone)]
pub struct ProxyRoute {
    pub prefix: String,
    pub group: usize,
    pub rewrite: Option<String>,
}

/// Where an application's `X-Accel-Redirect` and `X-Sendfile` may point (nginx's `internal`
/// location with its `alias`): a path under `prefix` names the file under `dir`, and a file
/// named by its path must lie under `dir`. Clients cannot ask for these paths themselves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InternalLocation {
    /// A URL path prefix, ending in `/`.
    pub prefix: String,
    /// A directory, canonical (symlinks resolved).
    pub dir: PathBuf,
}

/// A network (`10.0.0.0/8`, `::1/128`) whose forwarding headers are believed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub bits: u8,
}

impl Cidr {
    /// Whether `ip` is in this network (an IPv4-mapped IPv6 address counts as IPv4).
    #[must_use]
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 @ IpAddr::V4(_) => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.bits)).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.bits))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// Everything the proxy needs: the groups, the routes of each site, and whose forwarding
/// headers to believe.
#[derive(Debug, Clone, Default)]
pub struct ProxyConfig {
    pub groups: Vec<UpstreamGroup>,
    /// Proxies in front of this server whose `X-Forwarded-*` and `Forwarded` values are kept
    /// (appended to); from anyone else they are replaced.
    pub trusted: Vec<Cidr>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr() {
        let net = |a: &str, bits| Cidr {
            addr: a.parse().unwrap(),
            bits,
        };
        let ip = |a: &str| a.parse::<IpAddr>().unwrap();
        assert!(net("10.0.0.0", 8).contains(ip("10.200.3.4")));
        assert!(!net("10.0.0.0", 8).contains(ip("11.0.0.1")));
        assert!(net("127.0.0.1", 32).contains(ip("::ffff:127.0.0.1")));
        assert!(net("0.0.0.0", 0).contains(ip("8.8.8.8")));
        assert!(net("::1", 128).contains(ip("::1")));
        assert!(!net("::1", 128).contains(ip("127.0.0.1")));
        assert!(net("fd00::", 8).contains(ip("fd12::1")));
    }
}
