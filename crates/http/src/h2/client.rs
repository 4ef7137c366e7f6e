//! HTTP/2's client side as a state machine without I/O (RFC 9113): what a proxy needs to send
//! many requests as streams over one connection to an upstream, and what a load generator
//! needs to drive one. The caller moves bytes: it feeds what it read to
//! [`ClientConn::receive`] (whole frames are consumed, the rest kept by the caller) and writes
//! [`ClientConn::out`]; everything else — stream ids, the server's SETTINGS (its concurrency
//! limit, windows, frame size, HPACK table), flow control both ways, CONTINUATION, PING, GOAWAY
//! and RST_STREAM — is kept here.
//!
//! Flow control: request bodies go out as the server's windows allow ([`ClientConn::pump`]);
//! a body that is still arriving streams through [`ClientConn::open_streaming`], the caller
//! passing what [`ClientConn::send_room`] allows to [`ClientConn::send_data`] and ending it with
//! [`ClientConn::finish`];
//! response data is counted against the windows this side announced and given back only when
//! the caller says it has passed it on ([`ClientConn::release`]), so a slow reader downstream
//! slows the server instead of filling memory.
//!
//! Not here: server push (refused with SETTINGS_ENABLE_PUSH 0, and a PUSH_PROMISE is a
//! protocol error), priorities (deprecated by RFC 9113), and deciding what a stream's fields
//! mean: a response's head is handed over as decoded, pseudo-fields first.
//!
//! This file holds the state and what the caller asks of it (open, send, finish, cancel,
//! release); `receive.rs` reads what the server sends.

use std::ops::Range;

use super::frame::{self, flag, kind, setting, ErrorCode, FrameHeader, Settings, HEADER_LEN};
use super::hpack::{Decoder, Encoder};
use crate::limits::MAX_HEAD_BYTES;

mod receive;

/// The window this side announces for each stream: how much of one response may be in flight
/// before the caller has passed it on.
pub const STREAM_WINDOW: u32 = 256 * 1024;
/// The connection's receive window: room for several streams at their full window.
pub const CONNECTION_WINDOW: u32 = 16 * 1024 * 1024;
/// A read buffer this large always holds a whole frame: this side announces the default
/// SETTINGS_MAX_FRAME_SIZE, so no frame is longer.
pub const MIN_READ_BUFFER: usize = HEADER_LEN + frame::DEFAULT_MAX_FRAME as usize;
/// The largest header block accepted (HEADERS and its CONTINUATION frames).
const MAX_BLOCK: usize = MAX_HEAD_BYTES * 2;
/// Highest client stream id (RFC 9113 §5.1.1: 2^31 - 1 at most).
const LAST_STREAM_ID: u32 = (1 << 31) - 1;

/// Why a stream could not be opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenError {
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS is reached: open another connection.
    Full,
    /// The server sent GOAWAY, or the stream ids are used up: this connection takes no more.
    Closing,
}

/// Fields of a decoded header block: ranges into a buffer, so that no field is allocated.
#[derive(Debug, Clone, Copy)]
pub struct Fields<'a> {
    buf: &'a [u8],
    ranges: &'a [(Range<usize>, Range<usize>)],
}

impl<'a> Fields<'a> {
    /// The fields in order, pseudo-fields (`:status`) included.
    pub fn iter(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + '_ {
        self.ranges
            .iter()
            .map(|(n, v)| (&self.buf[n.clone()], &self.buf[v.clone()]))
    }

    /// The value of the first field named `name` (lower case).
    #[must_use]
    pub fn get(&self, name: &[u8]) -> Option<&'a [u8]> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// How many fields there are.
    #[must_use]
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

/// What a received frame meant for a stream or the connection.
#[derive(Debug)]
pub enum Event<'a> {
    /// A final response head (interim 1xx heads are skipped). `end_stream`: no body follows.
    Head {
        stream: u32,
        status: u16,
        fields: Fields<'a>,
        end_stream: bool,
    },
    /// Response body bytes; give them back with [`ClientConn::release`] once passed on.
    Data {
        stream: u32,
        data: &'a [u8],
        end_stream: bool,
    },
    /// Trailer fields; the stream has ended.
    Trailers { stream: u32, fields: Fields<'a> },
    /// The server reset the stream (or it broke the protocol on it): it is gone. `code` is the
    /// RFC 9113 error code; REFUSED_STREAM means the request was not processed (safe to retry).
    Reset { stream: u32, code: u32 },
    /// The server is closing: streams above `last_stream` were not processed (and are gone,
    /// each also reported as a [`Event::Reset`] with REFUSED_STREAM); no new stream may open.
    GoAway { last_stream: u32, code: u32 },
}

/// An open stream.
#[derive(Debug)]
struct Stream {
    id: u32,
    /// What we may still send on it.
    send_window: i64,
    /// What the server may still send on it.
    recv_window: i64,
    /// Received and released bytes not yet announced in a WINDOW_UPDATE.
    unannounced: u32,
    /// Request body still to send (`body[body_pos..]`).
    body: Vec<u8>,
    body_pos: usize,
    /// Request trailers, sent after the body (ending the stream).
    trailers: Option<Vec<(Vec<u8>, Vec<u8>)>>,
    /// END_STREAM sent.
    sent_end: bool,
    /// The body comes from the caller as it arrives ([`ClientConn::send_data`]), not `body`.
    streaming: bool,
    /// A final head arrived.
    head_seen: bool,
}

/// One HTTP/2 client connection's state.
#[derive(Debug)]
pub struct ClientConn {
    enc: Encoder,
    dec: Decoder,
    /// Frames to write, in order; the caller drains it (`out.drain(..n)` after writing `n`).
    pub out: Vec<u8>,
    peer: Settings,
    /// The server's SETTINGS arrived (until then its concurrency limit is unknown: one
    /// stream at a time is assumed safe, more wait).
    peer_settings_seen: bool,
    send_window: i64,
    recv_window: i64,
    conn_unannounced: u32,
    streams: Vec<Stream>,
    next_id: u32,
    goaway: Option<u32>,
    /// A header block continued in CONTINUATION frames: stream, END_STREAM, bytes so far.
    continuing: Option<(u32, bool, Vec<u8>)>,
    /// Decoded fields of the current block: bytes, and (name, value) ranges into them.
    decoded: Vec<u8>,
    ranges: Vec<(Range<usize>, Range<usize>)>,
    block: Vec<u8>,
}

impl Default for ClientConn {
    fn default() -> Self {
        Self::new()
    }
}

impl ClientConn {
    /// A new connection: the preface, this side's SETTINGS and the connection window's opening
    /// are queued in [`ClientConn::out`].
    #[must_use]
    pub fn new() -> Self {
        let mut out = frame::PREFACE.to_vec();
        frame::write_settings(
            &mut out,
            &[
                (setting::ENABLE_PUSH, 0),
                (setting::INITIAL_WINDOW_SIZE, STREAM_WINDOW),
            ],
        );
        frame::write_window_update(&mut out, 0, CONNECTION_WINDOW - frame::DEFAULT_WINDOW);
        Self {
            enc: Encoder::default(),
            dec: Decoder::default(),
            out,
            peer: Settings::default(),
            peer_settings_seen: false,
            send_window: i64::from(frame::DEFAULT_WINDOW),
            recv_window: i64::from(CONNECTION_WINDOW),
            conn_unannounced: 0,
            streams: Vec::new(),
            next_id: 1,
            goaway: None,
            continuing: None,
            decoded: Vec::new(),
            ranges: Vec::new(),
            block: Vec::new(),
        }
    }

    /// Streams open.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.streams.len()
    }

    /// Whether a new stream may open now.
    pub fn can_open(&self) -> Result<(), OpenError> {
        if self.goaway.is_some() || self.next_id > LAST_STREAM_ID {
            return Err(OpenError::Closing);
        }
        let limit = if self.peer_settings_seen {
            self.peer.max_concurrent_streams.unwrap_or(u32::MAX) as usize
        } else {
            1
        };
        if self.streams.len() >= limit {
            return Err(OpenError::Full);
        }
        Ok(())
    }

    /// How many streams the server allows at once: its SETTINGS_MAX_CONCURRENT_STREAMS, or
    /// `assumed` before its SETTINGS arrive (a caller queueing requests on a new connection).
    #[must_use]
    pub fn stream_limit(&self, assumed: usize) -> usize {
        if self.peer_settings_seen {
            self.peer
                .max_concurrent_streams
                .map_or(usize::MAX, |n| n as usize)
        } else {
            assumed
        }
    }

    /// Whether the server said GOAWAY.
    #[must_use]
    pub fn going_away(&self) -> bool {
        self.goaway.is_some()
    }

    /// Opens a stream: `head` (pseudo-fields first, names in lower case), then `body` and
    /// `trailers` as the windows allow. Returns the stream's id.
    ///
    /// # Errors
    /// [`OpenError`]: the connection is full or closing.
    pub fn open<'f>(
        &mut self,
        head: impl IntoIterator<Item = (&'f [u8], &'f [u8])>,
        body: &[u8],
        trailers: &[(&[u8], &[u8])],
    ) -> Result<u32, OpenError> {
        self.open_with(head, body, trailers, false)
    }

    /// Opens a stream whose body is still arriving: `head` goes out without END_STREAM, and
    /// the body follows through [`ClientConn::send_data`] and [`ClientConn::finish`].
    ///
    /// # Errors
    /// [`OpenError`]: the connection is full or closing.
    pub fn open_streaming<'f>(
        &mut self,
        head: impl IntoIterator<Item = (&'f [u8], &'f [u8])>,
    ) -> Result<u32, OpenError> {
        self.open_with(head, b"", &[], true)
    }

    /// [`ClientConn::open`] (`streaming` false) and [`ClientConn::open_streaming`] (`streaming`
    /// true, `body` and `trailers` empty) in one: a caller that does both makes one copy of the
    /// field encoding, not two (a proxy's every request goes through it).
    ///
    /// # Errors
    /// [`OpenError`]: the connection is full or closing.
    #[inline]
    pub fn open_with<'f>(
        &mut self,
        head: impl IntoIterator<Item = (&'f [u8], &'f [u8])>,
        body: &[u8],
        trailers: &[(&[u8], &[u8])],
        streaming: bool,
    ) -> Result<u32, OpenError> {
        self.can_open()?;
        let id = self.next_id;
        self.next_id += 2;
        let end = body.is_empty() && trailers.is_empty() && !streaming;
        self.block.clear();
        self.enc.encode_fields(head, &mut self.block);
        frame::write_headers(
            &mut self.out,
            id,
            &self.block,
            end,
            self.peer.max_frame_size as usize,
        );
        self.streams.push(Stream {
            id,
            send_window: i64::from(self.peer.initial_window_size),
            recv_window: i64::from(STREAM_WINDOW),
            unannounced: 0,
            body: body.to_vec(),
            body_pos: 0,
            trailers: (!trailers.is_empty()).then(|| {
                trailers
                    .iter()
                    .map(|(n, v)| (n.to_ascii_lowercase(), v.to_vec()))
                    .collect()
            }),
            sent_end: end,
            streaming,
            head_seen: false,
        });
        self.pump();
        Ok(id)
    }

    /// How many body bytes stream `id` may send now: the smaller of its window and the
    /// connection's; 0 once it ended (or the server ended it: its response is complete).
    #[must_use]
    pub fn send_room(&self, id: u32) -> usize {
        match self.index(id) {
            Some(i) if self.streams[i].streaming && !self.streams[i].sent_end => {
                let room = self.streams[i].send_window.min(self.send_window);
                usize::try_from(room.max(0)).unwrap_or(usize::MAX)
            }
            _ => 0,
        }
    }

    /// Whether stream `id` (opened with [`ClientConn::open_streaming`]) still takes body.
    #[must_use]
    pub fn sending(&self, id: u32) -> bool {
        self.index(id)
            .is_some_and(|i| self.streams[i].streaming && !self.streams[i].sent_end)
    }

    /// Queues body bytes of stream `id` as DATA frames, as far as [`ClientConn::send_room`]
    /// allows. Returns how many were taken.
    pub fn send_data(&mut self, id: u32, data: &[u8]) -> usize {
        let room = self.send_room(id).min(data.len());
        let max_frame = self.peer.max_frame_size as usize;
        for piece in data[..room].chunks(max_frame) {
            frame::write_data_header(&mut self.out, id, piece.len(), false);
            self.out.extend_from_slice(piece);
        }
        if room > 0 {
            if let Some(i) = self.index(id) {
                self.streams[i].send_window -= room as i64;
            }
            self.send_window -= room as i64;
        }
        room
    }

    /// Ends stream `id`'s body: END_STREAM on an empty DATA frame, or on a HEADERS frame of
    /// `trailers` (names in lower case) when there are any. Returns false when the stream no
    /// longer takes body (it ended, or was reset).
    pub fn finish<'f>(
        &mut self,
        id: u32,
        trailers: impl IntoIterator<Item = (&'f [u8], &'f [u8])>,
    ) -> bool {
        if !self.sending(id) {
            return false;
        }
        let max_frame = self.peer.max_frame_size as usize;
        self.block.clear();
        self.enc.encode_fields(trailers, &mut self.block);
        if self.block.is_empty() {
            frame::write_data_header(&mut self.out, id, 0, true);
        } else {
            frame::write_headers(&mut self.out, id, &self.block, true, max_frame);
        }
        if let Some(i) = self.index(id) {
            self.streams[i].sent_end = true;
        }
        true
    }

    /// The server ended stream `i` (its response is complete): it leaves. A request body not
    /// all sent stops there, and the stream is reset (CANCEL) so that the server's side closes
    /// too (RFC 9113 §8.1: a response may come before the whole request).
    #[inline]
    fn server_ended(&mut self, i: usize) {
        let s = self.streams.swap_remove(i);
        if !s.sent_end {
            frame::write_rst_stream(&mut self.out, s.id, ErrorCode::Cancel);
        }
    }

    /// Cancels stream `id` (RST_STREAM CANCEL): its client went away.
    pub fn cancel(&mut self, id: u32) {
        if let Some(i) = self.index(id) {
            self.streams.swap_remove(i);
            frame::write_rst_stream(&mut self.out, id, ErrorCode::Cancel);
        }
    }

    /// The caller passed on `n` bytes of stream `id`'s data: the server may send that much more.
    /// WINDOW_UPDATEs go out once a quarter of a window is owed, not per frame.
    pub fn release(&mut self, id: u32, n: usize) {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        self.conn_unannounced = self.conn_unannounced.saturating_add(n);
        if self.conn_unannounced >= CONNECTION_WINDOW / 4 {
            frame::write_window_update(&mut self.out, 0, self.conn_unannounced);
            self.recv_window += i64::from(self.conn_unannounced);
            self.conn_unannounced = 0;
        }
        if let Some(i) = self.index(id) {
            let s = &mut self.streams[i];
            s.unannounced = s.unannounced.saturating_add(n);
            if s.unannounced >= STREAM_WINDOW / 4 {
                frame::write_window_update(&mut self.out, id, s.unannounced);
                s.recv_window += i64::from(s.unannounced);
                s.unannounced = 0;
            }
        }
    }

    /// Queues request body (and trailers) as far as the server's windows allow.
    pub fn pump(&mut self) {
        let max_frame = self.peer.max_frame_size as usize;
        for i in 0..self.streams.len() {
            let s = &mut self.streams[i];
            if s.sent_end || s.streaming {
                continue;
            }
            while s.body_pos < s.body.len() {
                let room = s.send_window.min(self.send_window);
                if room <= 0 {
                    break;
                }
                let n = (s.body.len() - s.body_pos)
                    .min(max_frame)
                    .min(usize::try_from(room).unwrap_or(usize::MAX));
                let last = s.body_pos + n == s.body.len() && s.trailers.is_none();
                frame::write_data_header(&mut self.out, s.id, n, last);
                self.out
                    .extend_from_slice(&s.body[s.body_pos..s.body_pos + n]);
                s.body_pos += n;
                s.send_window -= n as i64;
                self.send_window -= n as i64;
                s.sent_end = last;
            }
            if s.body_pos == s.body.len() && !s.sent_end {
                s.body = Vec::new();
                s.body_pos = 0;
                if let Some(trailers) = s.trailers.take() {
                    self.block.clear();
                    self.enc.encode_fields(
                        trailers.iter().map(|(n, v)| (n.as_slice(), v.as_slice())),
                        &mut self.block,
                    );
                    let id = s.id;
                    s.sent_end = true;
                    frame::write_headers(&mut self.out, id, &self.block, true, max_frame);
                }
            }
        }
    }

    fn index(&self, id: u32) -> Option<usize> {
        self.streams.iter().position(|s| s.id == id)
    }

    /// A connection error: GOAWAY queued, the code returned for the caller to close after
    /// writing it.
    fn fail(&mut self, code: ErrorCode) -> Result<usize, ErrorCode> {
        frame::write_goaway(&mut self.out, 0, code, b"");
        Err(code)
    }
}

#[cfg(test)]
mod tests;
