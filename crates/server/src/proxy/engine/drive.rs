//! One HTTP/1.1 (or FastCGI) upstream connection driven through its exchange without blocking,
//! as far as its socket allows: the connect (and the PROXY header), the TLS handshake, the
//! request written, then a streaming body as it arrives, the response read (`relay`), a file
//! sent for `X-Accel-Redirect`, a tunnel pumped. A drive makes a bounded number of reads, so
//! that one fast upstream cannot hold the worker.

use std::io;

use mio::Token;

use super::{gate_of, Failure, Upstreams, RELAY_HIGH_WATER, TOKEN_BASE};
use crate::ctx::WorkerCtx;
use crate::proxy::downstream::Downstream;
use crate::proxy::fcgi::{self, FileTurn};
use crate::proxy::tunnel::{self, Pumped};
use crate::proxy::upload::{UPLOAD_LOW_WATER, UPLOAD_WAIT_LIMIT};
use crate::proxy::upstream::Phase;

/// Reads of one response a drive makes (each at most a 16 KiB buffer: 512 KiB, the turn a file
/// send or a tunnel gets) before the worker turns to its other connections and timers; the
/// relay reads on at the next turn. An upstream that sends faster than the relay goes — a body
/// to a client that keeps up, an endless run of `100 Continue` — left the socket never
/// drained, so one drive looped until the upstream stopped: every other connection of the
/// worker waited, and the first-byte timeout, checked between turns, never fired.
const RELAY_TURN_READS: usize = 32;

/// What writing a streaming body achieved.
enum Sent {
    More,
    Wait,
    Over,
}

impl Upstreams {
    /// Makes all the progress possible on connection `key` without blocking; an exchange
    /// whose response the cache keeps is relayed through the cache's tee (the job's fill
    /// until the head is relayed, the connection's while the body is).
    pub(super) fn drive(&mut self, key: usize, ctx: &mut WorkerCtx<'_>, down: &mut dyn Downstream) {
        let gated = self
            .conns
            .get(key)
            .and_then(|c| Some((gate_of(c)?, c.client?)));
        if let Some((gate, client)) = gated {
            match crate::proxy::auth::AuthGate::new(down, &gate) {
                Ok(mut judged) => self.drive_conn(key, ctx, &mut judged),
                Err(down) => return self.drive_conn(key, ctx, down),
            }
            return self.let_through(&gate, client, ctx, down);
        }
        let fill = self.conns.get(key).and_then(|c| match &c.job {
            Some(j) => j.cache.clone(),
            None => c.fill.clone(),
        });
        match fill {
            None => self.drive_conn(key, ctx, down),
            Some(fill) => match crate::cache::tee::Tee::new(down, &fill) {
                Ok(mut tee) => self.drive_conn(key, ctx, &mut tee),
                Err(down) => self.drive_conn(key, ctx, down),
            },
        }
    }

    /// [`Upstreams::drive`] for whichever `down` relays.
    fn drive_conn(&mut self, key: usize, ctx: &mut WorkerCtx<'_>, down: &mut dyn Downstream) {
        let mut reads = 0;
        loop {
            let Some(c) = self.conns.get_mut(key) else {
                return;
            };
            match c.phase {
                Phase::Idle => return self.idle_event(key, ctx),
                Phase::Tunnel => {
                    return match tunnel::pump(c, ctx, down) {
                        Pumped::Open => {}
                        Pumped::Done | Pumped::Broken => self.end_tunnel(key, ctx, down),
                    };
                }
                Phase::Connecting => {
                    if !c.writable {
                        return;
                    }
                    match c.sock.connect_result() {
                        Ok(true) if !c.preamble.is_empty() => {
                            // A fresh socket's send buffer takes these few hundred bytes whole;
                            // one that does not is treated as a failed connect.
                            let header = std::mem::take(&mut c.preamble);
                            if c.sock.write_raw(&header).ok() != Some(header.len()) {
                                return self.fail(key, Failure::Connect, ctx, down);
                            }
                            continue;
                        }
                        Ok(true) if c.sock.is_tls() => {
                            // The handshake's bytes count against the connect timeout: the
                            // deadline set at the connect's start stands.
                            c.phase = Phase::Handshake;
                            c.readable = true;
                        }
                        Ok(true) => {
                            c.phase = Phase::Sending;
                            c.deadline = ctx.now + c.group.cfg.timeouts.write;
                        }
                        Ok(false) => {
                            c.writable = false;
                            return;
                        }
                        Err(e) => {
                            tracing::debug!(server = %c.group.cfg.servers[c.server].label, "upstream connect: {e}");
                            return self.fail(key, Failure::Connect, ctx, down);
                        }
                    }
                }
                Phase::Handshake => {
                    if !c.readable && !c.writable {
                        return;
                    }
                    match self.handshake(key, ctx, down) {
                        Some(true) => {}
                        Some(false) | None => return,
                    }
                }
                Phase::Sending => {
                    let Some(job) = &c.job else {
                        return self.close(key, ctx);
                    };
                    if c.wpos == job.request.len() {
                        // The head is out; a streaming body follows as it arrives.
                        match self.send_upload(key, ctx, down) {
                            Sent::More => continue,
                            Sent::Wait => {}
                            Sent::Over => return,
                        }
                        // Nothing to write now: an upstream may answer before the body ends.
                        let c = &mut self.conns[key];
                        if c.phase == Phase::Sending && c.readable && !c.paused {
                            if yield_turn(&mut reads, key, ctx) {
                                return;
                            }
                            if self.read_response(key, ctx, down) {
                                continue;
                            }
                        }
                        return;
                    }
                    if !c.writable {
                        return;
                    }
                    // A new php-fpm connection's last record goes in a write of its own, so that
                    // the kernel tells a running script from a queued one (`fcgi_capacity`).
                    let end = match super::fcgi_capacity::split_tail(c) {
                        Some(head) if c.wpos < head => head,
                        _ => job.request.len(),
                    };
                    match c.sock.write(&job.request[c.wpos..end]) {
                        Ok(n) => {
                            c.wpos += n;
                            c.deadline = ctx.now + c.group.cfg.timeouts.write;
                            if c.wpos == job.request.len() {
                                let streams = job.upload.is_some();
                                // Through TLS the last bytes may still sit encrypted in rustls.
                                match c.sock.flush() {
                                    Ok(true) if streams => {}
                                    Ok(true) => {
                                        c.phase = Phase::Waiting;
                                        c.deadline = ctx.now + c.group.cfg.timeouts.first_byte;
                                    }
                                    Ok(false) => {
                                        c.writable = false;
                                        return;
                                    }
                                    Err(_) => {
                                        self.write_refused(key);
                                        continue;
                                    }
                                }
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            c.writable = false;
                            return;
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => {
                            self.write_refused(key);
                            continue;
                        }
                    }
                }
                Phase::File => {
                    if c.paused {
                        return;
                    }
                    return match fcgi::send_file(c, ctx, down, RELAY_HIGH_WATER, RELAY_TURN_READS) {
                        FileTurn::Done => self.finish(key, ctx, down),
                        FileTurn::Wait => {
                            if !c.paused {
                                // The turn is used up: on at the next one.
                                ctx.deferred.push(Token(TOKEN_BASE + key));
                            }
                        }
                        FileTurn::Failed => self.fail(key, Failure::Invalid, ctx, down),
                    };
                }
                Phase::Waiting | Phase::Body => {
                    if c.paused || !c.readable || yield_turn(&mut reads, key, ctx) {
                        return;
                    }
                    if !self.read_response(key, ctx, down) {
                        return;
                    }
                }
            }
        }
    }

    /// Writes what a streaming request body has ready (the head is out). `More`: progress was
    /// made; `Wait`: nothing can be written now (the socket is full, or the client has sent
    /// nothing more yet); `Over`: the exchange ended here.
    fn send_upload(
        &mut self,
        key: usize,
        ctx: &mut WorkerCtx<'_>,
        down: &mut dyn Downstream,
    ) -> Sent {
        let c = &mut self.conns[key];
        let Some(up) = c.job.as_ref().and_then(|j| j.upload.clone()) else {
            return Sent::Wait;
        };
        let mut pipe = up.borrow_mut();
        if let Some(status) = pipe.failed() {
            // The client's body was refused midway: the upstream got part of a request, which
            // only a close can end.
            drop(pipe);
            tracing::debug!(status, "request body refused while streaming");
            let relayed = c.head_relayed;
            self.close(key, ctx);
            if relayed {
                down.relay_abort(ctx);
            } else {
                down.relay_error(ctx, status);
            }
            return Sent::Over;
        }
        if pipe.done() {
            c.phase = Phase::Waiting;
            c.deadline = ctx.now + c.group.cfg.timeouts.first_byte;
            return Sent::More;
        }
        if pipe.pending().is_empty() {
            // The client's pace: its connection's body timeout bounds the wait.
            c.deadline = ctx.now + UPLOAD_WAIT_LIMIT;
            return Sent::Wait;
        }
        if !c.writable {
            return Sent::Wait;
        }
        let before = pipe.pending().len();
        match c.sock.write(pipe.pending()) {
            Ok(n) => {
                pipe.taken(n);
                c.deadline = ctx.now + c.group.cfg.timeouts.write;
                // Through TLS the bytes may still sit encrypted in rustls.
                match c.sock.flush() {
                    Ok(true) => {}
                    Ok(false) => c.writable = false,
                    Err(_) => {
                        drop(pipe);
                        self.write_refused(key);
                        return Sent::More;
                    }
                }
                // The client's side stops at the high-water mark, above the low one: crossing
                // the low one downwards is when a stopped client must read again (a client that
                // was not stopped is only driven once more, for nothing).
                let resume = before >= UPLOAD_LOW_WATER && pipe.drained();
                drop(pipe);
                if resume {
                    // The client's side stopped reading for room: it reads (and feeds) again.
                    down.upload_drained(ctx);
                }
                Sent::More
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                c.writable = false;
                Sent::Wait
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Sent::More,
            Err(_) => {
                drop(pipe);
                self.write_refused(key);
                Sent::More
            }
        }
    }

    /// The upstream took no more of the request (a reset, or its side shut): it may have
    /// answered first — gunicorn answers `413` and closes without reading the body, and the
    /// reset its close sends can reach this write before the answer is read. Whatever it sent
    /// is read before the exchange is counted failed (a read that finds nothing fails it as
    /// before: retried or answered 502); the rest of the request is not sent, so an answer
    /// ends the client's connection (`ProxyJob::answered`) and this one.
    fn write_refused(&mut self, key: usize) {
        let c = &mut self.conns[key];
        c.phase = Phase::Waiting;
        c.readable = true;
        c.writable = false;
        c.refused_write = true;
    }

    /// Advances connection `key`'s TLS handshake. `Some(true)`: done, the request can go;
    /// `Some(false)`: waiting for the socket; `None`: failed (answered or retried), a
    /// certificate refused named in the error log.
    fn handshake(
        &mut self,
        key: usize,
        ctx: &mut WorkerCtx<'_>,
        down: &mut dyn Downstream,
    ) -> Option<bool> {
        let c = &mut self.conns[key];
        match c.sock.handshake() {
            Ok(true) => {
                tracing::debug!(server = %c.group.cfg.servers[c.server].label, resumed = c.sock.resumed(), "upstream TLS handshake done");
                c.phase = Phase::Sending;
                c.writable = true;
                c.deadline = ctx.now + c.group.cfg.timeouts.write;
                Some(true)
            }
            Ok(false) => {
                c.readable = false;
                c.writable = false;
                Some(false)
            }
            Err(e) => {
                // A refused certificate is a configuration problem someone must see, not a
                // passing network failure: the error log names the server and the reason.
                tracing::error!(
                    group = %c.group.cfg.name,
                    server = %c.group.cfg.servers[c.server].label,
                    "upstream TLS handshake failed: {e}"
                );
                self.fail(key, Failure::Connect, ctx, down);
                None
            }
        }
    }
}

/// Counts one more read of connection `key` in this drive; past [`RELAY_TURN_READS`] the
/// connection is deferred to the next turn of the loop (still marked readable) and true says
/// to stop.
fn yield_turn(reads: &mut usize, key: usize, ctx: &mut WorkerCtx<'_>) -> bool {
    if *reads == RELAY_TURN_READS {
        ctx.deferred.push(Token(TOKEN_BASE + key));
        return true;
    }
    *reads += 1;
    false
}
