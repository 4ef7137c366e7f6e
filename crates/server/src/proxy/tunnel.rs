//! An upgraded exchange: after the upstream's `101 Switching Protocols` (a WebSocket), the
//! client connection and the upstream connection become one byte tunnel, driven by the worker's
//! event loop like everything else — no thread, no second runtime.
//!
//! Bytes are copied as they come, both ways, through bounded buffers with back-pressure: the
//! upstream is not read while the client has more than [`TUNNEL_HIGH_WATER`] unwritten, and the
//! client is not read while a buffer of its bytes still waits for the upstream to take it.
//! Nothing is parsed: the WebSocket frames, their masks and their close handshake are the two
//! ends' business.
//!
//! Closing follows TCP (RFC 9293 §3.6): one side's FIN becomes a half-close (`shutdown(Write)`)
//! of the other once what it sent before has been delivered, and the tunnel ends when both
//! directions are closed, or either side fails, or nothing crosses for the group's
//! `tunnel_idle` time. The upstream connection is then closed, never pooled.

use std::io;

use super::downstream::{Downstream, TunnelRead};
use super::upstream::{Sock, UpConn};
use crate::ctx::WorkerCtx;

/// Stop reading the upstream while this much of its output waits to be written to the client.
/// Smaller than a response relay's mark: a tunnel is long-lived, and many may be open at once.
pub(crate) const TUNNEL_HIGH_WATER: usize = 64 * 1024;

/// Bytes one pump moves (both ways together) before the worker turns to its other connections:
/// a tunnel streaming as fast as loopback allows would otherwise keep the loop to itself. What
/// is left continues on the next turn (the client connection is deferred, and its drive pumps
/// the tunnel again), as a large file send does.
const TUNNEL_TURN_BYTES: usize = 512 * 1024;

/// What a turn of [`pump`] left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pumped {
    /// Waiting for readiness.
    Open,
    /// Both directions closed cleanly.
    Done,
    /// A side failed (reset, write error): the tunnel is torn down.
    Broken,
}

/// Moves every byte that can move without blocking, both ways, and handles the closes.
pub(crate) fn pump(c: &mut UpConn, ctx: &mut WorkerCtx<'_>, down: &mut dyn Downstream) -> Pumped {
    let Some(t) = c.tunnel.as_deref_mut() else {
        return Pumped::Broken;
    };
    let idle = c.group.cfg.timeouts.tunnel_idle;
    let mut turn = 0usize;
    loop {
        let mut moved = false;
        if turn >= TUNNEL_TURN_BYTES {
            ctx.deferred.push(ctx.token);
            c.deadline = ctx.now + idle;
            return Pumped::Open;
        }

        // Upstream → client.
        let mut relayed = false;
        while !t.upstream_eof && c.readable && down.backlog() < TUNNEL_HIGH_WATER {
            if c.rbuf.is_empty() {
                c.rbuf = ctx.pool.take_read();
            }
            match c.sock.read(&mut c.rbuf) {
                Ok(0) => {
                    c.readable = false;
                    t.upstream_eof = true;
                    moved = true;
                }
                Ok(n) => {
                    // A short read drains the socket (edge-triggered), unless the edge said
                    // the server closed, which no later edge repeats.
                    c.readable = n == c.rbuf.len() || c.closed_seen;
                    turn += n;
                    down.tunnel_write(ctx, &c.rbuf[..n]);
                    relayed = true;
                    moved = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => c.readable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Pumped::Broken,
            }
        }
        if relayed {
            down.flush_relayed(ctx);
        }

        // Client → upstream: what is buffered first, then a fresh read.
        loop {
            if t.pos < t.len {
                if !c.writable {
                    break;
                }
                match c.sock.write(&t.buf[t.pos..t.len]) {
                    Ok(n) => {
                        t.pos += n;
                        turn += n;
                        moved = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        c.writable = false;
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return Pumped::Broken,
                }
                continue;
            }
            t.pos = 0;
            t.len = 0;
            if t.client_eof {
                break;
            }
            match down.tunnel_read(ctx, &mut t.buf) {
                TunnelRead::Data(n) => {
                    t.len = n;
                    moved = true;
                }
                TunnelRead::Blocked => break,
                TunnelRead::Eof => {
                    t.client_eof = true;
                    moved = true;
                }
                TunnelRead::Failed => return Pumped::Broken,
            }
        }

        // Half-closes, each after what its side sent before has been delivered.
        if t.client_eof && t.pos == t.len && !t.upstream_shut {
            t.upstream_shut = true;
            shutdown_write(&mut c.sock);
        }
        if t.upstream_eof && down.backlog() == 0 && !t.client_shut {
            t.client_shut = true;
            down.tunnel_shutdown(ctx);
        }
        if t.upstream_shut && t.client_shut {
            return Pumped::Done;
        }
        if moved {
            c.deadline = ctx.now + idle;
        } else {
            return Pumped::Open;
        }
    }
}

fn shutdown_write(sock: &mut Sock) {
    let _ = match sock {
        Sock::Tcp(s) => s.shutdown(std::net::Shutdown::Write),
        Sock::Unix(s) => s.shutdown(std::net::Shutdown::Write),
        Sock::Tls(t) => {
            t.shutdown_write();
            Ok(())
        }
    };
}
