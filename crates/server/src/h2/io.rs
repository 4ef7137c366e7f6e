//! An HTTP/2 connection's bytes: reading into its buffer and cutting it into frames, writing
//! its output, and the end of the connection (linger, close).
use std::io;
use std::time::Duration;

use lowlat_http::h2::frame::{self, ErrorCode, FrameHeader, HEADER_LEN};

use super::conn::H2Conn;
use super::stream::State;
use crate::ctx::WorkerCtx;
use crate::transport::Flushed;
use crate::wait::Wait;

/// How long a closing connection waits for the client to read our GOAWAY and close.
const LINGER: Duration = Duration::from_secs(2);

impl H2Conn {
    /// One read into the free end of the read buffer. `Some(true)`: bytes arrived;
    /// `Some(false)`: nothing more now; `None`: the connection is gone.
    pub(super) fn read(&mut self, ctx: &mut WorkerCtx<'_>) -> Option<bool> {
        if self.rbuf.is_empty() {
            self.rbuf = ctx.pool.take_read();
        }
        if self.rlen == self.rbuf.len() {
            // `process` left one incomplete frame at the start, larger than the buffer (it
            // refused any larger than SETTINGS_MAX_FRAME_SIZE): make room for all of it.
            let need = FrameHeader::parse(&self.rbuf[..self.rlen])
                .map_or(0, |h| HEADER_LEN + h.len as usize);
            if need <= self.rbuf.len() {
                self.read_ready = false;
                return Some(false);
            }
            self.rbuf.resize(need, 0);
        }
        loop {
            return match self.io.read(&mut self.rbuf[self.rlen..]) {
                Ok(r) if r.n == 0 => {
                    self.read_ready = false;
                    if self.lingering || self.streams.is_empty() && self.wpos == self.wbuf.len() {
                        self.close_now(ctx);
                        return None;
                    }
                    // Streams in flight are still answered; then the connection closes.
                    self.eof = true;
                    self.abandon_unfinishable(ctx);
                    Some(false)
                }
                Ok(r) => {
                    self.read_ready = r.more || self.fin_seen;
                    if self.lingering {
                        return Some(false);
                    }
                    self.rlen += r.n;
                    Some(true)
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.read_ready = false;
                    Some(false)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.close_now(ctx);
                    None
                }
            };
        }
    }

    /// Handles every complete frame in the read buffer.
    pub(super) fn process(&mut self, ctx: &mut WorkerCtx<'_>) {
        let mut pos = 0;
        if !self.preface_seen {
            let n = self.rlen.min(frame::PREFACE.len());
            if self.rbuf[..n] != frame::PREFACE[..n] {
                self.conn_error(ErrorCode::Protocol, "bad preface");
                return;
            }
            if n < frame::PREFACE.len() {
                return;
            }
            self.preface_seen = true;
            pos = n;
        }
        let max_frame = ctx.cfg.h2.max_frame_size as usize;
        while !self.closing {
            let Some(h) = FrameHeader::parse(&self.rbuf[pos..self.rlen]) else {
                break;
            };
            let len = h.len as usize;
            if len > max_frame {
                self.conn_error(
                    ErrorCode::FrameSize,
                    "frame larger than SETTINGS_MAX_FRAME_SIZE",
                );
                break;
            }
            if self.rlen - pos < HEADER_LEN + len {
                break;
            }
            let start = pos + HEADER_LEN;
            pos = start + len;
            // The payload is moved out of the way of `&mut self` by range, not copied.
            self.frame(ctx, h, start..start + len);
        }
        if self.closing {
            self.rlen = 0;
            return;
        }
        self.rbuf.copy_within(pos..self.rlen, 0);
        self.rlen -= pos;
    }

    /// Writes pending output. True when all of it is written.
    pub(super) fn flush(&mut self, ctx: &mut WorkerCtx<'_>) -> bool {
        if self.write_blocked {
            return false;
        }
        let before = self.wpos;
        let flushed = self.io.write_from(&self.wbuf, &mut self.wpos, false);
        self.wrote |= self.wpos > before;
        match flushed {
            Flushed::Done => {}
            Flushed::Blocked => {
                self.write_blocked = true;
                return false;
            }
            Flushed::Failed => {
                self.close_now(ctx);
                return false;
            }
        }
        self.wbuf.clear();
        self.wpos = 0;
        if self.io.has_pending() {
            self.write_blocked = true;
            self.wrote = true;
            return false;
        }
        true
    }

    /// Everything is written and the connection is to end: GOAWAY if not sent yet, then
    /// half-close and let the client read our last frames (a close with its bytes unread
    /// would reset them away); what it still sends is discarded until it closes.
    pub(super) fn begin_linger(&mut self, ctx: &mut WorkerCtx<'_>) {
        if !self.goaway {
            self.go_away(ErrorCode::NoError);
            if !self.flush(ctx) {
                return;
            }
        }
        if self.eof || ctx.shutting_down && !self.closing {
            // The client has closed its side (it cannot answer our GOAWAY), or the server is
            // stopping with nothing in flight here: everything is written, nothing to wait for.
            self.io.close_notify();
            let _ = self.flush(ctx);
            self.close_now(ctx);
            return;
        }
        self.io.close_notify();
        self.io.shutdown_write();
        self.lingering = true;
        self.closing = true;
        self.wait = Wait::Linger;
        self.deadline = ctx.now + LINGER;
        self.rlen = 0;
    }

    /// Closes the socket; the worker removes the connection.
    pub(crate) fn close_now(&mut self, ctx: &mut WorkerCtx<'_>) {
        if self.closed {
            return;
        }
        self.closed = true;
        ctx.counters.closed += 1;
        let _ = ctx.registry.deregister(self.io.socket());
        if self.wbuf.capacity() > 0 {
            ctx.pool.give_write(std::mem::take(&mut self.wbuf));
        }
        if !self.rbuf.is_empty() {
            ctx.pool.give_read(std::mem::take(&mut self.rbuf));
        }
        self.rlen = 0;
        for s in self.streams.drain(..) {
            super::relay::log_left(ctx, self.peer, &s);
            if let Some(up) = s.relay.and_then(|r| r.upstream) {
                ctx.proxy_cancels.push(up);
            }
        }
    }

    /// Buffers go back to the worker's pool whenever they are empty, as HTTP/1.1's do: many
    /// connections then share a few warm buffers instead of each holding its own.
    pub(super) fn release_idle_buffers(&mut self, ctx: &mut WorkerCtx<'_>) {
        if self.rlen == 0 && !self.rbuf.is_empty() {
            ctx.pool.give_read(std::mem::take(&mut self.rbuf));
        }
        if self.wbuf.len() == self.wpos && self.wbuf.capacity() > 0 {
            self.wbuf.clear();
            self.wpos = 0;
            ctx.pool.give_write(std::mem::take(&mut self.wbuf));
        }
    }

    /// The client closed its side: it will send no more DATA, so a request body still under way
    /// can never complete, nor a header block split over CONTINUATION frames. Their streams go.
    fn abandon_unfinishable(&mut self, ctx: &mut WorkerCtx<'_>) {
        // A stream still receiving (a body streaming to an upstream, a tunnel) cannot finish:
        // its upstream exchange is cancelled with it — left running, it would later deliver to
        // whatever connection and stream reuse its token and id.
        let peer = self.peer;
        self.streams.retain(|s| {
            if s.state != State::Open {
                return true;
            }
            super::relay::log_left(ctx, peer, s);
            if let Some(up) = s.relay.and_then(|r| r.upstream) {
                ctx.proxy_cancels.push(up);
            }
            false
        });
        self.pending = None;
    }

    /// After the client closed its side, whether the streams left can still finish: it will
    /// never send WINDOW_UPDATE again, so a stream that waits for window never will.
    pub(super) fn peer_gone_and_stuck(&self) -> bool {
        self.eof && !self.lingering && !self.streams.is_empty() && !self.can_send()
    }
}
