//! The end of a connection and what it waits for: closing (at once, or half-closed and
//! lingering), a tunnel's log line, buffers back to the pool, and the deadline armed for the
//! wait at hand (408 where a request was under way when it passes).

use std::time::Instant;

use super::{ClientTunnel, Conn, LINGER_TIMEOUT, UPSTREAM_WAIT_LIMIT};
use crate::access_log::UpstreamFields;
use crate::ctx::WorkerCtx;
use crate::wait::Wait;
use lowlat_http::ParseError;

impl Conn {
    /// All output is written and the connection is to close: close now, or half-close and linger
    /// when the client may still be sending (so it reads our answer instead of a reset).
    pub(super) fn finish_close(&mut self, ctx: &mut WorkerCtx<'_>) {
        if !self.lingering {
            self.io.close_notify();
            self.close_now(ctx);
            return;
        }
        if self.wait != Wait::Linger {
            self.io.close_notify();
            self.io.shutdown_write();
            self.wait = Wait::Linger;
            self.deadline = ctx.now + LINGER_TIMEOUT;
            self.rlen = 0;
        }
    }

    /// Closes the socket; the worker removes the connection.
    pub(crate) fn close_now(&mut self, ctx: &mut WorkerCtx<'_>) {
        if self.closed {
            return;
        }
        self.closed = true;
        if self.tunnel.is_none() && (self.relay.is_some() || self.hold.is_some()) {
            // Closed with a request unanswered: the client left (or the worker is going). A
            // tunnel's line is its own (`log_tunnel`).
            self.log_client_left(ctx);
        }
        self.hold = None;
        ctx.counters.closed += 1;
        let _ = ctx.registry.deregister(self.io.socket());
        if let Some(up) = self.upstream.take() {
            ctx.proxy_cancels.push(up);
        }
        if let Some(t) = self.tunnel.take() {
            self.log_tunnel(ctx, &t);
        }
        self.give_back(ctx);
    }

    /// The line and count of a request whose client left before its answer was complete: the
    /// status it was being answered with and the bytes that went out, or nginx's 499 ("client
    /// closed request") when no head had gone out yet — a request held back by a rate limit's
    /// `delay`, or forwarded and waiting for its upstream's head. Out of line: inlined, it
    /// took `on_event` out of the worker's loop, 23 instructions a request (callgrind).
    #[cold]
    #[inline(never)]
    pub(super) fn log_client_left(&mut self, ctx: &mut WorkerCtx<'_>) {
        let (status, bytes, started) = match (&self.relay, &self.hold) {
            (Some(relay), _) if relay.status != 0 => {
                (relay.status, relay.body_bytes, relay.started)
            }
            (Some(relay), _) => (499, 0, relay.started),
            (None, Some(_)) => (499, 0, self.head_started),
            (None, None) => return,
        };
        crate::proxy::downstream::log_relayed(
            ctx,
            self.held.as_deref(),
            self.peer,
            status,
            bytes,
            started,
            None,
        );
    }

    /// A tunnel's one line and count, when it ends (however it ends): status 101, the bytes
    /// each way, and how long it was open.
    fn log_tunnel(&self, ctx: &mut WorkerCtx<'_>, t: &ClientTunnel) {
        let started = self.relay.as_ref().map_or(ctx.now, |r| r.started);
        let took = Instant::now().saturating_duration_since(started);
        ctx.counters.response(0, 101, t.sent, took);
        if let (Some(log), Some(held)) = (ctx.access_log.as_deref_mut(), &self.held) {
            let mut entry = held.entry(
                self.peer,
                101,
                t.sent,
                took,
                ctx.worker,
                Some(UpstreamFields {
                    addr: &t.upstream,
                    status: 101,
                    time: took,
                }),
            );
            entry.received = Some(t.received);
            log.record(&entry);
        }
    }

    fn give_back(&mut self, ctx: &mut WorkerCtx<'_>) {
        if !self.rbuf.is_empty() {
            ctx.pool.give_read(std::mem::take(&mut self.rbuf));
        }
        if self.wbuf.capacity() > 0 {
            ctx.pool.give_write(std::mem::take(&mut self.wbuf));
        }
        self.rlen = 0;
        self.wpos = 0;
    }

    /// Idle keep-alive connections hold no buffers.
    pub(super) fn release_idle_buffers(&mut self, ctx: &mut WorkerCtx<'_>) {
        if self.rlen == 0 && !self.rbuf.is_empty() && !self.body_pending {
            ctx.pool.give_read(std::mem::take(&mut self.rbuf));
        }
        if self.wbuf.is_empty() && self.wbuf.capacity() > 0 && self.relay.is_none() {
            ctx.pool.give_write(std::mem::take(&mut self.wbuf));
        }
    }

    /// Sets the deadline for what the connection now waits for.
    pub(super) fn arm_deadline(&mut self, ctx: &WorkerCtx<'_>) {
        let cfg = ctx.cfg;
        if !self.write_blocked {
            self.wrote = false;
        }
        let (wait, deadline) = if self.upload_has_room() && !self.write_blocked {
            // Streaming a body: the client's pace is bounded as for any body.
            (Wait::Body, ctx.now + cfg.body_timeout)
        } else if self.relay.is_some() && !self.write_blocked {
            // The upstream side's timeouts bound the wait (and answer 504).
            (Wait::Upstream, ctx.now + UPSTREAM_WAIT_LIMIT)
        } else if let Some(hold) = &self.hold {
            // Its timer releases it; the deadline only stops a lost timer holding it for ever.
            (Wait::Held, hold.until + crate::hold::RELEASE_SLACK)
        } else if self.closing && self.lingering && self.wait == Wait::Linger {
            return;
        } else if self.wait == Wait::Handshake && self.io.is_handshaking() {
            // A total deadline from accept: a client that trickles a handshake is a slowloris.
            return;
        } else if self.write_blocked {
            let progressed = std::mem::take(&mut self.wrote);
            if self.wait == Wait::Write && !progressed {
                return;
            }
            (Wait::Write, ctx.now + cfg.write_timeout)
        } else if self.body_pending {
            (Wait::Body, ctx.now + cfg.body_timeout)
        } else if self.rlen > 0 {
            (Wait::Head, self.head_started + cfg.header_timeout)
        } else {
            (Wait::Idle, ctx.now + cfg.keepalive_timeout)
        };
        self.wait = wait;
        self.deadline = deadline;
    }

    /// The deadline passed: answer 408 where a request was under way, and close.
    pub(crate) fn expire(&mut self, ctx: &mut WorkerCtx<'_>) {
        match self.wait {
            Wait::Head | Wait::Body => {
                self.fail(ctx, ParseError::Timeout);
                self.drive_close(ctx);
            }
            Wait::Idle => {
                // Over TLS, say that the stream ends here (a graceful shutdown's idle close).
                self.io.close_notify();
                self.close_now(ctx);
            }
            Wait::Handshake | Wait::Write | Wait::Linger | Wait::Upstream | Wait::Held => {
                self.close_now(ctx);
            }
        }
    }
}
