//! Answering a complete request on a stream: the request handed to the router as HTTP/1.1's
//! are, the response translated to HEADERS (HPACK) and as much DATA as the windows allow, the
//! rest left on the stream for [`super::flow`]; refusals (413, 431) as short status pages.
use std::time::{Duration, Instant};

use lowlat_http::h2::frame::{self, ErrorCode};
use lowlat_http::h2::RequestHead;
use lowlat_http::request::Request;
use lowlat_http::ParseError;
use lowlat_http::Version;

use super::conn::{forget, remember, H2Conn};
use super::stream::{Relay, State, Stream};
use crate::ctx::WorkerCtx;
use crate::dispatch::{self, translate_head, HeadRefusal};
use crate::handler::{Finished, Response};
use crate::proxy::headers::StreamedBody;
use crate::proxy::upload::UploadFeed;

/// A request held back (`crate::hold`), and its log fields (with an access log).
type Held = (
    Box<crate::hold::Hold>,
    Option<Box<crate::access_log::HeldRequest>>,
);

impl H2Conn {
    /// The request on stream `i` is complete: check its length and answer it.
    pub(super) fn request_complete(&mut self, ctx: &mut WorkerCtx<'_>, i: usize) {
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
        self.respond(ctx, id, &head, &body, started, Some(i), None, false);
    }

    /// A held request's timer came (`crate::hold`): every stream whose time has come is
    /// answered, released, and the connection goes on.
    pub(crate) fn release_held(&mut self, ctx: &mut WorkerCtx<'_>) {
        let now = ctx.now;
        let mut any = false;
        while let Some(i) = self
            .streams
            .iter()
            .position(|s| s.hold.as_ref().is_some_and(|h| h.until <= now))
        {
            let s = &mut self.streams[i];
            s.hold = None;
            let (id, started) = (s.id, s.started);
            let body = std::mem::take(&mut s.body);
            if let Some(head) = s.head.take() {
                any = true;
                self.respond(ctx, id, &head, &body, started, Some(i), None, true);
            }
        }
        if any {
            self.drive(ctx);
        }
    }

    /// Stream `id`'s entry: `entry` when it has one, else a new one for its response.
    fn entry(&mut self, entry: Option<usize>, id: u32, started: Instant) -> usize {
        entry.unwrap_or_else(|| {
            self.streams.push(Stream::sending(
                id,
                i64::from(self.peer_settings.initial_window_size),
                started,
            ));
            self.streams.len() - 1
        })
    }

    /// Keeps the request on stream `id` (its entry, or a new one) until `hold`'s time, when
    /// [`H2Conn::release_held`] answers it.
    fn hold_stream(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        (id, head, body): (u32, &RequestHead, &[u8]),
        started: Instant,
        entry: Option<usize>,
        (hold, held): Held,
    ) {
        ctx.holds.at(hold.until, ctx.token);
        let i = self.entry(entry, id, started);
        let s = &mut self.streams[i];
        s.head = Some(Box::new(head.clone()));
        s.body = body.to_vec();
        s.hold = Some(hold);
        // For the line written if its client leaves meanwhile (`super::relay::log_left`).
        s.held = held;
    }

    /// Answers a request: the router writes the response in HTTP/1.1 form, which goes out as
    /// HEADERS and as much DATA as the windows allow; the rest waits in the stream's entry.
    /// With `streamed`, the body is still arriving (stream `entry` is open) and goes to the
    /// upstream the request is forwarded to as its DATA frames come (`super::frames`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn respond(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        id: u32,
        head: &RequestHead,
        body: &[u8],
        started: Instant,
        entry: Option<usize>,
        streamed: Option<StreamedBody>,
        released: bool,
    ) {
        let framing = crate::proxy::headers::request_framing(streamed, body.len());
        let max_fields = ctx.cfg.head.max_headers;
        let answered = dispatch::with_request(head, max_fields, Version::Http2, framing, |req| {
            self.answer(ctx, id, req, body, started, entry, streamed, released)
        });
        match answered {
            Ok(None) => {}
            Ok(Some(hold)) => self.hold_stream(ctx, (id, head, body), started, entry, hold),
            Err(HeadRefusal::Malformed) => self.stream_error(id, ErrorCode::Protocol),
            Err(HeadRefusal::TooManyFields) => {
                self.refuse(ctx, id, ParseError::TooManyHeaders, Some(head));
            }
        }
    }

    /// Answers `req` (see [`H2Conn::respond`]), or gives back the hold a handler asked for.
    #[allow(clippy::too_many_arguments)]
    fn answer(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        id: u32,
        req: &Request<'_, '_>,
        body: &[u8],
        started: Instant,
        entry: Option<usize>,
        streamed: Option<StreamedBody>,
        released: bool,
    ) -> Option<Held> {
        // An extended CONNECT (RFC 8441) opened a tunnel stream; only the proxy's WebSocket
        // tunnel can take it up.
        let tunnel = entry.is_some_and(|i| self.streams[i].tunnel.is_some());
        self.res_buf.clear();
        let mut forward = None;
        let mut done = Finished::default();
        let site = dispatch::route(
            ctx,
            req,
            body,
            &mut self.res_buf,
            &self.client,
            true,
            streamed,
            &mut forward,
            &mut done,
            released,
        );
        if let Some(hold) = done.hold.take() {
            if streamed.is_none() && !tunnel {
                let mut held = None;
                dispatch::hold(ctx, &mut held, req, site, &self.client, &done);
                return Some((hold, held));
            }
            // A body that streams, or a tunnel, flows from the client already: the stream
            // cannot wait unread, so the request goes on at once.
            drop(hold);
            return self.answer(ctx, id, req, body, started, entry, streamed, true);
        }
        if let Some(mut job) = forward {
            let upload = streamed.map(|framing| {
                let pipe = dispatch::upload_for(&mut job, framing);
                Box::new(UploadFeed::new(pipe, framing, job.max_body()))
            });
            // Answered as the upstream's response arrives (`super::relay`).
            ctx.proxy_starts.push((ctx.token, id, job));
            let i = self.entry(entry, id, started);
            let s = &mut self.streams[i];
            if upload.is_some() {
                // Still receiving: DATA frames feed the upload.
                s.upload = upload;
            } else if tunnel {
                // Still receiving: DATA frames are the client's side of the tunnel.
            } else {
                s.state = State::HalfClosedRemote;
            }
            dispatch::hold(ctx, &mut s.held, req, site, &self.client, &done);
            s.slots = done.slots;
            s.relay = Some(Relay {
                upstream: None,
                open: true,
                head_only: req.is_head(),
                status: 0,
                body_bytes: 0,
            });
            return None;
        }
        // A 2xx to an extended CONNECT would mean "tunnel established" (RFC 8441 §5): only the
        // proxy's tunnel may say it, anything else that would is answered 501.
        let sent = done.sent && !(tunnel && done.status / 100 == 2);
        let status = match (sent, done.sent) {
            (true, _) => done.status,
            (false, true) => 501,
            (false, false) => 500,
        };
        if !sent {
            self.status_page(ctx, status);
        }
        dispatch::answered(ctx, req, &self.client, site, status, &done, started);
        let file = if sent { done.file } else { None };
        if streamed.is_some() || tunnel {
            // Answered without forwarding (refused): the client may still be sending its body,
            // which no one will read — it is told to stop (RFC 9113 §8.1: a complete response,
            // then RST_STREAM with NO_ERROR).
            // As `refuse` does: a refusal page fits the window, so nothing waits behind the reset.
            if let Some(i) = self.streams.iter().position(|s| s.id == id) {
                self.streams.swap_remove(i);
            }
            self.send_response(id, file, None);
            frame::write_rst_stream(&mut self.wbuf, id, ErrorCode::NoError);
            remember(&mut self.reset_ids, id);
            return None;
        }
        self.send_response(id, file, entry);
        None
    }

    /// Sends `res_buf` (an HTTP/1.1-form response) and `file` on stream `id`.
    pub(super) fn send_response(
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
        self.write_head(id, status, empty);
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

    /// Writes a response head from `res_fields` (ranges of `res_buf`). HPACK-encoded now, as
    /// it is written: the table is the connection's, so blocks go out in the order encoded.
    pub(super) fn write_head(&mut self, id: u32, status: u16, end: bool) {
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
            end,
            self.peer_settings.max_frame_size as usize,
        );
        self.block = block;
    }

    /// The response on `id` is complete: the stream closes.
    pub(super) fn stream_done(&mut self, id: u32, entry: Option<usize>) {
        let i = entry
            .filter(|&i| self.streams.get(i).is_some_and(|s| s.id == id))
            .or_else(|| self.streams.iter().position(|s| s.id == id));
        match i {
            Some(i) => {
                let s = self.streams.swap_remove(i);
                forget(
                    &s,
                    &mut self.wbuf,
                    &mut self.closed_ids,
                    &mut self.reset_ids,
                );
            }
            None => remember(&mut self.closed_ids, id),
        }
    }

    /// Answers a stream whose request is refused (too large: 413, 431), then resets it if the
    /// client was still sending. Counted (by kind, as `lowlat_parse_errors_total`) and logged as
    /// HTTP/1.1 refusals are, with what `head` (as far as it was decoded) tells of the request.
    pub(super) fn refuse(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        id: u32,
        e: ParseError,
        head: Option<&RequestHead>,
    ) {
        let status = e.status();
        ctx.counters.parse_error(e);
        let still_sending = match self.streams.iter().position(|s| s.id == id) {
            Some(i) => self.streams.swap_remove(i).state == State::Open,
            None => false,
        };
        self.status_page(ctx, status);
        let tls = self.io.is_tls();
        dispatch::refused(
            ctx,
            head,
            self.peer,
            Version::Http2,
            tls,
            status,
            Duration::ZERO,
        );
        self.send_response(id, None, None);
        if still_sending {
            frame::write_rst_stream(&mut self.wbuf, id, ErrorCode::NoError);
            remember(&mut self.reset_ids, id);
        }
    }

    /// A plain status page (`404 Not Found\n`) in `res_buf`, for [`H2Conn::send_response`].
    pub(super) fn status_page(&mut self, ctx: &mut WorkerCtx<'_>, status: u16) {
        self.res_buf.clear();
        let mut done = Finished::default();
        let mut res = Response::new(
            &mut self.res_buf,
            ctx.scratch,
            ctx.date.get(),
            false,
            true,
            Version::Http2,
            &mut done,
        );
        res.send_status(status);
        res.finish();
    }
}
