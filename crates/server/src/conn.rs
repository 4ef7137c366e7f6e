//! One client connection: its buffers, its position in the request/response cycle, its deadline.
//!
//! The cycle is a loop in [`Conn::drive`]: flush what is pending, answer every complete request
//! in the read buffer (pipelining: all their responses go into one output buffer, so a batch
//! leaves in one `write`), then read more. Under edge-triggered epoll a read that returns less
//! than the space offered means the socket is drained (the kernel copies all it has), so the
//! loop stops there instead of paying one more `read` for `EAGAIN` — tokio makes the same
//! inference. Reading also stops while output is blocked, so a client that pipelines without
//! reading its answers gets back-pressure, not an ever-growing buffer.
//!
//! Invariants: a connection holds a pooled buffer only while it has bytes in it (an idle
//! keep-alive connection holds none); after a [`ParseError`] nothing more is read as a request
//! and the connection is closed once the error response is out.

use std::io;
use std::time::{Duration, Instant};

use mio::Token;

use crate::access_log::{HeldRequest, UpstreamFields};
use crate::ctx::WorkerCtx;
use crate::handler::{FileBody, Response};
use crate::proxy::downstream::{log_relayed, Downstream, TunnelRead};
use crate::proxy::headers::{ClientInfo, StreamedBody};
use crate::proxy::job::RelayBody;
use crate::proxy::upload::{Upload, UploadRef, STREAM_MIN_BODY};
use crate::transport::{Flushed, ReadFailure, Transport};
use crate::wait::Wait;
use lowlat_http::body::{BodyFraming, ChunkedDecoder};
use lowlat_http::request::{header_slots, parse_request};
use lowlat_http::{ParseError, Status, Version};

/// Stop answering pipelined requests once this much output is waiting; the rest are answered
/// after it is written. Bounds the output buffer of a client that pipelines thousands.
const OUTPUT_HIGH_WATER: usize = 256 * 1024;

/// Most file bytes sent for one connection before the worker turns to the others, so a fast
/// reader of a big file cannot monopolise the loop. Over TLS each byte is also read and
/// encrypted here, so a turn is shorter.
const SENDFILE_TURN_BYTES: u64 = 512 * 1024;
const TLS_FILE_TURN_BYTES: u64 = 256 * 1024;

/// How long a closing connection reads and discards what the client still sends, so the close
/// does not become a reset that destroys the response in flight (nginx: `lingering_time`).
const LINGER_TIMEOUT: Duration = Duration::from_secs(2);

/// Extra raw bytes allowed beyond the head and body limits while a body is read: the undecoded
/// tail of a chunked body (a size line, extensions, CRLFs) and the next pipelined request.
const CHUNK_FRAMING_ALLOWANCE: usize = 64 * 1024;

/// A connection waiting for an upstream's response is bounded by the upstream side's timeouts;
/// this only keeps its own deadline from firing first.
const UPSTREAM_WAIT_LIMIT: Duration = Duration::from_secs(24 * 3600);

/// A response being relayed from an upstream.
#[derive(Debug, Clone, Copy)]
struct Relay {
    /// The client's request asked to keep the connection open (and the server agreed).
    keep_alive: bool,
    version: Version,
    head_only: bool,
    /// The body goes out chunked (its length is not known ahead).
    chunked: bool,
    status: u16,
    body_bytes: u64,
    started: Instant,
}

/// The client's side of a WebSocket tunnel through the proxy (after the upstream's `101`): what
/// its log line will say, and whether its sending side is to be half-closed.
#[derive(Debug)]
struct ClientTunnel {
    /// The upstream server's label (the log's upstream address).
    upstream: String,
    /// Bytes from the client, forwarded upstream.
    received: u64,
    /// Bytes from the upstream, queued for the client.
    sent: u64,
    /// The upstream finished: half-close once the output is written.
    shut_wanted: bool,
    shut_done: bool,
}

/// What `drive` should do next after a read.
enum ReadOutcome {
    Data,
    Drained,
    Closed,
}

/// State kept only while a chunked body is being received.
struct ChunkState {
    decoder: ChunkedDecoder,
    /// Decoded body so far.
    data: Vec<u8>,
    /// Raw bytes after the head already fed to the decoder.
    scanned: usize,
}

/// The client's side of a body streaming to an upstream (see `proxy::upload`).
struct ClientUpload {
    pipe: UploadRef,
    left: UploadLeft,
}

/// What is left of a streaming body to read.
enum UploadLeft {
    Length(u64),
    Chunked(ChunkedDecoder),
}

/// One client connection.
pub(crate) struct Conn {
    /// The socket, in clear or under TLS.
    pub(crate) io: Transport,
    /// The client's address (for the access log).
    peer: std::net::SocketAddr,
    /// The client as handlers that pass it on see it (the proxy).
    client: ClientInfo,
    /// Read buffer, fully initialised; `rlen` bytes of it hold data. Empty (no capacity) while
    /// the connection has no unanswered bytes.
    rbuf: Vec<u8>,
    rlen: usize,
    /// Output waiting to be written; `wpos` bytes of it already were.
    wbuf: Vec<u8>,
    wpos: usize,
    /// A file region to send after `wbuf`.
    file: Option<Box<FileBody>>,
    chunk: Option<Box<ChunkState>>,
    /// The socket may have more to read (the last read filled the buffer, or an event said so).
    read_ready: bool,
    /// Bytes arrived since the last parse attempt, or a pause (file, high water) ended.
    unparsed: bool,
    /// A request's body is being received.
    body_pending: bool,
    /// `100 Continue` was sent for the request being received.
    continue_sent: bool,
    /// The socket's send buffer is full; wait for a writable event.
    write_blocked: bool,
    /// Bytes went out since the deadline was last armed (the write timeout counts from the last
    /// progress, not from the last event: a client that sends but never reads gets no extension).
    wrote: bool,
    /// Close once the output is written.
    closing: bool,
    /// Read and discard after closing our side, until the client closes.
    lingering: bool,
    /// The client closed its side: answer what it sent, then close.
    eof: bool,
    /// epoll reported the client's FIN (`EPOLLRDHUP`): a short read no longer means "drained",
    /// since the end of stream is still to be read and no further edge will announce it.
    fin_seen: bool,
    /// The connection is finished; the worker removes it.
    pub(crate) closed: bool,
    /// The client speaks HTTP/2: [`crate::proto`] hands the connection over.
    h2: bool,
    /// The first bytes were HTTP/1.1: the connection stays so.
    http1: bool,
    /// When the current request head started arriving.
    head_started: Instant,
    /// A request forwarded to an upstream, whose response is being relayed: no other request
    /// is answered meanwhile (responses stay in order).
    relay: Option<Relay>,
    /// The upstream connection serving `relay`.
    upstream: Option<Token>,
    /// The forwarded request's log fields, kept for its line (reused; only with an access log).
    held: Option<Box<HeldRequest>>,
    /// The forwarded request's body, still arriving and streaming to the upstream.
    upload: Option<Box<ClientUpload>>,
    /// Body bytes went to the upload since the upstream side was last woken for them.
    upload_fed: bool,
    /// The connection was upgraded (WebSocket through the proxy): bytes are tunnelled, no
    /// request is parsed again. `relay` stays set meanwhile, so nothing is read as HTTP.
    tunnel: Option<Box<ClientTunnel>>,
    pub(crate) wait: Wait,
    pub(crate) deadline: Instant,
}

impl Conn {
    /// A connection just accepted; `first_deadline` is the keep-alive deadline in clear and the
    /// handshake deadline over TLS.
    pub(crate) fn new(
        io: Transport,
        peer: std::net::SocketAddr,
        now: Instant,
        first_deadline: Duration,
    ) -> Self {
        let wait = if io.is_handshaking() {
            Wait::Handshake
        } else {
            Wait::Idle
        };
        let client = ClientInfo {
            peer,
            tls: io.is_tls(),
            early_data: false,
        };
        Self {
            io,
            peer,
            client,
            rbuf: Vec::new(),
            rlen: 0,
            wbuf: Vec::new(),
            wpos: 0,
            file: None,
            chunk: None,
            read_ready: false,
            unparsed: false,
            body_pending: false,
            continue_sent: false,
            write_blocked: false,
            wrote: false,
            closing: false,
            lingering: false,
            eof: false,
            fin_seen: false,
            closed: false,
            h2: false,
            http1: false,
            head_started: now,
            relay: None,
            upstream: None,
            held: None,
            upload: None,
            upload_fed: false,
            tunnel: None,
            wait,
            deadline: now + first_deadline,
        }
    }

    /// Whether the connection sits between requests with nothing buffered.
    pub(crate) fn is_idle(&self) -> bool {
        self.rlen == 0
            && self.wbuf.len() == self.wpos
            && self.file.is_none()
            && !self.closing
            && self.relay.is_none()
    }

    /// The upstream connection relaying this connection's response, if one is.
    pub(crate) fn upstream(&self) -> Option<Token> {
        self.upstream
    }

    /// Whether a relayed response waits to be written (the upstream is not read meanwhile).
    pub(crate) fn relaying(&self) -> bool {
        self.relay.is_some()
    }

    /// Whether the connection is a WebSocket tunnel (its upstream is pumped after each event).
    pub(crate) fn tunnelling(&self) -> bool {
        self.tunnel.is_some()
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
            if self.relay.is_some() && self.upload.is_none() && self.tunnel.is_none() {
                // The client left while its response was on the way: nginx's 499. The worker
                // abandons the upstream exchange. (During an upload, what it sent before its
                // FIN is read first: the end of the body may be in it.)
                self.close_now(ctx);
                return;
            }
        }
        if writable {
            self.write_blocked = false;
        }
        self.drive(ctx);
    }

    /// Makes all the progress possible without blocking, then arms the right deadline.
    pub(crate) fn drive(&mut self, ctx: &mut WorkerCtx<'_>) {
        loop {
            if self.closed {
                return;
            }
            if !self.flush(ctx) {
                break;
            }
            if let Some(t) = self.tunnel.as_deref_mut() {
                if t.shut_wanted && !t.shut_done {
                    // All the upstream sent is written: pass its FIN on.
                    t.shut_done = true;
                    self.io.close_notify();
                    self.io.shutdown_write();
                }
            }
            if self.closing {
                self.finish_close(ctx);
                if self.closed || !self.read_ready {
                    break;
                }
                // Lingering: discard what the client still sends.
                match self.read(ctx) {
                    ReadOutcome::Data => continue,
                    ReadOutcome::Drained | ReadOutcome::Closed => break,
                }
            }
            if self.unparsed && self.rlen > 0 {
                if self.speaks_h2(ctx) {
                    // Handed over as it is: the HTTP/2 side reads the preface from `rbuf`.
                    return;
                }
                self.process(ctx);
                if !self.wbuf.is_empty() || self.file.is_some() || self.closing {
                    continue;
                }
            }
            if self.eof && !self.unparsed && !self.closing && self.relay.is_none() {
                // Everything the client sent before its FIN is answered; what is left is an
                // incomplete request that can never complete.
                self.closing = true;
                self.lingering = false;
                continue;
            }
            if self.eof && self.upload.is_some() {
                // The client closed before the end of the body it is streaming: the upstream
                // exchange is abandoned (the upstream sees the request cut short).
                self.close_now(ctx);
                return;
            }
            if !self.read_ready || self.relay.is_some() && !self.upload_has_room() {
                // While a response is relayed, pipelined requests wait in the socket; so does
                // a streaming body while the upstream has not taken what it was given.
                break;
            }
            match self.read(ctx) {
                ReadOutcome::Data | ReadOutcome::Drained => {}
                ReadOutcome::Closed => return,
            }
        }
        if self.closed {
            return;
        }
        self.release_idle_buffers(ctx);
        self.arm_deadline(ctx);
    }

    /// Whether the bytes received start HTTP/2: ALPN agreed on `h2`, or `--h2c` is on and they
    /// are the HTTP/2 preface. A prefix of the preface waits for the rest (no HTTP/1.1 request
    /// starts with `PRI * HTTP/2.0`). Decided once, on a connection's first bytes.
    fn speaks_h2(&mut self, ctx: &WorkerCtx<'_>) -> bool {
        if self.http1 {
            return false;
        }
        if self.io.alpn() == Some(b"h2") {
            self.h2 = true;
        } else if ctx.cfg.h2.h2c && !self.io.is_tls() {
            let preface = lowlat_http::h2::frame::PREFACE;
            let n = self.rlen.min(preface.len());
            if self.rbuf[..n] == preface[..n] {
                if n < preface.len() {
                    self.unparsed = false;
                    return true;
                }
                self.h2 = true;
            }
        }
        self.http1 = !self.h2;
        self.h2
    }

    /// Whether the connection is to continue as HTTP/2 (see [`Conn::into_h2`]).
    pub(crate) fn wants_h2(&self) -> bool {
        self.h2 && !self.closed
    }

    /// The transport and what was read, for the HTTP/2 side; the rest goes back to the pool.
    pub(crate) fn into_h2(
        mut self,
        ctx: &mut WorkerCtx<'_>,
    ) -> (Transport, std::net::SocketAddr, Vec<u8>, usize) {
        if self.wbuf.capacity() > 0 {
            ctx.pool.give_write(std::mem::take(&mut self.wbuf));
        }
        (self.io, self.peer, self.rbuf, self.rlen)
    }

    /// One `read(2)` into the spare room of the read buffer.
    fn read(&mut self, ctx: &mut WorkerCtx<'_>) -> ReadOutcome {
        if self.rbuf.is_empty() {
            self.rbuf = ctx.pool.take_read();
        }
        if self.rlen == self.rbuf.len() && !self.grow_read_buffer(ctx) {
            return ReadOutcome::Closed;
        }
        loop {
            return match self.io.read(&mut self.rbuf[self.rlen..]) {
                Ok(r) if r.n == 0 => {
                    self.read_ready = false;
                    if self.lingering
                        || self.rlen == 0 && self.wpos == self.wbuf.len() && self.file.is_none()
                    {
                        self.close_now(ctx);
                        return ReadOutcome::Closed;
                    }
                    // A half-close after pipelined requests: they are still answered.
                    self.eof = true;
                    self.unparsed = self.rlen > 0;
                    ReadOutcome::Drained
                }
                Ok(r) => {
                    let n = r.n;
                    if self.lingering {
                        // Discarded: only the client's close matters now.
                        self.read_ready = r.more || self.fin_seen;
                        return if self.read_ready {
                            ReadOutcome::Data
                        } else {
                            ReadOutcome::Drained
                        };
                    }
                    if self.rlen == 0 {
                        self.head_started = ctx.now;
                    }
                    self.rlen += n;
                    self.unparsed = true;
                    if !r.more && !self.fin_seen {
                        self.read_ready = false;
                        ReadOutcome::Drained
                    } else {
                        ReadOutcome::Data
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.read_ready = false;
                    ReadOutcome::Drained
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    if self.io.classify(&e) == ReadFailure::PlainHttpOnTls {
                        // nginx's answer: 400 in clear, then close.
                        self.fail(ctx, ParseError::PlainHttpOnTls);
                        self.lingering = true;
                        self.unparsed = false;
                        return ReadOutcome::Drained;
                    }
                    self.close_now(ctx);
                    ReadOutcome::Closed
                }
            };
        }
    }

    /// Makes room in a full read buffer, up to what the request being read may need. Past that
    /// the parser has already refused the request, so this only fails for an over-long chunked
    /// body, which gets its 413 here.
    fn grow_read_buffer(&mut self, ctx: &mut WorkerCtx<'_>) -> bool {
        let cfg = ctx.cfg;
        let max_body = usize::try_from(cfg.max_body_bytes).unwrap_or(usize::MAX);
        let limit = if self.body_pending {
            cfg.head
                .max_head_bytes
                .saturating_add(max_body)
                .saturating_add(CHUNK_FRAMING_ALLOWANCE)
        } else {
            cfg.head.max_head_bytes + 1
        };
        if self.rbuf.len() >= limit {
            self.fail(ctx, ParseError::BodyTooLarge);
            self.drive_close(ctx);
            return false;
        }
        let new_len = self.rbuf.len().saturating_mul(2).min(limit);
        self.rbuf.resize(new_len, 0);
        true
    }

    /// Answers every complete request at the start of the read buffer.
    fn process(&mut self, ctx: &mut WorkerCtx<'_>) {
        self.unparsed = false;
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
            let mut res = Response::new(
                &mut self.wbuf,
                ctx.scratch,
                ctx.date.get(),
                req.is_head(),
                keep_alive,
                req.version,
            );
            let mut forward = None;
            res.set_client(&self.client, &mut forward);
            if let Some(framing) = streamed {
                res.set_streamed(framing);
            }
            let site = ctx.router.dispatch(&req, body, ctx.worker, &mut res);
            let done = res.finish();
            if let Some(mut job) = forward.take() {
                if let Some(framing) = streamed {
                    // The body follows the head to the upstream as it is read (`feed_upload`).
                    let pipe = Upload::new(framing);
                    let left = match framing {
                        StreamedBody::Length(n) => UploadLeft::Length(n),
                        StreamedBody::Chunked => {
                            // Its trailers go on with it (`proxy::upload`).
                            UploadLeft::Chunked(
                                ChunkedDecoder::new(job.group.cfg.max_body).keep_trailers(),
                            )
                        }
                    };
                    job.upload = Some(std::rc::Rc::clone(&pipe));
                    self.upload = Some(Box::new(ClientUpload { pipe, left }));
                    if req.expect_continue {
                        // As nginx does when it streams a body: the server asks for it.
                        self.wbuf
                            .extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
                    }
                }
                // Answered later, by the upstream side; what follows waits for it.
                ctx.proxy_starts.push((ctx.token, 0, job));
                if let Some(log) = ctx.access_log.as_deref() {
                    let held = self.held.get_or_insert_with(Box::default);
                    held.hold(&req, site, self.client.tls, log.config());
                }
                self.relay = Some(Relay {
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
            // With metrics or a log, the clock when answered: the loop's time is the same for a
            // request read and answered in one turn, which would time it at zero.
            let end = if ctx.timed { Instant::now() } else { ctx.now };
            let took = end.saturating_duration_since(self.head_started);
            ctx.counters.response(
                site,
                if done.sent { done.status } else { 500 },
                done.body_bytes,
                took,
            );
            if let Some(log) = ctx.access_log.as_deref_mut() {
                log.record(&crate::access_log::Entry::answered(
                    &req,
                    self.peer,
                    if done.sent { done.status } else { 500 },
                    done.body_bytes,
                    done.head_bytes,
                    took,
                    ctx.worker,
                    site,
                    self.client.tls,
                ));
            }
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

    /// Whether a streaming body may be read now: the upstream side took enough of what it was
    /// given (or wants no more).
    fn upload_has_room(&self) -> bool {
        self.upload
            .as_ref()
            .is_some_and(|u| u.pipe.borrow().has_room())
    }

    /// Passes what the read buffer holds of a streaming body to the upstream side: the bytes of
    /// a length, the decoded data of chunks (re-framed there). A malformed or over-long chunked
    /// body fails the exchange (400 or 413 if the upstream has not answered yet). What follows
    /// the body stays in the buffer: the next pipelined request.
    fn feed_upload(&mut self) {
        let Some(up) = self.upload.as_mut() else {
            return;
        };
        let mut pipe = up.pipe.borrow_mut();
        if pipe.is_closed() {
            // The upstream answered before the body ended (or the exchange ended): the rest
            // is not read, and the connection closes after the response.
            drop(pipe);
            self.upload = None;
            self.rlen = 0;
            return;
        }
        let data = &self.rbuf[..self.rlen];
        let (used, done) = match &mut up.left {
            UploadLeft::Length(left) => {
                let n = data.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                pipe.put(&data[..n]);
                *left -= n as u64;
                (n, *left == 0)
            }
            UploadLeft::Chunked(decoder) => match decoder.decode(data, |d| pipe.put(d)) {
                Ok(progress) => (progress.consumed, progress.done),
                Err(e) => {
                    pipe.fail(e.status());
                    drop(pipe);
                    self.upload = None;
                    self.upload_fed = true;
                    self.rlen = 0;
                    // The rest of the body may still come: read and dropped after the answer.
                    self.lingering = true;
                    if let Some(relay) = &mut self.relay {
                        relay.keep_alive = false;
                    }
                    return;
                }
            },
        };
        if done {
            match &mut up.left {
                UploadLeft::Chunked(decoder) => {
                    let raw = decoder.take_trailers();
                    pipe.end_with_trailers(lowlat_http::body::trailer_fields(&raw));
                }
                UploadLeft::Length(_) => pipe.end(),
            }
        }
        drop(pipe);
        self.upload_fed |= used > 0 || done;
        self.rbuf.copy_within(used..self.rlen, 0);
        self.rlen -= used;
        if done {
            self.upload = None;
        }
    }

    /// The upstream connection to drive for body bytes just passed to it, once.
    pub(crate) fn take_upload_wake(&mut self) -> Option<Token> {
        if std::mem::take(&mut self.upload_fed) {
            self.upstream
        } else {
            None
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
            });
        }
        Self::write_status(wbuf, ctx, status, Version::Http11, true);
    }

    fn write_status(
        wbuf: &mut Vec<u8>,
        ctx: &mut WorkerCtx<'_>,
        status: u16,
        version: Version,
        close: bool,
    ) {
        if wbuf.capacity() == 0 {
            *wbuf = ctx.pool.take_write();
        }
        let mut res = Response::new(wbuf, ctx.scratch, ctx.date.get(), false, !close, version);
        res.send_status(status);
        let _ = res.finish();
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

    /// Writes pending output and file data. Returns true when everything is written.
    fn flush(&mut self, ctx: &mut WorkerCtx<'_>) -> bool {
        if self.write_blocked {
            return false;
        }
        let before = self.wpos;
        // With a file to follow, the head may wait to leave with the file's first bytes.
        let flushed = self
            .io
            .write_from(&self.wbuf, &mut self.wpos, self.file.is_some());
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
        if self.wpos > 0 {
            self.wbuf.clear();
            self.wpos = 0;
        }
        if self.file.is_some() {
            return self.send_file(ctx);
        }
        if self.io.has_pending() {
            // Encrypted but not on the wire: the socket is full.
            self.write_blocked = true;
            self.wrote = true;
            return false;
        }
        true
    }

    /// Sends the pending file region (`sendfile(2)` in clear, read and encrypted over TLS), a
    /// turn's worth at a time.
    fn send_file(&mut self, ctx: &mut WorkerCtx<'_>) -> bool {
        let Some(file) = self.file.as_mut() else {
            return true;
        };
        let turn = if self.io.is_tls() {
            TLS_FILE_TURN_BYTES
        } else {
            SENDFILE_TURN_BYTES
        };
        let mut sent_this_turn = 0u64;
        while file.len > 0 {
            if sent_this_turn >= turn {
                ctx.deferred.push(ctx.token);
                return false;
            }
            let chunk = file.len.min(turn);
            match self
                .io
                .send_file(&file.file, file.offset, chunk, ctx.file_chunk)
            {
                Ok(0) => {
                    // The file is shorter than the Content-Length we announced: closing is the
                    // only way to not send a body of the wrong length.
                    self.close_now(ctx);
                    return false;
                }
                Ok(n) => {
                    file.offset += n;
                    file.len -= n;
                    sent_this_turn += n;
                    self.wrote = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.write_blocked = true;
                    return false;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.close_now(ctx);
                    return false;
                }
            }
        }
        self.file = None;
        // Requests pipelined behind the file can be answered now.
        self.unparsed = self.rlen > 0;
        if self.io.has_pending() {
            self.write_blocked = true;
            return false;
        }
        true
    }

    /// All output is written and the connection is to close: close now, or half-close and linger
    /// when the client may still be sending (so it reads our answer instead of a reset).
    fn finish_close(&mut self, ctx: &mut WorkerCtx<'_>) {
        if !self.lingering {
            self.io.close_notify();
            self.close_now(ctx);
            return;
        }
        if self.wait != Wait::Linger {
            self.io.close_notify();
            self.io.shutdown_write();
            self.wait = Wait::Linger;
            self.deadline = ctx.now + LINGER_TIMEOUT;
            self.rlen = 0;
        }
    }

    /// Closes the socket; the worker removes the connection.
    pub(crate) fn close_now(&mut self, ctx: &mut WorkerCtx<'_>) {
        if self.closed {
            return;
        }
        self.closed = true;
        ctx.counters.closed += 1;
        let _ = ctx.registry.deregister(self.io.socket());
        if let Some(up) = self.upstream.take() {
            ctx.proxy_cancels.push(up);
        }
        if let Some(t) = self.tunnel.take() {
            self.log_tunnel(ctx, &t);
        }
        self.give_back(ctx);
    }

    /// A tunnel's one line and count, when it ends (however it ends): status 101, the bytes
    /// each way, and how long it was open.
    fn log_tunnel(&self, ctx: &mut WorkerCtx<'_>, t: &ClientTunnel) {
        let started = self.relay.map_or(ctx.now, |r| r.started);
        let took = Instant::now().saturating_duration_since(started);
        ctx.counters.response(0, 101, t.sent, took);
        if let (Some(log), Some(held)) = (ctx.access_log.as_deref_mut(), &self.held) {
            let mut entry = held.entry(
                self.peer,
                101,
                t.sent,
                took,
                ctx.worker,
                Some(UpstreamFields {
                    addr: &t.upstream,
                    status: 101,
                    time: took,
                }),
            );
            entry.received = Some(t.received);
            log.record(&entry);
        }
    }

    fn give_back(&mut self, ctx: &mut WorkerCtx<'_>) {
        if !self.rbuf.is_empty() {
            ctx.pool.give_read(std::mem::take(&mut self.rbuf));
        }
        if self.wbuf.capacity() > 0 {
            ctx.pool.give_write(std::mem::take(&mut self.wbuf));
        }
        self.rlen = 0;
        self.wpos = 0;
    }

    /// Idle keep-alive connections hold no buffers.
    fn release_idle_buffers(&mut self, ctx: &mut WorkerCtx<'_>) {
        if self.rlen == 0 && !self.rbuf.is_empty() && !self.body_pending {
            ctx.pool.give_read(std::mem::take(&mut self.rbuf));
        }
        if self.wbuf.is_empty() && self.wbuf.capacity() > 0 && self.relay.is_none() {
            ctx.pool.give_write(std::mem::take(&mut self.wbuf));
        }
    }

    /// Sets the deadline for what the connection now waits for.
    fn arm_deadline(&mut self, ctx: &WorkerCtx<'_>) {
        let cfg = ctx.cfg;
        if !self.write_blocked {
            self.wrote = false;
        }
        let (wait, deadline) = if self.upload_has_room() && !self.write_blocked {
            // Streaming a body: the client's pace is bounded as for any body.
            (Wait::Body, ctx.now + cfg.body_timeout)
        } else if self.relay.is_some() && !self.write_blocked {
            // The upstream side's timeouts bound the wait (and answer 504).
            (Wait::Upstream, ctx.now + UPSTREAM_WAIT_LIMIT)
        } else if self.closing && self.lingering && self.wait == Wait::Linger {
            return;
        } else if self.wait == Wait::Handshake && self.io.is_handshaking() {
            // A total deadline from accept: a client that trickles a handshake is a slowloris.
            return;
        } else if self.write_blocked {
            let progressed = std::mem::take(&mut self.wrote);
            if self.wait == Wait::Write && !progressed {
                return;
            }
            (Wait::Write, ctx.now + cfg.write_timeout)
        } else if self.body_pending {
            (Wait::Body, ctx.now + cfg.body_timeout)
        } else if self.rlen > 0 {
            (Wait::Head, self.head_started + cfg.header_timeout)
        } else {
            (Wait::Idle, ctx.now + cfg.keepalive_timeout)
        };
        self.wait = wait;
        self.deadline = deadline;
    }

    /// The deadline passed: answer 408 where a request was under way, and close.
    pub(crate) fn expire(&mut self, ctx: &mut WorkerCtx<'_>) {
        match self.wait {
            Wait::Head | Wait::Body => {
                self.fail(ctx, ParseError::Timeout);
                self.drive_close(ctx);
            }
            Wait::Idle => {
                // Over TLS, say that the stream ends here (a graceful shutdown's idle close).
                self.io.close_notify();
                self.close_now(ctx);
            }
            Wait::Handshake | Wait::Write | Wait::Linger | Wait::Upstream => self.close_now(ctx),
        }
    }
}

impl Downstream for Conn {
    fn relay_head(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        status: u16,
        reason: &str,
        fields: &[lowlat_http::client::Header<'_>],
        pass: &dyn Fn(&str) -> bool,
        added: &[u8],
        body: RelayBody,
    ) {
        let Some(relay) = &mut self.relay else {
            return;
        };
        if self.upload.is_some() {
            // Answered before the body ended: the rest of it is not read, so the next request
            // cannot be found; the connection closes after this response.
            relay.keep_alive = false;
        }
        if self.wbuf.capacity() == 0 {
            self.wbuf = ctx.pool.take_write();
        }
        let out = &mut self.wbuf;
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
        out.push(b' ');
        // The upstream's phrase; an empty one (allowed) gets the standard phrase if there is one.
        let standard = lowlat_http::response::reason(status);
        out.extend_from_slice(if !reason.is_empty() {
            reason.as_bytes()
        } else if standard == "Unknown" {
            b""
        } else {
            standard.as_bytes()
        });
        out.extend_from_slice(b"\r\n");
        for f in fields.iter().filter(|f| pass(f.name)) {
            out.extend_from_slice(f.name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(f.value);
            out.extend_from_slice(b"\r\n");
        }
        for (name, value) in crate::proxy::downstream::added_lines(added, fields, pass) {
            out.extend_from_slice(name);
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        let length = |n: u64, out: &mut Vec<u8>| {
            out.extend_from_slice(b"Content-Length: ");
            out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            out.extend_from_slice(b"\r\n");
        };
        match body {
            RelayBody::Length(n) => length(n, out),
            RelayBody::None { length: announced } => {
                let bodiless = (100..200).contains(&status) || status == 204 || status == 304;
                if relay.head_only {
                    if let Some(n) = announced {
                        length(n, out);
                    }
                } else if !bodiless {
                    length(0, out);
                }
            }
            RelayBody::Unknown => {
                if relay.version == Version::Http11 {
                    if !relay.head_only {
                        out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
                        relay.chunked = true;
                    }
                } else {
                    // An HTTP/1.0 client reads to the close.
                    relay.keep_alive = false;
                }
            }
        }
        if !relay.keep_alive {
            out.extend_from_slice(b"Connection: close\r\n");
        } else if relay.version == Version::Http10 {
            out.extend_from_slice(b"Connection: keep-alive\r\n");
        }
        out.extend_from_slice(b"\r\n");
        relay.status = status;
    }

    fn relay_body(&mut self, ctx: &mut WorkerCtx<'_>, data: &[u8]) {
        let Some(relay) = &mut self.relay else {
            return;
        };
        if relay.head_only || data.is_empty() {
            return;
        }
        if self.wbuf.capacity() == 0 {
            self.wbuf = ctx.pool.take_write();
        }
        relay.body_bytes += data.len() as u64;
        if relay.chunked {
            let mut size = [0u8; 16];
            let n = hex_len(data.len(), &mut size);
            self.wbuf.extend_from_slice(&size[..n]);
            self.wbuf.extend_from_slice(b"\r\n");
            self.wbuf.extend_from_slice(data);
            self.wbuf.extend_from_slice(b"\r\n");
        } else {
            self.wbuf.extend_from_slice(data);
        }
    }
    /// Trailer fields go in the chunked body's trailer section (RFC 9112 §7.1.2), sent whether
    /// or not the client said `TE: trailers`: a recipient that does not want them discards them.
    /// A response not sent chunked (an HTTP/1.0 client, HEAD) has nowhere to put them.
    fn relay_trailers(&mut self, ctx: &mut WorkerCtx<'_>, fields: &[(&[u8], &[u8])]) {
        let Some(relay) = &mut self.relay else {
            return;
        };
        if !relay.chunked {
            return;
        }
        if self.wbuf.capacity() == 0 {
            self.wbuf = ctx.pool.take_write();
        }
        self.wbuf.extend_from_slice(b"0\r\n");
        for (name, value) in fields {
            self.wbuf.extend_from_slice(name);
            self.wbuf.extend_from_slice(b": ");
            self.wbuf.extend_from_slice(value);
            self.wbuf.extend_from_slice(b"\r\n");
        }
        self.wbuf.extend_from_slice(b"\r\n");
        // The last chunk is written: `relay_end` has nothing to add.
        relay.chunked = false;
    }

    fn relay_end(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        upstream: &str,
        upstream_status: u16,
        upstream_time: Duration,
    ) {
        let Some(relay) = self.relay.take() else {
            return;
        };
        self.upstream = None;
        let unread = self.end_upload();
        if relay.chunked {
            self.wbuf.extend_from_slice(b"0\r\n\r\n");
        }
        let took = ctx.now.saturating_duration_since(relay.started);
        log_relayed(
            ctx,
            self.held.as_deref(),
            self.peer,
            relay.status,
            relay.body_bytes,
            took,
            Some(UpstreamFields {
                addr: upstream,
                status: upstream_status,
                time: upstream_time,
            }),
        );
        if !relay.keep_alive {
            self.closing = true;
            self.lingering = self.rlen > 0 || unread;
        }
        // Requests pipelined behind this one are answered now.
        self.unparsed = self.rlen > 0;
    }

    fn relay_abort(&mut self, ctx: &mut WorkerCtx<'_>) {
        // Already-written bytes go out; then the close shows the response was cut.
        self.relay = None;
        self.upstream = None;
        self.end_upload();
        let _ = self.flush(ctx);
        self.close_now(ctx);
    }

    fn relay_error(&mut self, ctx: &mut WorkerCtx<'_>, status: u16) {
        let Some(mut relay) = self.relay.take() else {
            return;
        };
        self.upstream = None;
        if self.end_upload() {
            relay.keep_alive = false;
            self.lingering = true;
        }
        let took = ctx.now.saturating_duration_since(relay.started);
        log_relayed(ctx, self.held.as_deref(), self.peer, status, 0, took, None);
        Self::write_status(
            &mut self.wbuf,
            ctx,
            status,
            relay.version,
            !relay.keep_alive,
        );
        if !relay.keep_alive {
            self.closing = true;
        }
        self.unparsed = self.rlen > 0;
        // Nothing else will write it: the upstream side is done with this exchange.
        self.drive(ctx);
    }

    fn backlog(&self) -> usize {
        // Encrypted bytes still waiting for the socket count too: a tunnel half-closes the
        // client only once nothing at all is left to send, TLS records included.
        self.wbuf.len() - self.wpos + usize::from(self.io.has_pending())
    }

    fn relay_link(&mut self, upstream: Token) {
        self.upstream = Some(upstream);
    }

    fn flush_relayed(&mut self, ctx: &mut WorkerCtx<'_>) {
        self.drive(ctx);
    }

    fn tunnel_open(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        reason: &str,
        fields: &[lowlat_http::client::Header<'_>],
        pass: &dyn Fn(&str) -> bool,
        upstream: &str,
    ) -> bool {
        if self.relay.is_none() || self.closed {
            return false;
        }
        if self.wbuf.capacity() == 0 {
            self.wbuf = ctx.pool.take_write();
        }
        let out = &mut self.wbuf;
        out.extend_from_slice(b"HTTP/1.1 101 ");
        out.extend_from_slice(if reason.is_empty() {
            b"Switching Protocols"
        } else {
            reason.as_bytes()
        });
        out.extend_from_slice(b"\r\n");
        for f in fields.iter().filter(|f| pass(f.name)) {
            out.extend_from_slice(f.name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(f.value);
            out.extend_from_slice(b"\r\n");
        }
        // The upgrade's own fields are hop-by-hop, so `pass` dropped the upstream's: this hop's.
        out.extend_from_slice(b"Upgrade: websocket\r\nConnection: upgrade\r\n\r\n");
        if let Some(relay) = &mut self.relay {
            relay.status = 101;
            relay.keep_alive = false;
        }
        self.tunnel = Some(Box::new(ClientTunnel {
            upstream: upstream.to_owned(),
            received: 0,
            sent: 0,
            shut_wanted: false,
            shut_done: false,
        }));
        true
    }

    fn tunnel_read(&mut self, _ctx: &mut WorkerCtx<'_>, buf: &mut [u8]) -> TunnelRead {
        let Some(t) = self.tunnel.as_deref_mut() else {
            return TunnelRead::Failed;
        };
        if self.closed {
            return TunnelRead::Failed;
        }
        if self.rlen > 0 {
            // Sent behind the handshake, before the 101 came back: the first tunnelled bytes.
            let n = self.rlen.min(buf.len());
            buf[..n].copy_from_slice(&self.rbuf[..n]);
            self.rbuf.copy_within(n..self.rlen, 0);
            self.rlen -= n;
            t.received += n as u64;
            return TunnelRead::Data(n);
        }
        if !self.read_ready {
            return TunnelRead::Blocked;
        }
        loop {
            return match self.io.read(buf) {
                Ok(r) if r.n == 0 => {
                    self.read_ready = false;
                    TunnelRead::Eof
                }
                Ok(r) => {
                    self.read_ready = r.more || self.fin_seen;
                    t.received += r.n as u64;
                    TunnelRead::Data(r.n)
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.read_ready = false;
                    TunnelRead::Blocked
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => TunnelRead::Failed,
            };
        }
    }

    fn tunnel_write(&mut self, ctx: &mut WorkerCtx<'_>, data: &[u8]) {
        let Some(t) = self.tunnel.as_deref_mut() else {
            return;
        };
        if self.closed {
            return;
        }
        if self.wbuf.capacity() == 0 {
            self.wbuf = ctx.pool.take_write();
        }
        t.sent += data.len() as u64;
        self.wbuf.extend_from_slice(data);
    }

    fn tunnel_shutdown(&mut self, ctx: &mut WorkerCtx<'_>) {
        if let Some(t) = self.tunnel.as_deref_mut() {
            t.shut_wanted = true;
            self.drive(ctx);
        }
    }

    fn tunnel_end(&mut self, ctx: &mut WorkerCtx<'_>) {
        // The upstream side has closed its connection already.
        self.upstream = None;
        if !self.closed {
            let _ = self.flush(ctx);
            self.close_now(ctx);
        }
    }
}

impl Conn {
    /// The exchange a body was streaming to ended: the upstream side wants no more. Returns
    /// whether part of the body was left unread (the connection must then close, lingering).
    fn end_upload(&mut self) -> bool {
        match self.upload.take() {
            Some(up) => {
                up.pipe.borrow_mut().close();
                self.rlen = 0;
                true
            }
            None => false,
        }
    }
}

/// `n` in lower-case hexadecimal (a chunk size), into `out`; returns the digits' count.
fn hex_len(mut n: usize, out: &mut [u8; 16]) -> usize {
    let mut digits = [0u8; 16];
    let mut i = 0;
    loop {
        digits[i] = b"0123456789abcdef"[n & 0xf];
        i += 1;
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    for (k, d) in digits[..i].iter().rev().enumerate() {
        out[k] = *d;
    }
    i
}
