//! The `--h3-*` flags of `lowlat serve` (HTTP/3 over QUIC), each with its parser, and the
//! [`QuicConfig`] they describe. Checked here: the address, every limit's range, that the
//! stream window fits in the connection's, and (in `super::args`) that a certificate is given.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use lowlat_http::units::{parse_positive_duration, parse_size};

use crate::quic::config::{
    QuicConfig, DEFAULT_MAX_CONNS, DEFAULT_MAX_STREAMS, DEFAULT_MAX_UDP_PAYLOAD,
    DEFAULT_RETRY_ABOVE, MAX_UDP_PAYLOAD, MIN_UDP_PAYLOAD,
};

/// The `--h3-*` flags.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "HTTP/3 (QUIC)")]
pub struct QuicArgs {
    /// Serve HTTP/3 over QUIC on this UDP address (ADDR:PORT, or ADDR for the port of the first
    /// --tls-listen; needs a certificate; off by default)
    #[arg(long, value_name = "ADDR[:PORT]", value_parser = parse_h3_listen)]
    pub h3_listen: Option<H3Listen>,
    /// Bidirectional streams (requests) a client may have open at once per connection
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_STREAMS, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub h3_max_streams: u32,
    /// Each stream's receive window (how much of a request body may arrive unread)
    #[arg(long, value_name = "SIZE", default_value = "1m", value_parser = parse_window)]
    pub h3_stream_window: u32,
    /// A connection's receive window, over all its streams (at least --h3-stream-window)
    #[arg(long, value_name = "SIZE", default_value = "8m", value_parser = parse_window)]
    pub h3_conn_window: u32,
    /// Close a QUIC connection after this long without a packet from the client
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_idle_timeout)]
    pub h3_idle_timeout: Duration,
    /// Largest UDP payload accepted and sent (1200 to 65527); path MTU discovery finds what each
    /// path carries below it, from 1200
    #[arg(long, value_name = "SIZE", default_value_t = DEFAULT_MAX_UDP_PAYLOAD, value_parser = parse_udp_payload)]
    pub h3_max_udp_payload: u16,
    /// QUIC connections per worker; more are refused (CONNECTION_REFUSED)
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONNS, value_parser = parse_max_conns)]
    pub h3_max_conns: usize,
    /// Make every new client prove its address with a Retry first (a round trip more)
    #[arg(long)]
    pub h3_retry: bool,
    /// Handshakes in progress per worker above which new clients get a Retry first
    #[arg(long, value_name = "N", default_value_t = DEFAULT_RETRY_ABOVE, value_parser = parse_max_conns)]
    pub h3_retry_above: usize,
    /// One datagram per system call: no GSO on send, no GRO on receive (to measure them, or
    /// for a kernel that mishandles them)
    #[arg(long)]
    pub h3_no_batching: bool,
}

/// An `--h3-listen` value: the address, and whether its port was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct H3Listen {
    pub addr: SocketAddr,
    pub port_given: bool,
}

impl QuicArgs {
    /// The QUIC configuration these flags describe, or `None` without `--h3-listen`.
    ///
    /// # Errors
    /// One line: a stream window larger than the connection's, no port and no TLS listener.
    pub fn to_config(&self, tls_ports: &[u16]) -> Result<Option<QuicConfig>, String> {
        let Some(listen) = self.h3_listen else {
            return Ok(None);
        };
        if self.h3_stream_window > self.h3_conn_window {
            return Err(format!(
                "--h3-stream-window {} is larger than --h3-conn-window {}: one stream could never use its window",
                self.h3_stream_window, self.h3_conn_window
            ));
        }
        let mut addr = listen.addr;
        let mut port_from_tls = false;
        if !listen.port_given {
            let Some(&port) = tls_ports.first() else {
                return Err(
                    "--h3-listen without a port takes the --tls-listen port, and there is no --tls-listen"
                        .into(),
                );
            };
            addr.set_port(port);
            // Port 0 there is resolved when the TLS listener is bound.
            port_from_tls = port == 0;
        }
        Ok(Some(QuicConfig {
            port_from_tls,
            max_streams: self.h3_max_streams,
            stream_window: self.h3_stream_window,
            conn_window: self.h3_conn_window,
            idle_timeout: self.h3_idle_timeout,
            max_udp_payload: self.h3_max_udp_payload,
            max_conns_per_worker: self.h3_max_conns,
            retry_always: self.h3_retry,
            retry_above: self.h3_retry_above,
            batching: !self.h3_no_batching,
            ..QuicConfig::new(addr)
        }))
    }
}

/// `ADDR:PORT` as `--listen` takes it (the first address a name resolves to), or a bare IP
/// address (`127.0.0.1`, `::1`, `[::1]`) for the TLS listener's port.
///
/// # Errors
/// A message for clap naming what is wrong.
pub fn parse_h3_listen(text: &str) -> Result<H3Listen, String> {
    let t = text.trim();
    let bare = t
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(t);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(H3Listen {
            addr: SocketAddr::new(ip, 0),
            port_given: false,
        });
    }
    let addr = match t.strip_prefix(':') {
        // `:443`: every IPv4 address, as --listen takes it.
        Some(port) => port
            .parse::<u16>()
            .map(|p| SocketAddr::from(([0, 0, 0, 0], p)))
            .map_err(|_| format!("{text:?}: {port:?} is not a port (0 to 65535)"))?,
        None => std::net::ToSocketAddrs::to_socket_addrs(t)
            .map_err(|e| format!("{text:?} is not an address (ADDR:PORT, or ADDR alone): {e}"))?
            .next()
            .ok_or_else(|| format!("{text:?} resolves to no address"))?,
    };
    Ok(H3Listen {
        addr,
        port_given: true,
    })
}

fn parse_window(text: &str) -> Result<u32, String> {
    let n = parse_size(text)?;
    if !(16 * 1024..=1 << 30).contains(&n) {
        return Err(format!("{text:?} must be between 16k and 1g"));
    }
    u32::try_from(n).map_err(|_| format!("{text:?} is too large"))
}

fn parse_udp_payload(text: &str) -> Result<u16, String> {
    let n = parse_size(text)?;
    if n < u64::from(MIN_UDP_PAYLOAD) || n > u64::from(MAX_UDP_PAYLOAD) {
        return Err(format!(
            "{text:?} must be between {MIN_UDP_PAYLOAD} and {MAX_UDP_PAYLOAD} bytes"
        ));
    }
    u16::try_from(n).map_err(|_| format!("{text:?} is too large"))
}

fn parse_idle_timeout(text: &str) -> Result<Duration, String> {
    let d = parse_positive_duration(text)?;
    // QUIC carries it in milliseconds as a varint; past a day is surely a slip.
    if d < Duration::from_millis(1) || d > Duration::from_secs(86_400) {
        return Err(format!("{text:?} must be between 1ms and 24h"));
    }
    Ok(d)
}

fn parse_max_conns(text: &str) -> Result<usize, String> {
    let n: usize = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a count"))?;
    if n == 0 || n > 1_000_000 {
        return Err(format!("{text:?} must be between 1 and 1000000"));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_with_and_without_port() {
        let l = parse_h3_listen("127.0.0.1:4433").unwrap();
        assert_eq!(
            (l.addr.to_string().as_str(), l.port_given),
            ("127.0.0.1:4433", true)
        );
        let l = parse_h3_listen("127.0.0.1").unwrap();
        assert!(!l.port_given);
        let l = parse_h3_listen("[::1]").unwrap();
        assert_eq!(
            (l.addr.ip().to_string().as_str(), l.port_given),
            ("::1", false)
        );
        assert!(parse_h3_listen("not an address").is_err());
        assert!(parse_h3_listen("127.0.0.1:99999").is_err());
    }

    #[test]
    fn limits_are_bounded() {
        assert!(parse_udp_payload("1199").is_err());
        assert_eq!(parse_udp_payload("1200"), Ok(1200));
        assert!(parse_udp_payload("65528").is_err());
        assert!(parse_window("1k").is_err());
        assert_eq!(parse_window("1m"), Ok(1 << 20));
        assert!(parse_window("2g").is_err());
        assert!(parse_idle_timeout("25h").is_err());
        assert!(parse_max_conns("0").is_err());
    }
}
