//! One HTTP/2 upstream connection driven as far as its socket allows: the connect and the TLS
//! handshake, the session's output written, frames read and what each says of a stream kept on
//! its exchange for delivery, the exchanges still waiting on a connection going away sent
//! elsewhere, a connection without streams closed when its server or a reload says so.

use std::io;

use lowlat_http::h2::client::Event;
use lowlat_http::h2::frame::ErrorCode;

use super::{Conn, H2Upstreams, Outcome, PendingHead, Phase, CLOSED, CONNECT, INVALID};
use crate::ctx::WorkerCtx;
use crate::proxy::trailers::trailer_passes;

impl H2Upstreams {
    /// Makes all the progress possible on connection `key`.
    pub(super) fn drive(&mut self, key: usize, ctx: &mut WorkerCtx<'_>) {
        loop {
            let Some(c) = self.conns.get_mut(key) else {
                return;
            };
            match c.phase {
                Phase::Connecting => {
                    if !c.writable {
                        return;
                    }
                    match c.sock.connect_result() {
                        Ok(true) => {
                            c.phase = if c.sock.is_tls() {
                                c.readable = true;
                                Phase::Handshake
                            } else {
                                Phase::Open
                            };
                        }
                        Ok(false) => {
                            c.writable = false;
                            return;
                        }
                        Err(e) => {
                            tracing::debug!(server = %c.group.cfg.servers[c.server].label, "upstream connect: {e}");
                            return self.fail_conn(key, CONNECT, ctx);
                        }
                    }
                }
                Phase::Handshake => match c.sock.handshake() {
                    Ok(true) => {
                        c.phase = Phase::Open;
                        c.writable = true;
                    }
                    Ok(false) => {
                        c.readable = false;
                        c.writable = false;
                        return;
                    }
                    Err(e) => {
                        tracing::error!(
                            group = %c.group.cfg.name,
                            server = %c.group.cfg.servers[c.server].label,
                            "upstream TLS handshake failed: {e}"
                        );
                        return self.fail_conn(key, CONNECT, ctx);
                    }
                },
                Phase::Open => {
                    self.open_waiting(key, ctx);
                    // Checked here, not in the call: a bodiless request pays one comparison.
                    if self.conns[key].uploads > 0 {
                        self.pump_uploads(key, ctx);
                    }
                    // Never fails here: a failed write is found by the read that follows.
                    self.conns[key].write_or_break();
                    if !self.read(key, ctx) {
                        return;
                    }
                    // What was read may have opened a window for a body waiting to go.
                    let moved = self.conns[key].uploads > 0 && self.pump_uploads(key, ctx);
                    let c = &self.conns[key];
                    if !c.readable && !moved && (c.session.out.len() == c.wpos || !c.writable) {
                        return;
                    }
                }
            }
        }
    }

    /// Writes what the session queued. False when the connection failed.
    pub(super) fn write(&mut self, key: usize, ctx: &mut WorkerCtx<'_>) -> bool {
        if self.conns[key].write_out().is_err() {
            self.fail_conn(key, CLOSED, ctx);
            return false;
        }
        true
    }

    /// Reads and handles frames. False when the connection ended.
    fn read(&mut self, key: usize, ctx: &mut WorkerCtx<'_>) -> bool {
        let c = &mut self.conns[key];
        if !c.readable {
            return true;
        }
        match c.sock.read(&mut c.rbuf[c.rlen..]) {
            Ok(0) => {
                let quiet = c.streams.is_empty() && c.waiting.is_empty();
                if quiet {
                    self.remove_conn(key, ctx);
                } else {
                    self.fail_conn(key, CLOSED, ctx);
                }
                false
            }
            Ok(n) => {
                // Broken, it is read until it ends (its end, not an event, says so).
                c.readable = c.broken || !c.sock.drained_after(c.rlen + n < c.rbuf.len());
                c.rlen += n;
                self.frames(key, ctx)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if c.broken {
                    // All the server sent is read; nothing more can be written.
                    self.fail_conn(key, CLOSED, ctx);
                    return false;
                }
                c.readable = false;
                true
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => true,
            Err(_) => {
                self.fail_conn(key, CLOSED, ctx);
                false
            }
        }
    }

    /// Handles the frames the read buffer holds.
    fn frames(&mut self, key: usize, ctx: &mut WorkerCtx<'_>) -> bool {
        let Self {
            conns,
            exchanges,
            touched,
            ..
        } = self;
        let c = &mut conns[key];
        let read_timeout = c.group.cfg.timeouts.read;
        let streams = &mut c.streams;
        let rbuf = &c.rbuf[..c.rlen];
        let mut going_away = false;
        let result = c.session.receive(rbuf, |e| {
            let stream = match &e {
                Event::Head { stream, .. }
                | Event::Data { stream, .. }
                | Event::Trailers { stream, .. }
                | Event::Reset { stream, .. } => *stream,
                Event::GoAway { .. } => {
                    going_away = true;
                    return;
                }
            };
            let Some(at) = streams.iter().position(|&(s, _)| s == stream) else {
                return;
            };
            let xkey = streams[at].1;
            let Some(x) = exchanges.get_mut(xkey) else {
                return;
            };
            x.deadline = ctx.now + read_timeout;
            let mut ended = false;
            match e {
                Event::Head {
                    status,
                    fields,
                    end_stream,
                    ..
                } => {
                    let mut bytes = Vec::new();
                    let mut ranges = Vec::new();
                    for (n, v) in fields.iter() {
                        let ns = bytes.len();
                        bytes.extend_from_slice(n);
                        let vs = bytes.len();
                        bytes.extend_from_slice(v);
                        ranges.push((ns..vs, vs..bytes.len()));
                    }
                    x.head = Some(Box::new(PendingHead {
                        status,
                        bytes,
                        ranges,
                        end_stream,
                    }));
                    if end_stream {
                        x.outcome = Outcome::Ended;
                        ended = true;
                    }
                }
                Event::Data {
                    data, end_stream, ..
                } => {
                    x.body.extend_from_slice(data);
                    if end_stream {
                        x.outcome = Outcome::Ended;
                        ended = true;
                    }
                }
                Event::Trailers { fields, .. } => {
                    x.trailers = Some(
                        fields
                            .iter()
                            .filter(|(n, _)| trailer_passes(n))
                            .map(|(n, v)| (n.to_vec(), v.to_vec()))
                            .collect(),
                    );
                    x.outcome = Outcome::Ended;
                    ended = true;
                }
                Event::Reset { code, .. } => {
                    tracing::debug!(stream, code, "upstream reset the stream");
                    x.outcome = Outcome::Failed {
                        kind: CLOSED,
                        retry: code == ErrorCode::RefusedStream as u32,
                    };
                    ended = true;
                }
                Event::GoAway { .. } => {}
            }
            if ended {
                streams.swap_remove(at);
            }
            touched.push(xkey);
        });
        match result {
            Ok(used) => {
                c.rbuf.copy_within(used..c.rlen, 0);
                c.rlen -= used;
            }
            Err(code) => {
                tracing::debug!(server = %c.group.cfg.servers[c.server].label, ?code, "upstream HTTP/2 connection error");
                let _ = self.write(key, ctx);
                self.fail_conn(key, INVALID, ctx);
                return false;
            }
        }
        if going_away {
            // New requests go elsewhere; those waiting here are sent again.
            let waiting = std::mem::take(&mut self.conns[key].waiting);
            for xkey in waiting {
                if let Some(x) = self.exchanges.get_mut(xkey) {
                    x.outcome = Outcome::Failed {
                        kind: CLOSED,
                        retry: true,
                    };
                    self.touched.push(xkey);
                }
            }
        }
        let c = &mut self.conns[key];
        if c.streams.is_empty() {
            c.deadline = ctx.now + c.group.cfg.keepalive_timeout;
            if c.session.going_away() || (c.group.retired.get() && c.waiting.is_empty()) {
                let _ = self.write(key, ctx);
                self.remove_conn(key, ctx);
                return false;
            }
        }
        true
    }
}

impl Conn {
    /// [`H2Upstreams::write`] for the drive's own writes, which a read follows: a failed write
    /// does not fail the connection at once. A server that answers a request and then sends
    /// GOAWAY and closes (one with a request limit per connection) resets the connection when
    /// requests written after its close arrive, and the write that meets the reset may come
    /// before the read of its GOAWAY. Read first, that GOAWAY says which streams it never
    /// processed, and they go again as refused (RFC 9113 §6.8); failed straight away, they
    /// used up their one retry, and a second such race answered them 502. So the connection
    /// is marked broken and read to its end, which fails it.
    fn write_or_break(&mut self) {
        if self.write_out().is_err() {
            self.broken = true;
            self.writable = false;
            self.readable = true;
        }
    }

    /// Writes what the session queued, as far as the socket takes it; nothing once broken.
    fn write_out(&mut self) -> io::Result<()> {
        if self.broken {
            return Ok(());
        }
        while self.wpos < self.session.out.len() {
            if !self.writable {
                return Ok(());
            }
            match self.sock.write(&self.session.out[self.wpos..]) {
                Ok(n) => self.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.writable = false;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if !self.sock.flush()? {
            self.writable = false;
        }
        self.session.out.clear();
        self.wpos = 0;
        Ok(())
    }
}
