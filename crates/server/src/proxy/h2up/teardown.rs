//! HTTP/2 exchanges and connections ended otherwise than by a response: the client gone (its
//! stream reset, the connection kept), a deadline passed, the groups a reload retired, a
//! connection failed under its exchanges; each forgotten with the gauges `/metrics` reads
//! published again.

use std::rc::Rc;
use std::time::Instant;

use mio::Token;

use super::{base, H2Upstreams, Outcome, Phase, CONNECT, CONN_OFFSET, EXCHANGE_OFFSET, TIMEOUT};
use crate::ctx::WorkerCtx;
use crate::proxy::group::WorkerGroup;

impl H2Upstreams {
    /// The client went away: its stream is reset (the server stops working on it).
    pub(crate) fn cancel(&mut self, token: Token, ctx: &mut WorkerCtx<'_>) {
        let Some(key) = token.0.checked_sub(base() + EXCHANGE_OFFSET) else {
            return;
        };
        let Some(x) = self.exchanges.get(key) else {
            return;
        };
        let (conn, stream) = (x.conn, x.stream);
        if let Some(c) = self.conns.get_mut(conn) {
            if stream != 0 {
                tracing::debug!(server = %c.group.cfg.servers[c.server].label, stream, "client gone: upstream stream reset (CANCEL)");
                c.session.cancel(stream);
                c.streams.retain(|&(s, _)| s != stream);
            }
            c.waiting.retain(|&k| k != key);
        }
        if let Some(job) = self.exchanges.get_mut(key).and_then(|x| x.job.take()) {
            job.group.give_buffer(job.request);
        }
        self.remove_exchange(key, ctx.worker);
        if self.conns.contains(conn) {
            let _ = self.write(conn, ctx);
        }
    }

    /// See [`crate::proxy::engine::Upstreams::retire_groups`]: the connections of groups a
    /// reload replaced close now when idle, else once their last stream ends (a stream that ends
    /// by a cancel or a timeout leaves it to the next sweep, [`H2Upstreams::expired`]).
    pub(crate) fn retire_groups(&mut self, ctx: &mut WorkerCtx<'_>) {
        let mut idle = Vec::new();
        for (k, c) in &self.conns {
            c.group.retired.set(true);
            if c.phase == Phase::Open && c.streams.is_empty() && c.waiting.is_empty() {
                idle.push(k);
            }
        }
        for k in idle {
            self.remove_conn(k, ctx);
        }
    }

    /// Tokens whose deadline passed, and idle connections of retired groups.
    pub(crate) fn expired(&self, now: Instant, out: &mut Vec<Token>) {
        for (k, x) in &self.exchanges {
            if now >= x.deadline && matches!(x.outcome, Outcome::Pending) {
                out.push(Token(base() + EXCHANGE_OFFSET + k));
            }
        }
        for (k, c) in &self.conns {
            let idle = c.streams.is_empty() && c.waiting.is_empty();
            if (now >= c.deadline && (idle || c.phase != Phase::Open))
                || (idle && c.phase == Phase::Open && c.group.retired.get())
            {
                out.push(Token(base() + CONN_OFFSET + k));
            }
        }
    }

    /// A deadline passed: an exchange times out (504 or a cut response, delivered as any
    /// failure), an idle connection closes, a connect that took too long fails its exchanges.
    pub(crate) fn expire(&mut self, token: Token, ctx: &mut WorkerCtx<'_>) {
        if let Some(key) = token.0.checked_sub(base() + EXCHANGE_OFFSET) {
            let Some(x) = self.exchanges.get_mut(key) else {
                return;
            };
            if ctx.now < x.deadline {
                return;
            }
            let (conn, stream) = (x.conn, x.stream);
            x.outcome = Outcome::Failed {
                kind: TIMEOUT,
                retry: false,
            };
            self.touched.push(key);
            if let Some(c) = self.conns.get_mut(conn) {
                if stream != 0 {
                    c.session.cancel(stream);
                    c.streams.retain(|&(s, _)| s != stream);
                }
                c.waiting.retain(|&k| k != key);
                let _ = self.write(conn, ctx);
            }
            return;
        }
        let key = token.0 - base() - CONN_OFFSET;
        if let Some(c) = self.conns.get(key) {
            let retired_idle = c.group.retired.get()
                && c.phase == Phase::Open
                && c.streams.is_empty()
                && c.waiting.is_empty();
            if ctx.now >= c.deadline || retired_idle {
                if c.phase == Phase::Open {
                    self.remove_conn(key, ctx);
                } else {
                    self.fail_conn(key, TIMEOUT, ctx);
                }
            }
        }
    }

    /// The connection failed: every exchange on it fails (those never sent may go elsewhere).
    pub(super) fn fail_conn(&mut self, key: usize, kind: usize, ctx: &mut WorkerCtx<'_>) {
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        for (_, xkey) in std::mem::take(&mut c.streams) {
            if let Some(x) = self.exchanges.get_mut(xkey) {
                x.outcome = Outcome::Failed { kind, retry: false };
                self.touched.push(xkey);
            }
        }
        for xkey in std::mem::take(&mut c.waiting) {
            if let Some(x) = self.exchanges.get_mut(xkey) {
                x.outcome = Outcome::Failed {
                    kind,
                    retry: kind == CONNECT,
                };
                self.touched.push(xkey);
            }
        }
        self.remove_conn(key, ctx);
    }

    pub(super) fn remove_conn(&mut self, key: usize, ctx: &mut WorkerCtx<'_>) {
        if let Some(mut c) = self.conns.try_remove(key) {
            let _ = ctx.registry.deregister(c.sock.source());
            self.gauges(&c.group, c.server, ctx.worker);
        }
    }

    /// Publishes this worker's HTTP/2 connections to `server` for `/metrics`: with streams open
    /// (active), without (idle).
    pub(super) fn gauges(&self, group: &Rc<WorkerGroup>, server: usize, worker: usize) {
        let (mut active, mut idle) = (0, 0);
        for (_, c) in &self.conns {
            if Rc::ptr_eq(&c.group, group) && c.server == server {
                if c.streams.is_empty() && c.waiting.is_empty() {
                    idle += 1;
                } else {
                    active += 1;
                }
            }
        }
        group.health.stats.connections(server, worker, active, idle);
    }

    /// Exchange `key` is over, however it ended (a response, a failure, a cancel): its
    /// connection's gauges are published again, for a connection whose last stream this was is
    /// idle now, and nothing else would say so until its next exchange.
    pub(super) fn remove_exchange(&mut self, key: usize, worker: usize) {
        if let Some(x) = self.exchanges.try_remove(key) {
            {
                let mut active = x.group.active.borrow_mut();
                active[x.server] = active[x.server].saturating_sub(1);
            }
            if self.conns.contains(x.conn) {
                self.gauges(&x.group, x.server, worker);
            }
        }
    }
}
