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
//! - `conn`: a connection driven: connect, handshake, output written, frames read.
//! - `uploads`: request bodies streamed into DATA frames as the server's windows allow.
//! - `deliver`: an exchange's news handed to its client; failures answered or retried.
//! - `teardown`: ends other than a response: the client gone, deadlines, reloads, failed
//!   connections.
//! - `request`: the forwarded HTTP/1.1 request translated into an HTTP/2 stream's fields.
//!
//! This file holds what they share (a connection, an exchange, their tokens, the failure kinds)
//! and the way in for the worker's events and its clients' turns ([`H2Upstreams::on_event`]).

mod conn;
mod deliver;
mod open;
mod request;
mod teardown;
mod uploads;

use std::ops::Range;
use std::rc::Rc;
use std::time::Instant;

use lowlat_http::h2::client::ClientConn;
use mio::Token;
use slab::Slab;

use super::downstream::Downstream;
use super::group::WorkerGroup;
use super::job::ProxyJob;
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
    /// A write failed: nothing more is written, and what the server sent before it closed is
    /// read to its end before the connection fails (`conn.rs`, `write`).
    broken: bool,
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
}
