//! The protocol a connection speaks, over its transport: HTTP/1.1 ([`crate::conn`]) until it
//! turns out to be HTTP/2 ([`crate::h2`]) — ALPN `h2` after a TLS handshake, or the HTTP/2
//! preface in clear with `--h2c`. The worker holds every connection as a [`Connection`] and
//! never needs to know which protocol it speaks.

use std::time::Instant;

use crate::conn::Conn;
use crate::ctx::WorkerCtx;
use crate::h2::relay::StreamRelay;
use crate::h2::H2Conn;
use crate::proxied::{AwaitingHeader, HeaderRead};
use crate::proxy::downstream::Downstream;
use crate::transport::Transport;
use crate::wait::Wait;
use mio::Token;

/// How long an HTTP/1.1 connection must have been idle for shutdown to close it (see
/// [`Connection::shut_down`]); shutdown's sweeps look again at least every second.
const DRAIN_IDLE: std::time::Duration = std::time::Duration::from_millis(500);

/// A client connection, in the protocol it speaks.
// The worker's slab holds these by value: HTTP/1.1, the common case, stays inline (boxing it
// would add a pointer chase to every event); HTTP/2's state is large and boxed.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Connection {
    /// On a `proxy_protocol` listener, from a balancer: its PROXY header is awaited
    /// ([`crate::proxied`]); HTTP/1.1 (over TLS or not) follows.
    Awaiting(Box<AwaitingHeader>),
    H1(Conn),
    H2(Box<H2Conn>),
    /// Only while [`Connection::switch`] moves the transport from one protocol to the other;
    /// and a connection refused before it started (its PROXY header bad, missing or late),
    /// which the worker then removes as closed.
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

    /// A connection from a balancer whose PROXY header must come first.
    pub(crate) fn awaiting_header(header: AwaitingHeader) -> Self {
        Self::Awaiting(Box::new(header))
    }

    /// Reads the PROXY header if it is all there; once it is, the connection starts as
    /// HTTP/1.1 and is driven at once (what followed the header may already be readable, and
    /// edge-triggered epoll will not say so again).
    fn header_arrived(&mut self, ctx: &mut WorkerCtx<'_>, read_closed: bool) {
        let Self::Awaiting(a) = self else {
            return;
        };
        match a.read(ctx.cfg) {
            HeaderRead::Waiting => {}
            HeaderRead::Refused => {
                ctx.counters.proxy_protocol_refused += 1;
                if let Some(sock) = a.socket() {
                    let _ = ctx.registry.deregister(sock);
                }
                *self = Self::Switching;
            }
            HeaderRead::Ready {
                io,
                client,
                named,
                first_deadline,
            } => {
                let mut conn = Conn::new(io, client, ctx.now, first_deadline);
                conn.named = named.map(Box::new);
                conn.on_event(ctx, true, read_closed, true);
                let h2 = conn.wants_h2();
                *self = Self::H1(conn);
                if h2 {
                    self.switch(ctx);
                }
            }
        }
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
            Self::Awaiting(_) => {
                if readable || read_closed {
                    self.header_arrived(ctx, read_closed);
                }
            }
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
            Self::Awaiting(_) | Self::Switching => {}
        }
    }

    /// A held request's time came (`crate::hold`): the connection answers what is due and
    /// goes on.
    pub(crate) fn release_held(&mut self, ctx: &mut WorkerCtx<'_>) {
        match self {
            Self::H1(c) => c.release_held(ctx),
            Self::H2(c) => c.release_held(ctx),
            Self::Awaiting(_) | Self::Switching => {}
        }
    }

    /// An HTTP/1.1 connection that asked for HTTP/2 (h2c prior knowledge, or ALPN) becomes one.
    #[cold]
    #[inline(never)]
    fn switch(&mut self, ctx: &mut WorkerCtx<'_>) {
        let Self::H1(c) = std::mem::replace(self, Self::Switching) else {
            return;
        };
        let handover = c.into_h2(ctx);
        let mut h2 = Box::new(H2Conn::new(handover, ctx));
        h2.drive(ctx);
        *self = Self::H2(h2);
    }

    pub(crate) fn closed(&self) -> bool {
        match self {
            Self::H1(c) => c.closed,
            Self::H2(c) => c.closed,
            Self::Awaiting(_) => false,
            Self::Switching => true,
        }
    }

    pub(crate) fn deadline(&self) -> Instant {
        match self {
            Self::H1(c) => c.deadline,
            Self::H2(c) => c.deadline,
            Self::Awaiting(a) => a.deadline,
            Self::Switching => Instant::now(),
        }
    }

    /// Whether the connection waits between requests with nothing in flight.
    pub(crate) fn is_idle(&self) -> bool {
        match self {
            Self::H1(c) => c.wait == Wait::Idle && c.is_idle(),
            Self::H2(c) => c.wait == Wait::Idle && c.is_idle(),
            Self::Awaiting(_) | Self::Switching => false,
        }
    }

    /// The deadline passed.
    pub(crate) fn expire(&mut self, ctx: &mut WorkerCtx<'_>) {
        match self {
            Self::H1(c) => c.expire(ctx),
            Self::H2(c) => c.expire(ctx),
            Self::Awaiting(a) => {
                tracing::debug!("connection closed: its PROXY header did not come in time");
                ctx.counters.proxy_protocol_refused += 1;
                if let Some(sock) = a.socket() {
                    let _ = ctx.registry.deregister(sock);
                }
                *self = Self::Switching;
            }
            Self::Switching => {}
        }
    }

    /// Shutdown began: idle connections close now; an HTTP/2 one announces GOAWAY and closes
    /// once its streams are done.
    pub(crate) fn shut_down(&mut self, ctx: &mut WorkerCtx<'_>) {
        match self {
            Self::H1(c) => {
                // Handing over to a new process, an idle keep-alive connection closes once it
                // has been idle a while: a client that just had its answer may be sending the
                // next request this very moment, and closing under it would lose that request.
                // Until then its next answer says `Connection: close`; one idle for
                // `DRAIN_IDLE` is not that client. A plain shutdown closes idle ones at once.
                let idle_since = c.deadline.checked_sub(ctx.cfg.keepalive_timeout);
                let long_idle =
                    !ctx.handing_over || idle_since.is_none_or(|t| ctx.now >= t + DRAIN_IDLE);
                if c.wait == Wait::Idle && c.is_idle() && long_idle {
                    c.expire(ctx);
                }
            }
            Self::H2(c) => c.drive(ctx),
            // Nothing was asked yet: the balancer retries elsewhere.
            Self::Awaiting(_) => self.expire(ctx),
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
            Self::Awaiting(_) | Self::H2(_) | Self::Switching => false,
        }
    }

    pub(crate) fn take_upload_wake(&mut self) -> Option<(Token, u32)> {
        match self {
            Self::H1(c) => c.take_upload_wake().map(|t| (t, 0)),
            Self::H2(c) => c.take_upload_wake(),
            Self::Awaiting(_) | Self::Switching => None,
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
            Self::Awaiting(_) | Self::Switching => {}
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
            Self::Awaiting(_) | Self::H1(_) | Self::H2(_) | Self::Switching => f(None),
        }
    }
}
