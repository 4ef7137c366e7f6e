//! One HTTP/3 connection: the client's control and QPACK streams read as they come, each request
//! stream's frames decoded and its head read through QPACK, the complete request answered
//! through the router (or handed to the upstream side when a proxy rule takes it), and each
//! response written as its stream takes it — a file read in 64 KiB pieces, a relayed response
//! as it arrives (`super::relay`).

use std::collections::HashMap;
use std::ops::Range;
use std::os::unix::fs::FileExt;

use lowlat_http::h3::frame::{self, Frame, FrameDecoder, StreamType};
use lowlat_http::h3::qpack;
use lowlat_http::h3::stream::{ControlStream, RequestStream, Role, Section, UniStreams};
use lowlat_http::h3::{Error, ErrorCode};
use lowlat_http::head::RequestHead;
use lowlat_http::request::Method;
use lowlat_http::{Status, Version};
use mio::Token;
use rustc_hash::{FxHashMap, FxHashSet};

use super::stream::{Relay, ReqStream, UniIn};
use crate::ctx::WorkerCtx;
use crate::dispatch::{self, HeadRefusal};
use crate::handler::Finished;
use crate::proxy::downstream::Wake;
use crate::proxy::headers::{ClientInfo, StreamedBody};
use crate::proxy::upload::UploadFeed;
use crate::quic::{proxy_stream, Read, StreamError, StreamIo};

/// Bytes read from a stream at once.
const READ_CHUNK: usize = 64 * 1024;
/// A file is read into DATA this much at a time, as the stream takes it.
const FILE_CHUNK: u64 = 64 * 1024;
/// Bytes a client's control or QPACK stream may hold undecoded (a frame header, a SETTINGS).
const MAX_UNI_BUFFER: usize = 16 * 1024;
/// The longest response head (HTTP/1.1 form) kept with its encoding for the next response.
const MAX_CACHED_HEAD: usize = 2048;

/// One HTTP/3 connection.
pub(crate) struct H3Conn {
    pub(super) decoder: qpack::Decoder,
    pub(super) encoder: qpack::Encoder,
    pub(super) uni: UniStreams,
    pub(super) peer_uni: HashMap<u64, UniIn>,
    /// FxHash: a lookup or two per request event, and the ids are the protocol's (opened in
    /// order, at most --h3-max-streams at once), so SipHash's cost buys nothing.
    pub(super) requests: FxHashMap<u64, ReqStream>,
    /// Our control stream, and what it could not take yet.
    pub(super) control_out: Option<(u64, Vec<u8>)>,
    pub(super) read_buf: Vec<u8>,
    pub(super) res_buf: Vec<u8>,
    pub(super) res_fields: Vec<(Range<usize>, Range<usize>)>,
    /// The last response head in HTTP/1.1 form (as the handler wrote it) and its HEADERS frame:
    /// the same file asked for again within the second has the same head, and copying its frame
    /// saves reading and QPACK-encoding it (~7 000 instructions, 30 % of a small request's
    /// cost then). Only heads up to [`MAX_CACHED_HEAD`] bytes.
    pub(super) last_head: (Vec<u8>, Vec<u8>),
    /// A request head whose buffers are reused by the next request (decoding into a new one
    /// allocated three times).
    pub(super) spare_head: Option<Box<RequestHead>>,
    /// The last request's field section (up to [`MAX_CACHED_HEAD`] bytes), the field-list limit
    /// it was checked against, and what it decoded to: a client asking again with the same
    /// section (with no dynamic table, the same bytes) gets a copy, not a second QPACK and
    /// Huffman decoding (~2 000 instructions, an eighth of a small request's cost).
    pub(super) last_section: (Vec<u8>, usize, RequestHead),
    /// The buffer of the last response written whole, for the next one (up to
    /// [`MAX_CACHED_HEAD`] * 4 bytes of room kept).
    pub(super) spare_out: Vec<u8>,
    pub(super) closed: bool,
    /// Shutting down: GOAWAY sent with this stream id; requests from it on are refused, and
    /// the connection closes once those before it are answered (and the final GOAWAY is sent).
    pub(super) goaway: Option<u64>,
    /// When the final GOAWAY (the real last stream id) is due: the first one named every
    /// stream, so that requests crossing it are not refused (RFC 9114 §5.2), and a round trip
    /// after it the client has stopped sending new ones. `None` once sent.
    pub(super) final_goaway_at: Option<std::time::Instant>,
    /// Responses written whole and finished whose last bytes the client has not acknowledged:
    /// a shutdown waits for them (closing the connection would drop what is unsent).
    pub(super) unacked: FxHashSet<u64>,
    /// The client sent GOAWAY: it is shutting the connection down.
    pub(super) client_leaving: bool,
    /// The highest request stream seen, for GOAWAY.
    pub(super) last_request: Option<u64>,
    /// What relays ask of the upstream side: (upstream, proxy stream number, what).
    pub(super) wakes: Vec<(Token, u32, Wake)>,
    /// Upstream exchanges of requests the client gave up on.
    pub(super) abandoned: Vec<Token>,
    /// The client's address once connected: the log line of a request whose client left is
    /// written where no stream is at hand to ask (the connection gone).
    pub(super) peer: Option<std::net::SocketAddr>,
}

impl Default for H3Conn {
    fn default() -> Self {
        Self {
            // A dynamic table of 0 bytes: see the module's documentation.
            decoder: qpack::Decoder::new(0, 0, lowlat_http::limits::MAX_HEAD_BYTES * 4),
            encoder: qpack::Encoder::new(true),
            uni: UniStreams::new(Role::Server),
            peer_uni: HashMap::new(),
            requests: FxHashMap::default(),
            control_out: None,
            read_buf: Vec::new(),
            res_buf: Vec::new(),
            res_fields: Vec::new(),
            last_head: (Vec::new(), Vec::new()),
            spare_head: None,
            last_section: (Vec::new(), 0, RequestHead::default()),
            spare_out: Vec::new(),
            closed: false,
            goaway: None,
            final_goaway_at: None,
            unacked: FxHashSet::default(),
            last_request: None,
            client_leaving: false,
            wakes: Vec::new(),
            abandoned: Vec::new(),
            peer: None,
        }
    }
}

impl H3Conn {
    /// Request `id` is over (answered, refused, reset): a relay it still had is cancelled.
    /// The client gave up on request `id` (reset it, or stopped its answer): its line is
    /// logged as HTTP/1.1's and HTTP/2's are (`super::relay::log_left`), and it goes.
    pub(super) fn client_left(&mut self, id: u64, ctx: &mut WorkerCtx<'_>) {
        if let (Some(s), Some(peer)) = (self.requests.get(&id), self.peer) {
            super::relay::log_left(ctx, peer, s);
        }
        self.forget(id);
    }

    pub(super) fn forget(&mut self, id: u64) {
        if let Some(up) = self
            .requests
            .remove(&id)
            .and_then(|s| s.relay)
            .and_then(|r| r.upstream)
        {
            self.abandoned.push(up);
        }
    }

    pub(super) fn fail(&mut self, io: &mut StreamIo<'_>, e: &Error) {
        tracing::debug!("h3: {} from {}: {e}", e.code().value(), io.peer());
        self.closed = true;
        io.close(e.code().value(), b"");
    }

    /// Shutting down (or the client is: it sent GOAWAY) with every request answered: the
    /// connection closes.
    pub(super) fn close_if_done(&mut self, io: &mut StreamIo<'_>) {
        if ((self.goaway.is_some() && self.final_goaway_at.is_none()) || self.client_leaving)
            && self.requests.is_empty()
            && self.unacked.is_empty()
            && !self.closed
        {
            self.closed = true;
            io.close(ErrorCode::NoError.value(), b"");
        }
    }

    /// Queues the final GOAWAY: requests from the stream after the last one seen are refused.
    pub(super) fn final_goaway(&mut self) {
        self.final_goaway_at = None;
        let next = self.last_request.map_or(0, |id| id + 4);
        self.goaway = Some(next);
        if let Some((_, pending)) = &mut self.control_out {
            frame::put_goaway(pending, next);
        }
    }

    pub(super) fn flush_control(&mut self, io: &mut StreamIo<'_>) {
        if let Some((id, pending)) = &mut self.control_out {
            if let Ok(n) = io.write(*id, pending) {
                pending.drain(..n);
            }
        }
    }

    /// A client's unidirectional stream has bytes.
    pub(super) fn read_uni(&mut self, io: &mut StreamIo<'_>, id: u64) {
        loop {
            self.read_buf.clear();
            let (got, fin) = match io.read(id, &mut self.read_buf, READ_CHUNK) {
                Ok(Read::Data(_)) => (true, false),
                Ok(Read::Fin(_)) => (true, true),
                Ok(Read::Blocked) | Err(StreamError::Closed) => return,
                Err(_) => (false, true),
            };
            let input = std::mem::take(&mut self.read_buf);
            let result = if got {
                self.feed_uni(io, id, &input)
            } else {
                Ok(())
            };
            self.read_buf = input;
            if let Err(e) = result {
                return self.fail(io, &e);
            }
            if fin {
                let critical = !matches!(
                    self.peer_uni.remove(&id),
                    Some(UniIn::Discard | UniIn::Typing(_)) | None
                );
                if critical {
                    self.fail(io, &Error::ClosedCriticalStream);
                }
                return;
            }
        }
    }

    pub(super) fn feed_uni(
        &mut self,
        io: &mut StreamIo<'_>,
        id: u64,
        raw: &[u8],
    ) -> Result<(), Error> {
        let state = self
            .peer_uni
            .entry(id)
            .or_insert_with(|| UniIn::Typing(Vec::new()));
        let typed_input: Vec<u8>;
        let input: &[u8] = if let UniIn::Typing(so_far) = state {
            so_far.extend_from_slice(raw);
            if so_far.len() > MAX_UNI_BUFFER {
                return Err(Error::StreamCreation("a stream type longer than a varint"));
            }
            let Status::Complete((t, n)) = StreamType::decode(so_far) else {
                return Ok(());
            };
            typed_input = so_far[n..].to_vec();
            *state = if self.uni.open(t)? {
                match t {
                    StreamType::Control => UniIn::Control(
                        FrameDecoder::new(frame::MAX_SETTINGS_LEN),
                        ControlStream::new(Role::Server),
                    ),
                    StreamType::QpackEncoder => UniIn::QpackEncoder,
                    _ => UniIn::QpackDecoder,
                }
            } else {
                io.stop_sending(id, ErrorCode::StreamCreationError.value());
                UniIn::Discard
            };
            &typed_input
        } else {
            raw
        };
        match state {
            UniIn::Control(frames, control) => {
                let mut at = 0;
                while at < input.len() {
                    let d = frames.decode(&input[at..])?;
                    at += d.consumed;
                    if let Some(f) = d.frame {
                        // SETTINGS (nothing in them changes what this side sends: a static
                        // encoder, no push, no datagrams) and GOAWAY: the client is leaving
                        // and opens no new request; the connection closes once those under way
                        // are answered (`close_if_done`) rather than at the idle timeout, which
                        // a client waiting for the close would sit out.
                        control.on_frame(&f)?;
                        if matches!(f, Frame::GoAway(_)) {
                            self.client_leaving = true;
                        }
                    }
                }
            }
            UniIn::QpackEncoder => self.decoder.feed_encoder_stream(input)?,
            UniIn::QpackDecoder => self.encoder.feed_decoder_stream(input)?,
            UniIn::Typing(_) | UniIn::Discard => {}
        }
        Ok(())
    }

    /// A request stream has bytes, its end, or a reset.
    pub(super) fn read_request(&mut self, io: &mut StreamIo<'_>, id: u64, ctx: &mut WorkerCtx<'_>) {
        if self.goaway.is_some_and(|g| id >= g) {
            // After GOAWAY: not processed, the client may retry it elsewhere (RFC 9114 §5.2).
            io.stop_sending(id, ErrorCode::RequestRejected.value());
            io.reset(id, ErrorCode::RequestRejected.value());
            return;
        }
        self.last_request = self.last_request.max(Some(id));
        let max_section = u64::from(ctx.cfg.h2.max_header_list);
        let now = ctx.now;
        self.requests.entry(id).or_insert_with(|| ReqStream {
            frames: FrameDecoder::new(max_section),
            order: RequestStream::new(Role::Server),
            head: None,
            body: Vec::new(),
            too_large: false,
            answered: false,
            out: Vec::new(),
            out_at: 0,
            chunk: bytes::Bytes::new(),
            file: None,
            started: now,
            progress: now,
            relay: None,
            held: None,
            slots: None,
            trailers: None,
            upload: None,
            hold: None,
        });
        loop {
            // A body streaming upstream is not read while the upload is full: the stream's
            // flow control holds the client back until the upstream takes it
            // (`Downstream::upload_drained` reads on).
            if self
                .requests
                .get(&id)
                .and_then(|s| s.upload.as_deref())
                .is_some_and(|u| !u.has_room())
            {
                return;
            }
            self.read_buf.clear();
            let fin = match io.read(id, &mut self.read_buf, READ_CHUNK) {
                Ok(Read::Data(_)) => false,
                Ok(Read::Fin(_)) => true,
                Ok(Read::Blocked) => return,
                Err(StreamError::Closed) => return,
                Err(_) => {
                    // The client gave up on its request (RESET_STREAM).
                    io.reset(id, ErrorCode::RequestCancelled.value());
                    self.client_left(id, ctx);
                    return;
                }
            };
            if let Some(s) = self.requests.get_mut(&id) {
                s.progress = ctx.now;
            }
            let input = std::mem::take(&mut self.read_buf);
            let mut fed = self.feed_request(id, &input, fin, ctx);
            if let Ok(Some((at, framing))) = fed {
                // The head asks for its body to stream: the request is routed now, and what
                // follows the head in this read goes on from there.
                self.answer(io, id, ctx, Some(framing), false);
                fed = self.feed_request(id, &input[at..], fin, ctx).map(|_| None);
            }
            self.read_buf = input;
            match fed {
                Ok(_) => {}
                Err(e) if e.is_connection_error() => return self.fail(io, &e),
                Err(Error::FieldSectionTooLarge) => {
                    return self.answer_status(io, id, 431, ctx);
                }
                Err(e) => {
                    tracing::debug!("h3: stream {id} from {}: {e}", io.peer());
                    io.stop_sending(id, e.code().value());
                    io.reset(id, e.code().value());
                    self.forget(id);
                    return;
                }
            }
            if fin {
                let Some(s) = self.requests.get_mut(&id) else {
                    return;
                };
                let finished = s.frames.finish().and_then(|()| s.order.finish());
                if let Some(mut up) = s.upload.take() {
                    // The streaming body's end (a truncated frame cuts the request upstream).
                    if finished.is_err() {
                        up.pipe.borrow_mut().fail(400);
                    }
                    up.finish(std::iter::empty());
                    self.wake_upload(id);
                    return;
                }
                if s.answered {
                    return;
                }
                if let Err(e) = finished {
                    if e.is_connection_error() {
                        return self.fail(io, &e);
                    }
                    io.reset(id, e.code().value());
                    self.requests.remove(&id);
                    return;
                }
                return self.answer(io, id, ctx, None, false);
            }
        }
    }

    /// Ends the request streams past their time limits: a head not complete within
    /// `--header-timeout` and a body stalled past `--body-timeout` are answered 408 (a body
    /// streaming upstream is cut instead: the stream reset, the upstream exchange cancelled); a
    /// response the client takes nothing of for `--write-timeout` is reset. A relay waiting
    /// for its upstream is the upstream side's to time out.
    /// A held request's timer came (`crate::hold`): every request whose time has come is
    /// answered, released.
    pub(super) fn release_held(&mut self, io: &mut StreamIo<'_>, ctx: &mut WorkerCtx<'_>) {
        let now = ctx.now;
        let due: Vec<u64> = self
            .requests
            .iter()
            .filter(|(_, s)| s.hold.as_ref().is_some_and(|h| h.until <= now))
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            if let Some(s) = self.requests.get_mut(&id) {
                s.hold = None;
            }
            self.answer(io, id, ctx, None, true);
        }
    }

    pub(super) fn expire(&mut self, io: &mut StreamIo<'_>, ctx: &mut WorkerCtx<'_>) {
        let now = ctx.now;
        if self.final_goaway_at.is_some_and(|t| now >= t) {
            self.final_goaway();
            self.flush_control(io);
        }
        let cfg = ctx.cfg;
        let mut late: Vec<(u64, Option<u16>)> = Vec::new();
        for (&id, s) in &self.requests {
            if s.hold.is_some() {
                // Waits for its timer, which answers it (`release_held`).
                continue;
            }
            let idle = now.saturating_duration_since(s.progress);
            let waiting_out = s.out_at < s.out.len() || !s.chunk.is_empty() || s.file.is_some();
            if !s.answered && s.head.is_none() {
                if now.saturating_duration_since(s.started) >= cfg.header_timeout {
                    late.push((id, Some(408)));
                }
            } else if !s.answered || s.upload.is_some() {
                if idle >= cfg.body_timeout {
                    late.push((id, (!s.answered).then_some(408)));
                }
            } else if waiting_out && idle >= cfg.write_timeout {
                late.push((id, None));
            }
        }
        for (id, status) in late {
            ctx.counters.timed_out += 1;
            match status {
                Some(status) => self.answer_status(io, id, status, ctx),
                None => {
                    io.stop_sending(id, ErrorCode::RequestIncomplete.value());
                    io.reset(id, ErrorCode::RequestCancelled.value());
                    self.forget(id);
                }
            }
        }
        self.close_if_done(io);
    }

    /// Request `id` put bytes into its upload: its upstream connection writes them.
    fn wake_upload(&mut self, id: u64) {
        let Some(s) = self.requests.get(&id) else {
            return;
        };
        if let (Some(up), Some(n)) = (s.relay.and_then(|r| r.upstream), proxy_stream(id)) {
            if !self.wakes.contains(&(up, n, Wake::Upload)) {
                self.wakes.push((up, n, Wake::Upload));
            }
        }
    }

    /// Decodes what request stream `id` brought (`fin`: its last bytes). Returns where it
    /// stopped when the head was decoded and its body, not all here, is to stream to an
    /// upstream: the request is then routed before the rest is fed.
    pub(super) fn feed_request(
        &mut self,
        id: u64,
        input: &[u8],
        fin: bool,
        ctx: &mut WorkerCtx<'_>,
    ) -> Result<Option<(usize, StreamedBody)>, Error> {
        let Some(s) = self.requests.get_mut(&id) else {
            return Ok(None);
        };
        if s.answered && s.upload.is_none() {
            return Ok(None); // what follows an answered request is dropped
        }
        let mut uploaded = false;
        let max_body = usize::try_from(ctx.cfg.max_body_bytes).unwrap_or(usize::MAX);
        let max_list = ctx.cfg.h2.max_header_list as usize;
        let mut at = 0;
        while at < input.len() {
            let d = s.frames.decode(&input[at..])?;
            at += d.consumed;
            let Some(f) = d.frame else {
                continue;
            };
            match s.order.on_frame(&f)? {
                Some(Section::Head) => {
                    let Frame::Headers(section) = f else {
                        continue;
                    };
                    let mut head = self.spare_head.take().unwrap_or_default();
                    let (last_section, last_max, last_head) = &mut self.last_section;
                    if !last_section.is_empty() && *last_section == section && *last_max == max_list
                    {
                        (*head).clone_from(last_head);
                    } else {
                        match head.decode_h3(
                            &mut self.decoder,
                            id,
                            section,
                            max_list,
                            false,
                            false,
                        )? {
                            qpack::Decoded::Done => {
                                last_section.clear();
                                if section.len() <= MAX_CACHED_HEAD {
                                    last_section.extend_from_slice(section);
                                    *last_max = max_list;
                                    last_head.clone_from(&head);
                                }
                            }
                            // With a table of 0 bytes no section can wait for one.
                            qpack::Decoded::Blocked => {
                                return Err(Error::Qpack(qpack::QpackError::Decompression(
                                    "a reference to a table announced empty",
                                )));
                            }
                        }
                    }
                    s.order.set_content_length(head.content_length);
                    let streamed = if fin {
                        None // all of it is here: read whole
                    } else {
                        ctx.router.streamed_body(&head, ctx.cfg.max_body_bytes)
                    };
                    s.head = Some(head);
                    if let Some(framing) = streamed {
                        return Ok(Some((at, framing)));
                    }
                }
                // Trailers end a streaming body and go on with it; otherwise they are read (the
                // codec checks their order) and not kept.
                Some(Section::Trailers) => {
                    let (Frame::Headers(section), Some(mut up)) = (f, s.upload.take()) else {
                        continue;
                    };
                    let mut trailers = RequestHead::default();
                    trailers.decode_h3(&mut self.decoder, id, section, max_list, true, false)?;
                    up.finish(trailers.fields().map(|(n, v)| (n.as_bytes(), v)));
                    uploaded = true;
                }
                None => {
                    if let (Frame::Data(bytes), Some(up)) = (&f, s.upload.as_deref_mut()) {
                        // Room or not, what came is taken: the next read waits for room.
                        up.put(bytes);
                        uploaded = true;
                    } else if let Frame::Data(bytes) = f {
                        if s.body.len() + bytes.len() > max_body {
                            s.too_large = true;
                            s.body = Vec::new();
                        } else if !s.too_large {
                            s.body.extend_from_slice(bytes);
                        }
                    }
                }
            }
        }
        if uploaded {
            self.wake_upload(id);
        }
        Ok(None)
    }

    /// Answers the request on stream `id` through the router: complete, or with `streamed`,
    /// its head only, the body to stream to the upstream it is forwarded to as it comes (an
    /// answer from anywhere else drops the body: STOP_SENDING).
    pub(super) fn answer(
        &mut self,
        io: &mut StreamIo<'_>,
        id: u64,
        ctx: &mut WorkerCtx<'_>,
        streamed: Option<StreamedBody>,
        mut released: bool,
    ) {
        let Some(mut s) = self.requests.remove(&id) else {
            return;
        };
        if s.too_large {
            self.requests.insert(id, s);
            return self.answer_status(io, id, 413, ctx);
        }
        let Some(head) = s.head.take() else {
            self.requests.insert(id, s);
            return self.answer_status(io, id, 400, ctx);
        };
        let body = std::mem::take(&mut s.body);
        let framing = crate::proxy::headers::request_framing(streamed, body.len());
        let (peer, early_data) = (io.peer(), io.is_handshaking());
        let max_fields = ctx.cfg.head.max_headers;
        // Held back (`crate::hold`): kept with its head and body until its timer.
        let mut held = None;
        // Ok(true): answered here, the response in `res_buf`; Ok(false): forwarded; Err: a
        // refusal's status.
        let routed = dispatch::with_request(&head, max_fields, Version::Http3, framing, |req| {
            if early_data && !matches!(req.method, Method::Get | Method::Head | Method::Options) {
                // Came as 0-RTT data, which can be replayed: only safe methods are answered
                // before the handshake completes (RFC 9114 §10.9, RFC 8470: 425 Too Early, the
                // client sends it again after the handshake).
                return Err(425);
            }
            self.res_buf.clear();
            // No client certificate over QUIC: a site that requires one answers 421, and the
            // client asks again over TCP (`crate::client_auth`).
            let client = ClientInfo {
                peer,
                tls: true,
                early_data,
                cert: None,
            };
            let mut forward = None;
            let (site, done) = loop {
                let mut done = Finished::default();
                let site = dispatch::route(
                    ctx,
                    req,
                    &body,
                    &mut self.res_buf,
                    &client,
                    true,
                    streamed,
                    &mut forward,
                    &mut done,
                    released,
                );
                match done.hold.take() {
                    // A body streaming in cannot wait unread: the request goes on at once.
                    Some(_) if streamed.is_some() => released = true,
                    Some(hold) => {
                        held = Some(hold);
                        // For the line written if its client leaves meanwhile
                        // (`super::relay::log_left`).
                        dispatch::hold(ctx, &mut s.held, req, site, &client, &done);
                        return Ok(false);
                    }
                    None => break (site, done),
                }
            };
            if let Some(mut job) = forward {
                let Some(n) = proxy_stream(id) else {
                    // Past what the upstream side numbers (a billion requests on one connection).
                    job.group.give_buffer(job.request);
                    return Err(503);
                };
                if let Some(framing) = streamed {
                    let pipe = dispatch::upload_for(&mut job, framing);
                    s.upload = Some(Box::new(UploadFeed::new(pipe, framing, job.max_body())));
                }
                // Answered as the upstream's response arrives (`relay`).
                ctx.proxy_starts.push((ctx.token, n, job));
                dispatch::hold(ctx, &mut s.held, req, site, &client, &done);
                s.slots = done.slots;
                s.relay = Some(Relay {
                    head_request: req.is_head(),
                    ..Relay::default()
                });
                s.answered = true;
                return Ok(false);
            }
            let status = if done.sent { done.status } else { 500 };
            if !done.sent {
                self.res_buf.clear();
                write_status_page(&mut self.res_buf, 500);
            }
            dispatch::answered(ctx, req, &client, site, status, &done, s.started);
            s.file = if done.sent { done.file } else { None };
            Ok(true)
        });
        if let Some(hold) = held {
            ctx.holds.at(hold.until, ctx.token);
            s.head = Some(head);
            s.body = body;
            s.hold = Some(hold);
            self.requests.insert(id, s);
            return;
        }
        let refused = match routed {
            Ok(Ok(true)) => None,
            Ok(Ok(false)) => {
                self.requests.insert(id, s);
                return;
            }
            Ok(Err(status)) => Some(status),
            Err(HeadRefusal::Malformed) => Some(400),
            Err(HeadRefusal::TooManyFields) => Some(431),
        };
        if let Some(status) = refused {
            // Logged with what the head tells.
            s.head = Some(head);
            self.requests.insert(id, s);
            return self.answer_status(io, id, status, ctx);
        }
        self.spare_head = Some(head);
        self.requests.insert(id, s);
        self.send_response(io, id);
        if streamed.is_some() {
            // Answered without the body, which is still coming: not wanted (RFC 9114 §4.1).
            io.stop_sending(id, ErrorCode::NoError.value());
        }
    }

    /// Answers with a status page (a refusal) and drops what else the request sends.
    pub(super) fn answer_status(
        &mut self,
        io: &mut StreamIo<'_>,
        id: u64,
        status: u16,
        ctx: &mut WorkerCtx<'_>,
    ) {
        let Some(s) = self.requests.get_mut(&id) else {
            return;
        };
        s.file = None;
        self.res_buf.clear();
        write_status_page(&mut self.res_buf, status);
        let took = ctx.now.saturating_duration_since(s.started);
        let head = s.head.as_deref();
        dispatch::refused(ctx, head, io.peer(), Version::Http3, true, status, took);
        self.send_response(io, id);
        // RFC 9114 §4.1.2: a complete response, then STOP_SENDING with H3_NO_ERROR.
        io.stop_sending(id, ErrorCode::NoError.value());
    }

    /// `res_buf` (an HTTP/1.1-form response) as HEADERS and DATA on stream `id`, then its file.
    pub(super) fn send_response(&mut self, io: &mut StreamIo<'_>, id: u64) {
        let Some(s) = self.requests.get_mut(&id) else {
            return;
        };
        s.answered = true;
        s.out.clear();
        s.out_at = 0;
        if s.out.capacity() == 0 {
            s.out = std::mem::take(&mut self.spare_out);
        }
        // At most one allocation (none with the last response's buffer): the HTTP/1.1 form is
        // longer than its QPACK encoding, and two frame headers take at most 18 bytes (grown
        // from empty, `out` was reallocated ~6 times).
        s.out.reserve(self.res_buf.len() + 18);
        let (last_head, last_frame) = &mut self.last_head;
        // The whole head, up to its blank line, is the last one: so is its encoding.
        let body_at = if !last_head.is_empty() && self.res_buf.starts_with(last_head) {
            s.out.extend_from_slice(last_frame);
            last_head.len()
        } else {
            // Kept as written: reading it lower-cases the names in place.
            last_head.clear();
            last_frame.clear();
            let kept = self.res_buf.len().min(MAX_CACHED_HEAD);
            last_head.extend_from_slice(&self.res_buf[..kept]);
            let Some((status, body_at)) =
                dispatch::translate_head(&mut self.res_buf, &mut self.res_fields)
            else {
                last_head.clear();
                io.reset(id, ErrorCode::InternalError.value());
                self.requests.remove(&id);
                return;
            };
            let res_buf = &self.res_buf;
            lowlat_http::h3::head::write_response(
                &self.encoder,
                status,
                self.res_fields
                    .iter()
                    .map(|(n, v)| (&res_buf[n.clone()], &res_buf[v.clone()])),
                &mut s.out,
            );
            if body_at <= kept {
                last_head.truncate(body_at);
                last_frame.extend_from_slice(&s.out);
            } else {
                last_head.clear();
            }
            body_at
        };
        let body = &self.res_buf[body_at..];
        let file_len = s.file.as_ref().map_or(0, |f| f.len);
        if !body.is_empty() || file_len > 0 {
            frame::put_data_header(&mut s.out, body.len() as u64 + file_len);
            s.out.extend_from_slice(body);
        }
        self.pump(io, id);
    }

    /// Writes what stream `id` has waiting, reading more of its file as the stream takes it;
    /// finishes the stream after the last byte.
    pub(super) fn pump(&mut self, io: &mut StreamIo<'_>, id: u64) {
        let Some(s) = self.requests.get_mut(&id) else {
            return;
        };
        loop {
            if s.out_at < s.out.len() {
                match io.write(id, &s.out[s.out_at..]) {
                    Ok(0) => {}
                    Ok(n) => {
                        s.out_at += n;
                        s.progress = io.now();
                    }
                    Err(_) => {
                        self.forget(id);
                        return;
                    }
                }
                if s.out_at < s.out.len() {
                    return; // stream_writable comes when it takes more
                }
            }
            if !s.chunk.is_empty() {
                match io.write_bytes(id, &mut s.chunk) {
                    Ok(0) => {}
                    Ok(_) => s.progress = io.now(),
                    Err(_) => {
                        self.forget(id);
                        return;
                    }
                }
                if !s.chunk.is_empty() {
                    return; // stream_writable comes when it takes more
                }
            }
            s.out.clear();
            s.out_at = 0;
            let Some(f) = s.file.as_mut() else {
                if s.relay.is_some() {
                    return; // more comes from the upstream
                }
                io.finish(id);
                if s.out.capacity() <= MAX_CACHED_HEAD * 4 && self.spare_out.capacity() == 0 {
                    self.spare_out = std::mem::take(&mut s.out);
                }
                self.requests.remove(&id);
                self.unacked.insert(id);
                return;
            };
            let n = f.len.min(FILE_CHUNK) as usize;
            // A buffer of its own, which quinn-proto keeps until the client acknowledges it
            // (reading into `out` and writing that cost a copy of every byte more).
            let mut chunk = bytes::BytesMut::zeroed(n);
            match f.file.read_at(&mut chunk, f.offset) {
                Ok(0) | Err(_) => {
                    // The file shrank or failed under us: the response cannot be completed.
                    io.reset(id, ErrorCode::InternalError.value());
                    self.forget(id);
                    return;
                }
                Ok(got) => {
                    chunk.truncate(got);
                    s.chunk = chunk.freeze();
                    f.offset += got as u64;
                    f.len -= got as u64;
                    if f.len == 0 {
                        s.file = None;
                    }
                }
            }
        }
    }
}

/// A bare status page in HTTP/1.1 form (`413 Content Too Large`), for `send_response`.
pub(super) fn write_status_page(out: &mut Vec<u8>, status: u16) {
    let reason = lowlat_http::response::reason(status);
    let body = format!("{status} {reason}\n");
    out.extend_from_slice(
        format!(
            "HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
}
