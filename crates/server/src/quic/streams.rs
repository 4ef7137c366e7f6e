//! The interface between QUIC and the protocol above it (HTTP/3): one connection's streams as
//! byte streams with back-pressure, lent to the protocol for each event, as `crate::transport`
//! is lent to HTTP/1.1 and HTTP/2.
//!
//! The protocol implements [`QuicProtocol`]: it is told when a stream has bytes (or its end, or
//! a reset) to read — new streams the client opened are announced the same way — when a stream
//! it could not finish writing takes more, and when the client asked it to stop sending. Through
//! [`StreamIo`] it reads, writes (taking what flow control and the send buffer allow: a short
//! write means "wait for `stream_writable`"), finishes, resets, stops the client's sending,
//! opens its own unidirectional streams (HTTP/3's control and QPACK streams) and closes the
//! connection.
//!
//! What it does not do: buffering. Bytes stay in quinn-proto's stream buffers (bounded by the
//! stream and connection windows) until the protocol reads them, and a write takes no more than
//! the send window has room for.

use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;
use mio::Token;
use quinn_proto::{Connection, Dir, StreamId, VarInt};

use crate::ctx::WorkerCtx;
use crate::proxy::downstream::{Downstream, Wake};

/// What a read got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Read {
    /// This many bytes were appended to the buffer.
    Data(usize),
    /// This many bytes (perhaps 0) were appended, and they were the last: the stream ended
    /// (a later read says [`StreamError::Closed`]).
    Fin(usize),
    /// Nothing more for now: `stream_readable` comes when there is.
    Blocked,
}

/// Why a stream can no longer be read or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamError {
    /// The client reset its sending side with this code (RESET_STREAM).
    Reset(u64),
    /// The client asked us to stop sending with this code (STOP_SENDING).
    Stopped(u64),
    /// The stream is not open in that direction (finished, reset, never opened).
    Closed,
}

/// A protocol above QUIC, one per connection, chosen by the ALPN the handshake agreed on.
pub(crate) trait QuicProtocol {
    /// The handshake completed (the protocol may open its own streams now).
    fn connected(&mut self, _io: &mut StreamIo<'_>, _ctx: &mut WorkerCtx<'_>) {}
    /// `stream` (perhaps new) has bytes, its end or a reset to read.
    fn stream_readable(&mut self, io: &mut StreamIo<'_>, stream: u64, ctx: &mut WorkerCtx<'_>);
    /// `stream`, whose last write was short, takes more.
    fn stream_writable(&mut self, io: &mut StreamIo<'_>, stream: u64, ctx: &mut WorkerCtx<'_>);
    /// The client asked us to stop sending on `stream`, with `code`.
    fn stream_stopped(
        &mut self,
        io: &mut StreamIo<'_>,
        stream: u64,
        code: u64,
        ctx: &mut WorkerCtx<'_>,
    );
    /// Everything written on `stream` up to its finish reached the client (acknowledged).
    fn stream_acked(&mut self, _io: &mut StreamIo<'_>, _stream: u64, _ctx: &mut WorkerCtx<'_>) {}
    /// The server is shutting down: finish what is under way, take nothing new, then close
    /// (by default at once).
    fn shut_down(&mut self, io: &mut StreamIo<'_>, _ctx: &mut WorkerCtx<'_>) {
        io.close(0x100, b"");
    }
    /// The connection is gone (closed by either side, timed out); its streams with it.
    fn closed(&mut self, _ctx: &mut WorkerCtx<'_>) {}

    /// The worker's periodic sweep: streams past their time limits (a request head or body
    /// that stopped arriving, a response the client stopped taking) are ended.
    fn expire(&mut self, _io: &mut StreamIo<'_>, _ctx: &mut WorkerCtx<'_>) {}

    /// A timer for a request this protocol held back came (`crate::hold`): answer what is due.
    fn release_held(&mut self, _io: &mut StreamIo<'_>, _ctx: &mut WorkerCtx<'_>) {}

    /// Calls `f` with where the upstream side delivers the response of request `stream` (the
    /// proxy's stream number: [`proxy_stream`]), `None` when that exchange is no longer wanted.
    fn with_downstream(
        &mut self,
        _io: &mut StreamIo<'_>,
        _stream: u32,
        f: &mut dyn FnMut(Option<&mut dyn Downstream>),
    ) {
        f(None);
    }
    /// What the upstream side must do for this connection's relays since last asked, after
    /// each of its turns: `wakes` gets (upstream, proxy stream number, what to do) for relays
    /// whose streams took enough of their backlog or brought more of a streaming body,
    /// `cancels` the upstream exchanges of requests the client gave up on.
    fn relay_news(&mut self, _wakes: &mut Vec<(Token, u32, Wake)>, _cancels: &mut Vec<Token>) {}
}

/// One connection's streams, lent to its protocol while it handles an event.
pub(crate) struct StreamIo<'a> {
    pub(super) conn: &'a mut Connection,
    pub(super) now: Instant,
}

fn id(stream: u64) -> StreamId {
    StreamId::from(VarInt::from_u64(stream).unwrap_or(VarInt::MAX))
}

fn code(code: u64) -> VarInt {
    VarInt::from_u64(code).unwrap_or(VarInt::MAX)
}

impl StreamIo<'_> {
    /// Appends what `stream` has, up to `max` bytes, to `buf`.
    ///
    /// # Errors
    /// The client reset the stream, or it is not open for reading.
    pub(crate) fn read(
        &mut self,
        stream: u64,
        buf: &mut Vec<u8>,
        max: usize,
    ) -> Result<Read, StreamError> {
        let mut recv = self.conn.recv_stream(id(stream));
        let mut chunks = recv.read(true).map_err(|_| StreamError::Closed)?;
        let mut got = 0;
        let outcome = loop {
            if got >= max {
                break Ok(Read::Data(got));
            }
            match chunks.next(max - got) {
                Ok(Some(chunk)) => {
                    buf.extend_from_slice(&chunk.bytes);
                    got += chunk.bytes.len();
                }
                Ok(None) => break Ok(Read::Fin(got)),
                Err(quinn_proto::ReadError::Blocked) if got == 0 => break Ok(Read::Blocked),
                Err(quinn_proto::ReadError::Blocked) => break Ok(Read::Data(got)),
                Err(quinn_proto::ReadError::Reset(c)) => break Err(StreamError::Reset(c.into())),
            }
        };
        // Whether a window update must go out is decided by the transport's next transmit.
        let _ = chunks.finalize();
        outcome
    }

    /// Writes as much of `data` as `stream` takes now; fewer bytes than given (perhaps 0) means
    /// `stream_writable` follows when it takes more.
    ///
    /// # Errors
    /// The client stopped the stream, or it is not open for writing.
    pub(crate) fn write(&mut self, stream: u64, data: &[u8]) -> Result<usize, StreamError> {
        let mut stream = self.conn.send_stream(id(stream));
        let mut written = 0;
        // quinn-proto promises a `Writable` event only after a write that took nothing
        // (`Blocked`): after a short one, the rest is offered again so that one is seen.
        while written < data.len() {
            match stream.write(&data[written..]) {
                Ok(0) | Err(quinn_proto::WriteError::Blocked) => break,
                Ok(n) => written += n,
                Err(quinn_proto::WriteError::Stopped(c)) => {
                    return Err(StreamError::Stopped(c.into()))
                }
                Err(quinn_proto::WriteError::ClosedStream) => return Err(StreamError::Closed),
            }
        }
        Ok(written)
    }

    /// As [`StreamIo::write`], handing `data` over without a copy: what the stream did not take
    /// stays in `data` (empty when it took all).
    ///
    /// # Errors
    /// As [`StreamIo::write`].
    pub(crate) fn write_bytes(
        &mut self,
        stream: u64,
        data: &mut Bytes,
    ) -> Result<usize, StreamError> {
        let mut stream = self.conn.send_stream(id(stream));
        let mut written = 0;
        // As in `write`: offered again after a short write, until one takes nothing.
        while !data.is_empty() {
            match stream.write_chunks(std::slice::from_mut(data)) {
                Ok(w) if w.bytes == 0 => break,
                Ok(w) => written += w.bytes,
                Err(quinn_proto::WriteError::Blocked) => break,
                Err(quinn_proto::WriteError::Stopped(c)) => {
                    return Err(StreamError::Stopped(c.into()))
                }
                Err(quinn_proto::WriteError::ClosedStream) => return Err(StreamError::Closed),
            }
        }
        Ok(written)
    }

    /// Ends `stream`'s sending side after what was written (FIN).
    pub(crate) fn finish(&mut self, stream: u64) {
        let _ = self.conn.send_stream(id(stream)).finish();
    }

    /// Abandons `stream`'s sending side with `code` (RESET_STREAM).
    pub(crate) fn reset(&mut self, stream: u64, code_: u64) {
        let _ = self.conn.send_stream(id(stream)).reset(code(code_));
    }

    /// Asks the client to stop sending on `stream`, with `code` (STOP_SENDING); what it sent
    /// is discarded.
    pub(crate) fn stop_sending(&mut self, stream: u64, code_: u64) {
        let _ = self.conn.recv_stream(id(stream)).stop(code(code_));
    }

    /// Opens a unidirectional stream of ours, when the client's limit allows one.
    pub(crate) fn open_uni(&mut self) -> Option<u64> {
        self.conn.streams().open(Dir::Uni).map(u64::from)
    }

    /// Closes the whole connection with an application error `code` (CONNECTION_CLOSE).
    pub(crate) fn close(&mut self, code_: u64, reason: &'static [u8]) {
        self.conn
            .close(self.now, code(code_), Bytes::from_static(reason));
    }

    /// The loop's time for this event.
    pub(crate) fn now(&self) -> Instant {
        self.now
    }

    /// The connection's round-trip time (quinn-proto's smoothed estimate).
    pub(crate) fn rtt(&self) -> std::time::Duration {
        self.conn.rtt()
    }

    /// The client's address.
    pub(crate) fn peer(&self) -> SocketAddr {
        self.conn.remote_address()
    }

    /// The handshake is not complete: what the client sent so far came as 0-RTT data, which
    /// anyone who captured it can replay (RFC 9001 §9.2).
    pub(crate) fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }
}

/// The proxy's number for request stream `stream` (client-initiated bidirectional ids are
/// multiples of 4), or `None` past what a `u32` numbers (a billion requests on one connection).
#[must_use]
pub(crate) fn proxy_stream(stream: u64) -> Option<u32> {
    u32::try_from(stream >> 2).ok()
}

/// The request stream the proxy numbers `n` ([`proxy_stream`]).
#[must_use]
pub(crate) fn request_stream(n: u32) -> u64 {
    u64::from(n) << 2
}

/// Whether `stream` was opened by the client and carries bytes both ways.
#[must_use]
pub(crate) fn is_bidi(stream: u64) -> bool {
    stream & 0b10 == 0
}
