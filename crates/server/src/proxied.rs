//! A connection from a balancer on a `proxy_protocol` listener, before its PROXY header has
//! arrived: the header is read off the socket first — before TLS, before HTTP — and the
//! connection then starts as any other, under the client's address the header carries.
//!
//! The header is peeked (`MSG_PEEK`) until [`lowlat_http::proxy_protocol::parse`] says it is
//! whole, then exactly its length is read: the bytes behind it (a TLS ClientHello, a request)
//! stay in the socket for the layer that owns them, which needs no way to be handed leftovers.
//! That costs one peek and one read per connection, and only on listeners that ask for it
//! (haproxy reads its `accept-proxy` header the same way).
//!
//! The header's addresses are kept with the connection: the client's becomes its peer, and
//! both — the client and the address it connected to at the balancer — are what a PROXY header
//! sent on to an upstream names (`--proxy-send-proxy-protocol`), as haproxy passes on what it
//! was told rather than its own addresses.
//!
//! A header that is malformed, missing (the connection starts with anything else) or late (the
//! header timeout) closes the connection without a word: the peer is a balancer that speaks the
//! protocol or nothing lowlat should answer.

use std::io::{self, Read as _};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lowlat_http::proxy_protocol::{self, MAX_HEADER_BYTES};
use lowlat_http::Status;
use mio::net::TcpStream;

use crate::config::ServerConfig;
use crate::tls::Accept;
use crate::transport::Transport;

/// The first peek's length: every v1 header, and a v2 header with its addresses and a few TLVs.
const SMALL_PEEK: usize = 256;

/// A connection whose PROXY header is awaited.
pub(crate) struct AwaitingHeader {
    sock: Option<TcpStream>,
    /// The balancer's address (the socket's peer), for the log line of a refusal.
    balancer: SocketAddr,
    /// Accepted on a TLS listener: TLS starts after the header.
    tls: bool,
    /// When the header must be whole (the header timeout, from accept).
    pub(crate) deadline: Instant,
}

/// What reading the header came to.
pub(crate) enum HeaderRead {
    /// Not all of it yet: wait for the socket.
    Waiting,
    /// The connection is over (bad or missing header, the peer gone).
    Refused,
    /// The header was taken off the socket: the connection starts, as the client it names.
    Ready {
        io: Transport,
        client: SocketAddr,
        /// What the header named (`None` for `LOCAL`/`UNKNOWN`: the balancer speaks for
        /// itself, and the connection's own addresses stand).
        named: Option<proxy_protocol::Addresses>,
        first_deadline: Duration,
    },
}

impl AwaitingHeader {
    pub(crate) fn new(sock: TcpStream, balancer: SocketAddr, tls: bool, deadline: Instant) -> Self {
        Self {
            sock: Some(sock),
            balancer,
            tls,
            deadline,
        }
    }

    /// The socket, to deregister it.
    pub(crate) fn socket(&mut self) -> Option<&mut TcpStream> {
        self.sock.as_mut()
    }

    /// Reads the header if it is all there.
    pub(crate) fn read(&mut self, cfg: &ServerConfig) -> HeaderRead {
        let Some(sock) = &mut self.sock else {
            return HeaderRead::Refused;
        };
        // A peek of the longest header either version may have either holds a whole header or
        // shows that it is bad. Most headers are far shorter (v1 at most 107 bytes, v2 with
        // IPv6 addresses 52), so a small buffer is tried first: zeroing the longest one for every
        // connection cost more than parsing the header (4 096 instructions under callgrind).
        let mut small = [0u8; SMALL_PEEK];
        let mut large;
        let mut buf: &mut [u8] = &mut small;
        let header = loop {
            let n = match sock.peek(buf) {
                Ok(0) => return self.refuse("closed before its PROXY header"),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return HeaderRead::Waiting,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => return HeaderRead::Waiting,
                Err(_) => return self.refuse("failed before its PROXY header"),
            };
            match proxy_protocol::parse(&buf[..n]) {
                // A v2 header with more than the small buffer holds (its TLVs): peek again.
                Ok(Status::Partial) if n == SMALL_PEEK && buf.len() == SMALL_PEEK => {
                    large = [0u8; MAX_HEADER_BYTES];
                    buf = &mut large;
                }
                Ok(Status::Partial) => return HeaderRead::Waiting,
                Ok(Status::Complete(h)) => break h,
                Err(e) => return self.refuse(&e.to_string()),
            }
        };
        // Take the header (and nothing after it) off the socket. The peek showed it is there,
        // so the reads return it at once.
        let mut taken = 0;
        while taken < header.len {
            match sock.read(&mut buf[taken..header.len]) {
                Ok(0) => return self.refuse("closed in its PROXY header"),
                Ok(k) => taken += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return self.refuse("failed in its PROXY header"),
            }
        }
        let client = header.addresses.map_or(self.balancer, |a| a.source);
        let Some(sock) = self.sock.take() else {
            return HeaderRead::Refused;
        };
        match transport(cfg, sock, self.tls) {
            Some((io, first_deadline)) => HeaderRead::Ready {
                io,
                client,
                named: header.addresses,
                first_deadline,
            },
            None => HeaderRead::Refused,
        }
    }

    fn refuse(&mut self, why: &str) -> HeaderRead {
        tracing::debug!(balancer = %self.balancer, "connection refused: {why}");
        self.sock = None;
        HeaderRead::Refused
    }
}

/// The transport a connection starts with on a listener (TLS or clear), and its first deadline:
/// the handshake's over TLS, the keep-alive's in clear. `None` when TLS cannot start a session.
pub(crate) fn transport(
    cfg: &ServerConfig,
    stream: TcpStream,
    tls: bool,
) -> Option<(Transport, Duration)> {
    match (&cfg.tls, tls) {
        (Some(ctx), true) => {
            let io = match ctx.accept().ok()? {
                Accept::Session(session) => Transport::tls(stream, session),
                Accept::ByName(configs) => Transport::tls_by_name(stream, configs).ok()?,
            };
            Some((io, cfg.tls_handshake_timeout))
        }
        _ => Some((Transport::Plain(stream), cfg.keepalive_timeout)),
    }
}
