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

impl QuicProtocol for H3Conn {
    fn connected(&mut self, io: &mut StreamIo<'_>, ctx: &mut WorkerCtx<'_>) {
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
        // The first request stream not to be processed: the one after the last seen.
        let next = self.last_request.map_or(0, |id| id + 4);
        self.goaway = Some(next);
        if let Some((_, pending)) = &mut self.control_out {
            frame::put_goaway(pending, next);
        }
        self.flush_control(io);
        self.close_if_done(io);
    }

    fn stream_stopped(
        &mut self,
        io: &mut StreamIo<'_>,
        stream: u64,
        _code: u64,
        _ctx: &mut WorkerCtx<'_>,
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
        self.forget(stream);
        self.unacked.remove(&stream);
        self.close_if_done(io);
    }

    fn closed(&mut self, ctx: &mut WorkerCtx<'_>) {
        // The connection is gone: so is every exchange relaying to it.
        ctx.proxy_cancels.append(&mut self.abandoned);
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
