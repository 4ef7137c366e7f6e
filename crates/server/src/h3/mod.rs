//! The HTTP/3 protocol layer (RFC 9114): one QUIC connection's requests answered through the
//! same router and handlers as HTTP/1.1 and HTTP/2, on the stream interface of `crate::quic`
//! (the codec — frames, QPACK, request heads — is `lowlat_http::h3`).
//!
//! Per connection: our control stream (SETTINGS), the client's control and QPACK streams read
//! as they come, and one state per request stream — its frames decoded as they arrive, the head
//! through QPACK, the body collected up to `--max-body`; at the stream's end the request is
//! answered: the handler's HTTP/1.1-form head becomes a HEADERS frame, the body DATA, a file is
//! read in 64 KiB pieces as the stream takes them (the stream's window is the back-pressure).
//!
//! QPACK: this side announces a dynamic table of 0 bytes, so the client's encoder uses the
//! static table and literals only, no request head ever waits for the encoder stream, and no
//! decoder stream is needed (RFC 9204 §4.2); our encoder is static-only as well.
//!
//! 0-RTT: requests read while the handshake is still under way came as early data, which can be
//! replayed; only safe methods are answered then, others get `425 Too Early` (RFC 8470).
//!
//! What it does not do (answered, never left hanging): forwarding to an upstream (`--proxy`
//! routes answer 502 over HTTP/3), server push, extended CONNECT.

use std::collections::HashMap;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::time::Instant;

use lowlat_http::h3::frame::{self, Frame, FrameDecoder, Settings, StreamType};
use lowlat_http::h3::qpack;
use lowlat_http::h3::stream::{ControlStream, RequestStream, Role, Section, UniStreams};
use lowlat_http::h3::{Error, ErrorCode};
use lowlat_http::head::RequestHead;
use lowlat_http::request::{Header, Method, Request};
use lowlat_http::{Status, Version};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::ctx::WorkerCtx;
use crate::handler::{FileBody, Response};
use crate::quic::{is_bidi, QuicProtocol, Read, StreamError, StreamIo};

/// ALPN of HTTP/3 (RFC 9114 §3.1).
pub const ALPN: &[u8] = b"h3";
/// Bytes read from a stream at once.
const READ_CHUNK: usize = 64 * 1024;
/// A file is read into DATA this much at a time, as the stream takes it.
const FILE_CHUNK: u64 = 64 * 1024;
/// Bytes a client's control or QPACK stream may hold undecoded (a frame header, a SETTINGS).
const MAX_UNI_BUFFER: usize = 16 * 1024;
/// The longest response head (HTTP/1.1 form) kept with its encoding for the next response.
const MAX_CACHED_HEAD: usize = 2048;

/// The ALPN protocols offered over QUIC: HTTP/3, and the transport's test protocol when the
/// environment asks for it.
#[must_use]
pub fn alpn() -> Vec<&'static [u8]> {
    let mut alpn = vec![ALPN];
    alpn.extend(crate::quic::test_alpn());
    alpn
}

/// The protocol for an ALPN the QUIC handshake agreed on: HTTP/3, else the transport's test
/// protocol.
pub(crate) fn protocol_for(alpn: &[u8]) -> Option<Box<dyn QuicProtocol>> {
    if alpn == ALPN {
        return Some(Box::new(H3Conn::default()));
    }
    crate::quic::test_protocol(alpn)
}

/// One client's unidirectional stream.
enum UniIn {
    /// Its type is not read yet: the bytes so far.
    Typing(Vec<u8>),
    Control(FrameDecoder, ControlStream),
    QpackEncoder,
    QpackDecoder,
    /// Unknown type: read and dropped.
    Discard,
}

/// One request stream.
struct ReqStream {
    frames: FrameDecoder,
    order: RequestStream,
    /// Boxed: a request stream's state moves in and out of `requests`, and a head inline more
    /// than doubled it.
    head: Option<Box<RequestHead>>,
    body: Vec<u8>,
    /// The body passed `--max-body`: it is dropped, and the answer is 413.
    too_large: bool,
    /// Answered: what is left to send (HEADERS and DATA bytes from `out_at`, then the file).
    answered: bool,
    out: Vec<u8>,
    out_at: usize,
    /// A piece of the file read and not yet all taken by the stream: handed to quinn-proto as
    /// it is (no copy into its send buffer).
    chunk: bytes::Bytes,
    file: Option<FileBody>,
    started: Instant,
}

/// One HTTP/3 connection.
pub(crate) struct H3Conn {
    decoder: qpack::Decoder,
    encoder: qpack::Encoder,
    uni: UniStreams,
    peer_uni: HashMap<u64, UniIn>,
    /// FxHash: a lookup or two per request event, and the ids are the protocol's (opened in
    /// order, at most --h3-max-streams at once), so SipHash's cost buys nothing.
    requests: FxHashMap<u64, ReqStream>,
    /// Our control stream, and what it could not take yet.
    control_out: Option<(u64, Vec<u8>)>,
    read_buf: Vec<u8>,
    res_buf: Vec<u8>,
    res_fields: Vec<(Range<usize>, Range<usize>)>,
    /// The last response head in HTTP/1.1 form (as the handler wrote it) and its HEADERS frame: the
    /// same file asked for again within the second has the same head, and copying its frame
    /// saves reading and QPACK-encoding it (~7 000 instructions, 30 % of a small request's
    /// cost then). Only heads up to [`MAX_CACHED_HEAD`] bytes.
    last_head: (Vec<u8>, Vec<u8>),
    /// A request head whose buffers are reused by the next request (decoding into a new one
    /// allocated three times).
    spare_head: Option<Box<RequestHead>>,
    /// The last request's field section (up to [`MAX_CACHED_HEAD`] bytes), the field-list limit
    /// it was checked against, and what it decoded to: a client asking again with the same
    /// section (with no dynamic table, the same bytes) gets a copy, not a second QPACK and
    /// Huffman decoding (~2 000 instructions, an eighth of a small request's cost).
    last_section: (Vec<u8>, usize, RequestHead),
    /// The buffer of the last response written whole, for the next one (up to
    /// [`MAX_CACHED_HEAD`] * 4 bytes of room kept).
    spare_out: Vec<u8>,
    closed: bool,
    /// Shutting down: GOAWAY sent with this stream id; requests from it on are refused, and
    /// the connection closes once those before it are answered.
    goaway: Option<u64>,
    /// Responses written whole and finished whose last bytes the client has not acknowledged:
    /// a shutdown waits for them (closing the connection would drop what is unsent).
    unacked: FxHashSet<u64>,
    /// The highest request stream seen, for GOAWAY.
    last_request: Option<u64>,
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
            unacked: FxHashSet::default(),
            last_request: None,
        }
    }
}

impl H3Conn {
    fn fail(&mut self, io: &mut StreamIo<'_>, e: &Error) {
        tracing::debug!("h3: {} from {}: {e}", e.code().value(), io.peer());
        self.closed = true;
        io.close(e.code().value(), b"");
    }

    /// Shutting down with every request answered: the connection closes.
    fn close_if_done(&mut self, io: &mut StreamIo<'_>) {
        if self.goaway.is_some()
            && self.requests.is_empty()
            && self.unacked.is_empty()
            && !self.closed
        {
            self.closed = true;
            io.close(ErrorCode::NoError.value(), b"");
        }
    }

    fn flush_control(&mut self, io: &mut StreamIo<'_>) {
        if let Some((id, pending)) = &mut self.control_out {
            if let Ok(n) = io.write(*id, pending) {
                pending.drain(..n);
            }
        }
    }

    /// A client's unidirectional stream has bytes.
    fn read_uni(&mut self, io: &mut StreamIo<'_>, id: u64) {
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

    fn feed_uni(&mut self, io: &mut StreamIo<'_>, id: u64, raw: &[u8]) -> Result<(), Error> {
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
                        // encoder, no push, no datagrams) and GOAWAY (no new requests come).
                        control.on_frame(&f)?;
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
    fn read_request(&mut self, io: &mut StreamIo<'_>, id: u64, ctx: &mut WorkerCtx<'_>) {
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
        });
        loop {
            self.read_buf.clear();
            let fin = match io.read(id, &mut self.read_buf, READ_CHUNK) {
                Ok(Read::Data(_)) => false,
                Ok(Read::Fin(_)) => true,
                Ok(Read::Blocked) => return,
                Err(StreamError::Closed) => return,
                Err(_) => {
                    // The client gave up on its request (RESET_STREAM).
                    io.reset(id, ErrorCode::RequestCancelled.value());
                    self.requests.remove(&id);
                    return;
                }
            };
            let input = std::mem::take(&mut self.read_buf);
            let fed = self.feed_request(id, &input, ctx);
            self.read_buf = input;
            match fed {
                Ok(()) => {}
                Err(e) if e.is_connection_error() => return self.fail(io, &e),
                Err(Error::FieldSectionTooLarge) => {
                    return self.answer_status(io, id, 431, ctx);
                }
                Err(e) => {
                    tracing::debug!("h3: stream {id} from {}: {e}", io.peer());
                    io.stop_sending(id, e.code().value());
                    io.reset(id, e.code().value());
                    self.requests.remove(&id);
                    return;
                }
            }
            if fin {
                let Some(s) = self.requests.get_mut(&id) else {
                    return;
                };
                if s.answered {
                    return;
                }
                if let Err(e) = s.frames.finish().and_then(|()| s.order.finish()) {
                    if e.is_connection_error() {
                        return self.fail(io, &e);
                    }
                    io.reset(id, e.code().value());
                    self.requests.remove(&id);
                    return;
                }
                return self.answer(io, id, ctx);
            }
        }
    }

    fn feed_request(&mut self, id: u64, input: &[u8], ctx: &WorkerCtx<'_>) -> Result<(), Error> {
        let Some(s) = self.requests.get_mut(&id) else {
            return Ok(());
        };
        if s.answered {
            return Ok(()); // what follows an answered request is dropped
        }
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
                        s.order.set_content_length(head.content_length);
                        s.head = Some(head);
                        continue;
                    }
                    match head.decode_h3(&mut self.decoder, id, section, max_list, false, false)? {
                        qpack::Decoded::Done => {
                            last_section.clear();
                            if section.len() <= MAX_CACHED_HEAD {
                                last_section.extend_from_slice(section);
                                *last_max = max_list;
                                last_head.clone_from(&head);
                            }
                            s.order.set_content_length(head.content_length);
                            s.head = Some(head);
                        }
                        // With a table of 0 bytes no section can wait for one.
                        qpack::Decoded::Blocked => {
                            return Err(Error::Qpack(qpack::QpackError::Decompression(
                                "a reference to a table announced empty",
                            )));
                        }
                    }
                }
                // Trailers are read (the codec checks their order) and not kept.
                Some(Section::Trailers) => {}
                None => {
                    if let Frame::Data(bytes) = f {
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
        Ok(())
    }

    /// Answers the complete request on stream `id` through the router.
    fn answer(&mut self, io: &mut StreamIo<'_>, id: u64, ctx: &mut WorkerCtx<'_>) {
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
        let (Some(method_token), Some(target)) = (head.method(), head.path()) else {
            self.requests.insert(id, s);
            return self.answer_status(io, id, 400, ctx);
        };
        if io.is_handshaking()
            && !matches!(
                Method::from_token(method_token),
                Method::Get | Method::Head | Method::Options
            )
        {
            // Came as 0-RTT data, which can be replayed: only safe methods are answered before
            // the handshake completes (RFC 9114 §10.9, RFC 8470: 425 Too Early, the client
            // sends it again after the handshake).
            s.head = Some(head);
            self.requests.insert(id, s);
            return self.answer_status(io, id, 425, ctx);
        }
        let mut slots = [EMPTY_HEADER; lowlat_http::limits::MAX_HEADERS];
        let Some(n) = head.request_fields(&mut slots, ctx.cfg.head.max_headers) else {
            s.head = Some(head);
            self.requests.insert(id, s);
            return self.answer_status(io, id, 431, ctx);
        };
        let fields = &slots[..n];
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (target, None),
        };
        let body = std::mem::take(&mut s.body);
        let req = Request {
            method: Method::from_token(method_token),
            method_token,
            target,
            path,
            query,
            version: Version::Http3,
            headers: fields,
            framing: if body.is_empty() {
                lowlat_http::body::BodyFraming::None
            } else {
                lowlat_http::body::BodyFraming::Length(body.len() as u64)
            },
            keep_alive: true,
            expect_continue: false,
            head_len: 0,
            // Extended CONNECT is not announced over HTTP/3, so no request carries `:protocol`.
            protocol: None,
        };
        self.res_buf.clear();
        let mut res = Response::new(
            &mut self.res_buf,
            ctx.scratch,
            ctx.date.get(),
            req.is_head(),
            true,
            Version::Http3,
        );
        // No upstream can relay over HTTP/3 yet: a forwarding route answers 502 (`forward`
        // without a slot).
        let site = ctx.router.dispatch(&req, &body, ctx.worker, &mut res);
        let done = res.finish();
        let (status, file) = if done.sent {
            (done.status, done.file)
        } else {
            (500, None)
        };
        if !done.sent {
            self.res_buf.clear();
            write_status_page(&mut self.res_buf, 500);
        }
        let took = ctx.now.saturating_duration_since(s.started);
        ctx.counters.response(site, status, done.body_bytes, took);
        if let Some(log) = ctx.access_log.as_deref_mut() {
            log.record(&crate::access_log::Entry {
                remote: io.peer(),
                method: method_token,
                target,
                version: Version::Http3,
                status,
                bytes: done.body_bytes,
                duration: took,
                user_agent: req.header("user-agent"),
                referer: req.header("referer"),
                worker: ctx.worker,
                upstream: None,
                received: None,
                site: Some(site),
                tls: true,
                head_bytes: done.head_bytes,
                fields: crate::access_log::Fields::Head(req.headers),
            });
        }
        self.spare_head = Some(head);
        s.file = file;
        self.requests.insert(id, s);
        self.send_response(io, id);
    }

    /// Answers with a status page (a refusal) and drops what else the request sends.
    fn answer_status(
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
        ctx.counters.response(0, status, 0, took);
        if let Some(log) = ctx.access_log.as_deref_mut() {
            // As HTTP/1.1 and HTTP/2 refusals are logged: what is known of the request.
            let head = s.head.as_deref();
            let field = |name: &str| {
                head.and_then(|h| h.fields().find(|(n, _)| *n == name).map(|(_, v)| v))
            };
            log.record(&crate::access_log::Entry {
                remote: io.peer(),
                method: head.and_then(RequestHead::method).unwrap_or("-"),
                target: head.and_then(RequestHead::path).unwrap_or("-"),
                version: Version::Http3,
                status,
                bytes: 0,
                duration: took,
                user_agent: field("user-agent"),
                referer: field("referer"),
                worker: ctx.worker,
                upstream: None,
                received: None,
                site: None,
                tls: true,
                head_bytes: 0,
                fields: crate::access_log::Fields::None,
            });
        }
        self.send_response(io, id);
        // RFC 9114 §4.1.2: a complete response, then STOP_SENDING with H3_NO_ERROR.
        io.stop_sending(id, ErrorCode::NoError.value());
    }

    /// `res_buf` (an HTTP/1.1-form response) as HEADERS and DATA on stream `id`, then its file.
    fn send_response(&mut self, io: &mut StreamIo<'_>, id: u64) {
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
                crate::h2::stream::translate_head(&mut self.res_buf, &mut self.res_fields)
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
    fn pump(&mut self, io: &mut StreamIo<'_>, id: u64) {
        let Some(s) = self.requests.get_mut(&id) else {
            return;
        };
        loop {
            if s.out_at < s.out.len() {
                match io.write(id, &s.out[s.out_at..]) {
                    Ok(n) => s.out_at += n,
                    Err(_) => {
                        self.requests.remove(&id);
                        return;
                    }
                }
                if s.out_at < s.out.len() {
                    return; // stream_writable comes when it takes more
                }
            }
            if !s.chunk.is_empty() {
                if io.write_bytes(id, &mut s.chunk).is_err() {
                    self.requests.remove(&id);
                    return;
                }
                if !s.chunk.is_empty() {
                    return; // stream_writable comes when it takes more
                }
            }
            s.out.clear();
            s.out_at = 0;
            let Some(f) = s.file.as_mut() else {
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
                    self.requests.remove(&id);
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
        self.requests.remove(&stream);
        self.unacked.remove(&stream);
        self.close_if_done(io);
    }
}

const EMPTY_HEADER: Header<'static> = Header {
    name: "",
    value: b"",
};

/// A bare status page in HTTP/1.1 form (`413 Content Too Large`), for `send_response`.
fn write_status_page(out: &mut Vec<u8>, status: u16) {
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
