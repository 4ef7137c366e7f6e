//! An HTTP/2 upstream (h2c, prior knowledge) that misbehaves on purpose, written frame by frame
//! with the codec's own frame writers and HPACK (`lowlat_http::h2`): no server library would
//! send these. Each connection is a thread of the test: it reads the preface and the proxy's
//! frames, answers SETTINGS and PING, decodes each request's head for its `:path`, and once a
//! request has ended answers it the way its [`H2Act`] says.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::thread;
use std::time::Duration;

use lowlat_http::h2::frame::{self, flag, kind, ErrorCode, FrameHeader, HEADER_LEN, PREFACE};
use lowlat_http::h2::{Decoder, Encoder};

use super::listen::Listening;
use super::upstream::body_for;

/// How the upstream answers each request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum H2Act {
    /// A whole, correct answer (the body names the request's path).
    Echo,
    /// Never answers; the connection stays open.
    NeverAnswer,
    /// The head (a length of 1000), 500 bytes of body, then the connection closed.
    HalfThenClose,
    /// A length of `body_for(path)`, then 14 bytes more in the same DATA frame.
    LongerBody,
    /// A length 5 more than the body sent, then END_STREAM.
    ShorterBody,
    /// The head (a length of 1000), 500 bytes, then RST_STREAM INTERNAL_ERROR.
    ResetMidBody,
    /// A head of more than 1 MiB (1024 fields of 1 KiB) in HEADERS and CONTINUATION frames.
    HugeHead,
    /// 64 bytes that are no frame, where the answer should be.
    Garbage,
    /// A whole answer, then GOAWAY and the connection closed: one request per connection.
    CloseAfterOne,
    /// GOAWAY naming no stream as processed (last stream 0), then the close.
    GoAwayFirst,
    /// The head (a length of 100), then one byte of body a second.
    OneByteASecond,
}

/// A misbehaving HTTP/2 upstream on a port of its own.
pub struct H2Chaos(Listening);

impl H2Chaos {
    pub fn start(act: H2Act) -> H2Chaos {
        H2Chaos(Listening::start(move |conn, _| {
            let _ = serve(conn, act);
        }))
    }

    /// The URL a `--proxy` rule names it by.
    pub fn url(&self) -> String {
        format!("h2c://{}", self.0.addr)
    }

    pub fn port(&self) -> u16 {
        self.0.port()
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.0.accepted()
    }
}

/// Reads exactly `n` more bytes into `buf` (from `at`): false at the end of the connection.
fn read_exact_into(s: &mut TcpStream, buf: &mut Vec<u8>, n: usize) -> bool {
    let start = buf.len();
    buf.resize(start + n, 0);
    s.read_exact(&mut buf[start..]).is_ok()
}

/// One connection: frames in, answers out, until the proxy closes it (or the act does).
fn serve(mut s: TcpStream, act: H2Act) -> std::io::Result<()> {
    s.set_nodelay(true)?;
    let mut preface = vec![];
    if !read_exact_into(&mut s, &mut preface, PREFACE.len()) || preface != PREFACE {
        return Ok(());
    }
    let mut out = Vec::new();
    // Room for every body the proxy may send, so a request body never waits on this side.
    frame::write_settings(&mut out, &[(frame::setting::INITIAL_WINDOW_SIZE, 1 << 30)]);
    s.write_all(&out)?;
    let mut decoder = Decoder::default();
    let mut encoder = Encoder::default();
    // Streams whose head came (their path), waiting for their end.
    let mut open: Vec<(u32, String)> = Vec::new();
    let mut block = Vec::new();
    let mut block_stream = 0;
    let mut block_ends = false;
    loop {
        let mut head = Vec::new();
        if !read_exact_into(&mut s, &mut head, HEADER_LEN) {
            return Ok(());
        }
        let h = FrameHeader::parse(&head).unwrap();
        let mut payload = Vec::new();
        if !read_exact_into(&mut s, &mut payload, h.len as usize) {
            return Ok(());
        }
        let mut out = Vec::new();
        let mut ended = None;
        match h.kind {
            kind::SETTINGS if !h.has(flag::ACK) => frame::write_settings_ack(&mut out),
            kind::PING if !h.has(flag::ACK) => {
                let data: [u8; 8] = payload[..8].try_into().unwrap();
                frame::write_ping(&mut out, true, &data);
            }
            kind::HEADERS | kind::CONTINUATION => {
                let mut fragment = &payload[..];
                if h.kind == kind::HEADERS {
                    block.clear();
                    block_stream = h.stream;
                    block_ends = h.has(flag::END_STREAM);
                    fragment = frame::unpad(h.flags, fragment).unwrap();
                    if h.has(flag::PRIORITY) {
                        fragment = &fragment[5..];
                    }
                }
                block.extend_from_slice(fragment);
                if h.has(flag::END_HEADERS) {
                    let mut path = String::new();
                    decoder
                        .decode(&block, |n, v| {
                            if n == b":path" {
                                path = String::from_utf8_lossy(v).into_owned();
                            }
                        })
                        .unwrap();
                    if block_ends {
                        ended = Some((block_stream, path));
                    } else {
                        open.push((block_stream, path));
                    }
                }
            }
            kind::DATA if h.has(flag::END_STREAM) => {
                if let Some(i) = open.iter().position(|(id, _)| *id == h.stream) {
                    ended = Some(open.swap_remove(i));
                }
            }
            kind::RST_STREAM => open.retain(|(id, _)| *id != h.stream),
            _ => {}
        }
        if !out.is_empty() {
            s.write_all(&out)?;
        }
        if let Some((id, path)) = ended {
            if !answer(&mut s, &mut encoder, act, id, &path)? {
                let _ = s.shutdown(Shutdown::Both);
                return Ok(());
            }
        }
    }
}

/// A response head block: `:status` 200 and `fields`.
fn head_block(encoder: &mut Encoder, fields: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut block = Vec::new();
    encoder.encode_response(200, fields.iter().copied(), &mut block);
    block
}

/// Answers stream `id` (path `path`) as `act` says; false when the connection is to close.
fn answer(
    s: &mut TcpStream,
    encoder: &mut Encoder,
    act: H2Act,
    id: u32,
    path: &str,
) -> std::io::Result<bool> {
    let max = frame::DEFAULT_MAX_FRAME as usize;
    let body = body_for(path);
    let mut out = Vec::new();
    let length = |n: usize| n.to_string().into_bytes();
    match act {
        H2Act::NeverAnswer => return Ok(true),
        H2Act::Echo | H2Act::CloseAfterOne => {
            let block = head_block(encoder, &[(b"content-length", &length(body.len()))]);
            frame::write_headers(&mut out, id, &block, false, max);
            frame::write_data_header(&mut out, id, body.len(), true);
            out.extend_from_slice(&body);
            if act == H2Act::CloseAfterOne {
                frame::write_goaway(&mut out, id, ErrorCode::NoError, b"");
                s.write_all(&out)?;
                return Ok(false);
            }
        }
        H2Act::HalfThenClose | H2Act::ResetMidBody => {
            let block = head_block(encoder, &[(b"content-length", b"1000")]);
            frame::write_headers(&mut out, id, &block, false, max);
            frame::write_data_header(&mut out, id, 500, false);
            out.extend(std::iter::repeat_n(b'x', 500));
            if act == H2Act::HalfThenClose {
                s.write_all(&out)?;
                return Ok(false);
            }
            frame::write_rst_stream(&mut out, id, ErrorCode::Internal);
        }
        H2Act::LongerBody => {
            let block = head_block(encoder, &[(b"content-length", &length(body.len()))]);
            frame::write_headers(&mut out, id, &block, false, max);
            frame::write_data_header(&mut out, id, body.len() + 14, true);
            out.extend_from_slice(&body);
            out.extend_from_slice(b"SMUGGLED BYTES");
        }
        H2Act::ShorterBody => {
            let block = head_block(encoder, &[(b"content-length", &length(body.len() + 5))]);
            frame::write_headers(&mut out, id, &block, false, max);
            frame::write_data_header(&mut out, id, body.len(), true);
            out.extend_from_slice(&body);
        }
        H2Act::HugeHead => {
            let filler = vec![b'a'; 1024];
            let names: Vec<Vec<u8>> = (0..1024)
                .map(|i| format!("x-filler-{i:04}").into_bytes())
                .collect();
            let mut fields: Vec<(&[u8], &[u8])> = names
                .iter()
                .map(|n| (n.as_slice(), filler.as_slice()))
                .collect();
            fields.push((b"content-length", b"2"));
            let block = head_block(encoder, &fields);
            frame::write_headers(&mut out, id, &block, false, max);
            frame::write_data_header(&mut out, id, 2, true);
            out.extend_from_slice(b"ok");
        }
        H2Act::Garbage => {
            out.extend(std::iter::repeat_n(0xff_u8, 64));
            s.write_all(&out)?;
            return Ok(false);
        }
        H2Act::GoAwayFirst => {
            frame::write_goaway(&mut out, 0, ErrorCode::NoError, b"going away");
            s.write_all(&out)?;
            return Ok(false);
        }
        H2Act::OneByteASecond => {
            let block = head_block(encoder, &[(b"content-length", b"100")]);
            frame::write_headers(&mut out, id, &block, false, max);
            s.write_all(&out)?;
            for _ in 0..100 {
                thread::sleep(Duration::from_secs(1));
                let mut one = Vec::new();
                frame::write_data_header(&mut one, id, 1, false);
                one.push(b'x');
                s.write_all(&one)?;
            }
            return Ok(true);
        }
    }
    s.write_all(&out)?;
    Ok(true)
}
