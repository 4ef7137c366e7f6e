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

use std::ops::Range;

use super::frame::{self, flag, kind, setting, ErrorCode, FrameHeader, Settings, HEADER_LEN};
use super::hpack::{Decoder, Encoder};
use crate::limits::MAX_HEAD_BYTES;

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

    /// Consumes the whole frames at the start of `input`, reporting what they mean to `on`.
    /// Returns how many bytes were consumed (the rest is an incomplete frame: keep it, read
    /// more). Replies (SETTINGS and PING acknowledgements, window updates) join
    /// [`ClientConn::out`].
    ///
    /// # Errors
    /// A connection error (RFC 9113 §5.4.1): GOAWAY is queued; write it and close.
    pub fn receive(
        &mut self,
        input: &[u8],
        mut on: impl FnMut(Event<'_>),
    ) -> Result<usize, ErrorCode> {
        let mut at = 0;
        loop {
            let Some(h) = FrameHeader::parse(&input[at..]) else {
                return Ok(at);
            };
            if h.len > frame::DEFAULT_MAX_FRAME {
                return self.fail(ErrorCode::FrameSize);
            }
            let end = at + HEADER_LEN + h.len as usize;
            if input.len() < end {
                return Ok(at);
            }
            let payload = &input[at + HEADER_LEN..end];
            at = end;
            if self.continuing.is_some() && h.kind != kind::CONTINUATION {
                return self.fail(ErrorCode::Protocol);
            }
            match h.kind {
                kind::DATA => self.on_data(h, payload, &mut on)?,
                kind::HEADERS | kind::CONTINUATION => self.on_headers(h, payload, &mut on)?,
                kind::RST_STREAM => {
                    if payload.len() != 4 {
                        return self.fail(ErrorCode::FrameSize);
                    }
                    let code = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
                    if let Some(i) = self.index(h.stream) {
                        self.streams.swap_remove(i);
                        on(Event::Reset {
                            stream: h.stream,
                            code,
                        });
                    }
                }
                kind::SETTINGS => {
                    if h.stream != 0 {
                        return self.fail(ErrorCode::Protocol);
                    }
                    if h.has(flag::ACK) {
                        continue;
                    }
                    let before = self.peer.initial_window_size;
                    if let Err(code) = self.peer.apply(payload) {
                        return self.fail(code);
                    }
                    self.peer_settings_seen = true;
                    self.enc.set_peer_table_size(self.peer.header_table_size);
                    let delta = i64::from(self.peer.initial_window_size) - i64::from(before);
                    for s in &mut self.streams {
                        s.send_window += delta;
                    }
                    frame::write_settings_ack(&mut self.out);
                    self.pump();
                }
                kind::PING => {
                    if payload.len() != 8 {
                        return self.fail(ErrorCode::FrameSize);
                    }
                    if !h.has(flag::ACK) {
                        let mut data = [0u8; 8];
                        data.copy_from_slice(payload);
                        frame::write_ping(&mut self.out, true, &data);
                    }
                }
                kind::GOAWAY => {
                    if payload.len() < 8 {
                        return self.fail(ErrorCode::FrameSize);
                    }
                    let last = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
                        & 0x7fff_ffff;
                    let code = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
                    self.goaway = Some(self.goaway.map_or(last, |g| g.min(last)));
                    on(Event::GoAway {
                        last_stream: last,
                        code,
                    });
                    // Streams the server will not process: gone, and safe to send elsewhere.
                    let mut k = 0;
                    while k < self.streams.len() {
                        if self.streams[k].id > last {
                            let s = self.streams.swap_remove(k);
                            on(Event::Reset {
                                stream: s.id,
                                code: ErrorCode::RefusedStream as u32,
                            });
                        } else {
                            k += 1;
                        }
                    }
                }
                kind::WINDOW_UPDATE => {
                    if payload.len() != 4 {
                        return self.fail(ErrorCode::FrameSize);
                    }
                    let inc = i64::from(
                        u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
                            & 0x7fff_ffff,
                    );
                    if h.stream == 0 {
                        if inc == 0 {
                            return self.fail(ErrorCode::Protocol);
                        }
                        self.send_window += inc;
                        if self.send_window > frame::MAX_WINDOW {
                            return self.fail(ErrorCode::FlowControl);
                        }
                    } else if let Some(i) = self.index(h.stream) {
                        let s = &mut self.streams[i];
                        s.send_window += inc;
                        if inc == 0 || s.send_window > frame::MAX_WINDOW {
                            let id = s.id;
                            self.stream_error(id, ErrorCode::FlowControl, &mut on);
                        }
                    }
                    self.pump();
                }
                kind::PUSH_PROMISE => return self.fail(ErrorCode::Protocol),
                // PRIORITY and unknown frame types are ignored (RFC 9113 §5.5).
                _ => {}
            }
        }
    }

    /// A stream error: RST_STREAM sent, the stream reported reset.
    fn stream_error(&mut self, id: u32, code: ErrorCode, on: &mut impl FnMut(Event<'_>)) {
        if let Some(i) = self.index(id) {
            self.streams.swap_remove(i);
        }
        frame::write_rst_stream(&mut self.out, id, code);
        on(Event::Reset {
            stream: id,
            code: code as u32,
        });
    }

    fn on_data(
        &mut self,
        h: FrameHeader,
        payload: &[u8],
        on: &mut impl FnMut(Event<'_>),
    ) -> Result<(), ErrorCode> {
        if h.stream == 0 {
            return self.fail(ErrorCode::Protocol).map(|_| ());
        }
        let len = i64::from(h.len);
        self.recv_window -= len;
        if self.recv_window < 0 {
            return self.fail(ErrorCode::FlowControl).map(|_| ());
        }
        let data = match frame::unpad(h.flags, payload) {
            Ok(d) => d,
            Err(code) => return self.fail(code).map(|_| ()),
        };
        // Padding is never passed on: released at once.
        let padding = payload.len() - data.len();
        let Some(i) = self.index(h.stream) else {
            // A stream already reset or finished: its window is the connection's to give back.
            if h.stream >= self.next_id {
                return self.fail(ErrorCode::Protocol).map(|_| ());
            }
            self.release(0, payload.len());
            return Ok(());
        };
        let s = &mut self.streams[i];
        s.recv_window -= len;
        if s.recv_window < 0 || !s.head_seen {
            let code = if s.head_seen {
                ErrorCode::FlowControl
            } else {
                ErrorCode::Protocol
            };
            self.release(0, payload.len());
            self.stream_error(h.stream, code, on);
            return Ok(());
        }
        let end = h.has(flag::END_STREAM);
        if end {
            self.server_ended(i);
        }
        if padding > 0 {
            self.release(h.stream, padding);
        }
        on(Event::Data {
            stream: h.stream,
            data,
            end_stream: end,
        });
        Ok(())
    }

    fn on_headers(
        &mut self,
        h: FrameHeader,
        payload: &[u8],
        on: &mut impl FnMut(Event<'_>),
    ) -> Result<(), ErrorCode> {
        let (stream, end_stream, mut block) = if h.kind == kind::CONTINUATION {
            match self.continuing.take() {
                Some((s, e, b)) if s == h.stream => (s, e, b),
                _ => return self.fail(ErrorCode::Protocol).map(|_| ()),
            }
        } else {
            let mut fragment = match frame::unpad(h.flags, payload) {
                Ok(f) => f,
                Err(code) => return self.fail(code).map(|_| ()),
            };
            if h.has(flag::PRIORITY) {
                fragment = fragment.get(5..).unwrap_or_default();
            }
            if h.stream == 0 || h.stream.is_multiple_of(2) || h.stream >= self.next_id {
                return self.fail(ErrorCode::Protocol).map(|_| ());
            }
            let mut b = std::mem::take(&mut self.block);
            b.clear();
            b.extend_from_slice(fragment);
            (h.stream, h.has(flag::END_STREAM), b)
        };
        if h.kind == kind::CONTINUATION {
            block.extend_from_slice(payload);
        }
        if block.len() > MAX_BLOCK {
            return self.fail(ErrorCode::EnhanceYourCalm).map(|_| ());
        }
        if !h.has(flag::END_HEADERS) {
            self.continuing = Some((stream, end_stream, block));
            return Ok(());
        }
        // Decoded even for a stream already gone: HPACK's table must follow every block.
        self.decoded.clear();
        self.ranges.clear();
        let (decoded, ranges) = (&mut self.decoded, &mut self.ranges);
        let result = self.dec.decode(&block, |n, v| {
            let ns = decoded.len();
            decoded.extend_from_slice(n);
            let vs = decoded.len();
            decoded.extend_from_slice(v);
            ranges.push((ns..vs, vs..decoded.len()));
        });
        self.block = block;
        if result.is_err() {
            return self.fail(ErrorCode::Compression).map(|_| ());
        }
        let Some(i) = self.index(stream) else {
            return Ok(());
        };
        let fields = Fields {
            buf: &self.decoded,
            ranges: &self.ranges,
        };
        if self.streams[i].head_seen {
            // A second block is trailers, and must end the stream (RFC 9113 §8.1).
            let pseudo = fields.iter().any(|(n, _)| n.starts_with(b":"));
            if !end_stream || pseudo {
                self.stream_error(stream, ErrorCode::Protocol, on);
                return Ok(());
            }
            self.server_ended(i);
            let fields = Fields {
                buf: &self.decoded,
                ranges: &self.ranges,
            };
            on(Event::Trailers { stream, fields });
            return Ok(());
        }
        let status = fields
            .iter()
            .next()
            .filter(|(n, _)| *n == b":status")
            .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse::<u16>().ok())
            .filter(|s| (100..=999).contains(s));
        let Some(status) = status else {
            self.stream_error(stream, ErrorCode::Protocol, on);
            return Ok(());
        };
        if status < 200 {
            // An interim response; 101 has no meaning in HTTP/2 (RFC 9113 §8.6).
            if end_stream || status == 101 {
                self.stream_error(stream, ErrorCode::Protocol, on);
            }
            return Ok(());
        }
        self.streams[i].head_seen = true;
        if end_stream {
            self.server_ended(i);
        }
        let fields = Fields {
            buf: &self.decoded,
            ranges: &self.ranges,
        };
        on(Event::Head {
            stream,
            status,
            fields,
            end_stream,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames a server would send, built with the codec's own writers.
    fn server_frames(f: impl FnOnce(&mut Vec<u8>, &mut Encoder)) -> Vec<u8> {
        let mut out = Vec::new();
        let mut enc = Encoder::default();
        f(&mut out, &mut enc);
        out
    }

    fn settings(out: &mut Vec<u8>, max_streams: u32) {
        frame::write_settings(out, &[(setting::MAX_CONCURRENT_STREAMS, max_streams)]);
    }

    #[derive(Debug, PartialEq)]
    enum Seen {
        Head(u32, u16, Vec<(Vec<u8>, Vec<u8>)>, bool),
        Data(u32, Vec<u8>, bool),
        Trailers(u32, Vec<(Vec<u8>, Vec<u8>)>),
        Reset(u32, u32),
        GoAway(u32),
    }

    fn feed(c: &mut ClientConn, input: &[u8], step: usize) -> Result<Vec<Seen>, ErrorCode> {
        let mut seen = Vec::new();
        let mut buf = Vec::new();
        for chunk in input.chunks(step) {
            buf.extend_from_slice(chunk);
            let n = c.receive(&buf, |e| {
                let owned =
                    |f: Fields<'_>| f.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
                seen.push(match e {
                    Event::Head {
                        stream,
                        status,
                        fields,
                        end_stream,
                    } => Seen::Head(stream, status, owned(fields), end_stream),
                    Event::Data {
                        stream,
                        data,
                        end_stream,
                    } => Seen::Data(stream, data.to_vec(), end_stream),
                    Event::Trailers { stream, fields } => Seen::Trailers(stream, owned(fields)),
                    Event::Reset { stream, code } => Seen::Reset(stream, code),
                    Event::GoAway { last_stream, .. } => Seen::GoAway(last_stream),
                });
            })?;
            buf.drain(..n);
        }
        Ok(seen)
    }

    fn get(c: &mut ClientConn) -> Result<u32, OpenError> {
        c.open(
            [
                (&b":method"[..], &b"GET"[..]),
                (b":scheme", b"http"),
                (b":path", b"/"),
                (b":authority", b"x"),
            ],
            b"",
            &[],
        )
    }

    #[test]
    fn a_response_with_trailers_byte_by_byte_and_whole() {
        for step in [1, 7, 100_000] {
            let mut c = ClientConn::new();
            assert!(c.out.starts_with(frame::PREFACE));
            let input = server_frames(|out, _| settings(out, 10));
            feed(&mut c, &input, step).unwrap();
            let id = get(&mut c).unwrap();
            let input = server_frames(|out, enc| {
                let mut block = Vec::new();
                enc.encode_response(
                    200,
                    [(&b"content-type"[..], &b"application/grpc"[..])],
                    &mut block,
                );
                frame::write_headers(out, id, &block, false, 16_384);
                frame::write_data_header(out, id, 5, false);
                out.extend_from_slice(b"hello");
                block.clear();
                enc.encode_fields([(&b"grpc-status"[..], &b"0"[..])], &mut block);
                frame::write_headers(out, id, &block, true, 16_384);
            });
            let seen = feed(&mut c, &input, step).unwrap();
            assert_eq!(
                seen,
                vec![
                    Seen::Head(
                        id,
                        200,
                        vec![
                            (b":status".to_vec(), b"200".to_vec()),
                            (b"content-type".to_vec(), b"application/grpc".to_vec())
                        ],
                        false
                    ),
                    Seen::Data(id, b"hello".to_vec(), false),
                    Seen::Trailers(id, vec![(b"grpc-status".to_vec(), b"0".to_vec())]),
                ],
                "step {step}"
            );
            assert_eq!(c.in_flight(), 0);
        }
    }

    #[test]
    fn the_servers_stream_limit_is_respected() {
        let mut c = ClientConn::new();
        // Before the server's SETTINGS, one stream at a time.
        get(&mut c).unwrap();
        assert_eq!(get(&mut c), Err(OpenError::Full));
        feed(&mut c, &server_frames(|o, _| settings(o, 3)), 100).unwrap();
        get(&mut c).unwrap();
        get(&mut c).unwrap();
        assert_eq!(get(&mut c), Err(OpenError::Full));
    }

    #[test]
    fn goaway_refuses_the_streams_it_did_not_process() {
        let mut c = ClientConn::new();
        feed(&mut c, &server_frames(|o, _| settings(o, 10)), 100).unwrap();
        let ids: Vec<u32> = (0..3).map(|_| get(&mut c).unwrap()).collect();
        let input = server_frames(|o, _| frame::write_goaway(o, ids[0], ErrorCode::NoError, b""));
        let seen = feed(&mut c, &input, 100).unwrap();
        assert_eq!(seen[0], Seen::GoAway(ids[0]));
        let mut refused: Vec<u32> = seen[1..]
            .iter()
            .map(|s| match s {
                Seen::Reset(id, code) if *code == ErrorCode::RefusedStream as u32 => *id,
                other => panic!("{other:?}"),
            })
            .collect();
        refused.sort_unstable();
        assert_eq!(refused, ids[1..]);
        assert_eq!(c.in_flight(), 1);
        assert_eq!(get(&mut c), Err(OpenError::Closing));
    }

    /// A client whose server allows 10 streams and `window` bytes per stream, its own output
    /// (preface, settings) cleared.
    fn client_with_stream_window(window: u32) -> ClientConn {
        let mut c = ClientConn::new();
        feed(
            &mut c,
            &server_frames(|o, _| {
                frame::write_settings(
                    o,
                    &[
                        (setting::MAX_CONCURRENT_STREAMS, 10),
                        (setting::INITIAL_WINDOW_SIZE, window),
                    ],
                );
            }),
            100,
        )
        .unwrap();
        c.out.clear();
        c
    }

    #[test]
    fn request_bodies_wait_for_the_servers_window() {
        let mut c = client_with_stream_window(10);
        let id = c
            .open(
                [(&b":method"[..], &b"POST"[..])],
                &[b'x'; 25],
                &[(b"te-x", b"1")],
            )
            .unwrap();
        let data_frames = |out: &[u8]| {
            let mut at = 0;
            let mut sizes = Vec::new();
            while let Some(h) = FrameHeader::parse(&out[at..]) {
                if h.kind == kind::DATA {
                    sizes.push((h.len, h.has(flag::END_STREAM)));
                }
                if h.kind == kind::HEADERS && at > 0 {
                    sizes.push((u32::MAX, h.has(flag::END_STREAM)));
                }
                at += HEADER_LEN + h.len as usize;
            }
            sizes
        };
        assert_eq!(data_frames(&c.out), vec![(10, false)]);
        c.out.clear();
        let grant = server_frames(|o, _| frame::write_window_update(o, id, 100));
        feed(&mut c, &grant, 100).unwrap();
        // The rest of the body, then the trailers ending the stream.
        assert_eq!(data_frames(&c.out), vec![(15, false), (u32::MAX, true)]);
    }

    #[test]
    fn a_streaming_body_goes_as_the_windows_allow_and_ends_with_trailers() {
        let mut c = client_with_stream_window(10);
        let id = c.open_streaming([(&b":method"[..], &b"POST"[..])]).unwrap();
        let h = FrameHeader::parse(&c.out).unwrap();
        assert_eq!(h.kind, kind::HEADERS);
        assert!(!h.has(flag::END_STREAM), "the body follows");
        c.out.clear();
        assert_eq!(c.send_room(id), 10);
        assert_eq!(c.send_data(id, &[b'x'; 25]), 10);
        assert_eq!(c.send_room(id), 0);
        assert_eq!(c.send_data(id, b"more"), 0);
        let h = FrameHeader::parse(&c.out).unwrap();
        assert_eq!(
            (h.kind, h.len, h.has(flag::END_STREAM)),
            (kind::DATA, 10, false)
        );
        c.out.clear();
        feed(
            &mut c,
            &server_frames(|o, _| frame::write_window_update(o, id, 100)),
            100,
        )
        .unwrap();
        assert!(
            c.out.is_empty(),
            "nothing is sent for a streaming body but what is given"
        );
        assert_eq!(c.send_data(id, &[b'y'; 15]), 15);
        assert!(c.finish(id, [(&b"x-sum"[..], &b"1"[..])]));
        assert!(!c.sending(id));
        assert!(!c.finish(id, []), "ended once");
        let mut kinds = Vec::new();
        let mut at = 0;
        while let Some(h) = FrameHeader::parse(&c.out[at..]) {
            kinds.push((h.kind, h.has(flag::END_STREAM)));
            at += HEADER_LEN + h.len as usize;
        }
        assert_eq!(kinds, vec![(kind::DATA, false), (kind::HEADERS, true)]);
        // Without trailers the end is an empty DATA frame.
        let id = c.open_streaming([(&b":method"[..], &b"POST"[..])]).unwrap();
        c.out.clear();
        assert!(c.finish(id, []));
        let h = FrameHeader::parse(&c.out).unwrap();
        assert_eq!(
            (h.kind, h.len, h.has(flag::END_STREAM)),
            (kind::DATA, 0, true)
        );
    }

    #[test]
    fn a_complete_response_before_the_body_ends_resets_the_stream() {
        let mut c = ClientConn::new();
        feed(&mut c, &server_frames(|o, _| settings(o, 10)), 100).unwrap();
        let id = c.open_streaming([(&b":method"[..], &b"POST"[..])]).unwrap();
        assert_eq!(c.send_data(id, b"part"), 4);
        c.out.clear();
        let input = server_frames(|out, enc| {
            let mut block = Vec::new();
            enc.encode_response(413, [], &mut block);
            frame::write_headers(out, id, &block, true, 16_384);
        });
        let seen = feed(&mut c, &input, 100).unwrap();
        assert!(matches!(seen[..], [Seen::Head(_, 413, _, true)]));
        assert!(!c.sending(id));
        assert_eq!(c.send_room(id), 0);
        let h = FrameHeader::parse(&c.out).unwrap();
        assert_eq!((h.kind, h.stream), (kind::RST_STREAM, id));
        assert_eq!(c.in_flight(), 0);
    }

    #[test]
    fn a_reset_and_a_cancel() {
        let mut c = ClientConn::new();
        feed(&mut c, &server_frames(|o, _| settings(o, 10)), 100).unwrap();
        let a = get(&mut c).unwrap();
        let b = get(&mut c).unwrap();
        let seen = feed(
            &mut c,
            &server_frames(|o, _| frame::write_rst_stream(o, a, ErrorCode::Internal)),
            100,
        )
        .unwrap();
        assert_eq!(seen, vec![Seen::Reset(a, ErrorCode::Internal as u32)]);
        c.out.clear();
        c.cancel(b);
        assert_eq!(c.in_flight(), 0);
        let h = FrameHeader::parse(&c.out).unwrap();
        assert_eq!((h.kind, h.stream), (kind::RST_STREAM, b));
    }

    #[test]
    fn protocol_errors_end_the_connection() {
        // DATA on a stream never opened; PUSH_PROMISE; a frame over the announced size.
        for input in [
            server_frames(|o, _| {
                frame::write_data_header(o, 99, 1, false);
                o.push(b'x');
            }),
            server_frames(|o, _| frame::write_header(o, 4, kind::PUSH_PROMISE, 4, 1)),
            server_frames(|o, _| frame::write_header(o, 20_000, kind::DATA, 0, 1)),
        ] {
            let mut c = ClientConn::new();
            get(&mut c).unwrap();
            let mut padded = input.clone();
            padded.resize(padded.len().max(20_009), 0);
            assert!(c.receive(&padded, |_| {}).is_err(), "{input:?}");
        }
    }

    #[test]
    fn data_is_given_back_once_released() {
        let mut c = ClientConn::new();
        feed(&mut c, &server_frames(|o, _| settings(o, 10)), 100).unwrap();
        let id = get(&mut c).unwrap();
        let body = vec![b'y'; 16_000];
        let input = server_frames(|out, enc| {
            let mut block = Vec::new();
            enc.encode_response(200, [], &mut block);
            frame::write_headers(out, id, &block, false, 16_384);
            for _ in 0..5 {
                frame::write_data_header(out, id, body.len(), false);
                out.extend_from_slice(&body);
            }
        });
        c.out.clear();
        feed(&mut c, &input, 100_000).unwrap();
        assert!(
            c.out.is_empty(),
            "a window update before anything was released"
        );
        c.release(id, 80_000);
        let h = FrameHeader::parse(&c.out).unwrap();
        assert_eq!((h.kind, h.stream), (kind::WINDOW_UPDATE, id));
    }
}
