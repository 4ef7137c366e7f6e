//! An HTTP/2 connection as a list of frames, for the fuzzer to build structurally (raw bytes
//! would almost never carry a header block HPACK decodes, on a stream that is open): each frame
//! is written with the codec's own writers, header blocks encoded by the codec's HPACK encoder
//! and cut into CONTINUATION frames as the input says. Raw frames keep every other shape
//! reachable.

use arbitrary::Arbitrary;
use lowlat_http::h2::frame::{self, flag, kind};
use lowlat_http::h2::Encoder;

/// A stream id from a small number: mostly the first few client streams (odd), sometimes
/// stream 0 or an even one, so that streams meet again and wrong ids stay reachable.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub struct StreamId(u8);

impl StreamId {
    #[must_use]
    pub fn get(self) -> u32 {
        match self.0 {
            0 => 0,
            n if n >= 0xf0 => u32::from(n - 0xf0) * 2 + 2,
            n => u32::from(n % 16) * 2 + 1,
        }
    }
}

/// A field of a header block: the ones a server looks at, from small sets of likely values,
/// or any bytes.
#[derive(Debug, Clone, Arbitrary)]
pub enum Field {
    Method(Method),
    Scheme(bool),
    Authority(Vec<u8>),
    Path(Path),
    Protocol,
    Status(u16),
    ContentLength(u32),
    Named(Name, Vec<u8>),
    Any(Vec<u8>, Vec<u8>),
}

#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum Method {
    Get,
    Head,
    Post,
    Connect,
    Options,
}

#[derive(Debug, Clone, Arbitrary)]
pub enum Path {
    Plaintext,
    Json,
    Root,
    Missing,
    Star,
    Any(Vec<u8>),
}

#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum Name {
    Host,
    Te,
    Connection,
    Cookie,
    AcceptEncoding,
    Range,
    IfNoneMatch,
    UserAgent,
    Upper,
}

impl Field {
    pub fn write_to(&self, out: &mut Vec<(Vec<u8>, Vec<u8>)>) {
        let (n, v): (&[u8], Vec<u8>) = match self {
            Self::Method(m) => (
                b":method",
                match m {
                    Method::Get => b"GET".to_vec(),
                    Method::Head => b"HEAD".to_vec(),
                    Method::Post => b"POST".to_vec(),
                    Method::Connect => b"CONNECT".to_vec(),
                    Method::Options => b"OPTIONS".to_vec(),
                },
            ),
            Self::Scheme(tls) => (
                b":scheme",
                if *tls {
                    b"https".to_vec()
                } else {
                    b"http".to_vec()
                },
            ),
            Self::Authority(a) => (b":authority", a.clone()),
            Self::Path(p) => (
                b":path",
                match p {
                    Path::Plaintext => b"/plaintext".to_vec(),
                    Path::Json => b"/json".to_vec(),
                    Path::Root => b"/".to_vec(),
                    Path::Missing => b"/missing?a=b".to_vec(),
                    Path::Star => b"*".to_vec(),
                    Path::Any(p) => p.clone(),
                },
            ),
            Self::Protocol => (b":protocol", b"websocket".to_vec()),
            Self::Status(s) => (b":status", s.to_string().into_bytes()),
            Self::ContentLength(n) => (b"content-length", n.to_string().into_bytes()),
            Self::Named(name, v) => (
                match name {
                    Name::Host => b"host",
                    Name::Te => b"te",
                    Name::Connection => b"connection",
                    Name::Cookie => b"cookie",
                    Name::AcceptEncoding => b"accept-encoding",
                    Name::Range => b"range",
                    Name::IfNoneMatch => b"if-none-match",
                    Name::UserAgent => b"user-agent",
                    Name::Upper => b"X-Upper",
                },
                v.clone(),
            ),
            Self::Any(n, v) => (n.as_slice(), v.clone()),
        };
        out.push((n.to_vec(), v));
    }
}

/// One frame of a connection.
#[derive(Debug, Clone, Arbitrary)]
pub enum Frame {
    /// A header block on HEADERS and `continuations` CONTINUATION frames.
    Headers {
        stream: StreamId,
        fields: Vec<Field>,
        end_stream: bool,
        continuations: u8,
        padding: Option<u8>,
        priority: Option<u32>,
    },
    Data {
        stream: StreamId,
        len: u16,
        end_stream: bool,
        padding: Option<u8>,
    },
    Settings {
        ack: bool,
        entries: Vec<(u8, u32)>,
    },
    WindowUpdate {
        stream: StreamId,
        increment: u32,
    },
    RstStream {
        stream: StreamId,
        code: u8,
    },
    Ping {
        ack: bool,
        data: u64,
    },
    Priority {
        stream: StreamId,
        dependency: u32,
    },
    GoAway {
        last: u32,
        code: u8,
    },
    Raw {
        kind: u8,
        flags: u8,
        stream: StreamId,
        payload: Vec<u8>,
    },
}

/// Largest DATA payload written (the protocol's default frame size).
const MAX_DATA: usize = frame::DEFAULT_MAX_FRAME as usize;

/// Appends `frames` to `out`, header blocks encoded by `encoder`.
pub fn write(frames: &[Frame], encoder: &mut Encoder, out: &mut Vec<u8>) {
    for f in frames {
        write_one(f, encoder, out);
    }
}

fn write_one(f: &Frame, encoder: &mut Encoder, out: &mut Vec<u8>) {
    match f {
        Frame::Headers { .. } => write_headers(f, encoder, out),
        Frame::Data {
            stream,
            len,
            end_stream,
            padding,
        } => {
            let mut payload = Vec::new();
            let mut flags = if *end_stream { flag::END_STREAM } else { 0 };
            if let Some(p) = padding {
                flags |= flag::PADDED;
                payload.push(*p);
            }
            let len = usize::from(*len).min(MAX_DATA - 1 - 255);
            payload.resize(payload.len() + len, b'd');
            payload.resize(payload.len() + padding.map_or(0, usize::from), 0);
            raw(out, kind::DATA, flags, stream.get(), &payload);
        }
        Frame::Settings { ack, entries } => {
            if *ack {
                frame::write_settings_ack(out);
            } else {
                let entries: Vec<(u16, u32)> = entries
                    .iter()
                    .map(|&(id, v)| (u16::from(id % 9), v))
                    .collect();
                frame::write_settings(out, &entries);
            }
        }
        Frame::WindowUpdate { stream, increment } => {
            raw(
                out,
                kind::WINDOW_UPDATE,
                0,
                stream.get(),
                &increment.to_be_bytes(),
            );
        }
        Frame::RstStream { stream, code } => {
            raw(
                out,
                kind::RST_STREAM,
                0,
                stream.get(),
                &u32::from(*code % 16).to_be_bytes(),
            );
        }
        Frame::Ping { ack, data } => frame::write_ping(out, *ack, &data.to_be_bytes()),
        Frame::Priority { stream, dependency } => {
            let mut p = dependency.to_be_bytes().to_vec();
            p.push(16);
            raw(out, kind::PRIORITY, 0, stream.get(), &p);
        }
        Frame::GoAway { last, code } => {
            let mut p = (last & 0x7fff_ffff).to_be_bytes().to_vec();
            p.extend_from_slice(&u32::from(*code % 16).to_be_bytes());
            raw(out, kind::GOAWAY, 0, 0, &p);
        }
        Frame::Raw {
            kind,
            flags,
            stream,
            payload,
        } => raw(out, *kind % 12, *flags, stream.get(), payload),
    }
}

/// A HEADERS frame's header block, on HEADERS (padded and with a priority as asked) and as
/// many CONTINUATION frames as it says.
fn write_headers(f: &Frame, encoder: &mut Encoder, out: &mut Vec<u8>) {
    let Frame::Headers {
        stream,
        fields,
        end_stream,
        continuations,
        padding,
        priority,
    } = f
    else {
        return;
    };
    let mut list = Vec::new();
    for field in fields {
        field.write_to(&mut list);
    }
    let mut block = Vec::new();
    encoder.encode_fields(
        list.iter().map(|(n, v)| (n.as_slice(), v.as_slice())),
        &mut block,
    );
    let pieces = usize::from(*continuations % 8) + 1;
    let cut = block.len().div_ceil(pieces).max(1);
    let mut chunks: Vec<&[u8]> = block.chunks(cut).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    let final_piece = chunks.len() - 1;
    for (i, chunk) in chunks.iter().enumerate() {
        let end_headers = if i == final_piece {
            flag::END_HEADERS
        } else {
            0
        };
        if i == 0 {
            let mut payload = Vec::new();
            let mut flags = end_headers;
            if *end_stream {
                flags |= flag::END_STREAM;
            }
            if let Some(p) = padding {
                flags |= flag::PADDED;
                payload.push(*p);
            }
            if let Some(dep) = priority {
                flags |= flag::PRIORITY;
                payload.extend_from_slice(&dep.to_be_bytes());
                payload.push(16);
            }
            payload.extend_from_slice(chunk);
            payload.resize(payload.len() + padding.map_or(0, usize::from), 0);
            raw(out, kind::HEADERS, flags, stream.get(), &payload);
        } else {
            raw(out, kind::CONTINUATION, end_headers, stream.get(), chunk);
        }
    }
}

fn raw(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let payload = &payload[..payload.len().min(MAX_DATA)];
    frame::write_header(out, payload.len(), kind, flags, stream);
    out.extend_from_slice(payload);
}
