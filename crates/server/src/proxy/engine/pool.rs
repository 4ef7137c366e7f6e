//! Where an upstream connection goes when its exchange ends: back to its server's idle pool
//! when the response was complete, the connection may carry another, there is room and no
//! php-fpm request waits for its process; else closed. A connection closed mid-exchange (the
//! client gone, a failure) or idle (the server closed it) is forgotten here too. The gauges
//! `/metrics` reads are published again at each change.

use std::io;

use super::fcgi_capacity::{is_fastcgi, FASTCGI_PROBE_EVERY};
use super::Upstreams;
use crate::ctx::WorkerCtx;
use crate::proxy::downstream::Downstream;
use crate::proxy::fcgi;
use crate::proxy::group::WorkerGroup;
use crate::proxy::upstream::Phase;

impl Upstreams {
    /// The response is complete: the client is told, the connection goes back to its pool.
    pub(super) fn finish(
        &mut self,
        key: usize,
        ctx: &mut WorkerCtx<'_>,
        down: &mut dyn Downstream,
    ) {
        let queued = self.conns[key].fcgi.is_some() && self.fastcgi_queued(key, ctx.now);
        let c = &mut self.conns[key];
        // Another worker waits for a process that only pools like this one hold: this
        // connection's goes to it.
        let asked = c.fcgi.is_some() && c.group.health.fastcgi.take_ask(c.server);
        let label = &c.group.cfg.servers[c.server].label;
        let took = ctx.now.saturating_duration_since(c.sent_at);
        c.group
            .health
            .stats
            .response(c.server, ctx.worker, c.status, took);
        down.relay_end(ctx, label, c.status, took);
        down.flush_relayed(ctx);
        c.group.active.borrow_mut()[c.server] -= 1;
        c.client = None;
        c.fill = None;
        c.gate = None;
        if !c.rbuf.is_empty() {
            ctx.pool.give_read(std::mem::take(&mut c.rbuf));
        }
        c.rlen = 0;
        // A connection that began with a client's PROXY header speaks for that client only.
        let room = c.group.idle.borrow()[c.server].len() < c.group.cfg.keepalive
            && c.group.cfg.send_proxy_protocol == 0;
        if queued {
            // From now on the requests beyond what php-fpm serves wait here, not in its
            // backlog; a connection beyond what it serves is tried again a while later.
            c.group.fastcgi_full.borrow_mut()[c.server] = Some(ctx.now + FASTCGI_PROBE_EVERY);
        }
        if c.keep_alive && room && !queued && !asked && !ctx.shutting_down && !c.group.retired.get()
        {
            c.phase = Phase::Idle;
            c.deadline = ctx.now + c.group.cfg.keepalive_timeout;
            c.group.idle.borrow_mut()[c.server].push(key);
            gauges(&c.group, c.server, ctx.worker);
            let (group, server) = (std::rc::Rc::clone(&c.group), c.server);
            if c.readable {
                self.idle_event(key, ctx);
            }
            if is_fastcgi(&group, server) {
                if !group.fastcgi_registered.replace(true) {
                    // Pooling, this worker may be asked for a process back.
                    if let Some(waker) = crate::own_waker::get() {
                        group.health.fastcgi.register(waker);
                    }
                }
                self.wake_waiter(&group, server, ctx);
            }
        } else {
            self.remove(key, ctx);
        }
    }

    /// An idle pooled connection became readable: the server closed it (or sent what no one
    /// asked for). Either way it leaves the pool.
    pub(super) fn idle_event(&mut self, key: usize, ctx: &mut WorkerCtx<'_>) {
        let c = &mut self.conns[key];
        if !c.readable {
            return;
        }
        let mut probe = [0u8; 1];
        match c.sock.read(&mut probe) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => c.readable = false,
            _ => self.close(key, ctx),
        }
    }

    /// Closes an upstream connection mid-exchange or idle, and forgets it.
    pub(super) fn close(&mut self, key: usize, ctx: &mut WorkerCtx<'_>) {
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        if c.phase != Phase::Idle && c.client.is_some() {
            c.group.active.borrow_mut()[c.server] -= 1;
        }
        if c.fcgi.is_some() && matches!(c.phase, Phase::Waiting | Phase::Body) {
            // The client went away, or the exchange failed: the application is told to stop
            // (php-fpm ends the script at its next output), then sees the connection close.
            let _ = c.sock.write(&fcgi::abort_record());
        }
        if c.phase == Phase::Idle {
            c.group.idle.borrow_mut()[c.server].retain(|&k| k != key);
        }
        if let Some(job) = c.job.take() {
            job.group.give_buffer(job.request);
        }
        c.fill = None;
        c.gate = None;
        self.remove(key, ctx);
    }

    fn remove(&mut self, key: usize, ctx: &mut WorkerCtx<'_>) {
        let mut c = self.conns.remove(key);
        gauges(&c.group, c.server, ctx.worker);
        if is_fastcgi(&c.group, c.server) {
            let mut open = c.group.fastcgi_open.borrow_mut();
            open[c.server] = open[c.server].saturating_sub(1);
            drop(open);
            self.wake_waiter(&c.group, c.server, ctx);
        }
        let _ = ctx.registry.deregister(c.sock.source());
        if !c.rbuf.is_empty() {
            ctx.pool.give_read(std::mem::take(&mut c.rbuf));
        }
        if let Some(t) = c.tunnel.take() {
            ctx.pool.give_read(t.into_buffer());
        }
    }
}

/// Publishes this worker's connections to `server` (in an exchange, idle) for `/metrics`.
pub(super) fn gauges(group: &WorkerGroup, server: usize, worker: usize) {
    let active = u64::from(group.active.borrow()[server]);
    let idle = group.idle.borrow()[server].len() as u64;
    group.health.stats.connections(server, worker, active, idle);
}
