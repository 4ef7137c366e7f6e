//! Answering the HTTP/1.1 requests a connection's read buffer holds: parsing each head,
//! delimiting its body (whole, chunked, or streamed to an upstream), handing it to the router,
//! and the responses for refused requests.

use std::time::Duration;

use super::{ChunkState, ClientUpload, Conn, Relay, UploadLeft, OUTPUT_HIGH_WATER};
use crate::ctx::WorkerCtx;
use crate::dispatch;
use crate::handler::{Finished, Response};
use crate::proxy::headers::StreamedBody;
use crate::proxy::upload::STREAM_MIN_BODY;
use lowlat_http::body::{BodyFraming, ChunkedDecoder};
use lowlat_http::request::{header_slots, parse_request};
use lowlat_http::{ParseError, Status, Version};

impl Conn {
    /// Answers every complete request at the start of the read buffer.
    pub(super) fn process(&mut self, ctx: &mut WorkerCtx<'_>) {
        self.unparsed = false;
        if self.cert_pending {
            self.look_at_client_cert();
        }
        if self.upload.is_some() {
            // What arrives is the body streaming to the upstream, not requests.
            self.feed_upload();
            return;
        }
        let mut pos = 0;
        // Where the raw bytes of a pending chunked body start, and how many are decoded.
        let mut decoded_raw = None;
        while pos < self.rlen
            && !self.closing
            && self.file.is_none()
            && self.relay.is_none()
            && self.hold.is_none()
            && self.wbuf.len() < OUTPUT_HIGH_WATER
        {
            let buf = &self.rbuf[pos..self.rlen];
            let mut slots = header_slots();
            let req = match parse_request(buf, &mut slots, &ctx.cfg.head) {
                Ok(Status::Complete(req)) => req,
                Ok(Status::Partial) => break,
                Err(e) => {
                    Self::write_error(&mut self.wbuf, ctx, e, self.peer, buf);
                    self.closing = true;
                    self.lingering = true;
                    pos = self.rlen;
                    break;
                }
            };
            // A body that goes to a handler taking it as it comes (the proxy) streams when it is
            // long and not all here, or longer than bodies read whole may be, or chunked.
            let streamed = match req.framing {
                BodyFraming::None => None,
                BodyFraming::Length(n) => ((n > ctx.cfg.max_body_bytes
                    || n > STREAM_MIN_BODY && ((buf.len() - req.head_len) as u64) < n)
                    && ctx.router.streams_body(&req))
                .then_some(StreamedBody::Length(n)),
                BodyFraming::Chunked => (self.chunk.is_none() && ctx.router.streams_body(&req))
                    .then_some(StreamedBody::Chunked),
            };
            // Delimit the body; if it is not all here yet, wait for it.
            let (body, consumed): (&[u8], usize) = match req.framing {
                _ if streamed.is_some() => (&[], req.head_len),
                BodyFraming::None => (&[], req.head_len),
                BodyFraming::Length(n) => {
                    if n > ctx.cfg.max_body_bytes {
                        Self::write_error(
                            &mut self.wbuf,
                            ctx,
                            ParseError::BodyTooLarge,
                            self.peer,
                            buf,
                        );
                        self.closing = true;
                        self.lingering = true;
                        pos = self.rlen;
                        break;
                    }
                    // n <= max_body_bytes, which fits in memory by construction.
                    let total = req.head_len + usize::try_from(n).unwrap_or(usize::MAX);
                    if buf.len() < total {
                        self.await_body(ctx, req.expect_continue);
                        // The buffer grows as the body arrives (`grow_read_buffer`), never
                        // ahead of it: a head that declares a large body costs no memory until
                        // its bytes come.
                        if pos > 0 {
                            self.rbuf.copy_within(pos..self.rlen, 0);
                            self.rlen -= pos;
                            return;
                        }
                        break;
                    }
                    (&buf[req.head_len..total], total)
                }
                BodyFraming::Chunked => {
                    let state = self.chunk.get_or_insert_with(|| {
                        Box::new(ChunkState {
                            decoder: ChunkedDecoder::new(ctx.cfg.max_body_bytes),
                            data: Vec::new(),
                            scanned: 0,
                        })
                    });
                    let ChunkState {
                        decoder,
                        data,
                        scanned,
                    } = &mut **state;
                    match decoder.decode(&buf[req.head_len + *scanned..], |d| {
                        data.extend_from_slice(d);
                    }) {
                        Err(e) => {
                            Self::write_error(&mut self.wbuf, ctx, e, self.peer, buf);
                            self.closing = true;
                            self.lingering = true;
                            pos = self.rlen;
                            break;
                        }
                        Ok(progress) => {
                            *scanned += progress.consumed;
                            if !progress.done {
                                // The raw bytes decoded so far leave the buffer (below), so it
                                // holds the head and what is not decoded yet: a body sent in
                                // tiny chunks needs no more room than the same body sent whole.
                                decoded_raw = Some((pos + req.head_len, *scanned));
                                self.await_body(ctx, req.expect_continue);
                                break;
                            }
                            (&data[..], req.head_len + *scanned)
                        }
                    }
                }
            };
            self.body_pending = false;
            self.continue_sent = false;

            if self.wbuf.capacity() == 0 {
                self.wbuf = ctx.pool.take_write();
            }
            let keep_alive = req.keep_alive && !ctx.shutting_down;
            let mut forward = None;
            let mut done = Finished::default();
            let site = dispatch::route(
                ctx,
                &req,
                body,
                &mut self.wbuf,
                &self.client,
                keep_alive,
                streamed,
                &mut forward,
                &mut done,
                self.released,
            );
            self.released = false;
            if let Some(hold) = done.hold.take() {
                // Held back: the request stays unconsumed at `pos` (its body, if any, in the
                // buffer or the socket) and is parsed and routed again when released. Its log
                // fields are kept for the line written if its client leaves meanwhile.
                dispatch::hold(ctx, &mut self.held, &req, site, &self.client, &done);
                ctx.holds.at(hold.until, ctx.token);
                self.hold = Some(hold);
                break;
            }
            if let Some(mut job) = forward {
                if let Some(framing) = streamed {
                    // The body follows the head to the upstream as it is read (`feed_upload`).
                    let pipe = dispatch::upload_for(&mut job, framing);
                    let left = match framing {
                        StreamedBody::Length(n) => UploadLeft::Length(n),
                        StreamedBody::Chunked => {
                            // Its trailers go on with it (`proxy::upload`).
                            UploadLeft::Chunked(ChunkedDecoder::new(job.max_body()).keep_trailers())
                        }
                    };
                    self.upload = Some(Box::new(ClientUpload { pipe, left }));
                    if req.expect_continue {
                        // As nginx does when it streams a body: the server asks for it.
                        self.wbuf
                            .extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
                    }
                }
                // Answered later, by the upstream side; what follows waits for it.
                ctx.proxy_starts.push((ctx.token, 0, job));
                dispatch::hold(ctx, &mut self.held, &req, site, &self.client, &done);
                self.relay = Some(Relay {
                    _slots: done.slots,
                    keep_alive,
                    version: req.version,
                    head_only: req.is_head(),
                    chunked: false,
                    status: 0,
                    body_bytes: 0,
                    started: self.head_started,
                });
                pos += consumed;
                self.chunk = None;
                break;
            }
            let status = if done.sent { done.status } else { 500 };
            dispatch::answered(
                ctx,
                &req,
                &self.client,
                site,
                status,
                &done,
                self.head_started,
            );
            let (sent, close, file) = (done.sent, done.close, done.file);
            if !sent {
                Self::write_status(&mut self.wbuf, ctx, 500, req.version, true);
            }
            pos += consumed;
            self.chunk = None;
            if close || !keep_alive || !sent || streamed.is_some() {
                self.closing = true;
                // Unread bytes (pipelined after a close, a body not read) would turn our close
                // into a reset.
                self.lingering = pos < self.rlen || streamed.is_some();
                pos = self.rlen;
            }
            if let Some(file) = file {
                self.file = Some(Box::new(file));
            }
        }
        if let Some((start, n)) = decoded_raw {
            self.rbuf.copy_within(start + n..self.rlen, start);
            self.rlen -= n;
            if let Some(state) = &mut self.chunk {
                state.scanned = 0;
            }
        }
        if pos > 0 {
            self.rbuf.copy_within(pos..self.rlen, 0);
            self.rlen -= pos;
            if self.rlen > 0 {
                // What is left is the start of the next request.
                self.head_started = ctx.now;
                // Stopped early (file, high water): the rest is parsed after the flush.
                self.unparsed = self.file.is_some() || self.wbuf.len() >= OUTPUT_HIGH_WATER;
            }
        }
        if self.upload.is_some() {
            // The body's first bytes came with the head.
            self.feed_upload();
        }
    }

    /// A request's body is incomplete: note it, and ask for it if the client waits to be asked.
    fn await_body(&mut self, ctx: &mut WorkerCtx<'_>, expect_continue: bool) {
        self.body_pending = true;
        if expect_continue && !self.continue_sent {
            self.continue_sent = true;
            if self.wbuf.capacity() == 0 {
                self.wbuf = ctx.pool.take_write();
            }
            self.wbuf
                .extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
        }
    }

    /// Writes the response for a refused request (the connection closes after it).
    /// Writes the response for a refused request (the connection closes after it), counts it,
    /// and logs it with what `raw` (the bytes received of it) tells of its request line, as
    /// nginx logs every request it answers.
    fn write_error(
        wbuf: &mut Vec<u8>,
        ctx: &mut WorkerCtx<'_>,
        e: ParseError,
        peer: std::net::SocketAddr,
        raw: &[u8],
    ) {
        ctx.counters.parse_error(e);
        let status = e.status();
        ctx.counters.response(0, status, 0, Duration::ZERO);
        if let Some(log) = ctx.access_log.as_deref_mut() {
            let line = raw.split(|&b| b == b'\n').next().unwrap_or_default();
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let mut parts = line.splitn(3, |&b| b == b' ');
            fn text(p: Option<&[u8]>) -> &str {
                p.and_then(|p| std::str::from_utf8(p).ok())
                    .filter(|t| !t.is_empty())
                    .unwrap_or("-")
            }
            let (method, target) = (text(parts.next()), text(parts.next()));
            let version = if parts.next() == Some(b"HTTP/1.0") {
                Version::Http10
            } else {
                Version::Http11
            };
            log.record(&crate::access_log::Entry {
                remote: peer,
                method,
                target,
                version,
                status,
                bytes: 0,
                duration: Duration::ZERO,
                user_agent: None,
                referer: None,
                worker: ctx.worker,
                upstream: None,
                received: None,
                site: None,
                // Not known here (`$scheme` of a refused request reads `http`).
                tls: false,
                head_bytes: 0,
                fields: crate::access_log::Fields::None,
                cache: None,
                limit: None,
                cert: None,
            });
        }
        Self::write_status(wbuf, ctx, status, Version::Http11, true);
    }

    pub(super) fn write_status(
        wbuf: &mut Vec<u8>,
        ctx: &mut WorkerCtx<'_>,
        status: u16,
        version: Version,
        close: bool,
    ) {
        if wbuf.capacity() == 0 {
            *wbuf = ctx.pool.take_write();
        }
        let mut done = Finished::default();
        let mut res = Response::new(
            wbuf,
            ctx.scratch,
            ctx.date.get(),
            false,
            !close,
            version,
            &mut done,
        );
        res.send_status(status);
        res.finish();
    }

    /// Writes an error response outside of `process` (timeouts, over-long bodies).
    pub(crate) fn fail(&mut self, ctx: &mut WorkerCtx<'_>, e: ParseError) {
        if !self.closing {
            // Whatever was half-received is abandoned (after its request line is logged).
            Self::write_error(&mut self.wbuf, ctx, e, self.peer, &self.rbuf[..self.rlen]);
            self.rlen = 0;
            self.body_pending = false;
            self.chunk = None;
            self.closing = true;
        }
    }

    /// After [`Conn::fail`] from a timer: try to get the error out once, then close.
    pub(crate) fn drive_close(&mut self, ctx: &mut WorkerCtx<'_>) {
        let _ = self.flush(ctx);
        self.close_now(ctx);
    }
}
