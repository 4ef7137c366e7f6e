//! The HTTP/2 side of a load connection (`--h2`): requests as HEADERS (and DATA) frames on
//! consecutive streams, several in flight (`-m`), and responses read back as frames — the
//! codec's HPACK on both sides, so a connection's requests shrink to a few index bytes after
//! the first.
//!
//! Streams complete in any order, so each keeps its own send time (in a ring indexed by stream
//! number): latency is never charged to the wrong request. Flow control is kept out of the
//! way: the client opens its windows to the maximum at the start and tops the connection's up
//! as data arrives, so the server is never held back by the load generator.

use std::collections::VecDeque;
use std::time::Instant;

use lowlat_http::h2::frame::{self, flag, kind, FrameHeader, HEADER_LEN, MAX_WINDOW};
use lowlat_http::h2::{Decoder, Encoder};

use crate::plan::H2Request;

/// SETTINGS_NO_RFC7540_PRIORITIES (RFC 9218).
const SETTINGS_NO_RFC7540_PRIORITIES: u16 = 9;

/// What reading frames found, for the worker to count.
#[derive(Debug)]
pub(crate) enum Event {
    /// A response ended: its request's send time and its status; its fields and body when
    /// the session collects them.
    Response {
        sent: Instant,
        status: u16,
        collected: Option<Collected>,
    },
    /// The server reset a stream: its request failed.
    Reset { sent: Instant },
}

/// Why the connection cannot go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum H2Error {
    /// A frame that makes no sense, or a header block that does not decode.
    Protocol,
}

/// A response's fields (its first final head, pseudo-fields included) and body, for a script's
/// `response()`.
#[derive(Debug, Default)]
pub(crate) struct Collected {
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
    pub body: Vec<u8>,
}

/// A stream in flight.
#[derive(Debug, Clone, Copy)]
struct Slot {
    sent: Instant,
    status: u16,
    done: bool,
}

/// One connection's HTTP/2 state.
pub(crate) struct Session {
    enc: Encoder,
    dec: Decoder,
    /// Stream number (id = 2n + 1) of `slots[0]`.
    base: u32,
    slots: VecDeque<Slot>,
    live: usize,
    next: u32,
    /// Frames to write; `out_pos` of them are written.
    pub out: Vec<u8>,
    pub out_pos: usize,
    /// An incomplete frame held between reads.
    carry: Vec<u8>,
    /// A header block continued in CONTINUATION frames: its stream and bytes.
    block: Option<(u32, bool, Vec<u8>)>,
    /// DATA bytes received since the connection window was last topped up.
    received: u64,
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS.
    pub max_streams: usize,
    /// GOAWAY received: the last stream the server will answer.
    pub goaway: Option<u32>,
    /// Per request of the cycle: the encoder generation its cached block is valid for.
    cache: Vec<(u64, Vec<u8>)>,
    /// A header block being encoded for a request outside the cycle.
    scratch: Vec<u8>,
    /// Whether responses' fields and bodies are kept (a script's `response()`), in
    /// `collected`, one entry per entry of `slots`.
    collect: bool,
    collected: VecDeque<Collected>,
}

impl Session {
    /// A new session for a connection that sends `requests` distinct requests; queues the
    /// preface, our SETTINGS and the connection window's opening.
    pub fn new(requests: usize) -> Self {
        let mut out = frame::PREFACE.to_vec();
        frame::write_settings(
            &mut out,
            &[
                (frame::setting::ENABLE_PUSH, 0),
                (frame::setting::INITIAL_WINDOW_SIZE, MAX_WINDOW as u32),
                // RFC 9218 §2.1: no RFC 7540 priority signals from this client, as nghttp2 (and
                // so h2load), curl and browsers say; a server then skips its dependency tree.
                (SETTINGS_NO_RFC7540_PRIORITIES, 1),
            ],
        );
        frame::write_window_update(&mut out, 0, MAX_WINDOW as u32 - frame::DEFAULT_WINDOW);
        Self {
            enc: Encoder::default(),
            dec: Decoder::default(),
            base: 0,
            slots: VecDeque::new(),
            live: 0,
            next: 0,
            out,
            out_pos: 0,
            carry: Vec::new(),
            block: None,
            received: 0,
            max_streams: usize::MAX,
            goaway: None,
            cache: vec![(u64::MAX, Vec::new()); requests],
            scratch: Vec::new(),
            collect: false,
            collected: VecDeque::new(),
        }
    }

    /// Keeps each response's fields and body, for a script's `response()`.
    pub fn collect_responses(&mut self) {
        self.collect = true;
    }

    /// Streams in flight.
    pub fn in_flight(&self) -> usize {
        self.live
    }

    /// Whether stream ids are nearly used up (the connection must be replaced).
    pub fn exhausted(&self) -> bool {
        self.next >= (1 << 30) - 1
    }

    /// Frames wait to be written.
    pub fn has_output(&self) -> bool {
        self.out_pos < self.out.len()
    }

    /// Drops what is written.
    pub fn written(&mut self) {
        if self.out_pos == self.out.len() {
            self.out.clear();
            self.out_pos = 0;
        }
    }

    /// Queues request `index` of the cycle on the next stream, sent (or scheduled) at `sent`.
    pub fn request(&mut self, index: usize, req: &H2Request, sent: Instant) {
        let (generation, cached) = &mut self.cache[index];
        if *generation != self.enc.generation() {
            cached.clear();
            let before = self.enc.generation();
            self.enc
                .encode_fields(req.fields.iter().map(|(n, v)| (&n[..], &v[..])), cached);
            // A block that added to the table must not be sent again as it is (it would add
            // the same entries again, out of step with our mirror of the server's table): it
            // is reusable only when encoding left the table as it was.
            *generation = if self.enc.generation() == before {
                before
            } else {
                u64::MAX
            };
        }
        let block = std::mem::take(cached);
        self.send(&block, req, sent);
        self.cache[index].1 = block;
    }

    /// Queues a request that is not part of the cycle (made by a script's `request()`) on the
    /// next stream, encoding its fields afresh.
    pub fn request_once(&mut self, req: &H2Request, sent: Instant) {
        let mut block = std::mem::take(&mut self.scratch);
        block.clear();
        self.enc
            .encode_fields(req.fields.iter().map(|(n, v)| (&n[..], &v[..])), &mut block);
        self.send(&block, req, sent);
        self.scratch = block;
    }

    /// Opens the next stream with the header block `block` and `req`'s body.
    fn send(&mut self, block: &[u8], req: &H2Request, sent: Instant) {
        let id = 2 * self.next + 1;
        self.next += 1;
        if self.slots.is_empty() {
            self.base = self.next - 1;
        }
        self.slots.push_back(Slot {
            sent,
            status: 0,
            done: false,
        });
        if self.collect {
            self.collected.push_back(Collected::default());
        }
        self.live += 1;
        let end_stream = req.body.is_none();
        frame::write_headers(&mut self.out, id, block, end_stream, 16_384);
        if let Some(body) = &req.body {
            let mut chunks = body.chunks(16_384).peekable();
            if chunks.peek().is_none() {
                frame::write_data_header(&mut self.out, id, 0, true);
            }
            while let Some(c) = chunks.next() {
                frame::write_data_header(&mut self.out, id, c.len(), chunks.peek().is_none());
                self.out.extend_from_slice(c);
            }
        }
    }

    /// Reads the frames in `data` (after any held bytes), reporting completed streams.
    ///
    /// # Errors
    /// [`H2Error::Protocol`] for a connection error by the server or an undecodable frame.
    pub fn read(&mut self, data: &[u8], mut on: impl FnMut(Event)) -> Result<(), H2Error> {
        let mut carry = std::mem::take(&mut self.carry);
        let from_carry = !carry.is_empty();
        if from_carry {
            carry.extend_from_slice(data);
        }
        let input: &[u8] = if from_carry { &carry } else { data };
        let mut at = 0;
        let result = loop {
            let Some(h) = FrameHeader::parse(&input[at..]) else {
                break Ok(());
            };
            let end = at + HEADER_LEN + h.len as usize;
            if end > input.len() {
                break Ok(());
            }
            let payload = &input[at + HEADER_LEN..end];
            at = end;
            if let Err(e) = self.frame(h, payload, &mut on) {
                break Err(e);
            }
        };
        // An incomplete frame waits for the next read (no allocation once the carry is warm).
        if from_carry {
            carry.drain(..at);
        } else {
            carry.extend_from_slice(&data[at..]);
        }
        self.carry = carry;
        if self.received > u64::from(MAX_WINDOW as u32 / 2) {
            frame::write_window_update(&mut self.out, 0, self.received as u32);
            self.received = 0;
        }
        result
    }

    fn frame(
        &mut self,
        h: FrameHeader,
        payload: &[u8],
        on: &mut impl FnMut(Event),
    ) -> Result<(), H2Error> {
        if let Some((stream, _, _)) = &self.block {
            if h.kind != kind::CONTINUATION || h.stream != *stream {
                return Err(H2Error::Protocol);
            }
        }
        match h.kind {
            kind::DATA => {
                self.received += u64::from(h.len);
                if self.collect {
                    let data = frame::unpad(h.flags, payload).map_err(|_| H2Error::Protocol)?;
                    if let Some(c) = self.index(h.stream).and_then(|i| self.collected.get_mut(i)) {
                        c.body.extend_from_slice(data);
                    }
                }
                if h.has(flag::END_STREAM) {
                    self.end(h.stream, on);
                }
            }
            kind::HEADERS => {
                let mut fragment = frame::unpad(h.flags, payload).map_err(|_| H2Error::Protocol)?;
                if h.has(flag::PRIORITY) {
                    fragment = fragment.get(5..).ok_or(H2Error::Protocol)?;
                }
                if h.has(flag::END_HEADERS) {
                    self.head(h.stream, fragment)?;
                    if h.has(flag::END_STREAM) {
                        self.end(h.stream, on);
                    }
                } else {
                    self.block = Some((h.stream, h.has(flag::END_STREAM), fragment.to_vec()));
                }
            }
            kind::CONTINUATION => {
                let Some((stream, end_stream, mut block)) = self.block.take() else {
                    return Err(H2Error::Protocol);
                };
                block.extend_from_slice(payload);
                if h.has(flag::END_HEADERS) {
                    self.head(stream, &block)?;
                    if end_stream {
                        self.end(stream, on);
                    }
                } else {
                    self.block = Some((stream, end_stream, block));
                }
            }
            kind::RST_STREAM => {
                if let Some(slot) = self.finish(h.stream) {
                    on(Event::Reset { sent: slot.sent });
                }
            }
            kind::SETTINGS if !h.has(flag::ACK) => {
                let mut s = lowlat_http::h2::Settings::default();
                s.apply(payload).map_err(|_| H2Error::Protocol)?;
                if let Some(n) = s.max_concurrent_streams {
                    self.max_streams = n as usize;
                }
                self.enc.set_peer_table_size(s.header_table_size);
                frame::write_settings_ack(&mut self.out);
            }
            kind::PING if !h.has(flag::ACK) => {
                let data: [u8; 8] = payload.try_into().map_err(|_| H2Error::Protocol)?;
                frame::write_ping(&mut self.out, true, &data);
            }
            kind::GOAWAY => {
                let last = payload.get(..4).ok_or(H2Error::Protocol)?;
                let code = payload.get(4..8).ok_or(H2Error::Protocol)?;
                if code != [0, 0, 0, 0] {
                    return Err(H2Error::Protocol);
                }
                let last = u32::from_be_bytes([last[0], last[1], last[2], last[3]]) & 0x7fff_ffff;
                self.goaway = Some(last);
            }
            kind::PUSH_PROMISE => return Err(H2Error::Protocol),
            _ => {}
        }
        Ok(())
    }

    /// A response head: its status is kept for the stream's end.
    fn head(&mut self, stream: u32, block: &[u8]) -> Result<(), H2Error> {
        let mut status = 0u16;
        let collect = self.collect;
        let mut fields = Vec::new();
        self.dec
            .decode(block, |n, v| {
                if n == b":status" {
                    status = std::str::from_utf8(v)
                        .ok()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                }
                if collect {
                    fields.push((n.to_vec(), v.to_vec()));
                }
            })
            .map_err(|_| H2Error::Protocol)?;
        // An interim (1xx) head or trailers leave the final status in place.
        if (200..600).contains(&status) {
            if let Some(slot) = self.slot(stream) {
                slot.status = status;
            }
            if let Some(c) = self.index(stream).and_then(|i| self.collected.get_mut(i)) {
                if c.fields.is_empty() {
                    c.fields = fields;
                }
            }
        }
        Ok(())
    }

    fn end(&mut self, stream: u32, on: &mut impl FnMut(Event)) {
        let collected = if self.collect {
            self.index(stream)
                .and_then(|i| self.collected.get_mut(i))
                .map(std::mem::take)
        } else {
            None
        };
        if let Some(slot) = self.finish(stream) {
            on(Event::Response {
                sent: slot.sent,
                status: slot.status,
                collected,
            });
        }
    }

    /// The position of `stream` in `slots`.
    fn index(&self, stream: u32) -> Option<usize> {
        let n = stream.checked_sub(1)? / 2;
        Some(n.checked_sub(self.base)? as usize)
    }

    fn slot(&mut self, stream: u32) -> Option<&mut Slot> {
        let i = self.index(stream)?;
        self.slots.get_mut(i).filter(|s| !s.done)
    }

    /// Marks a stream done; returns its slot the first time.
    fn finish(&mut self, stream: u32) -> Option<Slot> {
        let slot = self.slot(stream)?;
        slot.done = true;
        let copy = *slot;
        self.live -= 1;
        while self.slots.front().is_some_and(|s| s.done) {
            self.slots.pop_front();
            self.collected.pop_front();
            self.base += 1;
        }
        Some(copy)
    }

    /// With GOAWAY: whether every stream the server will still answer is done.
    pub fn drained(&self) -> bool {
        let Some(last) = self.goaway else {
            return false;
        };
        self.slots
            .iter()
            .enumerate()
            .all(|(i, s)| s.done || 2 * (self.base + i as u32) + 1 > last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The HEADERS blocks a session sends for one request, decoded by one server-side decoder:
    /// the same fields every time, the first block filling the table, the later ones only
    /// indexes (a block that filled the table is never sent twice).
    #[test]
    fn requests_index_after_the_first_and_stay_in_step() {
        let req = H2Request {
            fields: vec![
                (b":method".to_vec(), b"GET".to_vec()),
                (b":scheme".to_vec(), b"https".to_vec()),
                (b":authority".to_vec(), b"example.com:8443".to_vec()),
                (b":path".to_vec(), b"/100.html".to_vec()),
                (b"user-agent".to_vec(), b"lowlat".to_vec()),
            ],
            body: None,
        };
        let other = H2Request {
            fields: vec![
                (b":method".to_vec(), b"GET".to_vec()),
                (b":scheme".to_vec(), b"https".to_vec()),
                (b":authority".to_vec(), b"example.com:8443".to_vec()),
                (b":path".to_vec(), b"/json".to_vec()),
            ],
            body: None,
        };
        let mut s = Session::new(2);
        s.out.clear();
        let now = Instant::now();
        let mut dec = Decoder::default();
        let mut sizes = Vec::new();
        for i in 0..6 {
            let (index, r) = if i % 3 == 2 { (1, &other) } else { (0, &req) };
            s.request(index, r, now);
            let h = FrameHeader::parse(&s.out).unwrap();
            let block = &s.out[HEADER_LEN..HEADER_LEN + h.len as usize];
            let mut got = Vec::new();
            dec.decode(block, |n, v| got.push((n.to_vec(), v.to_vec())))
                .unwrap();
            assert_eq!(got, r.fields, "request {i}");
            if index == 0 {
                sizes.push(block.len());
            }
            s.out.clear();
        }
        assert!(sizes[0] > 30, "{sizes:?}");
        assert!(
            sizes[1..].iter().all(|&n| n == req.fields.len()),
            "{sizes:?}"
        );
    }
}
