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
//!
//! # Layout
//!
//! This file holds the connection's state, its cycle and its reads; the rest is split by job:
//! `request.rs` answers the requests in the read buffer, `upload.rs` streams a request body to
//! an upstream, `output.rs` writes responses and files, `lifecycle.rs` closes and arms
//! deadlines, `relay.rs` writes an upstream's response (the proxy's `Downstream` contract).

use std::io;
use std::time::{Duration, Instant};

use mio::Token;

use crate::access_log::HeldRequest;
use crate::ctx::WorkerCtx;
use crate::handler::FileBody;
use crate::proxy::headers::ClientInfo;
use crate::proxy::upload::UploadRef;
use crate::transport::{ReadFailure, Transport};
use crate::wait::Wait;
use lowlat_http::body::ChunkedDecoder;
use lowlat_http::{ParseError, Version};

mod lifecycle;
mod output;
mod relay;
mod request;
mod upload;

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
#[derive(Debug)]
struct Relay {
    /// The request's places in connection-limit zones, given back when the relay ends.
    _slots: crate::handler::Slots,
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

/// What an HTTP/1.1 connection found to speak HTTP/2 hands over to [`crate::h2::H2Conn`].
pub(crate) struct Handover {
    pub(crate) io: Transport,
    pub(crate) peer: std::net::SocketAddr,
    pub(crate) named: Option<Box<lowlat_http::proxy_protocol::Addresses>>,
    /// The client as handlers see it, its certificate looked at (once the handshake is done).
    pub(crate) client: ClientInfo,
    /// What was read so far (`rbuf[..rlen]`): the preface, and maybe frames after it.
    pub(crate) rbuf: Vec<u8>,
    pub(crate) rlen: usize,
    /// epoll already reported the client's FIN: no event will report it again, so the HTTP/2
    /// side must read to the end of stream rather than stop at a short read.
    pub(crate) fin_seen: bool,
}

/// One client connection.
pub(crate) struct Conn {
    /// The socket, in clear or under TLS.
    pub(crate) io: Transport,
    /// The client's address (for the access log).
    peer: std::net::SocketAddr,
    /// The addresses a balancer's PROXY header named (`crate::proxied`): passed on in the
    /// header sent to an upstream in place of this socket's. Boxed: only connections from a
    /// balancer have it, and the others should not carry 32 bytes for it.
    pub(crate) named: Option<Box<lowlat_http::proxy_protocol::Addresses>>,
    /// The client as handlers that pass it on see it (the proxy).
    client: ClientInfo,
    /// The handshake may have verified a client certificate, not looked at yet: it is, before
    /// the first request (some site asks for client certificates; never set otherwise).
    cert_pending: bool,
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
    /// The request at the start of the read buffer is held back (`crate::hold`): nothing more
    /// is read or parsed until its timer releases it.
    hold: Option<Box<crate::hold::Hold>>,
    /// The request at the start of the read buffer was held back and its time came: routed
    /// as released (its rate limits counted it already).
    released: bool,
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
            cert: None,
        };
        Self {
            cert_pending: io.by_name(),
            io,
            peer,
            named: None,
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
            hold: None,
            released: false,
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
            if self.relay.is_some() && self.upload.is_none() && self.tunnel.is_none()
                || self.hold.is_some()
            {
                // The client left while its response was on the way (or its request was held
                // back): nginx's 499. The worker abandons the upstream exchange. (During an
                // upload, what it sent before its FIN is read first: the end of the body may be
                // in it.)
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
            // One test of `eof` for both of its cases: the loop turns a few times a request.
            if self.eof {
                if !self.unparsed && !self.closing && self.relay.is_none() {
                    // Everything the client sent before its FIN is answered; what is left is
                    // an incomplete request that can never complete.
                    self.closing = true;
                    self.lingering = false;
                    continue;
                }
                if self.upload.is_some() {
                    // The client closed before the end of the body it is streaming: the
                    // upstream exchange is abandoned (the upstream sees the request cut short).
                    self.close_now(ctx);
                    return;
                }
            }
            if !self.read_ready
                || self.relay.is_some() && !self.upload_has_room()
                || self.hold.is_some()
            {
                // While a response is relayed, pipelined requests wait in the socket; so does
                // a streaming body while the upstream has not taken what it was given, and
                // whatever follows a request held back.
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

    /// A held request's timer came: if its time has (the timer may be another connection's
    /// that had this slot), it is routed again, released, and the connection goes on.
    pub(crate) fn release_held(&mut self, ctx: &mut WorkerCtx<'_>) {
        if self.hold.as_ref().is_some_and(|h| h.until <= ctx.now) {
            self.hold = None;
            self.released = true;
            self.unparsed = true;
            self.drive(ctx);
        }
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
    pub(crate) fn into_h2(mut self, ctx: &mut WorkerCtx<'_>) -> Handover {
        if self.wbuf.capacity() > 0 {
            ctx.pool.give_write(std::mem::take(&mut self.wbuf));
        }
        self.look_at_client_cert();
        Handover {
            io: self.io,
            peer: self.peer,
            named: self.named,
            client: self.client,
            rbuf: self.rbuf,
            rlen: self.rlen,
            fin_seen: self.fin_seen,
        }
    }

    /// Notes the certificate the handshake verified, if any: once per connection, when its
    /// first request is about to be answered (the handshake is done by then: no plaintext
    /// comes before it).
    #[cold]
    fn look_at_client_cert(&mut self) {
        if self.cert_pending {
            self.cert_pending = false;
            self.client.cert = self.io.client_cert();
        }
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
}
