//! One HTTP/2 connection (RFC 9113) on the worker's event loop: the preface and SETTINGS, every
//! frame the client sends, streams and their flow control, and the responses.
//!
//! The cycle mirrors HTTP/1.1's (`crate::conn`): flush what is pending, handle every complete
//! frame in the read buffer — a request that is complete is answered at once, through the same
//! router and handlers — then send response bodies in DATA frames as the windows allow, one
//! frame per stream per round so streams share the connection fairly, and read again. All the
//! frames one readiness event produces leave in one write. Reading stops while a lot of output
//! waits, so a client that does not read what it asked for gets back-pressure, not memory.
//!
//! Defences: every size is bounded (frames, header lists, a header block across CONTINUATION
//! frames, bodies, streams at once); control frames (PING, SETTINGS, PRIORITY, resets, empty
//! frames) and stream resets are counted per second and a client past either limit gets GOAWAY
//! `ENHANCE_YOUR_CALM` (the rapid-reset, ping-flood and settings-flood shapes); a response
//! stalled on a window the client never opens is bounded by the write timeout, a body that
//! stops arriving by the body timeout, an idle connection by the keep-alive timeout.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use lowlat_http::h2::frame::{self, flag, kind, ErrorCode, FrameHeader, HEADER_LEN, MAX_WINDOW};
use lowlat_http::h2::{Decoder, Encoder, HeadError, RequestHead, Settings};
use lowlat_http::request::{Header, Method, Request};
use lowlat_http::Version;

use super::stream::{translate_head, State, Stream};
use crate::conn::Wait;
use crate::handler::Response;
use crate::transport::{Flushed, Transport};
use crate::worker::WorkerCtx;

/// Stop reading while this much output waits to be written.
const OUTPUT_HIGH_WATER: usize = 256 * 1024;
/// Most response body bytes written per drive turn before other connections get theirs.
const DATA_TURN_BYTES: usize = 512 * 1024;
/// Recently closed stream ids remembered, to tell a frame on a closed stream (STREAM_CLOSED)
/// from one on a stream that never existed (PROTOCOL_ERROR).
const CLOSED_MEMORY: usize = 128;
/// CONTINUATION frames one header block may use (CVE-2024-27316 sends endless ones).
const MAX_CONTINUATIONS: u32 = 64;
/// How long a closing connection waits for the client to read our GOAWAY and close.
const LINGER: Duration = Duration::from_secs(2);
/// The connection's receive window: room for many streams' bodies at once.
const CONNECTION_WINDOW: u32 = 16 << 20;

/// A header block being received across CONTINUATION frames.
struct Pending {
    stream: u32,
    end_stream: bool,
    self_dependent: bool,
    frames: u32,
}

/// One HTTP/2 connection.
pub(crate) struct H2Conn {
    pub(crate) io: Transport,
    peer: SocketAddr,
    rbuf: Vec<u8>,
    rlen: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    /// A handler's response in HTTP/1.1 form, before translation.
    res_buf: Vec<u8>,
    res_fields: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>,
    decoder: Decoder,
    encoder: Encoder,
    /// The head being decoded (moved into its stream when a body follows).
    head: Box<RequestHead>,
    /// A header block split over CONTINUATION frames, and what it belongs to.
    block: Vec<u8>,
    pending: Option<Pending>,
    streams: Vec<Stream>,
    /// Stream to serve first in the next round of DATA frames.
    rr: usize,
    /// Streams closed normally or reset by the client.
    closed_ids: VecDeque<u32>,
    /// Streams we reset: frames the client had already sent on them are ignored.
    reset_ids: VecDeque<u32>,
    /// Highest stream id the client opened.
    last_stream: u32,
    peer_settings: Settings,
    send_window: i64,
    recv_window: i64,
    /// The preface arrived, then a SETTINGS frame.
    preface_seen: bool,
    settings_seen: bool,
    /// Our SETTINGS wait to be acknowledged by then.
    settings_deadline: Option<Instant>,
    /// GOAWAY sent: no new streams; the connection closes when the last one is done.
    goaway: bool,
    /// The client sent GOAWAY.
    peer_goaway: bool,
    /// A connection error: close once the output is written.
    closing: bool,
    lingering: bool,
    read_ready: bool,
    write_blocked: bool,
    wrote: bool,
    eof: bool,
    fin_seen: bool,
    pub(crate) closed: bool,
    /// Counting window for floods.
    flood_window: Instant,
    control_frames: u32,
    resets: u32,
    /// Last time a stream waiting for window got some, or a body byte arrived.
    last_progress: Instant,
    started: Instant,
    pub(crate) wait: Wait,
    pub(crate) deadline: Instant,
}

impl H2Conn {
    /// Takes over a connection whose first bytes (`rbuf[..rlen]`) start HTTP/2: ALPN chose
    /// `h2`, or `--h2c` and the preface. Queues our SETTINGS.
    pub(crate) fn new(
        io: Transport,
        peer: SocketAddr,
        mut rbuf: Vec<u8>,
        rlen: usize,
        ctx: &mut WorkerCtx<'_>,
    ) -> Self {
        let cfg = &ctx.cfg.h2;
        if rbuf.len() < crate::pool::BUF_CAPACITY {
            rbuf.resize(crate::pool::BUF_CAPACITY, 0);
        }
        let decoder = Decoder::new(cfg.header_table_size as usize);
        let mut wbuf = ctx.pool.take_write();
        frame::write_settings(
            &mut wbuf,
            &[
                (frame::setting::MAX_CONCURRENT_STREAMS, cfg.max_streams),
                (frame::setting::INITIAL_WINDOW_SIZE, cfg.initial_window),
                (frame::setting::MAX_FRAME_SIZE, cfg.max_frame_size),
                (frame::setting::MAX_HEADER_LIST_SIZE, cfg.max_header_list),
                (frame::setting::HEADER_TABLE_SIZE, cfg.header_table_size),
            ],
        );
        frame::write_window_update(&mut wbuf, 0, CONNECTION_WINDOW - frame::DEFAULT_WINDOW);
        let now = ctx.now;
        Self {
            io,
            peer,
            rbuf,
            rlen,
            wbuf,
            wpos: 0,
            res_buf: Vec::new(),
            res_fields: Vec::new(),
            decoder,
            encoder: Encoder::default(),
            head: Box::default(),
            block: Vec::new(),
            pending: None,
            streams: Vec::new(),
            rr: 0,
            closed_ids: VecDeque::new(),
            reset_ids: VecDeque::new(),
            last_stream: 0,
            peer_settings: Settings::default(),
            send_window: i64::from(frame::DEFAULT_WINDOW),
            recv_window: i64::from(CONNECTION_WINDOW),
            preface_seen: false,
            settings_seen: false,
            settings_deadline: Some(now + cfg.settings_timeout),
            goaway: false,
            peer_goaway: false,
            closing: false,
            lingering: false,
            read_ready: true,
            write_blocked: false,
            wrote: false,
            eof: false,
            fin_seen: false,
            closed: false,
            flood_window: now,
            control_frames: 0,
            resets: 0,
            last_progress: now,
            started: now,
            wait: Wait::Head,
            deadline: now + ctx.cfg.header_timeout,
        }
    }

    /// Whether the connection has no stream and nothing to write.
    pub(crate) fn is_idle(&self) -> bool {
        self.streams.is_empty() && self.wpos == self.wbuf.len() && !self.closing
    }

    /// Handles a readiness event.
    pub(crate) fn on_event(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        readable: bool,
        read_closed: bool,
        writable: bool,
    ) {
        if readable || read_closed {
            self.read_ready = true;
        }
        if read_closed {
            self.fin_seen = true;
        }
        if writable {
            self.write_blocked = false;
        }
        self.drive(ctx);
    }

    /// Makes all the progress possible without blocking, then arms the deadline.
    pub(crate) fn drive(&mut self, ctx: &mut WorkerCtx<'_>) {
        if self.wbuf.capacity() == 0 {
            self.wbuf = ctx.pool.take_write();
        }
        if ctx.shutting_down && !self.goaway {
            self.go_away(ErrorCode::NoError);
        }
        let mut budget = DATA_TURN_BYTES;
        let mut unprocessed = true;
        loop {
            if self.closed {
                return;
            }
            if unprocessed && self.rlen > 0 && !self.closing {
                self.process(ctx);
            }
            unprocessed = false;
            budget = self.pump(budget);
            if !self.flush(ctx) {
                break;
            }
            if !self.lingering
                && (self.closing
                    || (self.goaway || self.peer_goaway || self.eof)
                        && self.streams.is_empty()
                        && self.pending.is_none())
            {
                self.begin_linger(ctx);
            }
            if !self.lingering {
                if self.can_send() {
                    if budget == 0 {
                        // Other connections get their turn; this one continues after them.
                        ctx.deferred.push(ctx.token);
                        break;
                    }
                    if self.eof || !self.read_ready {
                        // The output filled up before the budget ran out, and all of it was
                        // written: no event will come to ask for more, so send more now.
                        continue;
                    }
                    // Else read first: new requests, window updates and resets are not held
                    // behind the bodies already flowing.
                } else if self.eof || self.wbuf.len() - self.wpos >= OUTPUT_HIGH_WATER {
                    break;
                }
            }
            if !self.read_ready {
                break;
            }
            match self.read(ctx) {
                Some(true) => unprocessed = true,
                Some(false) => {}
                None => return,
            }
        }
        if self.closed {
            return;
        }
        self.release_idle_buffers(ctx);
        self.arm_deadline(ctx);
    }

    /// Whether some response body can go out now (data waiting, and window for it).
    fn can_send(&self) -> bool {
        self.send_window > 0
            && self
                .streams
                .iter()
                .any(|s| s.state == State::HalfClosedRemote && s.send_window > 0 && s.pending() > 0)
    }

    /// Buffers go back to the worker's pool whenever they are empty, as HTTP/1.1's do: many
    /// connections then share a few warm buffers instead of each holding its own.
    fn release_idle_buffers(&mut self, ctx: &mut WorkerCtx<'_>) {
        if self.rlen == 0 && !self.rbuf.is_empty() {
            ctx.pool.give_read(std::mem::take(&mut self.rbuf));
        }
        if self.wbuf.len() == self.wpos && self.wbuf.capacity() > 0 {
            self.wbuf.clear();
            self.wpos = 0;
            ctx.pool.give_write(std::mem::take(&mut self.wbuf));
        }
    }

    /// One read into the free end of the read buffer. `Some(true)`: bytes arrived;
    /// `Some(false)`: nothing more now; `None`: the connection is gone.
    fn read(&mut self, ctx: &mut WorkerCtx<'_>) -> Option<bool> {
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
    fn process(&mut self, ctx: &mut WorkerCtx<'_>) {
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

    fn frame(&mut self, ctx: &mut WorkerCtx<'_>, h: FrameHeader, p: std::ops::Range<usize>) {
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

    fn data(&mut self, ctx: &mut WorkerCtx<'_>, h: FrameHeader, p: std::ops::Range<usize>) {
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
        if s.body.len() as u64 + payload_range.len() as u64 > max_body {
            return self.refuse(ctx, h.stream, 413);
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

    fn headers(&mut self, ctx: &mut WorkerCtx<'_>, h: FrameHeader, p: std::ops::Range<usize>) {
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

    fn continuation(&mut self, ctx: &mut WorkerCtx<'_>, h: FrameHeader, p: std::ops::Range<usize>) {
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
    fn header_block(
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
            if !end_stream || result.is_err() {
                return self.stream_error(id, ErrorCode::Protocol);
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
                return self.refuse(ctx, id, 431);
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
        if end_stream {
            if self.head.content_length.is_some_and(|n| n > 0) {
                return self.stream_error(id, ErrorCode::Protocol);
            }
            let head = std::mem::take(&mut self.head);
            self.respond(ctx, id, &head, &[], ctx.now, None);
            self.head = head;
            return;
        }
        if self
            .head
            .content_length
            .is_some_and(|n| n > ctx.cfg.max_body_bytes)
        {
            return self.refuse(ctx, id, 413);
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

    /// The request on stream `i` is complete: check its length and answer it.
    fn request_complete(&mut self, ctx: &mut WorkerCtx<'_>, i: usize) {
        let s = &mut self.streams[i];
        let id = s.id;
        let Some(head) = s.head.take() else {
            return self.stream_error(id, ErrorCode::Internal);
        };
        if head
            .content_length
            .is_some_and(|n| n != s.body.len() as u64)
        {
            return self.stream_error(id, ErrorCode::Protocol);
        }
        s.state = State::HalfClosedRemote;
        let body = std::mem::take(&mut s.body);
        let started = s.started;
        self.respond(ctx, id, &head, &body, started, Some(i));
    }

    /// Answers a request: the router writes the response in HTTP/1.1 form, which goes out as
    /// HEADERS and as much DATA as the windows allow; the rest waits in the stream's entry.
    fn respond(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        id: u32,
        head: &RequestHead,
        body: &[u8],
        started: Instant,
        entry: Option<usize>,
    ) {
        let (Some(method_token), Some(target)) = (head.method(), head.path()) else {
            return self.stream_error(id, ErrorCode::Protocol);
        };
        if !(target.starts_with('/') || target == "*" && method_token == "OPTIONS") {
            return self.stream_error(id, ErrorCode::Protocol);
        }
        // Most requests have a few fields: a small array to fill, the full one only for many.
        let mut small = [EMPTY_HEADER; 24];
        let mut big;
        let slots: &mut [Header<'_>] = if head.field_count() < small.len() {
            &mut small
        } else {
            big = [EMPTY_HEADER; lowlat_http::limits::MAX_HEADERS];
            &mut big
        };
        let Some(n) = request_fields(head, slots, ctx.cfg.head.max_headers) else {
            return self.refuse(ctx, id, 431);
        };
        let fields = &slots[..n];
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (target, None),
        };
        let method = Method::from_token(method_token);
        let req = Request {
            method,
            method_token,
            target,
            path,
            query,
            version: Version::Http2,
            headers: fields,
            framing: if body.is_empty() {
                lowlat_http::body::BodyFraming::None
            } else {
                lowlat_http::body::BodyFraming::Length(body.len() as u64)
            },
            keep_alive: true,
            expect_continue: false,
            head_len: 0,
        };
        self.res_buf.clear();
        let mut res = Response::new(
            &mut self.res_buf,
            ctx.scratch,
            ctx.date.get(),
            req.is_head(),
            true,
            Version::Http2,
        );
        let site = ctx.router.dispatch(&req, body, ctx.worker, &mut res);
        let done = res.finish();
        if !done.sent {
            self.status_page(ctx, 500);
        }
        let status = if done.sent { done.status } else { 500 };
        let took = ctx.now.saturating_duration_since(started);
        ctx.counters.response(site, status, done.body_bytes, took);
        if let Some(log) = ctx.access_log.as_deref_mut() {
            log.record(&crate::access_log::Entry {
                remote: self.peer,
                method: method_token,
                target,
                version: Version::Http2,
                status,
                bytes: done.body_bytes,
                duration: took,
                user_agent: req.header("user-agent"),
                referer: req.header("referer"),
                worker: ctx.worker,
            });
        }
        let file = if done.sent { done.file } else { None };
        self.send_response(id, file, entry);
    }

    /// Sends `res_buf` (an HTTP/1.1-form response) and `file` on stream `id`.
    fn send_response(
        &mut self,
        id: u32,
        file: Option<crate::handler::FileBody>,
        entry: Option<usize>,
    ) {
        let Some((status, body_at)) = translate_head(&mut self.res_buf, &mut self.res_fields)
        else {
            return self.stream_error(id, ErrorCode::Internal);
        };
        let body_len = self.res_buf.len() - body_at;
        let file_len = file.as_ref().map_or(0, |f| f.len);
        let empty = body_len == 0 && file_len == 0;
        let mut block = std::mem::take(&mut self.block);
        block.clear();
        let res_buf = &self.res_buf;
        self.encoder.encode_response(
            status,
            self.res_fields
                .iter()
                .map(|(n, v)| (&res_buf[n.clone()], &res_buf[v.clone()])),
            &mut block,
        );
        frame::write_headers(
            &mut self.wbuf,
            id,
            &block,
            empty,
            self.peer_settings.max_frame_size as usize,
        );
        self.block = block;
        if empty {
            return self.stream_done(id, entry);
        }
        // As much of an in-memory body as the windows allow goes now, copied once.
        let stream_window = match entry {
            Some(i) => self.streams[i].send_window,
            None => i64::from(self.peer_settings.initial_window_size),
        };
        let max_frame = self.peer_settings.max_frame_size as usize;
        let mut window = stream_window.min(self.send_window).max(0) as usize;
        let mut at = body_at;
        while at < self.res_buf.len() && window > 0 {
            let n = (self.res_buf.len() - at).min(max_frame).min(window);
            let last = at + n == self.res_buf.len() && file.is_none();
            frame::write_data_header(&mut self.wbuf, id, n, last);
            self.wbuf.extend_from_slice(&self.res_buf[at..at + n]);
            at += n;
            window -= n;
            self.send_window -= n as i64;
        }
        let sent = (at - body_at) as i64;
        if at == self.res_buf.len() && file.is_none() {
            return self.stream_done(id, entry);
        }
        // The rest waits for window (or for its turn, for a file).
        let i = match entry {
            Some(i) => i,
            None => {
                self.streams
                    .push(Stream::sending(id, stream_window, self.last_progress));
                self.streams.len() - 1
            }
        };
        let s = &mut self.streams[i];
        s.send_window = stream_window - sent;
        s.out.clear();
        s.out.extend_from_slice(&self.res_buf[at..]);
        s.out_pos = 0;
        s.file = file;
    }

    /// The response on `id` is complete: the stream closes.
    fn stream_done(&mut self, id: u32, entry: Option<usize>) {
        if let Some(i) = entry.filter(|&i| self.streams.get(i).is_some_and(|s| s.id == id)) {
            self.streams.swap_remove(i);
        } else if let Some(i) = self.streams.iter().position(|s| s.id == id) {
            self.streams.swap_remove(i);
        }
        remember(&mut self.closed_ids, id);
    }

    /// Writes DATA frames for streams with pending bodies: one frame per stream per round,
    /// while the windows and `budget` allow and the output is below its high-water mark.
    /// Returns what is left of the budget.
    fn pump(&mut self, mut budget: usize) -> usize {
        let max_frame = self.peer_settings.max_frame_size as u64;
        loop {
            if self.streams.is_empty()
                || budget == 0
                || self.send_window <= 0
                || self.wbuf.len() - self.wpos >= OUTPUT_HIGH_WATER
            {
                return budget;
            }
            let mut progress = false;
            let mut done = false;
            let count = self.streams.len();
            for k in 0..count {
                let i = (self.rr + k) % count;
                let s = &mut self.streams[i];
                if s.state != State::HalfClosedRemote || s.send_window <= 0 {
                    continue;
                }
                let pending = s.pending();
                if pending == 0 {
                    continue;
                }
                let n = pending
                    .min(max_frame)
                    .min(s.send_window as u64)
                    .min(self.send_window.max(0) as u64)
                    .min(budget as u64) as usize;
                if n == 0 {
                    continue;
                }
                progress = true;
                let mem_left = s.out.len() - s.out_pos;
                let sent = if mem_left > 0 {
                    let n = n.min(mem_left);
                    let last = n as u64 == pending;
                    frame::write_data_header(&mut self.wbuf, s.id, n, last);
                    self.wbuf
                        .extend_from_slice(&s.out[s.out_pos..s.out_pos + n]);
                    s.out_pos += n;
                    if s.out_pos == s.out.len() {
                        s.out = Vec::new();
                        s.out_pos = 0;
                    }
                    n
                } else if let Some(f) = &mut s.file {
                    // Read straight into the output, behind room for the frame header.
                    let at = self.wbuf.len();
                    self.wbuf.resize(at + HEADER_LEN + n, 0);
                    let got = loop {
                        match f.file.read_at(&mut self.wbuf[at + HEADER_LEN..], f.offset) {
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            other => break other,
                        }
                    };
                    let Ok(got @ 1..) = got else {
                        // The file shrank or failed under us: the body cannot be completed.
                        self.wbuf.truncate(at);
                        frame::write_rst_stream(&mut self.wbuf, s.id, ErrorCode::Internal);
                        s.state = State::Done;
                        done = true;
                        continue;
                    };
                    self.wbuf.truncate(at + HEADER_LEN + got);
                    f.offset += got as u64;
                    f.len -= got as u64;
                    let last = got as u64 == pending;
                    self.wbuf[at..at + HEADER_LEN].copy_from_slice(&frame::header_bytes(
                        got,
                        kind::DATA,
                        if last { flag::END_STREAM } else { 0 },
                        s.id,
                    ));
                    if f.len == 0 {
                        s.file = None;
                    }
                    got
                } else {
                    continue;
                };
                s.send_window -= sent as i64;
                self.send_window -= sent as i64;
                budget = budget.saturating_sub(sent);
                if s.pending() == 0 {
                    s.state = State::Done;
                    done = true;
                }
                if budget == 0 || self.send_window <= 0 {
                    self.rr = i + 1;
                    break;
                }
            }
            if done {
                let closed_ids = &mut self.closed_ids;
                self.streams.retain(|s| {
                    if s.state == State::Done {
                        remember(closed_ids, s.id);
                    }
                    s.state != State::Done
                });
            }
            if !progress {
                return budget;
            }
        }
    }

    fn rst_stream(&mut self, ctx: &mut WorkerCtx<'_>, h: FrameHeader, p: std::ops::Range<usize>) {
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
            self.streams.swap_remove(i);
        }
        // The client closed it: anything more it sends on it is its error (STREAM_CLOSED).
        remember(&mut self.closed_ids, h.stream);
    }

    fn settings(&mut self, ctx: &mut WorkerCtx<'_>, h: FrameHeader, p: std::ops::Range<usize>) {
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

    fn window_update(&mut self, now: Instant, h: FrameHeader, p: std::ops::Range<usize>) {
        if p.len() != 4 {
            return self.conn_error(ErrorCode::FrameSize, "WINDOW_UPDATE of the wrong size");
        }
        let b = &self.rbuf[p];
        let inc = i64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff);
        if h.stream == 0 {
            if inc == 0 {
                return self.conn_error(ErrorCode::Protocol, "WINDOW_UPDATE of 0");
            }
            self.send_window += inc;
            if self.send_window > MAX_WINDOW {
                return self.conn_error(ErrorCode::FlowControl, "window above 2^31-1");
            }
            self.last_progress = now;
            return;
        }
        if h.stream > self.last_stream {
            return self.conn_error(ErrorCode::Protocol, "WINDOW_UPDATE on an idle stream");
        }
        let Some(s) = self.streams.iter_mut().find(|s| s.id == h.stream) else {
            return;
        };
        if inc == 0 {
            return self.stream_error(h.stream, ErrorCode::Protocol);
        }
        s.send_window += inc;
        if s.send_window > MAX_WINDOW {
            return self.stream_error(h.stream, ErrorCode::FlowControl);
        }
        self.last_progress = now;
    }

    /// Opens a new counting second when the last one is over.
    fn count_window(&mut self, ctx: &WorkerCtx<'_>) {
        if ctx.now.saturating_duration_since(self.flood_window) >= Duration::from_secs(1) {
            self.flood_window = ctx.now;
            self.control_frames = 0;
            self.resets = 0;
        }
    }

    /// A frame that costs work and answers no request.
    fn count_control(&mut self, ctx: &WorkerCtx<'_>) {
        self.count_window(ctx);
        self.control_frames += 1;
        if self.control_frames > ctx.cfg.h2.max_control_per_sec {
            self.conn_error(ErrorCode::EnhanceYourCalm, "too many control frames");
        }
    }

    /// Answers `status` on a stream whose request is refused (too large), then resets it if
    /// the client was still sending.
    fn refuse(&mut self, ctx: &mut WorkerCtx<'_>, id: u32, status: u16) {
        let still_sending = match self.streams.iter().position(|s| s.id == id) {
            Some(i) => self.streams.swap_remove(i).state == State::Open,
            None => false,
        };
        self.status_page(ctx, status);
        ctx.counters.response(0, status, 0, Duration::ZERO);
        self.send_response(id, None, None);
        if still_sending {
            frame::write_rst_stream(&mut self.wbuf, id, ErrorCode::NoError);
            remember(&mut self.reset_ids, id);
        }
    }

    /// A plain status page (`404 Not Found\n`) in `res_buf`, for [`H2Conn::send_response`].
    fn status_page(&mut self, ctx: &mut WorkerCtx<'_>, status: u16) {
        self.res_buf.clear();
        let mut res = Response::new(
            &mut self.res_buf,
            ctx.scratch,
            ctx.date.get(),
            false,
            true,
            Version::Http2,
        );
        res.send_status(status);
        let _ = res.finish();
    }

    /// A stream error: RST_STREAM, and the stream is forgotten.
    fn stream_error(&mut self, id: u32, code: ErrorCode) {
        if let Some(i) = self.streams.iter().position(|s| s.id == id) {
            self.streams.swap_remove(i);
        }
        frame::write_rst_stream(&mut self.wbuf, id, code);
        remember(&mut self.reset_ids, id);
    }

    /// A connection error: GOAWAY with `code`, then close once it is written.
    fn conn_error(&mut self, code: ErrorCode, why: &str) {
        if self.closing {
            return;
        }
        tracing::debug!(peer = %self.peer, ?code, "HTTP/2 connection error: {why}");
        frame::write_goaway(&mut self.wbuf, self.last_stream, code, why.as_bytes());
        self.goaway = true;
        self.closing = true;
        self.streams.clear();
        self.rlen = 0;
    }

    /// GOAWAY for a graceful end: streams in flight finish, no new ones start.
    pub(crate) fn go_away(&mut self, code: ErrorCode) {
        if self.goaway {
            return;
        }
        self.goaway = true;
        frame::write_goaway(&mut self.wbuf, self.last_stream, code, b"");
    }

    /// Writes pending output. True when all of it is written.
    fn flush(&mut self, ctx: &mut WorkerCtx<'_>) -> bool {
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
    fn begin_linger(&mut self, ctx: &mut WorkerCtx<'_>) {
        if !self.goaway {
            self.go_away(ErrorCode::NoError);
            if !self.flush(ctx) {
                return;
            }
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
        self.streams.clear();
    }

    /// Sets the deadline for what the connection now waits for.
    fn arm_deadline(&mut self, ctx: &WorkerCtx<'_>) {
        let cfg = ctx.cfg;
        if self.lingering {
            return;
        }
        if !self.write_blocked {
            self.wrote = false;
        }
        let (wait, mut deadline) = if !self.preface_seen || !self.settings_seen {
            (Wait::Head, self.started + cfg.header_timeout)
        } else if self.write_blocked {
            let progressed = std::mem::take(&mut self.wrote);
            if self.wait == Wait::Write && !progressed {
                return;
            }
            (Wait::Write, ctx.now + cfg.write_timeout)
        } else if self.streams.iter().any(|s| s.pending() > 0) {
            // Waiting for the client to open a window.
            (Wait::Write, self.last_progress + cfg.write_timeout)
        } else if self.streams.iter().any(|s| s.state == State::Open) {
            (Wait::Body, self.last_progress + cfg.body_timeout)
        } else if self.pending.is_some() {
            (Wait::Head, self.last_progress + cfg.header_timeout)
        } else {
            (Wait::Idle, ctx.now + cfg.keepalive_timeout)
        };
        if let Some(s) = self.settings_deadline {
            deadline = deadline.min(s);
        }
        self.wait = wait;
        self.deadline = deadline;
    }

    /// The deadline passed.
    pub(crate) fn expire(&mut self, ctx: &mut WorkerCtx<'_>) {
        if self.lingering {
            return self.close_now(ctx);
        }
        let code = if self.settings_deadline.is_some_and(|d| ctx.now >= d) {
            ErrorCode::SettingsTimeout
        } else {
            ErrorCode::NoError
        };
        if !self.goaway || code != ErrorCode::NoError {
            self.goaway = false;
            self.conn_error(code, "timeout");
        }
        self.closing = true;
        let _ = self.flush(ctx);
        self.io.close_notify();
        self.close_now(ctx);
    }
}

const EMPTY_HEADER: Header<'static> = Header {
    name: "",
    value: b"",
};

/// The request's fields as the handlers see them, with `Host` from `:authority` when the
/// request has no `host` field (RFC 9113 §8.3.1). `None` when they do not fit `slots` or are
/// more than `max` (431, as over HTTP/1.1).
fn request_fields<'a>(
    head: &'a RequestHead,
    slots: &mut [Header<'a>],
    max: usize,
) -> Option<usize> {
    let mut n = 0;
    let mut has_host = false;
    for (name, value) in head.fields() {
        has_host |= name == "host";
        *slots.get_mut(n)? = Header { name, value };
        n += 1;
    }
    if let (false, Some(authority)) = (has_host, head.authority()) {
        *slots.get_mut(n)? = Header {
            name: "host",
            value: authority,
        };
        n += 1;
    }
    (n <= max).then_some(n)
}

/// Adds `id` to a bounded list of recent stream ids.
fn remember(list: &mut VecDeque<u32>, id: u32) {
    if list.len() == CLOSED_MEMORY {
        list.pop_front();
    }
    list.push_back(id);
}
