//! One connection to an upstream server: its socket (TCP, a Unix socket, or TLS over TCP), where it is in an
//! exchange, and the buffers it holds only while it is in one. An idle pooled connection holds
//! its socket and this small record: no buffer.

use std::io::{self, Read, Write};
use std::rc::Rc;
use std::time::Instant;

use lowlat_http::body::ChunkedDecoder;
use mio::net::{TcpStream, UnixStream};
use mio::Token;

use super::config::{UpstreamAddr, UpstreamServer};
use super::group::WorkerGroup;
use super::job::ProxyJob;
use super::upstream_tls::TlsSock;

/// Tokens of upstream connections start here (client connections and listeners stay below).
pub(crate) const TOKEN_BASE: usize = usize::MAX / 2;

/// The socket to an upstream server.
#[derive(Debug)]
pub(crate) enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// Boxed: rustls's connection state is a few KiB, and an idle clear connection should not
    /// pay for it.
    Tls(Box<TlsSock>),
}

impl Sock {
    /// Starts a non-blocking connect (the TLS handshake, for an `https://` server, follows
    /// once TCP is connected: [`Sock::handshake`]).
    pub(crate) fn connect(server: &UpstreamServer) -> io::Result<Self> {
        match &server.addr {
            UpstreamAddr::Tcp(a) => {
                let s = TcpStream::connect(*a)?;
                let _ = s.set_nodelay(true);
                match &server.tls {
                    Some(target) => Ok(Self::Tls(Box::new(TlsSock::new(s, target)?))),
                    None => Ok(Self::Tcp(s)),
                }
            }
            UpstreamAddr::Unix(p) => Ok(Self::Unix(UnixStream::connect(p)?)),
        }
    }

    /// Bytes written that the peer has not read yet, where the kernel can tell: on a Unix
    /// socket, `SIOCOUTQ` counts what still waits in the reader's queue (a connection in the
    /// listener's backlog has all its request there). `None` over TCP, whose count is of bytes
    /// not yet acknowledged, which the peer's kernel does before its program reads them.
    pub(crate) fn unread_output(&self) -> Option<usize> {
        use std::os::fd::AsRawFd;
        let Self::Unix(s) = self else {
            return None;
        };
        let mut n: libc::c_int = 0;
        // SAFETY: SIOCOUTQ (TIOCOUTQ's number on Linux) writes one c_int through the pointer,
        // which points at `n`, alive for the call; the descriptor is this socket's own.
        let rc = unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &raw mut n) };
        (rc == 0).then(|| usize::try_from(n).unwrap_or(0))
    }

    /// Whether a handshake follows the connect.
    pub(crate) fn is_tls(&self) -> bool {
        matches!(self, Self::Tls(_))
    }

    /// Advances a TLS handshake: `Ok(true)` when done (at once for a clear socket).
    pub(crate) fn handshake(&mut self) -> io::Result<bool> {
        match self {
            Self::Tls(t) => t.handshake(),
            _ => Ok(true),
        }
    }

    /// Whether a TLS handshake resumed an earlier session.
    pub(crate) fn resumed(&self) -> bool {
        matches!(self, Self::Tls(t) if t.resumed())
    }

    /// Sends what TLS still holds: `Ok(true)` when nothing is left (always, in clear).
    pub(crate) fn flush(&mut self) -> io::Result<bool> {
        match self {
            Self::Tls(t) => t.flush(),
            _ => Ok(true),
        }
    }

    /// After a read that returned data (`short`: less than the room offered), whether the next
    /// edge may be waited for. In clear a short read drained the socket; through TLS the
    /// plaintext's length says nothing of the socket, so the socket read's own length decides.
    pub(crate) fn drained_after(&self, short: bool) -> bool {
        match self {
            Self::Tls(t) => short && !t.more_to_read(),
            _ => short,
        }
    }

    /// After a writable event on a connecting socket: connected, still connecting, or failed.
    pub(crate) fn connect_result(&self) -> io::Result<bool> {
        let (err, peer) = match self {
            Self::Tcp(s) => (s.take_error(), s.peer_addr().map(|_| ())),
            Self::Unix(s) => (s.take_error(), s.peer_addr().map(|_| ())),
            Self::Tls(t) => (t.tcp.take_error(), t.tcp.peer_addr().map(|_| ())),
        };
        if let Ok(Some(e)) | Err(e) = err {
            return Err(e);
        }
        match peer {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub(crate) fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => s.read(buf),
            Self::Unix(s) => s.read(buf),
            Self::Tls(t) => t.read(buf),
        }
    }

    pub(crate) fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => s.write(buf),
            Self::Unix(s) => s.write(buf),
            Self::Tls(t) => t.write(buf),
        }
    }

    /// Writes on the socket itself, under TLS if there is one: the PROXY protocol header goes
    /// before the TLS handshake, as haproxy's `send-proxy` on a `ssl` server sends it.
    pub(crate) fn write_raw(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => s.write(buf),
            Self::Unix(s) => s.write(buf),
            Self::Tls(t) => t.tcp.write(buf),
        }
    }

    pub(crate) fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Self::Tcp(s) => s,
            Self::Unix(s) => s,
            Self::Tls(t) => &mut t.tcp,
        }
    }
}

/// Where a connection is in its exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// The connect has not completed.
    Connecting,
    /// Connected; the TLS handshake is under way (still under the connect timeout).
    Handshake,
    /// Writing the request.
    Sending,
    /// The request is out; the response head has not all arrived.
    Waiting,
    /// Relaying the response body.
    Body,
    /// In its server's pool, waiting for the next request.
    Idle,
    /// Switched protocols (`101`): a byte tunnel to the client until both close.
    Tunnel,
    /// A FastCGI application's request ended and a file answers for it (`X-Accel-Redirect`):
    /// the file is sent as the client takes it, then the connection goes back to its pool.
    File,
}

/// How the rest of the response body is delimited.
#[derive(Debug)]
pub(crate) enum BodyLeft {
    Length(u64),
    Chunked(Box<ChunkedDecoder>),
    UntilClose,
}

/// One upstream connection.
#[derive(Debug)]
pub(crate) struct UpConn {
    pub(crate) sock: Sock,
    pub(crate) group: Rc<WorkerGroup>,
    pub(crate) server: usize,
    pub(crate) phase: Phase,
    /// The client connection and stream (HTTP/2; 0 for HTTP/1.1) the response goes to.
    pub(crate) client: Option<(Token, u32)>,
    /// The request, kept until the first response byte (a retry sends it again).
    pub(crate) job: Option<ProxyJob>,
    /// The cache's fill of a response whose body is being relayed: the job is gone by then,
    /// and every later read of the body must still go through the cache's tee.
    pub(crate) fill: Option<crate::cache::fill::FillRef>,
    /// A forward-auth subrequest's gate while its answer's body is read (the job is gone by
    /// then, as for `fill`): the rest of the answer is judged by it too.
    pub(crate) gate: Option<super::job::GateRef>,
    pub(crate) wpos: usize,
    /// The PROXY protocol header this new connection starts with (the group sends one), written
    /// as soon as it is connected; empty otherwise.
    pub(crate) preamble: Vec<u8>,
    /// Read buffer (from the worker's pool, only during an exchange); `rlen` bytes hold data.
    pub(crate) rbuf: Vec<u8>,
    pub(crate) rlen: usize,
    pub(crate) body: BodyLeft,
    /// The head went to the client: a failure now can only truncate.
    pub(crate) head_relayed: bool,
    /// A response byte arrived: the request was seen, no retry.
    pub(crate) got_bytes: bool,
    /// Taken from the pool (it may have been closed under us: retried on a fresh connection).
    pub(crate) reused: bool,
    /// The response allows another on this connection.
    pub(crate) keep_alive: bool,
    pub(crate) status: u16,
    /// The client has too much unwritten: stop reading until it drains.
    pub(crate) paused: bool,
    /// Edge-triggered readiness not yet used up.
    pub(crate) readable: bool,
    pub(crate) writable: bool,
    /// An event reported the server's FIN or a reset.
    pub(crate) closed_seen: bool,
    /// A write of the request failed: the response is still read, the connection is not kept.
    pub(crate) refused_write: bool,
    pub(crate) deadline: Instant,
    /// When the request was handed to this connection (the upstream's response time).
    pub(crate) sent_at: Instant,
    /// The client-to-upstream side of a tunnel (only in [`Phase::Tunnel`]).
    pub(crate) tunnel: Option<Box<Tunnel>>,
    /// A FastCGI server's exchange (`super::fcgi`): its records' state.
    pub(crate) fcgi: Option<Box<super::fcgi_state::FcgiExchange>>,
}

/// The client-to-upstream half of a WebSocket tunnel (driven by `tunnel::pump`), and where each
/// direction stands.
#[derive(Debug)]
pub(crate) struct Tunnel {
    /// Client bytes not yet taken by the upstream (a pooled read buffer): `buf[pos..len]`.
    pub(crate) buf: Vec<u8>,
    pub(crate) pos: usize,
    pub(crate) len: usize,
    /// The client sent its FIN (or TLS `close_notify`).
    pub(crate) client_eof: bool,
    /// The upstream's sending side was half-closed after the client's FIN.
    pub(crate) upstream_shut: bool,
    /// The upstream sent its FIN.
    pub(crate) upstream_eof: bool,
    /// The client was told the upstream is done (half-closed after its output).
    pub(crate) client_shut: bool,
}

impl Tunnel {
    pub(crate) fn new(buf: Vec<u8>) -> Self {
        Self {
            buf,
            pos: 0,
            len: 0,
            client_eof: false,
            upstream_shut: false,
            upstream_eof: false,
            client_shut: false,
        }
    }

    /// The buffer, for the worker's pool, when the tunnel ends.
    pub(crate) fn into_buffer(self) -> Vec<u8> {
        self.buf
    }
}

#[cfg(test)]
mod tests {
    /// An idle pooled connection costs its record (it holds no buffer): well under the 1 KiB a
    /// pooled connection may cost.
    #[test]
    fn an_idle_connection_is_small() {
        let size = std::mem::size_of::<super::UpConn>();
        println!("UpConn: {size} bytes");
        assert!(size <= 512, "{size} bytes");
    }
}
