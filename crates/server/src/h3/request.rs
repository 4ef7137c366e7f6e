//! A request stream read and answered: its frames decoded as they come, the head read through
//! QPACK, the body collected (or streamed to an upstream), a request held back by a rate limit
//! released when its time comes, and the complete request answered through the router or
//! handed to the upstream side.

use lowlat_http::h3::frame::{Frame, FrameDecoder};
use lowlat_http::h3::qpack;
use lowlat_http::h3::stream::{RequestStream, Role, Section};
use lowlat_http::h3::{Error, ErrorCode};
use lowlat_http::head::RequestHead;
use lowlat_http::request::Method;
use lowlat_http::Version;

use super::conn::{H3Conn, MAX_CACHED_HEAD, READ_CHUNK};
use super::send::write_status_page;
use super::stream::{Relay, ReqStream};
use crate::ctx::WorkerCtx;
use crate::dispatch::{self, HeadRefusal};
use crate::handler::Finished;
use crate::proxy::downstream::Wake;
use crate::proxy::headers::{ClientInfo, StreamedBody};
use crate::proxy::upload::UploadFeed;
use crate::quic::{proxy_stream, Read, StreamError, StreamIo};

impl H3Conn {
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
                        // (`ReqStream::log_left`).
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
}
