//! HTTP/3 frames (RFC 9114 §7): the frame types, SETTINGS, the unidirectional stream types
//! (§6.2), writers for every frame, and [`FrameDecoder`], which reads the frames of one stream
//! from input split anywhere.
//!
//! A frame is a type and a length (two QUIC variable-length integers, [`super::varint`]) and a
//! payload. The decoder checks what one frame alone decides: the payload holds exactly its
//! fields (else H3_FRAME_ERROR), the HTTP/2 frame types that HTTP/3 reserves are refused
//! (H3_FRAME_UNEXPECTED, §7.2.8), unknown and reserved types are skipped without buffering
//! (§9), and each type has a size limit: a HEADERS or PUSH_PROMISE larger than the field
//! section this side accepts is refused before a byte of it is stored. DATA is never buffered:
//! it comes out as [`Frame::DataHeader`] and then [`Frame::Data`] chunks, slices of the input.
//! Which frames may come on which stream, and in which order, is [`super::stream`]'s job.

use super::error::Error;
use super::varint;
use crate::Status;

/// Frame types (RFC 9114 §7.2, §11.2.1).
pub mod kind {
    pub const DATA: u64 = 0x00;
    pub const HEADERS: u64 = 0x01;
    pub const CANCEL_PUSH: u64 = 0x03;
    pub const SETTINGS: u64 = 0x04;
    pub const PUSH_PROMISE: u64 = 0x05;
    pub const GOAWAY: u64 = 0x07;
    pub const MAX_PUSH_ID: u64 = 0x0d;
    /// HTTP/2's PRIORITY, PING, WINDOW_UPDATE and CONTINUATION: reserved, an error to receive.
    pub const HTTP2_ONLY: [u64; 4] = [0x02, 0x06, 0x08, 0x09];
}

/// SETTINGS identifiers (RFC 9114 §7.2.4.1, RFC 9204 §5, RFC 9220 §3, RFC 9297 §2.1.1).
pub mod setting {
    pub const QPACK_MAX_TABLE_CAPACITY: u64 = 0x01;
    pub const MAX_FIELD_SECTION_SIZE: u64 = 0x06;
    pub const QPACK_BLOCKED_STREAMS: u64 = 0x07;
    pub const ENABLE_CONNECT_PROTOCOL: u64 = 0x08;
    pub const H3_DATAGRAM: u64 = 0x33;
    /// HTTP/2's ENABLE_PUSH, MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE and MAX_FRAME_SIZE:
    /// reserved, an H3_SETTINGS_ERROR to receive.
    pub const HTTP2_ONLY: [u64; 4] = [0x02, 0x03, 0x04, 0x05];
}

/// The largest SETTINGS payload accepted. Five settings take at most 80 bytes; the rest is room
/// for the reserved "grease" settings peers add (RFC 9114 §7.2.4.1) and future extensions.
pub const MAX_SETTINGS_LEN: u64 = 4096;

/// The longest frame header: two 8-byte integers.
const MAX_HEADER_LEN: usize = 2 * varint::MAX_LEN;

/// The settings a peer announced in its SETTINGS frame; absent ones keep their defaults
/// (RFC 9114 §7.2.4.2: zero, or unlimited for MAX_FIELD_SECTION_SIZE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Settings {
    /// SETTINGS_QPACK_MAX_TABLE_CAPACITY: the dynamic table the peer's decoder keeps for us.
    pub qpack_max_table_capacity: u64,
    /// SETTINGS_MAX_FIELD_SECTION_SIZE: the largest decoded field section the peer accepts.
    pub max_field_section_size: Option<u64>,
    /// SETTINGS_QPACK_BLOCKED_STREAMS: how many of its streams may wait for our encoder stream.
    pub qpack_blocked_streams: u64,
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 9220): extended CONNECT (`:protocol`) accepted.
    pub enable_connect_protocol: bool,
    /// SETTINGS_H3_DATAGRAM (RFC 9297).
    pub h3_datagram: bool,
}

impl Settings {
    /// Reads a SETTINGS payload. Unknown identifiers (grease included) are ignored.
    ///
    /// # Errors
    /// [`Error::Frame`] for a payload that ends inside a pair; [`Error::Settings`] for a repeated
    /// identifier, an HTTP/2-only one, or a boolean setting other than 0 or 1.
    pub fn decode(payload: &[u8]) -> Result<Self, Error> {
        let mut s = Self::default();
        let mut seen_known = 0u8;
        let mut unknown: Vec<u64> = Vec::new();
        let mut at = 0;
        while at < payload.len() {
            let Status::Complete((id, a)) = varint::decode(&payload[at..]) else {
                return Err(Error::Frame("SETTINGS ends inside an identifier"));
            };
            let Status::Complete((value, b)) = varint::decode(&payload[at + a..]) else {
                return Err(Error::Frame("SETTINGS ends inside a value"));
            };
            at += a + b;
            let bit = match id {
                setting::QPACK_MAX_TABLE_CAPACITY => {
                    s.qpack_max_table_capacity = value;
                    1
                }
                setting::MAX_FIELD_SECTION_SIZE => {
                    s.max_field_section_size = Some(value);
                    2
                }
                setting::QPACK_BLOCKED_STREAMS => {
                    s.qpack_blocked_streams = value;
                    4
                }
                setting::ENABLE_CONNECT_PROTOCOL => {
                    s.enable_connect_protocol = flag(value)?;
                    8
                }
                setting::H3_DATAGRAM => {
                    s.h3_datagram = flag(value)?;
                    16
                }
                id if setting::HTTP2_ONLY.contains(&id) => {
                    return Err(Error::Settings("an HTTP/2 setting"));
                }
                id => {
                    unknown.push(id);
                    0
                }
            };
            if seen_known & bit != 0 {
                return Err(Error::Settings("a setting repeated"));
            }
            seen_known |= bit;
        }
        unknown.sort_unstable();
        if unknown.windows(2).any(|w| w[0] == w[1]) {
            return Err(Error::Settings("a setting repeated"));
        }
        Ok(s)
    }

    /// Appends a whole SETTINGS frame announcing these settings (those at their default are
    /// left out).
    pub fn write(&self, out: &mut Vec<u8>) {
        let mut pairs: Vec<(u64, u64)> = Vec::with_capacity(5);
        if self.qpack_max_table_capacity != 0 {
            pairs.push((
                setting::QPACK_MAX_TABLE_CAPACITY,
                self.qpack_max_table_capacity,
            ));
        }
        if let Some(v) = self.max_field_section_size {
            pairs.push((setting::MAX_FIELD_SECTION_SIZE, v));
        }
        if self.qpack_blocked_streams != 0 {
            pairs.push((setting::QPACK_BLOCKED_STREAMS, self.qpack_blocked_streams));
        }
        if self.enable_connect_protocol {
            pairs.push((setting::ENABLE_CONNECT_PROTOCOL, 1));
        }
        if self.h3_datagram {
            pairs.push((setting::H3_DATAGRAM, 1));
        }
        let len: usize = pairs
            .iter()
            .map(|&(i, v)| varint::len(i) + varint::len(v))
            .sum();
        put_frame_header(out, kind::SETTINGS, len as u64);
        for (i, v) in pairs {
            varint::put(i, out);
            varint::put(v, out);
        }
    }
}

fn flag(v: u64) -> Result<bool, Error> {
    match v {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(Error::Settings("a boolean setting other than 0 or 1")),
    }
}

/// The type that opens a unidirectional stream (RFC 9114 §6.2, RFC 9204 §4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamType {
    Control,
    Push,
    QpackEncoder,
    QpackDecoder,
    /// Reserved ("grease", 0x1f * N + 0x21) or unknown: the stream is read and discarded, or
    /// refused with STOP_SENDING (H3_STREAM_CREATION_ERROR), never an error (§6.2.3, §9).
    Other(u64),
}

impl StreamType {
    /// The type for a stream-type value.
    #[must_use]
    pub const fn from_value(v: u64) -> Self {
        match v {
            0x00 => Self::Control,
            0x01 => Self::Push,
            0x02 => Self::QpackEncoder,
            0x03 => Self::QpackDecoder,
            v => Self::Other(v),
        }
    }

    /// The value on the wire.
    #[must_use]
    pub const fn value(self) -> u64 {
        match self {
            Self::Control => 0x00,
            Self::Push => 0x01,
            Self::QpackEncoder => 0x02,
            Self::QpackDecoder => 0x03,
            Self::Other(v) => v,
        }
    }

    /// Reads the type at the start of a unidirectional stream, and how many bytes it took.
    #[must_use]
    pub fn decode(input: &[u8]) -> Status<(Self, usize)> {
        match varint::decode(input) {
            Status::Complete((v, n)) => Status::Complete((Self::from_value(v), n)),
            Status::Partial => Status::Partial,
        }
    }

    /// Control and QPACK streams live as long as the connection: closing one is a connection
    /// error (H3_CLOSED_CRITICAL_STREAM, RFC 9114 §6.2.1, RFC 9204 §4.2).
    #[must_use]
    pub const fn is_critical(self) -> bool {
        matches!(
            self,
            Self::Control | Self::QpackEncoder | Self::QpackDecoder
        )
    }

    /// Appends the type that opens a stream of this kind.
    pub fn write(self, out: &mut Vec<u8>) {
        varint::put(self.value(), out);
    }
}

/// A frame read by [`FrameDecoder`]. Payloads borrow from the input, or from the decoder's
/// buffer when a frame arrived in pieces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A DATA frame starts; its `len` bytes follow as [`Frame::Data`] chunks (none if 0).
    DataHeader {
        len: u64,
    },
    /// Some of the current DATA frame's payload.
    Data(&'a [u8]),
    /// A HEADERS frame: an encoded field section (QPACK), whole.
    Headers(&'a [u8]),
    CancelPush(u64),
    Settings(Settings),
    PushPromise {
        push_id: u64,
        field_section: &'a [u8],
    },
    /// GOAWAY: a stream id (from a server) or a push id (from a client).
    GoAway(u64),
    MaxPushId(u64),
}

impl Frame<'_> {
    /// A short name, for errors and logs.
    #[must_use]
    pub const fn name(&self) -> &'static str {
        match self {
            Self::DataHeader { .. } | Self::Data(_) => "DATA",
            Self::Headers(_) => "HEADERS",
            Self::CancelPush(_) => "CANCEL_PUSH",
            Self::Settings(_) => "SETTINGS",
            Self::PushPromise { .. } => "PUSH_PROMISE",
            Self::GoAway(_) => "GOAWAY",
            Self::MaxPushId(_) => "MAX_PUSH_ID",
        }
    }
}

/// What one call of [`FrameDecoder::decode`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded<'a> {
    /// Input bytes used (consumed, or kept by the decoder): the caller drops them.
    pub consumed: usize,
    /// The frame read, if one was completed. `None` means every input byte was consumed and
    /// more are needed.
    pub frame: Option<Frame<'a>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a frame header (`head[..head_len]` so far).
    Header,
    /// Reading a payload into `payload`: the frame type and its length.
    Payload { kind: u64, len: usize },
    /// Inside a DATA frame's payload.
    Data { remaining: u64 },
    /// Inside an unknown frame, skipped.
    Skip { remaining: u64 },
}

/// Reads the frames of one stream (request, push or control) from input split anywhere.
#[derive(Debug)]
pub struct FrameDecoder {
    max_field_section: u64,
    state: State,
    head: [u8; MAX_HEADER_LEN],
    head_len: usize,
    /// The payload of a frame that arrived in more than one piece.
    payload: Vec<u8>,
}

impl FrameDecoder {
    /// A decoder refusing HEADERS and PUSH_PROMISE frames longer than `max_field_section`
    /// bytes (the SETTINGS_MAX_FIELD_SECTION_SIZE this side announces is a good value: an
    /// encoded section is rarely longer than the decoded one it counts).
    #[must_use]
    pub fn new(max_field_section: u64) -> Self {
        Self {
            max_field_section,
            state: State::Header,
            head: [0; MAX_HEADER_LEN],
            head_len: 0,
            payload: Vec::new(),
        }
    }

    /// Whether the decoder is between frames: a stream may end here (RFC 9114 §7.1).
    #[must_use]
    pub fn is_idle(&self) -> bool {
        self.state == State::Header && self.head_len == 0
    }

    /// The stream ended (FIN).
    ///
    /// # Errors
    /// [`Error::Frame`] when it ended inside a frame.
    pub fn finish(&self) -> Result<(), Error> {
        if self.is_idle() {
            Ok(())
        } else {
            Err(Error::Frame("stream ends inside a frame"))
        }
    }

    /// Reads from `input` until a frame (or a DATA chunk) is complete, or the input ends.
    ///
    /// Call it again on `&input[consumed..]` while it returns a frame.
    ///
    /// # Errors
    /// See [`Error`]: [`Error::FieldSectionTooLarge`] for a HEADERS or PUSH_PROMISE too long
    /// (a stream error); the others end the connection. The decoder is unusable afterwards.
    pub fn decode<'a>(&'a mut self, input: &'a [u8]) -> Result<Decoded<'a>, Error> {
        let mut at = 0;
        loop {
            match self.state {
                State::Header => {
                    let old = self.head_len;
                    let take = (MAX_HEADER_LEN - old).min(input.len() - at);
                    self.head[old..old + take].copy_from_slice(&input[at..at + take]);
                    self.head_len += take;
                    let Some((kind, len, n)) = header(&self.head[..self.head_len]) else {
                        // Sixteen bytes always hold a header, so more input is needed.
                        return Ok(Decoded {
                            consumed: input.len(),
                            frame: None,
                        });
                    };
                    at += n - old;
                    self.head_len = 0;
                    if let Some(frame) = self.start(kind, len)? {
                        return Ok(Decoded {
                            consumed: at,
                            frame: Some(frame),
                        });
                    }
                }
                State::Data { remaining } => {
                    if at == input.len() {
                        return Ok(Decoded {
                            consumed: at,
                            frame: None,
                        });
                    }
                    let n = usize::try_from(remaining)
                        .unwrap_or(usize::MAX)
                        .min(input.len() - at);
                    let left = remaining - n as u64;
                    self.state = if left == 0 {
                        State::Header
                    } else {
                        State::Data { remaining: left }
                    };
                    return Ok(Decoded {
                        consumed: at + n,
                        frame: Some(Frame::Data(&input[at..at + n])),
                    });
                }
                State::Skip { remaining } => {
                    let n = usize::try_from(remaining)
                        .unwrap_or(usize::MAX)
                        .min(input.len() - at);
                    at += n;
                    let left = remaining - n as u64;
                    if left > 0 {
                        self.state = State::Skip { remaining: left };
                        return Ok(Decoded {
                            consumed: at,
                            frame: None,
                        });
                    }
                    self.state = State::Header;
                }
                State::Payload { kind, len } => {
                    if self.payload.is_empty() && input.len() - at >= len {
                        // The whole payload is in the input: no copy.
                        self.state = State::Header;
                        let frame = parse(kind, &input[at..at + len])?;
                        return Ok(Decoded {
                            consumed: at + len,
                            frame: Some(frame),
                        });
                    }
                    let take = (len - self.payload.len()).min(input.len() - at);
                    self.payload.extend_from_slice(&input[at..at + take]);
                    at += take;
                    if self.payload.len() < len {
                        return Ok(Decoded {
                            consumed: at,
                            frame: None,
                        });
                    }
                    self.state = State::Header;
                    let frame = parse(kind, &self.payload)?;
                    return Ok(Decoded {
                        consumed: at,
                        frame: Some(frame),
                    });
                }
            }
        }
    }

    /// A frame header was read: what comes next, and the frame if it is already complete.
    fn start(&mut self, kind: u64, len: u64) -> Result<Option<Frame<'static>>, Error> {
        self.payload.clear();
        let limit = match kind {
            kind::DATA => {
                if len > 0 {
                    self.state = State::Data { remaining: len };
                }
                return Ok(Some(Frame::DataHeader { len }));
            }
            kind::HEADERS | kind::PUSH_PROMISE => {
                if len > self.max_field_section {
                    return Err(Error::FieldSectionTooLarge);
                }
                len
            }
            kind::SETTINGS => {
                if len > MAX_SETTINGS_LEN {
                    return Err(Error::ExcessiveLoad("SETTINGS frame too long"));
                }
                len
            }
            kind::CANCEL_PUSH | kind::GOAWAY | kind::MAX_PUSH_ID => {
                if len == 0 || len > varint::MAX_LEN as u64 {
                    return Err(Error::Frame("payload is not one integer"));
                }
                len
            }
            k if kind::HTTP2_ONLY.contains(&k) => {
                return Err(Error::FrameUnexpected("an HTTP/2 frame type"));
            }
            _ => {
                if len > 0 {
                    self.state = State::Skip { remaining: len };
                }
                return Ok(None);
            }
        };
        // Bounded above by the field-section limit or a constant, so it fits in memory.
        let len = usize::try_from(limit).map_err(|_| Error::FieldSectionTooLarge)?;
        if len == 0 {
            // Only HEADERS, PUSH_PROMISE and SETTINGS may be empty here.
            return parse(kind, &[]).map(Some);
        }
        self.state = State::Payload { kind, len };
        Ok(None)
    }
}

/// A frame header at the start of `b`: type, length, and its size in bytes.
fn header(b: &[u8]) -> Option<(u64, u64, usize)> {
    let Status::Complete((kind, a)) = varint::decode(b) else {
        return None;
    };
    let Status::Complete((len, c)) = varint::decode(&b[a..]) else {
        return None;
    };
    Some((kind, len, a + c))
}

/// A whole payload of a buffered frame type.
fn parse(kind: u64, payload: &[u8]) -> Result<Frame<'_>, Error> {
    Ok(match kind {
        kind::HEADERS => Frame::Headers(payload),
        kind::SETTINGS => Frame::Settings(Settings::decode(payload)?),
        kind::PUSH_PROMISE => {
            let Status::Complete((push_id, n)) = varint::decode(payload) else {
                return Err(Error::Frame("PUSH_PROMISE without a push id"));
            };
            Frame::PushPromise {
                push_id,
                field_section: &payload[n..],
            }
        }
        _ => {
            let v = match varint::decode(payload) {
                Status::Complete((v, n)) if n == payload.len() => v,
                _ => return Err(Error::Frame("payload is not one integer")),
            };
            match kind {
                kind::CANCEL_PUSH => Frame::CancelPush(v),
                kind::GOAWAY => Frame::GoAway(v),
                _ => Frame::MaxPushId(v),
            }
        }
    })
}

/// Appends a frame header.
pub fn put_frame_header(out: &mut Vec<u8>, kind: u64, len: u64) {
    varint::put(kind, out);
    varint::put(len, out);
}

/// Appends the header of a DATA frame of `len` bytes (the caller appends the payload).
pub fn put_data_header(out: &mut Vec<u8>, len: u64) {
    put_frame_header(out, kind::DATA, len);
}

/// Appends a HEADERS frame carrying `section` (an encoded field section).
pub fn put_headers(out: &mut Vec<u8>, section: &[u8]) {
    put_frame_header(out, kind::HEADERS, section.len() as u64);
    out.extend_from_slice(section);
}

/// Appends a HEADERS frame whose field section `encode` appends to `out`: the section is
/// written in place and the frame header slid in before it (a few bytes moved, no buffer).
pub fn put_headers_with(out: &mut Vec<u8>, encode: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    encode(out);
    let len = out.len() - start;
    put_frame_header(out, kind::HEADERS, len as u64);
    let header_len = out.len() - start - len;
    out[start..].rotate_right(header_len);
}

/// Appends a GOAWAY frame: from a server, the first client stream id it will not process;
/// from a client, the first push id.
pub fn put_goaway(out: &mut Vec<u8>, id: u64) {
    put_frame_header(out, kind::GOAWAY, varint::len(id) as u64);
    varint::put(id, out);
}

/// Appends a MAX_PUSH_ID frame (client only).
pub fn put_max_push_id(out: &mut Vec<u8>, id: u64) {
    put_frame_header(out, kind::MAX_PUSH_ID, varint::len(id) as u64);
    varint::put(id, out);
}

/// Appends a CANCEL_PUSH frame.
pub fn put_cancel_push(out: &mut Vec<u8>, id: u64) {
    put_frame_header(out, kind::CANCEL_PUSH, varint::len(id) as u64);
    varint::put(id, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every frame of `input`, fed in pieces of `step` bytes; DATA chunks joined into one.
    fn frames(input: &[u8], step: usize, max: u64) -> Result<Vec<String>, Error> {
        let mut dec = FrameDecoder::new(max);
        let mut got = Vec::new();
        let mut data: Option<Vec<u8>> = None;
        for piece in input.chunks(step.max(1)) {
            let mut at = 0;
            loop {
                let d = dec.decode(&piece[at..])?;
                at += d.consumed;
                let Some(f) = d.frame else { break };
                match f {
                    Frame::Data(b) => data.get_or_insert_with(Vec::new).extend_from_slice(b),
                    f => {
                        if let Some(d) = data.take() {
                            got.push(format!("data {}", String::from_utf8_lossy(&d)));
                        }
                        got.push(format!("{f:?}"));
                    }
                }
            }
            assert_eq!(at, piece.len());
        }
        if let Some(d) = data.take() {
            got.push(format!("data {}", String::from_utf8_lossy(&d)));
        }
        dec.finish()?;
        Ok(got)
    }

    fn stream() -> Vec<u8> {
        let mut out = Vec::new();
        put_headers(&mut out, b"\x00\x00\xd1");
        // A grease frame type (0x1f * 3 + 0x21) with a payload, skipped.
        put_frame_header(&mut out, 0x1f * 3 + 0x21, 5);
        out.extend_from_slice(b"grease");
        out.pop();
        put_data_header(&mut out, 5);
        out.extend_from_slice(b"hello");
        put_data_header(&mut out, 0);
        put_frame_header(&mut out, kind::DATA, 300);
        out.extend(std::iter::repeat_n(b'x', 300));
        put_headers(&mut out, b"");
        out
    }

    #[test]
    fn a_request_stream_split_anywhere() {
        let input = stream();
        let whole = frames(&input, input.len(), 1024).unwrap();
        assert_eq!(
            whole,
            vec![
                "Headers([0, 0, 209])".to_string(),
                "DataHeader { len: 5 }".into(),
                "data hello".into(),
                "DataHeader { len: 0 }".into(),
                "DataHeader { len: 300 }".into(),
                format!("data {}", "x".repeat(300)),
                "Headers([])".into(),
            ]
        );
        for step in 1..input.len() {
            assert_eq!(frames(&input, step, 1024).unwrap(), whole, "step {step}");
        }
    }

    #[test]
    fn control_frames() {
        let mut out = Vec::new();
        let s = Settings {
            qpack_max_table_capacity: 4096,
            max_field_section_size: Some(16384),
            qpack_blocked_streams: 16,
            enable_connect_protocol: true,
            h3_datagram: true,
        };
        s.write(&mut out);
        put_goaway(&mut out, 1 << 20);
        put_max_push_id(&mut out, 7);
        put_cancel_push(&mut out, 3);
        let mut pp = Vec::new();
        varint::put(2, &mut pp);
        pp.extend_from_slice(b"\x00\x00");
        put_frame_header(&mut out, kind::PUSH_PROMISE, pp.len() as u64);
        out.extend_from_slice(&pp);
        for step in 1..=out.len() {
            let got = frames(&out, step, 100).unwrap();
            assert_eq!(
                got,
                vec![
                    format!("{:?}", Frame::Settings(s)),
                    "GoAway(1048576)".into(),
                    "MaxPushId(7)".into(),
                    "CancelPush(3)".into(),
                    "PushPromise { push_id: 2, field_section: [0, 0] }".into(),
                ]
            );
        }
        // An empty SETTINGS is all defaults.
        let mut out = Vec::new();
        Settings::default().write(&mut out);
        assert_eq!(out, [0x04, 0x00]);
        assert_eq!(
            frames(&out, 1, 100).unwrap(),
            vec![format!("{:?}", Frame::Settings(Settings::default()))]
        );
    }

    fn settings_payload(pairs: &[(u64, u64)]) -> Vec<u8> {
        let mut p = Vec::new();
        for &(i, v) in pairs {
            varint::put(i, &mut p);
            varint::put(v, &mut p);
        }
        p
    }

    #[test]
    fn settings_errors() {
        use setting::*;
        let cases: &[(&[(u64, u64)], Error)] = &[
            (
                &[(QPACK_MAX_TABLE_CAPACITY, 1), (QPACK_MAX_TABLE_CAPACITY, 1)],
                Error::Settings("a setting repeated"),
            ),
            (
                &[(0x21, 1), (0x21, 2)],
                Error::Settings("a setting repeated"),
            ),
            (&[(0x02, 0)], Error::Settings("an HTTP/2 setting")),
            (&[(0x05, 16384)], Error::Settings("an HTTP/2 setting")),
            (
                &[(ENABLE_CONNECT_PROTOCOL, 2)],
                Error::Settings("a boolean setting other than 0 or 1"),
            ),
            (
                &[(H3_DATAGRAM, 7)],
                Error::Settings("a boolean setting other than 0 or 1"),
            ),
        ];
        for (pairs, err) in cases {
            assert_eq!(
                Settings::decode(&settings_payload(pairs)),
                Err(*err),
                "{pairs:?}"
            );
        }
        // Unknown and grease ids are ignored; a pair cut short is a frame error.
        assert_eq!(
            Settings::decode(&settings_payload(&[(0x21, 5), (0x1234, 0)])),
            Ok(Settings::default())
        );
        assert_eq!(
            Settings::decode(&[0x01]),
            Err(Error::Frame("SETTINGS ends inside a value"))
        );
        assert_eq!(
            Settings::decode(&[0x40]),
            Err(Error::Frame("SETTINGS ends inside an identifier"))
        );
    }

    #[test]
    fn frame_errors() {
        let frame = |kind: u64, payload: &[u8]| {
            let mut out = Vec::new();
            put_frame_header(&mut out, kind, payload.len() as u64);
            out.extend_from_slice(payload);
            out
        };
        let cases: Vec<(Vec<u8>, Error)> = vec![
            // HTTP/2's PRIORITY, PING, WINDOW_UPDATE, CONTINUATION.
            (
                frame(0x02, b""),
                Error::FrameUnexpected("an HTTP/2 frame type"),
            ),
            (
                frame(0x06, &[0; 8]),
                Error::FrameUnexpected("an HTTP/2 frame type"),
            ),
            (
                frame(0x08, &[0; 4]),
                Error::FrameUnexpected("an HTTP/2 frame type"),
            ),
            (
                frame(0x09, b""),
                Error::FrameUnexpected("an HTTP/2 frame type"),
            ),
            // GOAWAY with a byte after its id, with none, MAX_PUSH_ID cut short.
            (
                frame(kind::GOAWAY, &[0x04, 0x00]),
                Error::Frame("payload is not one integer"),
            ),
            (
                frame(kind::GOAWAY, b""),
                Error::Frame("payload is not one integer"),
            ),
            (
                frame(kind::MAX_PUSH_ID, &[0x40]),
                Error::Frame("payload is not one integer"),
            ),
            (
                frame(kind::CANCEL_PUSH, &[0; 9]),
                Error::Frame("payload is not one integer"),
            ),
            (
                frame(kind::PUSH_PROMISE, b""),
                Error::Frame("PUSH_PROMISE without a push id"),
            ),
            (frame(kind::HEADERS, &[0; 101]), Error::FieldSectionTooLarge),
            (
                frame(kind::PUSH_PROMISE, &[0; 101]),
                Error::FieldSectionTooLarge,
            ),
            (
                frame(kind::SETTINGS, &[0x21; 4097]),
                Error::ExcessiveLoad("SETTINGS frame too long"),
            ),
            // Cut short: the stream ends inside a header, a payload, a DATA frame.
            (vec![0x01], Error::Frame("stream ends inside a frame")),
            (
                frame(kind::HEADERS, b"abc")[..3].to_vec(),
                Error::Frame("stream ends inside a frame"),
            ),
            (
                frame(kind::DATA, b"abc")[..3].to_vec(),
                Error::Frame("stream ends inside a frame"),
            ),
            (
                frame(0x21, b"abc")[..3].to_vec(),
                Error::Frame("stream ends inside a frame"),
            ),
        ];
        for (input, err) in cases {
            for step in [1, 2, input.len()] {
                assert_eq!(
                    frames(&input, step, 100),
                    Err(err),
                    "{input:x?} in steps of {step}"
                );
            }
        }
        // A huge DATA or unknown frame is fine: neither is buffered.
        let mut big = Vec::new();
        put_frame_header(&mut big, 0x21, varint::MAX);
        put_data_header(&mut big, varint::MAX);
        let mut dec = FrameDecoder::new(100);
        let d = dec.decode(&big).unwrap();
        assert_eq!(d.frame, None, "the unknown frame swallows the rest");
        assert_eq!(d.consumed, big.len());
    }

    #[test]
    fn headers_written_in_place() {
        let mut out = b"xx".to_vec();
        put_headers_with(&mut out, |o| o.extend(std::iter::repeat_n(7u8, 70)));
        let mut want = b"xx".to_vec();
        put_headers(&mut want, &[7u8; 70]);
        assert_eq!(out, want);
        assert_eq!(&out[2..5], &[0x01, 0x40, 70]);
    }

    #[test]
    fn stream_types() {
        for (v, t) in [
            (0, StreamType::Control),
            (1, StreamType::Push),
            (2, StreamType::QpackEncoder),
            (3, StreamType::QpackDecoder),
            (0x21, StreamType::Other(0x21)),
        ] {
            let mut out = Vec::new();
            t.write(&mut out);
            assert_eq!(StreamType::decode(&out), Status::Complete((t, 1)));
            assert_eq!(t.value(), v);
        }
        assert_eq!(StreamType::decode(&[0x40]), Status::Partial);
        assert!(StreamType::QpackDecoder.is_critical() && !StreamType::Push.is_critical());
    }
}
