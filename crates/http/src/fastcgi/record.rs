//! FastCGI records: the 8-byte head (version, type, request id, content length, padding),
//! the request's records written into the caller's buffer, and [`Decoder`], which reads the
//! application's records one event at a time.

use super::FastCgiError;
use crate::Status;

/// Every record starts with this head.
pub const HEAD_LEN: usize = 8;
/// The protocol version this codec speaks.
pub const VERSION: u8 = 1;
/// The largest content one record carries (its length is 16 bits).
pub const MAX_CONTENT: usize = 0xFFFF;

/// Record types (FastCGI §8).
pub mod kind {
    pub const BEGIN_REQUEST: u8 = 1;
    pub const ABORT_REQUEST: u8 = 2;
    pub const END_REQUEST: u8 = 3;
    pub const PARAMS: u8 = 4;
    pub const STDIN: u8 = 5;
    pub const STDOUT: u8 = 6;
    pub const STDERR: u8 = 7;
    pub const DATA: u8 = 8;
    pub const GET_VALUES: u8 = 9;
    pub const GET_VALUES_RESULT: u8 = 10;
    pub const UNKNOWN_TYPE: u8 = 11;
}

/// The responder role, the only one a web server asks for.
pub const ROLE_RESPONDER: u16 = 1;
/// `FCGI_KEEP_CONN`: the application keeps the connection open after the request.
pub const FLAG_KEEP_CONN: u8 = 1;

/// A record head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub kind: u8,
    pub request_id: u16,
    pub content_len: u16,
    pub padding_len: u8,
}

impl Head {
    /// Reads a head from the first 8 bytes of `b`.
    ///
    /// # Errors
    /// A version other than 1.
    pub fn parse(b: &[u8]) -> Result<Status<Head>, FastCgiError> {
        let Some(h) = b.get(..HEAD_LEN) else {
            return Ok(Status::Partial);
        };
        if h[0] != VERSION {
            return Err(FastCgiError::Version(h[0]));
        }
        Ok(Status::Complete(Head {
            kind: h[1],
            request_id: u16::from_be_bytes([h[2], h[3]]),
            content_len: u16::from_be_bytes([h[4], h[5]]),
            padding_len: h[6],
        }))
    }

    /// The head's 8 bytes.
    #[must_use]
    pub fn encode(self) -> [u8; HEAD_LEN] {
        let id = self.request_id.to_be_bytes();
        let len = self.content_len.to_be_bytes();
        [
            VERSION,
            self.kind,
            id[0],
            id[1],
            len[0],
            len[1],
            self.padding_len,
            0,
        ]
    }
}

/// Appends `FCGI_BEGIN_REQUEST` for a responder, keeping the connection when `keep_conn`.
pub fn begin_request(out: &mut Vec<u8>, request_id: u16, keep_conn: bool) {
    let role = ROLE_RESPONDER.to_be_bytes();
    let flags = if keep_conn { FLAG_KEEP_CONN } else { 0 };
    push_record(
        out,
        kind::BEGIN_REQUEST,
        request_id,
        &[role[0], role[1], flags, 0, 0, 0, 0, 0],
    );
}

/// Appends `FCGI_ABORT_REQUEST`: the client went away; the application should stop.
pub fn abort_request(out: &mut Vec<u8>, request_id: u16) {
    push_record(out, kind::ABORT_REQUEST, request_id, &[]);
}

/// Appends `content` as records of a stream (`FCGI_PARAMS` or `FCGI_STDIN`), split at 64 KiB;
/// nothing for empty content (the stream's end is [`end_stream`]).
pub fn stream(out: &mut Vec<u8>, kind: u8, request_id: u16, content: &[u8]) {
    for piece in content.chunks(MAX_CONTENT) {
        push_record(out, kind, request_id, piece);
    }
}

/// Appends the head of one stream record of `len` bytes (at most 64 KiB - 1) whose content the
/// caller appends itself (a body relayed from the client's buffer without a copy through here).
///
/// # Panics
/// Never for `len <= MAX_CONTENT`; a longer `len` is cut to it, and the caller must then send
/// only that much.
pub fn stream_head(out: &mut Vec<u8>, kind: u8, request_id: u16, len: usize) {
    let len = u16::try_from(len.min(MAX_CONTENT)).unwrap_or(u16::MAX);
    out.extend_from_slice(
        &Head {
            kind,
            request_id,
            content_len: len,
            padding_len: 0,
        }
        .encode(),
    );
}

/// Appends the empty record that ends a stream.
pub fn end_stream(out: &mut Vec<u8>, kind: u8, request_id: u16) {
    push_record(out, kind, request_id, &[]);
}

/// One record, without padding (padding is optional for the sender, FastCGI §3.3).
fn push_record(out: &mut Vec<u8>, kind: u8, request_id: u16, content: &[u8]) {
    let len = u16::try_from(content.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(
        &Head {
            kind,
            request_id,
            content_len: len,
            padding_len: 0,
        }
        .encode(),
    );
    out.extend_from_slice(&content[..usize::from(len)]);
}

/// What the application sent, one piece at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Bytes of the response (the CGI head, then the body), at `range` of the input.
    Stdout(std::ops::Range<usize>),
    /// Bytes for the error log, at `range` of the input.
    Stderr(std::ops::Range<usize>),
    /// The request is over: the application's exit status and the protocol status
    /// (0 complete; 1 can't multiplex, 2 overloaded, 3 unknown role: it refused the request).
    End {
        app_status: u32,
        protocol_status: u8,
    },
    /// Something to skip (padding, an empty stream record, a `GET_VALUES_RESULT`).
    Skip,
}

/// Reads the application's records for one request id. Stream content is handed out as it
/// arrives, in pieces as large as the input holds (a 64 KiB record need not be buffered whole).
#[derive(Debug, Clone)]
pub struct Decoder {
    request_id: u16,
    /// Content bytes left in the current record, and its padding after them.
    content_left: usize,
    padding_left: usize,
    /// The current record's type, while its content is being handed out.
    current: u8,
    ended: bool,
}

impl Decoder {
    #[must_use]
    pub fn new(request_id: u16) -> Decoder {
        Decoder {
            request_id,
            content_left: 0,
            padding_left: 0,
            current: 0,
            ended: false,
        }
    }

    /// The request's `FCGI_END_REQUEST` has been read.
    #[must_use]
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Reads the next event from `input`: the event and how many bytes of `input` it used
    /// (the caller drops them before the next call).
    ///
    /// # Errors
    /// A bad version, an unexpected record type, another request's id, a malformed end.
    pub fn decode(&mut self, input: &[u8]) -> Result<Status<(Event, usize)>, FastCgiError> {
        if self.content_left > 0 {
            if input.is_empty() {
                return Ok(Status::Partial);
            }
            let n = self.content_left.min(input.len());
            self.content_left -= n;
            let event = if self.current == kind::STDOUT {
                Event::Stdout(0..n)
            } else {
                Event::Stderr(0..n)
            };
            return Ok(Status::Complete((event, n)));
        }
        if self.padding_left > 0 {
            if input.is_empty() {
                return Ok(Status::Partial);
            }
            let n = self.padding_left.min(input.len());
            self.padding_left -= n;
            return Ok(Status::Complete((Event::Skip, n)));
        }
        let head = match Head::parse(input)? {
            Status::Complete(h) => h,
            Status::Partial => return Ok(Status::Partial),
        };
        let len = usize::from(head.content_len);
        let padding = usize::from(head.padding_len);
        match head.kind {
            kind::STDOUT | kind::STDERR => {
                self.check_id(head)?;
                self.current = head.kind;
                self.content_left = len;
                self.padding_left = padding;
                Ok(Status::Complete((Event::Skip, HEAD_LEN)))
            }
            kind::END_REQUEST => {
                self.check_id(head)?;
                if len != 8 {
                    return Err(FastCgiError::EndRequest);
                }
                let Some(body) = input.get(HEAD_LEN..HEAD_LEN + 8) else {
                    return Ok(Status::Partial);
                };
                self.ended = true;
                self.padding_left = padding;
                Ok(Status::Complete((
                    Event::End {
                        app_status: u32::from_be_bytes([body[0], body[1], body[2], body[3]]),
                        protocol_status: body[4],
                    },
                    HEAD_LEN + 8,
                )))
            }
            // Management records (request id 0) answer questions the server never asks, but
            // are harmless: skipped whole.
            kind::GET_VALUES_RESULT | kind::UNKNOWN_TYPE if head.request_id == 0 => {
                self.current = 0;
                self.content_left = 0;
                self.padding_left = len + padding;
                Ok(Status::Complete((Event::Skip, HEAD_LEN)))
            }
            other => Err(FastCgiError::RecordType(other)),
        }
    }

    fn check_id(&self, head: Head) -> Result<(), FastCgiError> {
        if head.request_id == self.request_id {
            Ok(())
        } else {
            Err(FastCgiError::RequestId(head.request_id))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every event of `input`, fed in slices of `step` bytes.
    fn events(input: &[u8], step: usize) -> Result<Vec<(u8, Vec<u8>)>, FastCgiError> {
        let mut d = Decoder::new(1);
        let mut buf = Vec::new();
        let mut fed = 0;
        let mut out: Vec<(u8, Vec<u8>)> = Vec::new();
        loop {
            match d.decode(&buf)? {
                Status::Complete((event, used)) => {
                    match event {
                        Event::Stdout(r) => out.push((kind::STDOUT, buf[r].to_vec())),
                        Event::Stderr(r) => out.push((kind::STDERR, buf[r].to_vec())),
                        Event::End {
                            app_status,
                            protocol_status,
                        } => out.push((
                            kind::END_REQUEST,
                            format!("{app_status}/{protocol_status}").into_bytes(),
                        )),
                        Event::Skip => {}
                    }
                    buf.drain(..used);
                }
                Status::Partial => {
                    if fed >= input.len() {
                        return Ok(out);
                    }
                    let end = (fed + step).min(input.len());
                    buf.extend_from_slice(&input[fed..end]);
                    fed = end;
                }
            }
        }
    }

    fn record(kind: u8, id: u16, content: &[u8], padding: u8) -> Vec<u8> {
        let mut out = Head {
            kind,
            request_id: id,
            content_len: content.len() as u16,
            padding_len: padding,
        }
        .encode()
        .to_vec();
        out.extend_from_slice(content);
        out.extend(std::iter::repeat_n(0xAA, usize::from(padding)));
        out
    }

    #[test]
    fn request_records_are_as_the_specification_lays_them_out() {
        let mut out = Vec::new();
        begin_request(&mut out, 1, true);
        assert_eq!(out, [1, 1, 0, 1, 0, 8, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0]);
        out.clear();
        stream(&mut out, kind::STDIN, 7, &vec![b'x'; MAX_CONTENT + 10]);
        assert_eq!(&out[..8], &[1, 5, 0, 7, 0xFF, 0xFF, 0, 0]);
        let second = HEAD_LEN + MAX_CONTENT;
        assert_eq!(&out[second..second + 8], &[1, 5, 0, 7, 0, 10, 0, 0]);
        assert_eq!(out.len(), 2 * HEAD_LEN + MAX_CONTENT + 10);
        out.clear();
        end_stream(&mut out, kind::PARAMS, 7);
        abort_request(&mut out, 7);
        assert_eq!(out, [1, 4, 0, 7, 0, 0, 0, 0, 1, 2, 0, 7, 0, 0, 0, 0]);
    }

    #[test]
    fn a_response_is_read_whole_whatever_the_slicing() {
        let mut input = record(kind::STDOUT, 1, b"Status: 200 OK\r\n\r\nhel", 5);
        input.extend(record(kind::STDERR, 1, b"PHP Notice", 0));
        input.extend(record(kind::STDOUT, 1, b"lo", 0));
        input.extend(record(kind::STDOUT, 1, b"", 0));
        input.extend(record(kind::END_REQUEST, 1, &[0, 0, 0, 3, 0, 0, 0, 0], 0));
        for step in [1, 3, 8, 9, 1000] {
            let got = events(&input, step).unwrap();
            let stdout: Vec<u8> = got
                .iter()
                .filter(|(k, _)| *k == kind::STDOUT)
                .flat_map(|(_, b)| b.clone())
                .collect();
            let stderr: Vec<u8> = got
                .iter()
                .filter(|(k, _)| *k == kind::STDERR)
                .flat_map(|(_, b)| b.clone())
                .collect();
            assert_eq!(stdout, b"Status: 200 OK\r\n\r\nhello", "step {step}");
            assert_eq!(stderr, b"PHP Notice", "step {step}");
            assert_eq!(
                got.last().unwrap(),
                &(kind::END_REQUEST, b"3/0".to_vec()),
                "step {step}"
            );
        }
    }

    #[test]
    fn bad_records_are_refused() {
        let mut v2 = record(kind::STDOUT, 1, b"x", 0);
        v2[0] = 2;
        assert_eq!(events(&v2, 100), Err(FastCgiError::Version(2)));
        assert_eq!(
            events(&record(kind::STDOUT, 2, b"x", 0), 100),
            Err(FastCgiError::RequestId(2))
        );
        assert_eq!(
            events(&record(kind::PARAMS, 1, b"x", 0), 100),
            Err(FastCgiError::RecordType(kind::PARAMS))
        );
        assert_eq!(
            events(&record(kind::END_REQUEST, 1, &[0; 4], 0), 100),
            Err(FastCgiError::EndRequest)
        );
        // Management answers are skipped, content and padding.
        let mut skipped = record(kind::GET_VALUES_RESULT, 0, b"\x01\x01ab", 3);
        skipped.extend(record(kind::END_REQUEST, 1, &[0; 8], 0));
        assert_eq!(
            events(&skipped, 2).unwrap(),
            [(kind::END_REQUEST, b"0/0".to_vec())]
        );
    }
}
