//! The worker's clients as the upstream side reaches them: TCP connections (HTTP/1.1, HTTP/2)
//! in a slab and QUIC connections (HTTP/3) in the worker's endpoint, each named by a token, with
//! a stream number for the multiplexed protocols. A relayed response finds its client through
//! [`Clients::with_downstream`] whichever kind it is.
//!
//! And what follows a client's turn ([`Clients::settle`]): the requests it forwarded go to the
//! upstream side, the exchanges it abandoned are cancelled, the relays it drained read their
//! upstreams again, and a closed connection leaves.

use mio::Token;
use slab::Slab;

use crate::cache::refresh;
use crate::ctx::WorkerCtx;
use crate::proto::Connection;
use crate::proxy::downstream::{Downstream, Wake};
use crate::proxy::engine::{Readiness, Upstreams, RELAY_LOW_WATER};
use crate::quic::{owns_client, QuicWorker};

/// Tokens below this are listeners (one per listen address) and the QUIC socket; TCP
/// connections start here.
pub(crate) const FIRST_CONN: usize = 1024;

/// The worker's client connections.
pub(crate) struct Clients {
    /// TCP connections, by token − [`FIRST_CONN`].
    pub(crate) conns: Slab<Connection>,
    /// QUIC connections (`--h3-listen`), tokens of their own (`crate::quic`).
    pub(crate) quic: Option<QuicWorker>,
}

impl Clients {
    /// Calls `f` with where the upstream side delivers the response of `stream` (0 for
    /// HTTP/1.1) of the client `client` names: `None` when that exchange is no longer wanted or
    /// the client is gone. What it does is on that client's behalf (`ctx.token`).
    pub(crate) fn with_downstream(
        &mut self,
        client: Token,
        stream: u32,
        ctx: &mut WorkerCtx<'_>,
        f: impl FnOnce(Option<&mut dyn Downstream>, &mut WorkerCtx<'_>),
    ) {
        let token = std::mem::replace(&mut ctx.token, client);
        if owns_client(client) {
            match &mut self.quic {
                Some(q) => q.with_downstream(client, stream, ctx, f),
                None => f(None, ctx),
            }
        } else {
            match self.conn_mut(client) {
                Some(conn) => conn.with_downstream(stream, |down| f(down, ctx)),
                // A background refresh: its response goes into the cache only.
                None if client == refresh::CLIENT => f(Some(&mut refresh::Sink), ctx),
                None => f(None, ctx),
            }
        }
        ctx.token = token;
    }

    /// Whether the connection `client` names is still open.
    fn exists(&self, client: Token) -> bool {
        if client == refresh::CLIENT {
            return true;
        }
        if owns_client(client) {
            self.quic.as_ref().is_some_and(|q| q.has_client(client))
        } else {
            client
                .0
                .checked_sub(FIRST_CONN)
                .is_some_and(|key| self.conns.contains(key))
        }
    }

    /// The TCP connection `token` names (`None` for other tokens).
    fn conn_mut(&mut self, token: Token) -> Option<&mut Connection> {
        self.conns.get_mut(token.0.checked_sub(FIRST_CONN)?)
    }

    /// An event (or news) for upstream connection `up`: handed to the client it relays to (or
    /// to none), which is then settled.
    pub(crate) fn upstream_event(
        &mut self,
        upstreams: &mut Upstreams,
        up: Token,
        ready: Readiness,
        ctx: &mut WorkerCtx<'_>,
        relays: &mut Vec<(Token, u32)>,
    ) {
        match upstreams.client_of(up) {
            Some((client, stream)) => {
                self.with_downstream(client, stream, ctx, |down, ctx| {
                    upstreams.on_event(up, ready, ctx, down);
                });
                self.settle(upstreams, client, ctx, relays);
            }
            None => upstreams.on_event(up, ready, ctx, None),
        }
    }

    /// An upstream connection timed out: its client gets a 504 (or a cut response).
    pub(crate) fn upstream_expired(
        &mut self,
        upstreams: &mut Upstreams,
        up: Token,
        ctx: &mut WorkerCtx<'_>,
        relays: &mut Vec<(Token, u32)>,
    ) {
        match upstreams.client_of(up) {
            Some((client, stream)) => {
                self.with_downstream(client, stream, ctx, |down, ctx| {
                    upstreams.expire(up, ctx, down);
                });
                self.settle(upstreams, client, ctx, relays);
            }
            None => upstreams.expire(up, ctx, None),
        }
    }

    /// After client `client` was driven (or after the QUIC endpoint was, any of its clients,
    /// with the QUIC socket's token):
    /// the upstream exchanges abandoned are cancelled, the requests forwarded go to the
    /// upstream side, relays drained resume reading their upstreams, and a closed TCP
    /// connection leaves.
    #[inline]
    pub(crate) fn settle(
        &mut self,
        upstreams: &mut Upstreams,
        client: Token,
        ctx: &mut WorkerCtx<'_>,
        relays: &mut Vec<(Token, u32)>,
    ) {
        // Most events leave nothing to settle: no exchange to start or cancel, no HTTP/3 stream
        // woken, and an HTTP/1.1 connection still open that relays nothing. Asked here, inlined
        // into the loop, for the rest is a large call (about 35 instructions a request on
        // /plaintext by callgrind, against b782d19's settle).
        if ctx.proxy_cancels.is_empty()
            && ctx.proxy_starts.is_empty()
            && self.quic.as_ref().is_none_or(|q| !q.has_wake())
            && self.conn_mut(client).is_some_and(|c| c.is_quiet_h1())
        {
            return;
        }
        self.settle_all(upstreams, client, ctx, relays);
    }

    /// [`Clients::settle`] when there may be something to do.
    #[inline(never)]
    fn settle_all(
        &mut self,
        upstreams: &mut Upstreams,
        client: Token,
        ctx: &mut WorkerCtx<'_>,
        relays: &mut Vec<(Token, u32)>,
    ) {
        loop {
            while let Some(up) = ctx.proxy_cancels.pop() {
                upstreams.cancel(up, ctx);
            }
            self.start_forwarded(upstreams, ctx);
            // HTTP/3 streams that took their backlog or brought body bytes (they say so when
            // it happens).
            let wake = self.quic.as_mut().and_then(QuicWorker::take_wake);
            let Some((from, up, stream, wake)) = wake else {
                break;
            };
            self.with_downstream(from, stream, ctx, |down, ctx| match (down, wake) {
                (Some(down), Wake::Resume) => upstreams.resume(up, ctx, down),
                (Some(down), Wake::Upload) => upstreams.wake(up, ctx, down),
                (None, _) => {}
            });
        }
        // The QUIC side's connections leave by themselves (`crate::quic`).
        let Some(key) = client.0.checked_sub(FIRST_CONN) else {
            return;
        };
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        if conn.closed() {
            self.remove(upstreams, key, ctx);
            return;
        }
        while let Some((up, stream)) = conn.take_upload_wake() {
            // Body bytes it read for a streaming upload: the upstream connection writes them.
            conn.with_downstream(stream, |down| {
                if let Some(down) = down {
                    upstreams.wake(up, ctx, down);
                }
            });
            if conn.closed() {
                self.remove(upstreams, key, ctx);
                return;
            }
        }
        conn.relays_below(RELAY_LOW_WATER, relays);
        while let Some((up, stream)) = relays.pop() {
            conn.with_downstream(stream, |down| {
                if let Some(down) = down {
                    upstreams.resume(up, ctx, down);
                }
            });
        }
    }

    /// The cache rang this worker: the background refreshes its handlers queued are started,
    /// and the requests whose flight ended are released.
    pub(crate) fn cache_news(
        &mut self,
        upstreams: &mut Upstreams,
        ctx: &mut WorkerCtx<'_>,
        relays: &mut Vec<(Token, u32)>,
    ) {
        for job in refresh::take_queued() {
            self.with_downstream(refresh::CLIENT, 0, ctx, |down, ctx| match down {
                Some(down) => upstreams.start((refresh::CLIENT, 0), job, ctx, down),
                None => job.group.give_buffer(job.request),
            });
        }
        self.release_waiters(upstreams, ctx, relays);
    }

    /// Parked requests whose wait is over (their flight ended, or their time is up) are
    /// answered from the cache or forwarded on their own, each on its client's behalf.
    pub(crate) fn release_waiters(
        &mut self,
        upstreams: &mut Upstreams,
        ctx: &mut WorkerCtx<'_>,
        relays: &mut Vec<(Token, u32)>,
    ) {
        for ((client, stream), job) in upstreams.released(ctx.now) {
            self.with_downstream(client, stream, ctx, |down, ctx| match down {
                Some(down) => upstreams.unpark((client, stream), job, ctx, down),
                None => job.group.give_buffer(job.request),
            });
            self.settle(upstreams, client, ctx, relays);
        }
    }

    /// A closed TCP connection leaves; the exchanges it abandoned are cancelled.
    fn remove(&mut self, upstreams: &mut Upstreams, key: usize, ctx: &mut WorkerCtx<'_>) {
        self.conns.remove(key);
        while let Some(up) = ctx.proxy_cancels.pop() {
            upstreams.cancel(up, ctx);
        }
        // A php-fpm connection it gave back may start a request that waited for one.
        self.start_forwarded(upstreams, ctx);
    }

    /// Starts the requests queued to go upstream, each on its client's behalf, and cancels
    /// what their starts abandoned: a settle's, and those the upstream side woke itself when no
    /// settle is to follow (a php-fpm connection came free in a sweep or as a client left,
    /// `proxy::fcgi_queue`).
    pub(crate) fn start_forwarded(&mut self, upstreams: &mut Upstreams, ctx: &mut WorkerCtx<'_>) {
        while let Some((from, stream, job)) = ctx.proxy_starts.pop() {
            self.with_downstream(from, stream, ctx, |down, ctx| match down {
                Some(down) => upstreams.start((from, stream), job, ctx, down),
                None => job.group.give_buffer(job.request),
            });
            while let Some(up) = ctx.proxy_cancels.pop() {
                upstreams.cancel(up, ctx);
            }
        }
    }

    /// Hands each HTTP/2 upstream exchange with news (a head, data, trailers, its end, a
    /// failure) to its client — one upstream connection may carry news for many — then settles
    /// the client.
    pub(crate) fn deliver_touched(
        &mut self,
        upstreams: &mut Upstreams,
        ctx: &mut WorkerCtx<'_>,
        relays: &mut Vec<(Token, u32)>,
    ) {
        let news = Readiness {
            readable: false,
            writable: false,
            closed: false,
        };
        loop {
            let touched = upstreams.take_touched();
            if touched.is_empty() {
                return;
            }
            for up in touched {
                let Some((client, stream)) = upstreams.client_of(up) else {
                    continue;
                };
                if self.exists(client) {
                    self.with_downstream(client, stream, ctx, |down, ctx| {
                        upstreams.on_event(up, news, ctx, down);
                    });
                } else {
                    upstreams.cancel(up, ctx);
                }
                self.settle(upstreams, client, ctx, relays);
            }
        }
    }
}
