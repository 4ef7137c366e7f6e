//! HTTP/2 frames (RFC 9113 §4 and §6): the 9-byte frame header, the frame types, flags and error
//! codes, the SETTINGS a peer sends, and writers for every frame a server emits. Reading checks
//! what can be checked from one frame alone (sizes, stream 0 or not, padding); what depends on
//! stream state is the connection's job.

/// What a client sends first (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Length of a frame header.
pub const HEADER_LEN: usize = 9;
/// The largest flow-control window (2^31 - 1).
pub const MAX_WINDOW: i64 = (1 << 31) - 1;
/// The default and smallest SETTINGS_MAX_FRAME_SIZE.
pub const DEFAULT_MAX_FRAME: u32 = 16_384;
/// The largest SETTINGS_MAX_FRAME_SIZE.
pub const MAX_MAX_FRAME: u32 = (1 << 24) - 1;
/// The window every stream and the connection start with.
pub const DEFAULT_WINDOW: u32 = 65_535;

/// Frame types.
pub mod kind {
    pub const DATA: u8 = 0;
    pub const HEADERS: u8 = 1;
    pub const PRIORITY: u8 = 2;
    pub const RST_STREAM: u8 = 3;
    pub const SETTINGS: u8 = 4;
    pub const PUSH_PROMISE: u8 = 5;
    pub const PING: u8 = 6;
    pub const GOAWAY: u8 = 7;
    pub const WINDOW_UPDATE: u8 = 8;
    pub const CONTINUATION: u8 = 9;
}

/// Frame flags.
pub mod flag {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

/// SETTINGS identifiers.
pub mod setting {
    pub const HEADER_TABLE_SIZE: u16 = 1;
    pub const ENABLE_PUSH: u16 = 2;
    pub const MAX_CONCURRENT_STREAMS: u16 = 3;
    pub const INITIAL_WINDOW_SIZE: u16 = 4;
    pub const MAX_FRAME_SIZE: u16 = 5;
    pub const MAX_HEADER_LIST_SIZE: u16 = 6;
    /// RFC 8441 §3: the peer accepts extended CONNECT (`:protocol`), WebSocket over HTTP/2.
    pub const ENABLE_CONNECT_PROTOCOL: u16 = 8;
}

/// Error codes (RFC 9113 §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum ErrorCode {
    NoError = 0,
    Protocol = 1,
    Internal = 2,
    FlowControl = 3,
    SettingsTimeout = 4,
    StreamClosed = 5,
    FrameSize = 6,
    RefusedStream = 7,
    Cancel = 8,
    Compression = 9,
    Connect = 10,
    EnhanceYourCalm = 11,
    InadequateSecurity = 12,
    Http11Required = 13,
}

/// A frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Payload length.
    pub len: u32,
    pub kind: u8,
    pub flags: u8,
    /// Stream identifier (the reserved bit cleared).
    pub stream: u32,
}

impl FrameHeader {
    /// Reads a frame header from the first [`HEADER_LEN`] bytes of `b`; `None` when shorter.
    #[must_use]
    pub fn parse(b: &[u8]) -> Option<Self> {
        let h: &[u8; HEADER_LEN] = b.get(..HEADER_LEN)?.try_into().ok()?;
        Some(Self {
            len: u32::from_be_bytes([0, h[0], h[1], h[2]]),
            kind: h[3],
            flags: h[4],
            stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
        })
    }

    /// Whether `flag` is set.
    #[must_use]
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// A frame header's bytes.
#[must_use]
pub fn header_bytes(len: usize, kind: u8, flags: u8, stream: u32) -> [u8; HEADER_LEN] {
    let len = u32::try_from(len).unwrap_or(MAX_MAX_FRAME).to_be_bytes();
    let s = stream.to_be_bytes();
    [len[1], len[2], len[3], kind, flags, s[0], s[1], s[2], s[3]]
}

/// Appends a frame header.
pub fn write_header(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    out.extend_from_slice(&header_bytes(len, kind, flags, stream));
}

/// The payload of a DATA or HEADERS frame without its padding (RFC 9113 §6.1).
///
/// # Errors
/// `Protocol` when the pad length is not shorter than the payload.
pub fn unpad(flags: u8, payload: &[u8]) -> Result<&[u8], ErrorCode> {
    if flags & flag::PADDED == 0 {
        return Ok(payload);
    }
    let (&pad, rest) = payload.split_first().ok_or(ErrorCode::FrameSize)?;
    let keep = rest
        .len()
        .checked_sub(usize::from(pad))
        .ok_or(ErrorCode::Protocol)?;
    Ok(&rest[..keep])
}

/// A stream dependency (PRIORITY, or HEADERS with the PRIORITY flag). Priorities are not acted
/// on (RFC 9113 deprecates the scheme), but a stream depending on itself is an error.
#[must_use]
pub fn dependency(b: &[u8]) -> Option<u32> {
    let d: [u8; 4] = b.get(..4)?.try_into().ok()?;
    Some(u32::from_be_bytes(d) & 0x7fff_ffff)
}

/// The settings a peer announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub header_table_size: u32,
    pub enable_push: bool,
    pub max_concurrent_streams: Option<u32>,
    pub initial_window_size: u32,
    pub max_frame_size: u32,
    pub max_header_list_size: Option<u32>,
    /// RFC 8441: extended CONNECT may be sent to this peer.
    pub enable_connect_protocol: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            header_table_size: 4096,
            enable_push: true,
            max_concurrent_streams: None,
            initial_window_size: DEFAULT_WINDOW,
            max_frame_size: DEFAULT_MAX_FRAME,
            max_header_list_size: None,
            enable_connect_protocol: false,
        }
    }
}

impl Settings {
    /// Applies a SETTINGS payload (not an ACK) in order; unknown identifiers are ignored.
    ///
    /// # Errors
    /// `FrameSize` for a payload that is not a list of 6-byte entries, `Protocol` for a bad
    /// ENABLE_PUSH, MAX_FRAME_SIZE or ENABLE_CONNECT_PROTOCOL, `FlowControl` for an INITIAL_WINDOW_SIZE above 2^31 - 1.
    pub fn apply(&mut self, payload: &[u8]) -> Result<(), ErrorCode> {
        if !payload.len().is_multiple_of(6) {
            return Err(ErrorCode::FrameSize);
        }
        for e in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([e[0], e[1]]);
            let v = u32::from_be_bytes([e[2], e[3], e[4], e[5]]);
            match id {
                setting::HEADER_TABLE_SIZE => self.header_table_size = v,
                setting::ENABLE_PUSH => match v {
                    0 | 1 => self.enable_push = v == 1,
                    _ => return Err(ErrorCode::Protocol),
                },
                setting::MAX_CONCURRENT_STREAMS => self.max_concurrent_streams = Some(v),
                setting::INITIAL_WINDOW_SIZE => {
                    if i64::from(v) > MAX_WINDOW {
                        return Err(ErrorCode::FlowControl);
                    }
                    self.initial_window_size = v;
                }
                setting::MAX_FRAME_SIZE => {
                    if !(DEFAULT_MAX_FRAME..=MAX_MAX_FRAME).contains(&v) {
                        return Err(ErrorCode::Protocol);
                    }
                    self.max_frame_size = v;
                }
                setting::MAX_HEADER_LIST_SIZE => self.max_header_list_size = Some(v),
                // RFC 8441 §3: 0 or 1, and once 1 never back to 0.
                setting::ENABLE_CONNECT_PROTOCOL => match v {
                    0 if self.enable_connect_protocol => return Err(ErrorCode::Protocol),
                    0 | 1 => self.enable_connect_protocol = v == 1,
                    _ => return Err(ErrorCode::Protocol),
                },
                _ => {}
            }
        }
        Ok(())
    }
}

/// Appends a SETTINGS frame with these entries.
pub fn write_settings(out: &mut Vec<u8>, entries: &[(u16, u32)]) {
    write_header(out, entries.len() * 6, kind::SETTINGS, 0, 0);
    for (id, v) in entries {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&v.to_be_bytes());
    }
}

/// Appends a SETTINGS acknowledgement.
pub fn write_settings_ack(out: &mut Vec<u8>) {
    write_header(out, 0, kind::SETTINGS, flag::ACK, 0);
}

/// Appends a PING (or its acknowledgement, echoing `data`).
pub fn write_ping(out: &mut Vec<u8>, ack: bool, data: &[u8; 8]) {
    write_header(out, 8, kind::PING, if ack { flag::ACK } else { 0 }, 0);
    out.extend_from_slice(data);
}

/// Appends a WINDOW_UPDATE.
pub fn write_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    write_header(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&increment.to_be_bytes());
}

/// Appends a RST_STREAM.
pub fn write_rst_stream(out: &mut Vec<u8>, stream: u32, code: ErrorCode) {
    write_header(out, 4, kind::RST_STREAM, 0, stream);
    out.extend_from_slice(&(code as u32).to_be_bytes());
}

/// Appends a GOAWAY naming the last stream that was or will be processed.
pub fn write_goaway(out: &mut Vec<u8>, last_stream: u32, code: ErrorCode, debug: &[u8]) {
    write_header(out, 8 + debug.len(), kind::GOAWAY, 0, 0);
    out.extend_from_slice(&last_stream.to_be_bytes());
    out.extend_from_slice(&(code as u32).to_be_bytes());
    out.extend_from_slice(debug);
}

/// Appends a header block as HEADERS and as many CONTINUATION frames as `max_frame` requires.
pub fn write_headers(
    out: &mut Vec<u8>,
    stream: u32,
    block: &[u8],
    end_stream: bool,
    max_frame: usize,
) {
    let max_frame = max_frame.max(1);
    let mut chunks = block.chunks(max_frame).peekable();
    let first = chunks.next().unwrap_or(&[]);
    let mut flags = if end_stream { flag::END_STREAM } else { 0 };
    if chunks.peek().is_none() {
        flags |= flag::END_HEADERS;
    }
    write_header(out, first.len(), kind::HEADERS, flags, stream);
    out.extend_from_slice(first);
    while let Some(chunk) = chunks.next() {
        let last = chunks.peek().is_none();
        write_header(
            out,
            chunk.len(),
            kind::CONTINUATION,
            if last { flag::END_HEADERS } else { 0 },
            stream,
        );
        out.extend_from_slice(chunk);
    }
}

/// Appends the header of a DATA frame of `len` bytes (the caller appends the payload).
pub fn write_data_header(out: &mut Vec<u8>, stream: u32, len: usize, end_stream: bool) {
    write_header(
        out,
        len,
        kind::DATA,
        if end_stream { flag::END_STREAM } else { 0 },
        stream,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let mut out = Vec::new();
        write_header(&mut out, 0x01_02_03, kind::HEADERS, 0x25, 0x8000_0007);
        let h = FrameHeader::parse(&out).unwrap();
        assert_eq!(h.len, 0x01_02_03);
        assert_eq!(h.kind, kind::HEADERS);
        assert!(h.has(flag::PRIORITY) && h.has(flag::END_HEADERS));
        assert_eq!(h.stream, 7, "the reserved bit is ignored");
        assert_eq!(FrameHeader::parse(&out[..8]), None);
    }

    #[test]
    fn padding() {
        assert_eq!(unpad(0, b"abc"), Ok(&b"abc"[..]));
        assert_eq!(unpad(flag::PADDED, b"\x02abcxx"), Ok(&b"abc"[..]));
        assert_eq!(unpad(flag::PADDED, b"\x03ab"), Err(ErrorCode::Protocol));
        assert_eq!(unpad(flag::PADDED, b""), Err(ErrorCode::FrameSize));
    }

    #[test]
    fn settings_checked() {
        let entry = |id: u16, v: u32| {
            let mut e = id.to_be_bytes().to_vec();
            e.extend_from_slice(&v.to_be_bytes());
            e
        };
        let mut s = Settings::default();
        s.apply(&entry(setting::MAX_FRAME_SIZE, 32_768)).unwrap();
        assert_eq!(s.max_frame_size, 32_768);
        s.apply(&entry(0x99, 1)).unwrap();
        assert_eq!(
            s.apply(&entry(setting::ENABLE_PUSH, 2)),
            Err(ErrorCode::Protocol)
        );
        assert_eq!(
            s.apply(&entry(setting::INITIAL_WINDOW_SIZE, 1 << 31)),
            Err(ErrorCode::FlowControl)
        );
        assert_eq!(
            s.apply(&entry(setting::MAX_FRAME_SIZE, 100)),
            Err(ErrorCode::Protocol)
        );
        assert_eq!(s.apply(&[0; 5]), Err(ErrorCode::FrameSize));
        // RFC 8441 §3: 0 or 1, and a 1 cannot be taken back.
        assert!(!s.enable_connect_protocol);
        assert_eq!(
            s.apply(&entry(setting::ENABLE_CONNECT_PROTOCOL, 2)),
            Err(ErrorCode::Protocol)
        );
        s.apply(&entry(setting::ENABLE_CONNECT_PROTOCOL, 1))
            .unwrap();
        assert!(s.enable_connect_protocol);
        s.apply(&entry(setting::ENABLE_CONNECT_PROTOCOL, 1))
            .unwrap();
        assert_eq!(
            s.apply(&entry(setting::ENABLE_CONNECT_PROTOCOL, 0)),
            Err(ErrorCode::Protocol)
        );
    }

    #[test]
    fn headers_split_into_continuations() {
        let mut out = Vec::new();
        write_headers(&mut out, 3, &[7u8; 25], true, 10);
        let lens: Vec<(u8, u8, u32)> = {
            let mut v = Vec::new();
            let mut at = 0;
            while let Some(h) = FrameHeader::parse(&out[at..]) {
                v.push((h.kind, h.flags, h.len));
                at += HEADER_LEN + h.len as usize;
            }
            v
        };
        assert_eq!(
            lens,
            vec![
                (kind::HEADERS, flag::END_STREAM, 10),
                (kind::CONTINUATION, 0, 10),
                (kind::CONTINUATION, flag::END_HEADERS, 5)
            ]
        );
    }
}
