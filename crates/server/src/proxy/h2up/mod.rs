//! HTTP/2 upstreams (`h2c://`, or `protocol = "h2"`): many client requests as streams over few
//! connections per server, each connection driven by the codec's client state machine
//! (`lowlat_http::h2::client`) from the worker's own loop, in clear or through TLS (ALPN h2).
//!
//! Two kinds of tokens, both above the upstream side's [`super::upstream::TOKEN_BASE`]: a connection's
//! (registered with epoll) and an exchange's (one per request, what the client links to and
//! cancels by). A readable connection may carry news for many clients, so what its frames say
//! is kept on each exchange and the exchange is marked touched; the worker then hands each
//! touched exchange its client ([`H2Upstreams::take_touched`]), and the exchange delivers
//! (head, body as the client's backlog allows, trailers, end — or a 502 / a cut response).
//!
//! Back-pressure is HTTP/2's own: data a client has not taken is not given back to the
//! server's window, so at most a stream window per exchange is held here.
//!
//! A request body still arriving from the client (`super::upload`) streams: HEADERS go out
//! without END_STREAM, then DATA as the client's bytes come and the server's windows (its
//! connection's and the stream's) allow — a WINDOW_UPDATE read is followed by another pump —
//! and END_STREAM (on the client's trailers, if it sent any) once the body is in. What the
//! upload holds is taken only while the connection's unwritten output is below
//! [`uploads::UPLOAD_OUT_LIMIT`]; what it no longer holds lets the client send more
//! (`Downstream::upload_drained`). The response is relayed as it comes, body still going: a
//! gRPC bidirectional call works both ways at once. A response that ends first ends the upload
//! (the stream is reset with CANCEL); a body the client's side refused (a malformed chunk, over
//! the limit) resets the stream and answers the client 400 or 413; a client that leaves resets
//! its stream only, never the connection the other streams share.
//!
//! Failures: a stream the server refused (RST_STREAM REFUSED_STREAM, or above a GOAWAY's last
//! stream) was not processed, and an idempotent request goes once more elsewhere; any other
//! failure before the head is a 502 (504 after the first-byte timeout); after it, the client's
//! response is cut. A GOAWAY lets the streams in flight finish; new requests open another
//! connection.
//!
//! # Layout
//! - `open`: an exchange given to a connection with a stream free, or a new one; streams opened.
//! - `uploads`: request bodies streamed into DATA frames as the server's windows allow.
//! - `deliver`: an exchange's news handed to its client; failures answered or retried.
//! - `teardown`: ends other than a response: the client gone, deadlines, reloads, failed
//!   connections.
//! - `request`: the forwarded HTTP/1.1 request translated into an HTTP/2 stream's fields.

mod deliver;
mod open;
mod request;
mod teardown;
mod uploads;

use std::io;
use std::ops::Range;
use std::rc::Rc;
use std::time::Instant;

use lowlat_http::h2::client::{ClientConn, Event};
use lowlat_http::h2::frame::ErrorCode;
use mio::Token;
use slab::Slab;

use super::downstream::Downstream;
use super::group::WorkerGroup;
use super::job::ProxyJob;
use super::trailers::trailer_passes;
use super::upload::UploadRef;
use super::upstream::Sock;
use crate::ctx::WorkerCtx;

/// Connection tokens: this far above the engine's base (HTTP/1.1 connections sit just above it).
pub(crate) const CONN_OFFSET: usize = 1 << 40;
/// Exchange tokens.
pub(crate) const EXCHANGE_OFFSET: usize = 1 << 41;
/// Failure kinds, in the order of [`super::stats::FAILURE_KINDS`].
const CONNECT: usize = 0;
const CLOSED: usize = 1;
const INVALID: usize = 2;
const TIMEOUT: usize = 3;

/// Where a connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Connecting,
    Handshake,
    Open,
}

/// One HTTP/2 connection to an upstream server.
#[derive(Debug)]
struct Conn {
    sock: Sock,
    group: Rc<WorkerGroup>,
    server: usize,
    phase: Phase,
    session: Box<ClientConn>,
    /// Bytes of `session.out` written.
    wpos: usize,
    rbuf: Vec<u8>,
    rlen: usize,
    readable: bool,
    writable: bool,
    /// (stream id, exchange key) of the streams open.
    streams: Vec<(u32, usize)>,
    /// Exchanges waiting for the connection (or a free stream).
    waiting: Vec<usize>,
    /// Streams that may still have a request body to send (counted again on each pass while
    /// not 0): a connection without any skips the pass, so bodiless requests pay nothing.
    uploads: usize,
    /// Connect deadline, then idle deadline while no stream is open.
    deadline: Instant,
}

/// What an exchange must still tell its client.
#[derive(Debug)]
enum Outcome {
    /// Nothing yet: in progress.
    Pending,
    /// The response is complete once the body is delivered.
    Ended,
    /// Failed: a status page if nothing was relayed, else a cut response. `retry`: the server
    /// did not process it.
    Failed { kind: usize, retry: bool },
    /// The client's side refused its own body midway (a malformed chunk, over the limit):
    /// this status if nothing was relayed, else a cut response. Not the server's failure.
    Refused(u16),
}

/// A response head read, not yet delivered.
#[derive(Debug)]
struct PendingHead {
    status: u16,
    /// The decoded fields: their bytes, and (name, value) ranges into them.
    bytes: Vec<u8>,
    ranges: Vec<(Range<usize>, Range<usize>)>,
    /// No body follows.
    end_stream: bool,
}

/// One request on an HTTP/2 upstream connection.
#[derive(Debug)]
struct Exchange {
    conn: usize,
    group: Rc<WorkerGroup>,
    server: usize,
    stream: u32,
    client: (Token, u32),
    /// Kept until the head arrives (a refused stream sends it again).
    job: Option<ProxyJob>,
    /// The cache's fill, taken from the job when the head is relayed: the body is copied
    /// into it until the exchange ends (`engine` relays through the cache's tee while there
    /// is one).
    fill: Option<crate::cache::fill::FillRef>,
    /// The request body still arriving from the client, sent as it comes; `None` once it is
    /// all sent (or for a body sent whole).
    upload: Option<UploadRef>,
    /// The upload went below its low water since the last delivery: the client's side, which
    /// may have stopped for room, is told on the next one.
    upload_resume: bool,
    head_request: bool,
    /// The site's lines for every response (`ProxyJob::added`).
    added: Option<std::rc::Rc<[u8]>>,
    /// A head to deliver.
    head: Option<Box<PendingHead>>,
    head_relayed: bool,
    status: u16,
    /// The body's length as the head announced it, and what was relayed: a response whose
    /// DATA does not add up to its `content-length` is cut, never completed wrong.
    announced: Option<u64>,
    relayed: u64,
    body: Vec<u8>,
    trailers: Option<Vec<(Vec<u8>, Vec<u8>)>>,
    outcome: Outcome,
    deadline: Instant,
    sent_at: Instant,
}

/// One worker's HTTP/2 upstream connections and exchanges.
#[derive(Debug, Default)]
pub(crate) struct H2Upstreams {
    conns: Slab<Conn>,
    exchanges: Slab<Exchange>,
    /// Exchanges with something to deliver.
    touched: Vec<usize>,
    /// The request head being translated (lower-cased names).
    scratch: Vec<u8>,
}

/// What the engine must do after an exchange delivered.
pub(crate) enum Delivered {
    Nothing,
    /// Send this request again, to another server (the first was refused unprocessed).
    Retry(ProxyJob, (Token, u32), usize),
}

fn base() -> usize {
    super::upstream::TOKEN_BASE
}

/// Whether `token` is an HTTP/2 connection's or exchange's.
pub(crate) fn owns(token: Token) -> bool {
    token.0 >= base() + CONN_OFFSET
}

impl H2Upstreams {
    /// The cache's fill of exchange `token`, when its response is being stored: the job's
    /// until the head is relayed, the exchange's after.
    pub(crate) fn fill_of(&self, token: Token) -> Option<crate::cache::fill::FillRef> {
        let key = token.0.checked_sub(base() + EXCHANGE_OFFSET)?;
        let x = self.exchanges.get(key)?;
        match &x.job {
            Some(job) => job.cache.clone(),
            None => x.fill.clone(),
        }
    }

    /// The client an exchange token relays to (`None` for a connection's token).
    pub(crate) fn client_of(&self, token: Token) -> Option<(Token, u32)> {
        let key = token.0.checked_sub(base() + EXCHANGE_OFFSET)?;
        self.exchanges.get(key).map(|x| x.client)
    }

    /// Exchanges with news for their clients, as tokens (the worker hands each its client).
    pub(crate) fn take_touched(&mut self) -> Vec<Token> {
        let mut out: Vec<Token> = self
            .touched
            .drain(..)
            .map(|k| Token(base() + EXCHANGE_OFFSET + k))
            .collect();
        out.dedup();
        out
    }

    /// A readiness event on a connection token; or, for an exchange token, its client is
    /// `down`: deliver what it has.
    pub(crate) fn on_event(
        &mut self,
        token: Token,
        readable: bool,
        writable: bool,
        ctx: &mut WorkerCtx<'_>,
        down: Option<&mut dyn Downstream>,
    ) -> Delivered {
        if let Some(key) = token.0.checked_sub(base() + EXCHANGE_OFFSET) {
            return match down {
                Some(down) => self.deliver(key, ctx, down),
                None => {
                    self.cancel(token, ctx);
                    Delivered::Nothing
                }
            };
        }
        let key = token.0 - base() - CONN_OFFSET;
        if let Some(c) = self.conns.get_mut(key) {
            c.readable |= readable;
            c.writable |= writable;
            self.drive(key, ctx);
        }
        Delivered::Nothing
    }

    /// Makes all the progress possible on connection `key`.
    fn drive(&mut self, key: usize, ctx: &mut WorkerCtx<'_>) {
        loop {
            let Some(c) = self.conns.get_mut(key) else {
                return;
            };
            match c.phase {
                Phase::Connecting => {
                    if !c.writable {
                        return;
                    }
                    match c.sock.connect_result() {
                        Ok(true) => {
                            c.phase = if c.sock.is_tls() {
                                c.readable = true;
                                Phase::Handshake
                            } else {
                                Phase::Open
                            };
                        }
                        Ok(false) => {
                            c.writable = false;
                            return;
                        }
                        Err(e) => {
                            tracing::debug!(server = %c.group.cfg.servers[c.server].label, "upstream connect: {e}");
                            return self.fail_conn(key, CONNECT, ctx);
                        }
                    }
                }
                Phase::Handshake => match c.sock.handshake() {
                    Ok(true) => {
                        c.phase = Phase::Open;
                        c.writable = true;
                    }
                    Ok(false) => {
                        c.readable = false;
                        c.writable = false;
                        return;
                    }
                    Err(e) => {
                        tracing::error!(
                            group = %c.group.cfg.name,
                            server = %c.group.cfg.servers[c.server].label,
                            "upstream TLS handshake failed: {e}"
                        );
                        return self.fail_conn(key, CONNECT, ctx);
                    }
                },
                Phase::Open => {
                    self.open_waiting(key, ctx);
                    // Checked here, not in the call: a bodiless request pays one comparison.
                    if self.conns[key].uploads > 0 {
                        self.pump_uploads(key, ctx);
                    }
                    if !self.write(key, ctx) {
                        return;
                    }
                    if !self.read(key, ctx) {
                        return;
                    }
                    // What was read may have opened a window for a body waiting to go.
                    let moved = self.conns[key].uploads > 0 && self.pump_uploads(key, ctx);
                    let c = &self.conns[key];
                    if !c.readable && !moved && (c.session.out.len() == c.wpos || !c.writable) {
                        return;
                    }
                }
            }
        }
    }

    /// Writes what the session queued. False when the connection failed.
    fn write(&mut self, key: usize, ctx: &mut WorkerCtx<'_>) -> bool {
        let c = &mut self.conns[key];
        while c.wpos < c.session.out.len() {
            if !c.writable {
                return true;
            }
            match c.sock.write(&c.session.out[c.wpos..]) {
                Ok(n) => c.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    c.writable = false;
                    return true;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.fail_conn(key, CLOSED, ctx);
                    return false;
                }
            }
        }
        match c.sock.flush() {
            Ok(true) => {}
            Ok(false) => c.writable = false,
            Err(_) => {
                self.fail_conn(key, CLOSED, ctx);
                return false;
            }
        }
        c.session.out.clear();
        c.wpos = 0;
        true
    }

    /// Reads and handles frames. False when the connection ended.
    fn read(&mut self, key: usize, ctx: &mut WorkerCtx<'_>) -> bool {
        let c = &mut self.conns[key];
        if !c.readable {
            return true;
        }
        match c.sock.read(&mut c.rbuf[c.rlen..]) {
            Ok(0) => {
                let quiet = c.streams.is_empty() && c.waiting.is_empty();
                if quiet {
                    self.remove_conn(key, ctx);
                } else {
                    self.fail_conn(key, CLOSED, ctx);
                }
                false
            }
            Ok(n) => {
                c.readable = !c.sock.drained_after(c.rlen + n < c.rbuf.len());
                c.rlen += n;
                self.frames(key, ctx)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                c.readable = false;
                true
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => true,
            Err(_) => {
                self.fail_conn(key, CLOSED, ctx);
                false
            }
        }
    }

    /// Handles the frames the read buffer holds.
    fn frames(&mut self, key: usize, ctx: &mut WorkerCtx<'_>) -> bool {
        let Self {
            conns,
            exchanges,
            touched,
            ..
        } = self;
        let c = &mut conns[key];
        let read_timeout = c.group.cfg.timeouts.read;
        let streams = &mut c.streams;
        let rbuf = &c.rbuf[..c.rlen];
        let mut going_away = false;
        let result = c.session.receive(rbuf, |e| {
            let stream = match &e {
                Event::Head { stream, .. }
                | Event::Data { stream, .. }
                | Event::Trailers { stream, .. }
                | Event::Reset { stream, .. } => *stream,
                Event::GoAway { .. } => {
                    going_away = true;
                    return;
                }
            };
            let Some(at) = streams.iter().position(|&(s, _)| s == stream) else {
                return;
            };
            let xkey = streams[at].1;
            let Some(x) = exchanges.get_mut(xkey) else {
                return;
            };
            x.deadline = ctx.now + read_timeout;
            let mut ended = false;
            match e {
                Event::Head {
                    status,
                    fields,
                    end_stream,
                    ..
                } => {
                    let mut bytes = Vec::new();
                    let mut ranges = Vec::new();
                    for (n, v) in fields.iter() {
                        let ns = bytes.len();
                        bytes.extend_from_slice(n);
                        let vs = bytes.len();
                        bytes.extend_from_slice(v);
                        ranges.push((ns..vs, vs..bytes.len()));
                    }
                    x.head = Some(Box::new(PendingHead {
                        status,
                        bytes,
                        ranges,
                        end_stream,
                    }));
                    if end_stream {
                        x.outcome = Outcome::Ended;
                        ended = true;
                    }
                }
                Event::Data {
                    data, end_stream, ..
                } => {
                    x.body.extend_from_slice(data);
                    if end_stream {
                        x.outcome = Outcome::Ended;
                        ended = true;
                    }
                }
                Event::Trailers { fields, .. } => {
                    x.trailers = Some(
                        fields
                            .iter()
                            .filter(|(n, _)| trailer_passes(n))
                            .map(|(n, v)| (n.to_vec(), v.to_vec()))
                            .collect(),
                    );
                    x.outcome = Outcome::Ended;
                    ended = true;
                }
                Event::Reset { code, .. } => {
                    tracing::debug!(stream, code, "upstream reset the stream");
                    x.outcome = Outcome::Failed {
                        kind: CLOSED,
                        retry: code == ErrorCode::RefusedStream as u32,
                    };
                    ended = true;
                }
                Event::GoAway { .. } => {}
            }
            if ended {
                streams.swap_remove(at);
            }
            touched.push(xkey);
        });
        match result {
            Ok(used) => {
                c.rbuf.copy_within(used..c.rlen, 0);
                c.rlen -= used;
            }
            Err(code) => {
                tracing::debug!(server = %c.group.cfg.servers[c.server].label, ?code, "upstream HTTP/2 connection error");
                let _ = self.write(key, ctx);
                self.fail_conn(key, INVALID, ctx);
                return false;
            }
        }
        if going_away {
            // New requests go elsewhere; those waiting here are sent again.
            let waiting = std::mem::take(&mut self.conns[key].waiting);
            for xkey in waiting {
                if let Some(x) = self.exchanges.get_mut(xkey) {
                    x.outcome = Outcome::Failed {
                        kind: CLOSED,
                        retry: true,
                    };
                    self.touched.push(xkey);
                }
            }
        }
        let c = &mut self.conns[key];
        if c.streams.is_empty() {
            c.deadline = ctx.now + c.group.cfg.keepalive_timeout;
            if c.session.going_away() || (c.group.retired.get() && c.waiting.is_empty()) {
                let _ = self.write(key, ctx);
                self.remove_conn(key, ctx);
                return false;
            }
        }
        true
    }
}
