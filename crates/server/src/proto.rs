//! The protocol a connection speaks, over its transport: HTTP/1.1 ([`crate::conn`]) until it
//! turns out to be HTTP/2 ([`crate::h2`]) — ALPN `h2` after a TLS handshake, or the HTTP/2
//! preface in clear with `--h2c`. The worker holds every connection as a [`Connection`] and
//! never needs to know which protocol it speaks.

use std::time::Instant;

use crate::conn::Conn;
use crate::ctx::WorkerCtx;
use crate::h2::relay::StreamRelay;
use crate::h2::H2Conn;
use crate::proxy::downstream::Downstream;
use crate::transport::Transport;
use crate::wait::Wait;
use mio::Token;

/// A client connection, in the protocol it speaks.
// The worker's slab holds these by value: HTTP/1.1, the common case, stays inline (boxing it
// would add a pointer chase to every event); HTTP/2's state is large and boxed.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Connection {
    H1(Conn),
    H2(Box<H2Conn>),
    /// Only while [`Connection::switch`] moves the transport from one protocol to the other.
    Switching,
}

impl Connection {
    /// A connection just accepted: HTTP/1.1 until its first bytes (or ALPN) say otherwise.
    /// `first_deadline` is the keep-alive deadline in clear and the handshake deadline over TLS.
    pub(crate) fn accepted(
        io: Transport,
        peer: std::net::SocketAddr,
        now: Instant,
        first_deadline: std::time::Duration,
    ) -> Self {
        Self::H1(Conn::new(io, peer, now, first_deadline))
    }

    /// Handles a readiness event; a connection found to speak HTTP/2 switches here.
    pub(crate) fn on_event(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        readable: bool,
        read_closed: bool,
        writable: bool,
    ) {
        match self {
            Self::H1(c) => {
                c.on_event(ctx, readable, read_closed, writable);
                // Tested here, not in `switch`: a request that stays HTTP/1.1 pays two loads,
                // not a call (30 instructions a request on /plaintext by callgrind).
                if c.wants_h2() {
                    self.switch(ctx);
                }
            }
            Self::H2(c) => c.on_event(ctx, readable, read_closed, writable),
            Self::Switching => {}
        }
    }

    /// Makes all the progress possible without blocking.
    pub(crate) fn drive(&mut self, ctx: &mut WorkerCtx<'_>) {
        match self {
            Self::H1(c) => {
                c.drive(ctx);
                if c.wants_h2() {
                    self.switch(ctx);
                }
            }
            Self::H2(c) => c.drive(ctx),
            Self::Switching => {}
        }
    }

    /// An HTTP/1.1 connection that asked for HTTP/2 (h2c prior knowledge, or ALPN) becomes one.
    #[cold]
    #[inline(never)]
    fn switch(&mut self, ctx: &mut WorkerCtx<'_>) {
        let Self::H1(c) = std::mem::replace(self, Self::Switching) else {
            return;
        };
        let (io, peer, rbuf, rlen) = c.into_h2(ctx);
        let mut h2 = Box::new(H2Conn::new(io, peer, rbuf, rlen, ctx));
        h2.drive(ctx);
        *self = Self::H2(h2);
    }

    pub(crate) fn closed(&self) -> bool {
        match self {
            Self::H1(c) => c.closed,
            Self::H2(c) => c.closed,
            Self::Switching => true,
        }
    }

    pub(crate) fn deadline(&self) -> Instant {
        match self {
            Self::H1(c) => c.deadline,
            Self::H2(c) => c.deadline,
            Self::Switching => Instant::now(),
        }
    }

    /// Whether the connection waits between requests with nothing in flight.
    pub(crate) fn is_idle(&self) -> bool {
        match self {
            Self::H1(c) => c.wait == Wait::Idle && c.is_idle(),
            Self::H2(c) => c.wait == Wait::Idle && c.is_idle(),
            Self::Switching => false,
        }
    }

    /// The deadline passed.
    pub(crate) fn expire(&mut self, ctx: &mut WorkerCtx<'_>) {
        match self {
            Self::H1(c) => c.expire(ctx),
            Self::H2(c) => c.expire(ctx),
            Self::Switching => {}
        }
    }

    /// Shutdown began: idle connections close now; an HTTP/2 one announces GOAWAY and closes
    /// once its streams are done.
    pub(crate) fn shut_down(&mut self, ctx: &mut WorkerCtx<'_>) {
        match self {
            Self::H1(c) => {
                if c.wait == Wait::Idle && c.is_idle() {
                    c.expire(ctx);
                }
            }
            Self::H2(c) => c.drive(ctx),
            Self::Switching => {}
        }
    }

    /// Relayed responses whose client side has drained below `low`: (upstream, stream) pairs
    /// whose upstream may be read again.
    /// An upstream connection (and the stream, 0 for HTTP/1.1) to drive for request-body bytes
    /// this connection just read for it.
    /// An HTTP/1.1 connection that is open, relays nothing, tunnels nothing and fed no upload
    /// since it was last settled: settling it would do nothing.
    pub(crate) fn is_quiet_h1(&self) -> bool {
        match self {
            Self::H1(c) => !c.closed && !c.relaying() && !c.tunnelling() && !c.upload_fed(),
            Self::H2(_) | Self::Switching => false,
        }
    }

    pub(crate) fn take_upload_wake(&mut self) -> Option<(Token, u32)> {
        match self {
            Self::H1(c) => c.take_upload_wake().map(|t| (t, 0)),
            Self::H2(c) => c.take_upload_wake(),
            Self::Switching => None,
        }
    }

    pub(crate) fn relays_below(&self, low: usize, out: &mut Vec<(Token, u32)>) {
        match self {
            Self::H1(c) => {
                // A tunnel's upstream is pumped after every event of its client: the event
                // may have brought bytes to forward, not only room to write.
                let wanted = c.tunnelling() || c.relaying() && c.backlog() < low;
                if let (true, Some(up)) = (wanted, c.upstream()) {
                    out.push((up, 0));
                }
            }
            Self::H2(c) => c.relays_below(low, out),
            Self::Switching => {}
        }
    }

    /// Calls `f` with where the upstream side delivers the response of `stream` (0 for
    /// HTTP/1.1): `None` when that exchange is no longer wanted — among others, on a connection
    /// that has closed. A request and the client's close read in one turn leave the request
    /// waiting to be forwarded on a connection already closed: it must not start, for its
    /// exchange would outlive the connection and name its slot, and the next connection given
    /// that slot would get the response.
    pub(crate) fn with_downstream<R>(
        &mut self,
        stream: u32,
        f: impl FnOnce(Option<&mut dyn Downstream>) -> R,
    ) -> R {
        match self {
            Self::H1(c) if !c.closed => f(Some(c)),
            Self::H2(c) if !c.closed && c.has_relay(stream) => f(Some(&mut StreamRelay {
                conn: c,
                id: stream,
            })),
            Self::H1(_) | Self::H2(_) | Self::Switching => f(None),
        }
    }
}
