//! The worker's upstream side: every upstream connection of one worker, in the worker's own
//! event loop (same epoll, tokens above [`TOKEN_BASE`]; no second runtime, no thread hop). It
//! starts exchanges ([`Upstreams::start`]), reuses idle keep-alive connections from each server's
//! pool, relays responses to the client as they arrive — the head through the codec's response
//! parser (`lowlat_http::client`, the one `lowlat load` uses), the body decoded and handed on —
//! with back-pressure, retries, passive health and timeouts.
//!
//! Failures: before any response byte, an idempotent request is retried once on another server
//! (and a pooled connection found closed under it is retried on a fresh one, which does not
//! count); without a response, the client gets 502 (refused, reset, malformed) or 504 (timed
//! out); after the head went out, the client's response is cut short — never completed with
//! wrong bytes.
//!
//! A WebSocket handshake answered `101` turns its exchange into a tunnel (`tunnel`): the
//! connection leaves the request/response cycle for good and is closed, never pooled, when the
//! tunnel ends.
//!
//! # Layout
//! - `start`: an exchange started: gated, parked, or handed to a pooled or new connection.
//! - `drive`: a connection driven through its exchange: connect, handshake, request, body.
//! - `relay`: a response read and relayed: head, body, trailers.
//! - `pool`: an exchange's end: its connection back in its server's pool, or closed.
//! - `failure`: a failed exchange: retried, answered 502/504, or cut short.
//! - `upgraded`: an exchange turned into a WebSocket tunnel, and the tunnel's end.
//! - `fcgi_capacity`: how many connections a php-fpm takes; processes given back when asked.
//!
//! This file holds what they share (`Upstreams`, `Failure`, the relay's water marks) and the
//! worker's entry points (an event, a resume, a cancel, a wake, a deadline, a reload), each
//! routed to its HTTP/1.1 connection, to HTTP/2 (`h2up`), to the cache's parked requests or to
//! php-fpm's queue.

mod drive;
mod failure;
mod fcgi_capacity;
mod pool;
mod relay;
mod start;
mod upgraded;

use std::time::Instant;

use mio::Token;
use slab::Slab;

use super::downstream::Downstream;
use super::fcgi_queue;
use super::h2up::{self, Delivered, H2Upstreams};
use super::upstream::{Phase, UpConn};
use crate::ctx::WorkerCtx;

pub(crate) use super::upstream::TOKEN_BASE;
/// Stop reading an upstream while this much of its response waits to be written to the client.
pub(crate) const RELAY_HIGH_WATER: usize = 256 * 1024;
/// Resume once the client's backlog is below this.
pub(crate) const RELAY_LOW_WATER: usize = 64 * 1024;

/// What an event said of an upstream connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Readiness {
    pub(crate) readable: bool,
    pub(crate) writable: bool,
    /// The server closed or reset: read until the end, whatever a short read suggests.
    pub(crate) closed: bool,
}

/// Whether a token is an upstream connection's.
pub(crate) fn is_upstream(token: Token) -> bool {
    token.0 >= TOKEN_BASE
}

/// Why an exchange failed (in the order of [`super::stats::FAILURE_KINDS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// The connect failed.
    Connect,
    /// Reset or closed before the response was complete.
    Closed,
    /// A response the server must not relay: malformed head, conflicting framing, a bad chunk.
    Invalid,
    /// A timeout (connect, first byte, read, write).
    Timeout,
}

/// One worker's upstream connections.
#[derive(Debug, Default)]
pub(crate) struct Upstreams {
    conns: Slab<UpConn>,
    /// HTTP/2 upstreams: connections carrying many exchanges (tokens of their own).
    h2: H2Upstreams,
    /// Requests waiting for another's fill of their cache key (tokens of their own).
    parked: crate::cache::collapse::Parked,
    /// Requests waiting for a connection to a php-fpm that serves all it can (tokens of their
    /// own).
    fcgi_waiting: super::fcgi_queue::Backlog,
    /// When to look again for php-fpm connections queued behind idle ones (a new connection's
    /// request was unread when another finished, too recently to tell): the worker wakes then
    /// and calls [`Upstreams::release_for_queued`].
    pub(crate) fastcgi_check_at: Option<Instant>,
}

impl Upstreams {
    /// The client (token, stream) an upstream connection relays to.
    pub(crate) fn client_of(&self, token: Token) -> Option<(Token, u32)> {
        if h2up::owns(token) {
            return self.h2.client_of(token);
        }
        if fcgi_queue::owns(token) {
            return self.fcgi_waiting.client_of(token);
        }
        self.conns.get(token.0 - TOKEN_BASE).and_then(|c| c.client)
    }

    /// HTTP/2 exchanges with news for their clients: the worker hands each its client through
    /// [`Upstreams::on_event`].
    pub(crate) fn take_touched(&mut self) -> Vec<Token> {
        self.h2.take_touched()
    }

    /// An event (or news) for an HTTP/2 connection or exchange; a retry it asks for.
    fn h2_event(
        &mut self,
        token: Token,
        ready: Readiness,
        ctx: &mut WorkerCtx<'_>,
        down: Option<&mut dyn Downstream>,
    ) {
        match down {
            // A response the cache keeps is relayed through its tee, as on HTTP/1.1.
            Some(down) => match self.h2.fill_of(token) {
                None => self.h2_deliver(token, ready, ctx, down),
                Some(fill) => match crate::cache::tee::Tee::new(down, &fill) {
                    Ok(mut tee) => self.h2_deliver(token, ready, ctx, &mut tee),
                    Err(down) => self.h2_deliver(token, ready, ctx, down),
                },
            },
            None => {
                self.h2
                    .on_event(token, ready.readable, ready.writable, ctx, None);
            }
        }
    }

    /// [`Upstreams::h2_event`] for whichever `down` relays.
    fn h2_deliver(
        &mut self,
        token: Token,
        ready: Readiness,
        ctx: &mut WorkerCtx<'_>,
        down: &mut dyn Downstream,
    ) {
        let done = self
            .h2
            .on_event(token, ready.readable, ready.writable, ctx, Some(&mut *down));
        if let Delivered::Retry(job, client, server) = done {
            self.assign(server, job, client, true, ctx, down);
        }
    }

    /// A readiness event on an upstream connection. `down` is its client, if it still has one.
    pub(crate) fn on_event(
        &mut self,
        token: Token,
        ready: Readiness,
        ctx: &mut WorkerCtx<'_>,
        down: Option<&mut dyn Downstream>,
    ) {
        if h2up::owns(token) {
            return self.h2_event(token, ready, ctx, down);
        }
        let key = token.0 - TOKEN_BASE;
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        c.readable |= ready.readable;
        c.writable |= ready.writable;
        c.closed_seen |= ready.closed;
        match down {
            Some(down) => self.drive(key, ctx, down),
            None => {
                if c.phase == Phase::Idle {
                    self.idle_event(key, ctx);
                } else {
                    // Its client is gone (or no longer wants the response).
                    self.close(key, ctx);
                }
            }
        }
    }

    /// The client drained its backlog: read the upstream again.
    pub(crate) fn resume(
        &mut self,
        token: Token,
        ctx: &mut WorkerCtx<'_>,
        down: &mut dyn Downstream,
    ) {
        if h2up::owns(token) {
            let none = Readiness {
                readable: false,
                writable: false,
                closed: false,
            };
            return self.h2_event(token, none, ctx, Some(down));
        }
        let key = token.0 - TOKEN_BASE;
        if let Some(c) = self.conns.get_mut(key) {
            if c.phase == Phase::Tunnel {
                // The client's side moved (bytes to read, room to write): pump both ways.
                return self.drive(key, ctx, down);
            }
            if c.paused && down.backlog() < RELAY_LOW_WATER {
                c.paused = false;
                self.drive(key, ctx, down);
            }
        }
    }

    /// The client went away: its exchange is abandoned (the connection is not reused: the rest of
    /// the response would have to be read first).
    pub(crate) fn cancel(&mut self, token: Token, ctx: &mut WorkerCtx<'_>) {
        if h2up::owns(token) {
            return self.h2.cancel(token, ctx);
        }
        if crate::cache::collapse::owns(token) {
            return self.parked.cancel(token);
        }
        if fcgi_queue::owns(token) {
            if let Some(job) = self.fcgi_waiting.take(token) {
                job.group.give_buffer(job.request);
            }
            return;
        }
        let key = token.0 - TOKEN_BASE;
        if let Some(c) = self.conns.get(key) {
            if c.phase != Phase::Idle {
                self.close(key, ctx);
            }
        }
    }

    /// A reload replaced the worker's groups, and the new ones start with empty pools: the
    /// connections of the old ones would never be chosen again. Their idle connections close
    /// now; one in an exchange closes once it is over (`finish`), never going back to a pool;
    /// an HTTP/2 one once its last stream ends.
    pub(crate) fn retire_groups(&mut self, ctx: &mut WorkerCtx<'_>) {
        let mut idle = Vec::new();
        for (key, c) in &self.conns {
            c.group.retired.set(true);
            if c.phase == Phase::Idle {
                idle.push(key);
            }
        }
        for key in idle {
            self.close(key, ctx);
        }
        self.h2.retire_groups(ctx);
    }

    /// Connections whose deadline has passed (for [`Upstreams::expire`]); allocates only when
    /// there is one.
    pub(crate) fn expired(&self, now: Instant) -> Vec<Token> {
        let mut out: Vec<Token> = self
            .conns
            .iter()
            .filter(|(_, c)| now >= c.deadline)
            .map(|(k, _)| Token(TOKEN_BASE + k))
            .collect();
        self.h2.expired(now, &mut out);
        self.fcgi_waiting.expired(now, &mut out);
        out
    }

    /// A deadline passed: an exchange times out (504, or a cut response), an idle connection
    /// past its keep-alive time closes. `down` is the connection's client, if it has one.
    pub(crate) fn expire(
        &mut self,
        token: Token,
        ctx: &mut WorkerCtx<'_>,
        down: Option<&mut dyn Downstream>,
    ) {
        if h2up::owns(token) {
            // Delivered to the client as news, through `take_touched`.
            return self.h2.expire(token, ctx);
        }
        if fcgi_queue::owns(token) {
            // Waited for a connection as long as it would have for an answer.
            if let Some(job) = self.fcgi_waiting.take(token) {
                tracing::debug!(group = %job.group.cfg.name, "no php-fpm connection came free in time");
                job.group.give_buffer(job.request);
                if let Some(down) = down {
                    down.relay_error(ctx, 504);
                }
            }
            return;
        }
        let key = token.0 - TOKEN_BASE;
        let Some(c) = self.conns.get(key) else {
            return;
        };
        if ctx.now < c.deadline {
            return;
        }
        match down {
            Some(down) if c.phase == Phase::Tunnel => {
                tracing::debug!(server = %c.group.cfg.servers[c.server].label, "tunnel idle for too long: closed");
                self.end_tunnel(key, ctx, down);
            }
            Some(down) if c.phase != Phase::Idle && c.client.is_some() => {
                // A forward-auth subrequest that timed out fails its request closed, counted
                // as such by its gate.
                match gate_of(c) {
                    Some(gate) => match super::auth::AuthGate::new(down, &gate) {
                        Ok(mut judged) => self.fail(key, Failure::Timeout, ctx, &mut judged),
                        Err(down) => self.fail(key, Failure::Timeout, ctx, down),
                    },
                    None => self.fail(key, Failure::Timeout, ctx, down),
                }
            }
            _ => self.close(key, ctx),
        }
    }

    /// Body bytes were passed to a streaming upload: the connection writes them.
    pub(crate) fn wake(
        &mut self,
        token: Token,
        ctx: &mut WorkerCtx<'_>,
        down: &mut dyn Downstream,
    ) {
        if h2up::owns(token) {
            return self.h2.wake(token, ctx);
        }
        let key = token.0 - TOKEN_BASE;
        // (A tunnel's HTTP/2 client sent bytes: they are pumped too.)
        if self
            .conns
            .get(key)
            .is_some_and(|c| matches!(c.phase, Phase::Sending | Phase::Tunnel))
        {
            self.drive(key, ctx, down);
        }
    }
}

/// The forward-auth gate of connection `c`'s exchange, when it carries a subrequest: its job's
/// until the answer's head, the connection's while the body is read.
fn gate_of(c: &UpConn) -> Option<super::job::GateRef> {
    match &c.job {
        Some(j) => j.gate.clone(),
        None => c.gate.clone(),
    }
}
