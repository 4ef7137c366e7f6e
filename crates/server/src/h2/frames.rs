//! The frames a client sends, one handler each: DATA, HEADERS and CONTINUATION (a header block
//! decoded into a request), SETTINGS, RST_STREAM, PRIORITY, PING, GOAWAY; the protocol errors
//! they can raise (RFC 9113 §5.4, §6).
use lowlat_http::h2::frame::{self, flag, kind, ErrorCode, FrameHeader, MAX_WINDOW};
use lowlat_http::h2::HeadError;
use lowlat_http::ParseError;

use super::conn::{remember, H2Conn, Pending, CONNECTION_WINDOW};
use super::stream::{State, Stream};
use crate::ctx::WorkerCtx;
use crate::proxy::headers::StreamedBody;

/// CONTINUATION frames one header block may use (CVE-2024-27316 sends endless ones).
const MAX_CONTINUATIONS: u32 = 64;

impl H2Conn {
    pub(super) fn frame(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        h: FrameHeader,
        p: std::ops::Range<usize>,
    ) {
        if !self.settings_seen {
            if h.kind != kind::SETTINGS || h.has(flag::ACK) {
                self.conn_error(
                    ErrorCode::Protocol,
                    "the preface must be followed by SETTINGS",
                );
                return;
            }
            self.settings_seen = true;
        }
        if let Some(pending) = &self.pending {
            if h.kind != kind::CONTINUATION || h.stream != pending.stream {
                self.conn_error(ErrorCode::Protocol, "header block interrupted");
                return;
            }
        }
        self.handle(ctx, h, p);
        if !self.abandoned.is_empty() {
            // Cancelled now, while their tokens are still theirs.
            ctx.proxy_cancels.append(&mut self.abandoned);
        }
        if self.resets > ctx.cfg.h2.max_resets_per_sec {
            // Resets the client sent or provoked (see `stream_error`), in the current second:
            // the window is renewed only when the count is over (an ordinary frame pays one
            // comparison).
            self.count_window(ctx);
            if self.resets > ctx.cfg.h2.max_resets_per_sec {
                self.conn_error(ErrorCode::EnhanceYourCalm, "too many stream resets");
            }
        }
    }

    fn handle(&mut self, ctx: &mut WorkerCtx<'_>, h: FrameHeader, p: std::ops::Range<usize>) {
        match h.kind {
            kind::DATA => self.data(ctx, h, p),
            kind::HEADERS => self.headers(ctx, h, p),
            kind::PRIORITY => {
                self.count_control(ctx);
                if h.stream == 0 {
                    self.conn_error(ErrorCode::Protocol, "PRIORITY on stream 0");
                } else if p.len() != 5 {
                    self.stream_error(h.stream, ErrorCode::FrameSize);
                } else if frame::dependency(&self.rbuf[p]) == Some(h.stream) {
                    self.stream_error(h.stream, ErrorCode::Protocol);
                }
            }
            kind::RST_STREAM => self.rst_stream(ctx, h, p),
            kind::SETTINGS => self.settings(ctx, h, p),
            kind::PUSH_PROMISE => {
                self.conn_error(ErrorCode::Protocol, "PUSH_PROMISE from a client")
            }
            kind::PING => {
                self.count_control(ctx);
                if h.stream != 0 {
                    self.conn_error(ErrorCode::Protocol, "PING on a stream");
                } else if p.len() != 8 {
                    self.conn_error(ErrorCode::FrameSize, "PING of the wrong size");
                } else if !h.has(flag::ACK) {
                    let mut data = [0u8; 8];
                    data.copy_from_slice(&self.rbuf[p]);
                    frame::write_ping(&mut self.wbuf, true, &data);
                } else if self.drain_started.is_some()
                    && !self.goaway
                    && self.rbuf[p] == super::conn::DRAIN_PING[..]
                {
                    // The client has read shutdown's first GOAWAY: every stream it opened
                    // before that has arrived, so the final GOAWAY refuses none.
                    self.go_away(ErrorCode::NoError);
                }
            }
            kind::GOAWAY => {
                if h.stream != 0 {
                    self.conn_error(ErrorCode::Protocol, "GOAWAY on a stream");
                } else {
                    self.peer_goaway = true;
                }
            }
            kind::WINDOW_UPDATE => self.window_update(ctx.now, h, p),
            kind::CONTINUATION => self.continuation(ctx, h, p),
            // Unknown frame types are ignored (RFC 9113 §4.1).
            _ => {}
        }
    }

    pub(super) fn data(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        h: FrameHeader,
        p: std::ops::Range<usize>,
    ) {
        if h.stream == 0 {
            return self.conn_error(ErrorCode::Protocol, "DATA on stream 0");
        }
        let len = p.len() as i64;
        self.recv_window -= len;
        if self.recv_window < 0 {
            return self.conn_error(ErrorCode::FlowControl, "connection window exceeded");
        }
        // What was received counts against the connection's window whatever becomes of it.
        if self.recv_window < i64::from(CONNECTION_WINDOW / 2) {
            let inc = i64::from(CONNECTION_WINDOW) - self.recv_window;
            frame::write_window_update(&mut self.wbuf, 0, inc as u32);
            self.recv_window += inc;
        }
        let Ok(payload) = frame::unpad(h.flags, &self.rbuf[p.clone()]) else {
            return self.conn_error(ErrorCode::Protocol, "bad padding");
        };
        // Without the pad-length byte before and the padding after.
        let skip = usize::from(h.has(flag::PADDED));
        let payload_range = p.start + skip..p.start + skip + payload.len();
        let end_stream = h.has(flag::END_STREAM);
        if payload_range.is_empty() && !end_stream {
            self.count_control(ctx);
        }
        let Some(i) = self.streams.iter().position(|s| s.id == h.stream) else {
            if h.stream > self.last_stream {
                return self.conn_error(ErrorCode::Protocol, "DATA on an idle stream");
            }
            if self.reset_ids.contains(&h.stream) {
                return;
            }
            return self.conn_error(ErrorCode::StreamClosed, "DATA on a closed stream");
        };
        if self.streams[i].state != State::Open {
            return self.stream_error(h.stream, ErrorCode::StreamClosed);
        }
        let max_body = ctx.cfg.max_body_bytes;
        let initial = i64::from(ctx.cfg.h2.initial_window);
        let s = &mut self.streams[i];
        s.recv_window -= len;
        if s.recv_window < 0 {
            return self.stream_error(h.stream, ErrorCode::FlowControl);
        }
        self.last_progress = ctx.now;
        if s.upload.is_some() {
            return self.upload_data(ctx, i, payload_range, end_stream);
        }
        if s.tunnel.is_some() {
            return self.tunnel_data(i, payload_range, end_stream);
        }
        if s.body.len() as u64 + payload_range.len() as u64 > max_body {
            let head = s.head.take();
            return self.refuse(ctx, h.stream, ParseError::BodyTooLarge, head.as_deref());
        }
        s.body.extend_from_slice(&self.rbuf[payload_range]);
        if end_stream {
            return self.request_complete(ctx, i);
        }
        if s.recv_window < initial / 2 {
            let inc = initial - s.recv_window;
            s.recv_window += inc;
            frame::write_window_update(&mut self.wbuf, h.stream, inc as u32);
        }
    }

    /// DATA on a stream whose body streams to an upstream: the bytes go to the upload (dropped
    /// once the upstream wants no more: it answered first), the stream's window is given back
    /// only while the upload has room — so a client sends no faster than the upstream takes —
    /// and the end is checked against the declared length (400 to the upstream side if it
    /// differs, which cuts the request there).
    fn upload_data(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        i: usize,
        payload: std::ops::Range<usize>,
        end_stream: bool,
    ) {
        let initial = i64::from(ctx.cfg.h2.initial_window);
        let s = &mut self.streams[i];
        let Some(up) = s.upload.as_deref_mut() else {
            return;
        };
        let room = up.put(&self.rbuf[payload]);
        if end_stream {
            up.finish(std::iter::empty());
        }
        if let Some(token) = s.relay.and_then(|r| r.upstream) {
            self.upload_wakes.push((token, s.id));
        }
        if end_stream {
            s.upload = None;
            s.state = State::HalfClosedRemote;
        } else if room && s.recv_window < initial / 2 {
            let inc = initial - s.recv_window;
            s.recv_window += inc;
            frame::write_window_update(&mut self.wbuf, s.id, inc as u32);
        }
    }

    /// Trailers ended stream `i`'s streaming body: they go to the upload (those that may pass),
    /// which ends.
    fn upload_trailers(&mut self, i: usize) {
        let s = &mut self.streams[i];
        let Some(mut up) = s.upload.take() else {
            return;
        };
        s.state = State::HalfClosedRemote;
        up.finish(self.head.fields().map(|(n, v)| (n.as_bytes(), v)));
        if let Some(token) = s.relay.and_then(|r| r.upstream) {
            self.upload_wakes.push((token, s.id));
        }
    }

    /// The upstream side took enough of stream `id`'s upload: the client may send more.
    pub(crate) fn upload_room(&mut self, ctx: &WorkerCtx<'_>, id: u32) {
        let initial = i64::from(ctx.cfg.h2.initial_window);
        let Some(s) = self.streams.iter_mut().find(|s| s.id == id) else {
            return;
        };
        let drained = s.upload.as_ref().is_some_and(|u| u.drained());
        if drained && s.recv_window < initial / 2 {
            let inc = initial - s.recv_window;
            s.recv_window += inc;
            frame::write_window_update(&mut self.wbuf, s.id, inc as u32);
        }
    }

    pub(super) fn headers(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        h: FrameHeader,
        p: std::ops::Range<usize>,
    ) {
        if h.stream == 0 {
            return self.conn_error(ErrorCode::Protocol, "HEADERS on stream 0");
        }
        if h.stream.is_multiple_of(2) {
            return self.conn_error(ErrorCode::Protocol, "even stream id from a client");
        }
        let Ok(mut fragment) = frame::unpad(h.flags, &self.rbuf[p.clone()]) else {
            return self.conn_error(ErrorCode::Protocol, "bad padding");
        };
        let mut start = p.start + usize::from(h.has(flag::PADDED));
        let mut self_dependent = false;
        if h.has(flag::PRIORITY) {
            if fragment.len() < 5 {
                return self.conn_error(ErrorCode::FrameSize, "HEADERS too short for priority");
            }
            self_dependent = frame::dependency(fragment) == Some(h.stream);
            fragment = &fragment[5..];
            start += 5;
        }
        let fragment = start..start + fragment.len();
        let end_stream = h.has(flag::END_STREAM);
        if h.has(flag::END_HEADERS) {
            // Decoded straight from the read buffer: the common case copies nothing.
            let rbuf = std::mem::take(&mut self.rbuf);
            self.header_block(ctx, h.stream, &rbuf[fragment], end_stream, self_dependent);
            self.rbuf = rbuf;
        } else {
            self.block.clear();
            self.block.extend_from_slice(&self.rbuf[fragment]);
            self.pending = Some(Pending {
                stream: h.stream,
                end_stream,
                self_dependent,
                frames: 0,
            });
        }
    }

    pub(super) fn continuation(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        h: FrameHeader,
        p: std::ops::Range<usize>,
    ) {
        let Some(pending) = &mut self.pending else {
            return self.conn_error(ErrorCode::Protocol, "CONTINUATION without HEADERS");
        };
        pending.frames += 1;
        let limit = ctx.cfg.h2.max_header_list as usize + ctx.cfg.h2.max_frame_size as usize;
        if pending.frames > MAX_CONTINUATIONS || self.block.len() + p.len() > limit {
            return self.conn_error(ErrorCode::EnhanceYourCalm, "header block too long");
        }
        if p.is_empty() && !h.has(flag::END_HEADERS) {
            self.count_control(ctx);
        }
        self.block.extend_from_slice(&self.rbuf[p]);
        if h.has(flag::END_HEADERS) {
            let Some(pending) = self.pending.take() else {
                return;
            };
            let block = std::mem::take(&mut self.block);
            self.header_block(
                ctx,
                pending.stream,
                &block,
                pending.end_stream,
                pending.self_dependent,
            );
            self.block = block;
        }
    }

    /// A complete header block: a new request, trailers, or an error.
    pub(super) fn header_block(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        id: u32,
        block: &[u8],
        end_stream: bool,
        self_dependent: bool,
    ) {
        let max_list = ctx.cfg.h2.max_header_list as usize;
        if let Some(i) = self.streams.iter().position(|s| s.id == id) {
            // Trailers, or a second head on a stream already answered.
            let result = self.head.decode(&mut self.decoder, block, max_list, true);
            if result == Err(HeadError::Compression) {
                return self.conn_error(ErrorCode::Compression, "bad header block");
            }
            if self.streams[i].state != State::Open {
                return self.stream_error(id, ErrorCode::StreamClosed);
            }
            if !end_stream || result.is_err() || self.streams[i].tunnel.is_some() {
                return self.stream_error(id, ErrorCode::Protocol);
            }
            if self.streams[i].upload.is_some() {
                // Trailers end a body streaming to an upstream, and go on with it.
                return self.upload_trailers(i);
            }
            return self.request_complete(ctx, i);
        }
        if id <= self.last_stream {
            let result = self.head.decode(&mut self.decoder, block, max_list, true);
            if result == Err(HeadError::Compression) {
                return self.conn_error(ErrorCode::Compression, "bad header block");
            }
            if self.closed_ids.contains(&id) || self.reset_ids.contains(&id) {
                return self.conn_error(ErrorCode::StreamClosed, "HEADERS on a closed stream");
            }
            return self.conn_error(ErrorCode::Protocol, "stream id lower than an earlier one");
        }
        self.last_stream = id;
        let result = self.head.decode(&mut self.decoder, block, max_list, false);
        match result {
            Err(HeadError::Compression) => {
                return self.conn_error(ErrorCode::Compression, "bad header block");
            }
            Err(HeadError::Malformed) => return self.stream_error(id, ErrorCode::Protocol),
            Err(HeadError::TooLarge) => {
                self.last_progress = ctx.now;
                let head = std::mem::take(&mut self.head);
                self.refuse(ctx, id, ParseError::HeadTooLarge, Some(&head));
                self.head = head;
                return;
            }
            Ok(()) => {}
        }
        if self_dependent {
            return self.stream_error(id, ErrorCode::Protocol);
        }
        if self.goaway {
            // After our GOAWAY, new streams are not processed (the client retries them).
            return self.stream_error(id, ErrorCode::RefusedStream);
        }
        if self.streams.len() >= ctx.cfg.h2.max_streams as usize {
            return self.stream_error(id, ErrorCode::RefusedStream);
        }
        self.last_progress = ctx.now;
        if self.head.protocol().is_some() {
            return self.extended_connect(ctx, id, end_stream);
        }
        if end_stream {
            if self.head.content_length.is_some_and(|n| n > 0) {
                return self.stream_error(id, ErrorCode::Protocol);
            }
            let head = std::mem::take(&mut self.head);
            self.respond(ctx, id, &head, &[], ctx.now, None, None, false);
            self.head = head;
            return;
        }
        // A body for an upstream streams as its DATA frames come when it is long or of unknown
        // length (as HTTP/1.1's chunked ones do); others are read whole, up to --max-body.
        let streamed = ctx.router.streamed_body(&self.head, ctx.cfg.max_body_bytes);
        if streamed.is_none()
            && self
                .head
                .content_length
                .is_some_and(|n| n > ctx.cfg.max_body_bytes)
        {
            let head = std::mem::take(&mut self.head);
            self.refuse(ctx, id, ParseError::BodyTooLarge, Some(&head));
            self.head = head;
            return;
        }
        if let Some(framing) = streamed {
            self.answer_while_receiving(ctx, id, None, Some(framing));
            return;
        }
        let head = std::mem::take(&mut self.head);
        self.streams.push(Stream::receiving(
            id,
            head,
            i64::from(self.peer_settings.initial_window_size),
            i64::from(ctx.cfg.h2.initial_window),
            ctx.now,
        ));
        self.last_progress = ctx.now;
    }

    /// An extended CONNECT (RFC 8441 §4, a WebSocket over HTTP/2): the stream stays open both
    /// ways, its DATA frames kept for the tunnel the proxy opens once its upstream switches
    /// protocols — or dropped, with the stream, when the request is answered otherwise.
    fn extended_connect(&mut self, ctx: &mut WorkerCtx<'_>, id: u32, end_stream: bool) {
        if end_stream || self.head.content_length.is_some() {
            // A tunnel's request has no body and no end (RFC 9113 §8.5).
            return self.stream_error(id, ErrorCode::Protocol);
        }
        self.answer_while_receiving(ctx, id, Some(Box::default()), None);
    }

    /// Routes the head just decoded while its stream stays open for what the client still
    /// sends (a body that streams to an upstream, or a tunnel's bytes): the stream gets its
    /// entry, and its receive window, first.
    fn answer_while_receiving(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        id: u32,
        tunnel: Option<Box<super::stream::StreamTunnel>>,
        streamed: Option<StreamedBody>,
    ) {
        let i = self.streams.len();
        let mut s = Stream::sending(
            id,
            i64::from(self.peer_settings.initial_window_size),
            ctx.now,
        );
        s.state = State::Open;
        s.recv_window = i64::from(ctx.cfg.h2.initial_window);
        s.tunnel = tunnel;
        self.streams.push(s);
        let head = std::mem::take(&mut self.head);
        self.respond(ctx, id, &head, &[], ctx.now, Some(i), streamed, false);
        self.head = head;
    }

    /// DATA on a tunnel stream: the client's bytes, kept until the upstream side takes them
    /// (`super::relay`). No window is given back here: the stream's receive window bounds
    /// what waits.
    fn tunnel_data(&mut self, i: usize, payload: std::ops::Range<usize>, end_stream: bool) {
        let s = &mut self.streams[i];
        let Some(t) = s.tunnel.as_deref_mut() else {
            return;
        };
        if t.client_eof {
            let id = s.id;
            return self.stream_error(id, ErrorCode::StreamClosed);
        }
        if t.taken == t.inbound.len() {
            t.inbound.clear();
            t.taken = 0;
        }
        t.inbound.extend_from_slice(&self.rbuf[payload]);
        if end_stream {
            t.client_eof = true;
        }
        if let Some(token) = s.relay.and_then(|r| r.upstream) {
            self.upload_wakes.push((token, s.id));
        }
    }

    pub(super) fn settings(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        h: FrameHeader,
        p: std::ops::Range<usize>,
    ) {
        self.count_control(ctx);
        if h.stream != 0 {
            return self.conn_error(ErrorCode::Protocol, "SETTINGS on a stream");
        }
        if h.has(flag::ACK) {
            if !p.is_empty() {
                return self.conn_error(ErrorCode::FrameSize, "SETTINGS ACK with a payload");
            }
            self.settings_deadline = None;
            return;
        }
        let old_window = i64::from(self.peer_settings.initial_window_size);
        if let Err(code) = self.peer_settings.apply(&self.rbuf[p]) {
            return self.conn_error(code, "bad SETTINGS");
        }
        self.encoder
            .set_peer_table_size(self.peer_settings.header_table_size);
        let delta = i64::from(self.peer_settings.initial_window_size) - old_window;
        if delta != 0 {
            for s in &mut self.streams {
                s.send_window += delta;
                if s.send_window > MAX_WINDOW {
                    return self.conn_error(ErrorCode::FlowControl, "window above 2^31-1");
                }
            }
            self.last_progress = ctx.now;
        }
        frame::write_settings_ack(&mut self.wbuf);
    }

    pub(super) fn rst_stream(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        h: FrameHeader,
        p: std::ops::Range<usize>,
    ) {
        if h.stream == 0 {
            return self.conn_error(ErrorCode::Protocol, "RST_STREAM on stream 0");
        }
        if p.len() != 4 {
            return self.conn_error(ErrorCode::FrameSize, "RST_STREAM of the wrong size");
        }
        if h.stream > self.last_stream {
            return self.conn_error(ErrorCode::Protocol, "RST_STREAM on an idle stream");
        }
        self.count_window(ctx);
        self.resets += 1;
        self.control_frames += 1;
        if self.resets > ctx.cfg.h2.max_resets_per_sec {
            return self.conn_error(ErrorCode::EnhanceYourCalm, "too many stream resets");
        }
        if let Some(i) = self.streams.iter().position(|s| s.id == h.stream) {
            let s = self.streams.swap_remove(i);
            // A reset stream's upstream request is abandoned at once.
            if let Some(up) = s.relay.and_then(|r| r.upstream) {
                ctx.proxy_cancels.push(up);
            }
            super::relay::log_tunnel(ctx, self.peer, &s);
            super::relay::log_left(ctx, self.peer, &s);
        }
        // The client closed it: anything more it sends on it is its error (STREAM_CLOSED).
        remember(&mut self.closed_ids, h.stream);
    }
}
