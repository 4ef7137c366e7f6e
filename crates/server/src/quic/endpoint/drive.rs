//! Connections driven: after each call from the loop, every connection touched has its events
//! handed to the endpoint and to its protocol (`super::app`), sends what it has (`super::send`)
//! and files its next timer in the heap; due timers fire here.

use std::cmp::Reverse;
use std::time::Instant;

use quinn_proto::ConnectionHandle;

use super::app::handle_app_event;
use super::{client_token, QuicWorker};
use crate::ctx::WorkerCtx;

impl QuicWorker {
    /// When the earliest timer is due (perhaps a stale one: waking early is harmless).
    pub(crate) fn next_timer(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((t, _))| *t)
    }

    /// Due timers fire; their connections are driven.
    pub(crate) fn on_timers(&mut self, now: Instant, ctx: &mut WorkerCtx<'_>) {
        while let Some(&Reverse((at, key))) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            let Some(c) = self.conns.get_mut(&key) else {
                continue;
            };
            if c.timer != Some(at) {
                continue; // stale
            }
            c.timer = None;
            c.conn.handle_timeout(now);
            self.touched.push(key);
        }
        self.drive_touched(now, ctx);
        if self.timers.len() > 64 && self.timers.len() > 4 * self.conns.len() {
            self.timers = self
                .conns
                .iter()
                .filter_map(|(&k, c)| c.timer.map(|t| Reverse((t, k))))
                .collect();
        }
    }

    /// Drives every connection touched since the last time, each once.
    pub(super) fn drive_touched(&mut self, now: Instant, ctx: &mut WorkerCtx<'_>) {
        let mut touched = std::mem::take(&mut self.touched);
        touched.sort_unstable();
        touched.dedup();
        for key in touched.drain(..) {
            self.drive(key, now, ctx);
        }
        // Driving may have touched none further; keep the allocation.
        if self.touched.is_empty() {
            self.touched = touched;
        }
    }

    /// One connection: its events to the endpoint and its protocol, its packets out, its next
    /// timer filed; gone once drained.
    fn drive(&mut self, key: usize, now: Instant, ctx: &mut WorkerCtx<'_>) {
        let ch = ConnectionHandle(key);
        let Some(c) = self.conns.get_mut(&key) else {
            return;
        };
        let mut drained = false;
        // What the protocol does (a request forwarded, a stream reset) is on this client's behalf.
        let token = std::mem::replace(&mut ctx.token, client_token(key));
        loop {
            let mut progress = false;
            while let Some(event) = c.conn.poll_endpoint_events() {
                progress = true;
                drained |= event.is_drained();
                if let Some(back) = self.endpoint.handle_event(ch, event) {
                    c.conn.handle_event(back);
                }
            }
            while let Some(event) = c.conn.poll() {
                progress = true;
                handle_app_event(c, event, now, self.protocols, ctx, &mut self.handshakes);
            }
            if !progress {
                break;
            }
        }
        if let Some(proto) = c.proto.as_mut() {
            proto.relay_news(&mut self.wake_buf, ctx.proxy_cancels);
            let client = client_token(key);
            self.wakes.extend(
                self.wake_buf
                    .drain(..)
                    .map(|(up, stream, wake)| (client, up, stream, wake)),
            );
        }
        if drained {
            if c.handshaking {
                self.handshakes = self.handshakes.saturating_sub(1);
            }
            if let Some(mut proto) = c.proto.take() {
                proto.closed(ctx);
            }
            ctx.token = token;
            self.conns.remove(&key);
            return;
        }
        ctx.token = token;
        self.transmit(key, now);
        let Some(c) = self.conns.get_mut(&key) else {
            return;
        };
        let next = c.conn.poll_timeout();
        if next != c.timer {
            c.timer = next;
            if let Some(t) = next {
                self.timers.push(Reverse((t, key)));
            }
        }
    }
}
