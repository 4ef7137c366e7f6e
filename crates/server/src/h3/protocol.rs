//! An HTTP/3 connection as the protocol above QUIC (`crate::quic::QuicProtocol`): the control
//! stream opened once the handshake allows, streams read and written as the transport says,
//! STOP_SENDING, shutdown with GOAWAY, and the upstream side's way to a request stream
//! (`with_downstream`, `relay_news`).

use lowlat_http::h3::frame::{self, Settings, StreamType};
use lowlat_http::h3::{Error, ErrorCode};
use mio::Token;

use super::conn::H3Conn;
use super::relay::StreamRelay;
use crate::ctx::WorkerCtx;
use crate::proxy::downstream::{Downstream, Wake};
use crate::proxy::engine::RELAY_LOW_WATER;
use crate::quic::{is_bidi, proxy_stream, request_stream, QuicProtocol, StreamIo};

/// The last client-initiated bidirectional stream id there can be (2^62 − 4): the first
/// GOAWAY's, which refuses nothing.
const MAX_CLIENT_STREAM: u64 = (1 << 62) - 4;

/// Round trips (quinn-proto's estimate) between the two GOAWAYs: one for the first to reach the
/// client and a request it crossed to arrive, one more for a late or re-sent packet.
const FINAL_GOAWAY_ROUND_TRIPS: u32 = 2;

impl QuicProtocol for H3Conn {
    fn connected(&mut self, io: &mut StreamIo<'_>, ctx: &mut WorkerCtx<'_>) {
        self.peer = Some(io.peer());
        // Our control stream: its type, then SETTINGS (RFC 9114 §6.2.1).
        let Some(id) = io.open_uni() else {
            return self.fail(
                io,
                &Error::StreamCreation("no unidirectional stream allowed"),
            );
        };
        let mut out = Vec::with_capacity(32);
        StreamType::Control.write(&mut out);
        Settings {
            max_field_section_size: Some(u64::from(ctx.cfg.h2.max_header_list)),
            ..Settings::default()
        }
        .write(&mut out);
        self.control_out = Some((id, out));
        self.flush_control(io);
    }

    fn stream_readable(&mut self, io: &mut StreamIo<'_>, stream: u64, ctx: &mut WorkerCtx<'_>) {
        if self.closed {
            return;
        }
        if is_bidi(stream) {
            self.read_request(io, stream, ctx);
        } else {
            self.read_uni(io, stream);
        }
        self.close_if_done(io);
    }

    fn stream_writable(&mut self, io: &mut StreamIo<'_>, stream: u64, _ctx: &mut WorkerCtx<'_>) {
        if self
            .control_out
            .as_ref()
            .is_some_and(|(id, _)| *id == stream)
        {
            return self.flush_control(io);
        }
        self.pump(io, stream);
        // A relay that drained enough: its upstream is read again.
        if let Some((s, n)) = self.requests.get(&stream).zip(proxy_stream(stream)) {
            if let Some(up) = s.relay.and_then(|r| r.upstream) {
                if s.out.len() - s.out_at < RELAY_LOW_WATER {
                    self.wakes.push((up, n, Wake::Resume));
                }
            }
        }
        self.close_if_done(io);
    }

    fn stream_acked(&mut self, io: &mut StreamIo<'_>, stream: u64, _ctx: &mut WorkerCtx<'_>) {
        self.unacked.remove(&stream);
        self.close_if_done(io);
    }

    fn shut_down(&mut self, io: &mut StreamIo<'_>, _ctx: &mut WorkerCtx<'_>) {
        if self.closed || self.goaway.is_some() {
            return;
        }
        match &mut self.control_out {
            // RFC 9114 §5.2's graceful shutdown, in two steps as HTTP/2's (`crate::h2`): a
            // GOAWAY naming the last client stream there can be, so that a request already on
            // its way is processed, not refused — a refusal the client may never read, should
            // the connection close in the same flight — and, a round trip later (checked by the
            // sweep: `H3Conn::expire`), the final one with the last stream seen. The client
            // sends no new request once it has the first.
            Some((_, pending)) => {
                frame::put_goaway(pending, MAX_CLIENT_STREAM);
                self.goaway = Some(MAX_CLIENT_STREAM);
                self.final_goaway_at = Some(io.now() + FINAL_GOAWAY_ROUND_TRIPS * io.rtt());
            }
            // No control stream (yet): no GOAWAY to send; nothing to wait for.
            None => self.final_goaway(),
        }
        self.flush_control(io);
        self.close_if_done(io);
    }

    fn stream_stopped(
        &mut self,
        io: &mut StreamIo<'_>,
        stream: u64,
        _code: u64,
        ctx: &mut WorkerCtx<'_>,
    ) {
        if self
            .control_out
            .as_ref()
            .is_some_and(|(id, _)| *id == stream)
        {
            return self.fail(io, &Error::ClosedCriticalStream);
        }
        // The client no longer wants the response.
        io.reset(stream, ErrorCode::RequestCancelled.value());
        self.client_left(stream, ctx);
        self.unacked.remove(&stream);
        self.close_if_done(io);
    }

    fn closed(&mut self, ctx: &mut WorkerCtx<'_>) {
        // The connection is gone: so is every exchange relaying to it, each logged as its
        // client left it (`ReqStream::log_left`).
        ctx.proxy_cancels.append(&mut self.abandoned);
        if let Some(peer) = self.peer {
            for s in self.requests.values() {
                s.log_left(ctx, peer);
            }
        }
        for s in self.requests.values_mut() {
            if let Some(up) = s.relay.take().and_then(|r| r.upstream) {
                ctx.proxy_cancels.push(up);
            }
        }
    }

    fn expire(&mut self, io: &mut StreamIo<'_>, ctx: &mut WorkerCtx<'_>) {
        if !self.closed {
            H3Conn::expire(self, io, ctx);
        }
    }

    fn release_held(&mut self, io: &mut StreamIo<'_>, ctx: &mut WorkerCtx<'_>) {
        if !self.closed {
            H3Conn::release_held(self, io, ctx);
        }
    }

    fn with_downstream(
        &mut self,
        io: &mut StreamIo<'_>,
        stream: u32,
        f: &mut dyn FnMut(Option<&mut dyn Downstream>),
    ) {
        let id = request_stream(stream);
        if self.requests.get(&id).is_some_and(|s| s.relay.is_some()) {
            f(Some(&mut StreamRelay { conn: self, io, id }));
        } else {
            f(None);
        }
    }

    fn relay_news(&mut self, wakes: &mut Vec<(Token, u32, Wake)>, cancels: &mut Vec<Token>) {
        wakes.append(&mut self.wakes);
        cancels.append(&mut self.abandoned);
    }
}
