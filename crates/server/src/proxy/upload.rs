//! A request body on its way to an upstream while it is still arriving ([`Upload`]): the client's
//! side puts body bytes in as it reads them, framed for the upstream; the upstream side takes
//! them out as its socket accepts them. Shared by the two sides of one exchange in one worker
//! (`Rc<RefCell<_>>`: no lock, no thread).
//!
//! Back-pressure both ways: the client's side stops reading its socket while more than
//! [`UPLOAD_HIGH_WATER`] bytes wait here, and is driven again once the upstream side has taken
//! them below [`UPLOAD_LOW_WATER`]; so an upload of any size holds at most a few hundred KiB.
//!
//! Framing is the upstream's: an HTTP/1.1 upstream gets a body of unknown length re-framed as
//! chunks (trailers in the last one), an HTTP/2 upstream the bare bytes (DATA frames are its
//! framing; trailers a last HEADERS frame, [`Upload::trailers`]), a FastCGI one `FCGI_STDIN`
//! records ended by an empty one (trailers have no place there). The client's side puts bytes in
//! before the server is chosen, so the upstream side says which it is ([`Upload::frame_for`])
//! and what waits is re-framed then (nothing has been sent yet).
//!
//! Trailer fields the client sent after its body pass by the rule responses' do
//! (`super::trailers`): framing, hop-by-hop, routing and authentication fields stay behind.
//!
//! Invariant: bytes leave in the order they came, each once; `sent` counts them, and a request
//! with any sent cannot be retried (the body is gone).

use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;

use lowlat_http::fastcgi::record;

use super::cgi_request::REQUEST_ID;
use super::headers::StreamedBody;
use super::trailers::trailer_passes;

/// A body longer than this that is not all here when its head arrives streams to an upstream as
/// it comes, when the request is forwarded (smaller ones are read whole first: the request can
/// then be retried on another server, and goes out in one write).
pub(crate) const STREAM_MIN_BODY: u64 = 64 * 1024;

/// A streaming request body waiting for its client is bounded by the client connection's body
/// timeout (which abandons the exchange); this only keeps the upstream's deadline from firing
/// first.
pub(crate) const UPLOAD_WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// The client's side stops reading while this much waits for the upstream.
pub(crate) const UPLOAD_HIGH_WATER: usize = 256 * 1024;
/// ...and reads again once the upstream side has taken it below this.
pub(crate) const UPLOAD_LOW_WATER: usize = 64 * 1024;

/// Trailer fields as (name, value).
pub(crate) type TrailerList = Vec<(Vec<u8>, Vec<u8>)>;

/// How the bytes waiting in an upload are framed for the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// As they came (a length was given, or an HTTP/2 upstream: DATA frames are its framing).
    Bare,
    /// HTTP/1.1 chunks (a body of unknown length to an HTTP/1.1 upstream).
    Chunked,
    /// `FCGI_STDIN` records.
    FastCgi,
}

/// The protocol of the upstream an upload goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UpstreamProtocol {
    Http1,
    Http2,
    FastCgi,
}

/// A body streaming from a client to an upstream.
#[derive(Debug)]
pub(crate) struct Upload {
    /// The client did not say the body's length (an HTTP/1.1 upstream then gets chunks).
    unknown_length: bool,
    /// How `buf` is framed.
    framing: Framing,
    /// The client's trailer fields that pass (`super::trailers`), once its body ended.
    trailers: TrailerList,
    /// Framed bytes for the upstream; those before `pos` are sent.
    buf: Vec<u8>,
    pos: usize,
    /// The body's last byte (and, chunked, the last chunk) is in `buf`.
    complete: bool,
    /// Bytes handed to the upstream's socket so far.
    sent: u64,
    /// The client's body was refused midway (a malformed chunk, over the limit, the client
    /// gone): the status to answer if no response has started, the exchange to abandon.
    failed: Option<u16>,
    /// The upstream side wants no more (a response came before the body ended, or the exchange
    /// ended): the client's side stops feeding.
    closed: bool,
}

/// Both sides' handle on one upload.
pub(crate) type UploadRef = Rc<RefCell<Upload>>;

impl Upload {
    pub(crate) fn new(framing: StreamedBody) -> UploadRef {
        Rc::new(RefCell::new(Self {
            unknown_length: framing == StreamedBody::Chunked,
            framing: if framing == StreamedBody::Chunked {
                Framing::Chunked
            } else {
                Framing::Bare
            },
            trailers: Vec::new(),
            buf: Vec::new(),
            pos: 0,
            complete: false,
            sent: 0,
            failed: None,
            closed: false,
        }))
    }

    /// Body bytes from the client (decoded, if the client sent them chunked).
    pub(crate) fn put(&mut self, data: &[u8]) {
        if data.is_empty() || self.closed {
            return;
        }
        Self::frame(self.framing, data, &mut self.buf);
    }

    /// Appends `data` to `buf` framed as `framing` says.
    fn frame(framing: Framing, data: &[u8], buf: &mut Vec<u8>) {
        match framing {
            Framing::Chunked => {
                // Into the buffer directly: no string per chunk.
                let _ = write!(buf, "{:x}\r\n", data.len());
                buf.extend_from_slice(data);
                buf.extend_from_slice(b"\r\n");
            }
            Framing::FastCgi => record::stream(buf, record::kind::STDIN, REQUEST_ID, data),
            Framing::Bare => buf.extend_from_slice(data),
        }
    }

    /// The client's body ended.
    pub(crate) fn end(&mut self) {
        self.end_with_trailers(std::iter::empty());
    }

    /// The client's body ended with trailer fields; those that may pass are kept.
    pub(crate) fn end_with_trailers<'t>(
        &mut self,
        fields: impl IntoIterator<Item = (&'t [u8], &'t [u8])>,
    ) {
        if self.complete {
            return;
        }
        self.trailers = fields
            .into_iter()
            .filter(|(n, _)| trailer_passes(n))
            .map(|(n, v)| (n.to_ascii_lowercase(), v.to_vec()))
            .collect();
        if !self.closed {
            self.end_framing();
        }
        self.complete = true;
    }

    /// What ends the body in its framing: the last chunk, or the empty `FCGI_STDIN` record.
    fn end_framing(&mut self) {
        match self.framing {
            Framing::Chunked => self.last_chunk(),
            Framing::FastCgi => record::end_stream(&mut self.buf, record::kind::STDIN, REQUEST_ID),
            Framing::Bare => {}
        }
    }

    /// The last chunk and the trailer section (RFC 9112 §7.1.2).
    fn last_chunk(&mut self) {
        self.buf.extend_from_slice(b"0\r\n");
        for (n, v) in &self.trailers {
            self.buf.extend_from_slice(n);
            self.buf.extend_from_slice(b": ");
            self.buf.extend_from_slice(v);
            self.buf.extend_from_slice(b"\r\n");
        }
        self.buf.extend_from_slice(b"\r\n");
    }

    /// The upstream is chosen: an HTTP/2 one takes bare bytes, an HTTP/1.1 one chunks when the
    /// length is unknown, a FastCGI one `FCGI_STDIN` records. What waits is re-framed (nothing
    /// was sent yet).
    pub(crate) fn frame_for(&mut self, upstream: UpstreamProtocol) {
        let framing = match upstream {
            UpstreamProtocol::FastCgi => Framing::FastCgi,
            UpstreamProtocol::Http1 if self.unknown_length => Framing::Chunked,
            UpstreamProtocol::Http1 | UpstreamProtocol::Http2 => Framing::Bare,
        };
        if framing == self.framing || self.sent > 0 || self.closed {
            return;
        }
        let framed = std::mem::take(&mut self.buf);
        let waiting = &framed[self.pos..];
        self.pos = 0;
        // Back to bare bytes first: this side's own framing, well-formed, the trailers kept
        // apart already.
        let mut bare = Vec::new();
        match self.framing {
            Framing::Bare => bare.extend_from_slice(waiting),
            Framing::Chunked => {
                let mut decoder = lowlat_http::body::ChunkedDecoder::new(u64::MAX);
                let _ = decoder.decode(waiting, |d| bare.extend_from_slice(d));
            }
            Framing::FastCgi => {
                let mut rest = waiting;
                while let Ok(lowlat_http::Status::Complete(head)) = record::Head::parse(rest) {
                    let end = (record::HEAD_LEN + usize::from(head.content_len)).min(rest.len());
                    bare.extend_from_slice(&rest[record::HEAD_LEN..end]);
                    rest = &rest[end..];
                }
            }
        }
        self.framing = framing;
        if !bare.is_empty() {
            Self::frame(framing, &bare, &mut self.buf);
        }
        if self.complete {
            self.end_framing();
        }
    }

    /// The client's trailer fields (that pass), once the body is complete: for an upstream that
    /// frames them itself (HTTP/2).
    pub(crate) fn trailers(&self) -> &[(Vec<u8>, Vec<u8>)] {
        &self.trailers
    }

    /// The client's body was refused midway: answer `status` if nothing was answered yet.
    pub(crate) fn fail(&mut self, status: u16) {
        self.failed.get_or_insert(status);
    }

    /// Bytes waiting for the upstream.
    pub(crate) fn pending(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    /// `n` of the pending bytes were written to the upstream.
    pub(crate) fn taken(&mut self, n: usize) {
        self.pos += n;
        self.sent += n as u64;
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > UPLOAD_LOW_WATER {
            // Keep the buffer's size to what waits, not to all that passed through.
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
    }

    /// Whether the client's side may read more of the body.
    pub(crate) fn has_room(&self) -> bool {
        self.closed || self.buf.len() - self.pos < UPLOAD_HIGH_WATER
    }

    /// Whether the client's side, stopped for room, may read again.
    pub(crate) fn drained(&self) -> bool {
        self.buf.len() - self.pos < UPLOAD_LOW_WATER
    }

    /// Everything is in and out.
    pub(crate) fn done(&self) -> bool {
        self.complete && self.pos == self.buf.len()
    }

    pub(crate) fn sent(&self) -> u64 {
        self.sent
    }

    pub(crate) fn failed(&self) -> Option<u16> {
        self.failed
    }

    /// The upstream side wants no more of the body.
    pub(crate) fn close(&mut self) {
        self.closed = true;
        self.buf = Vec::new();
        self.pos = 0;
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed
    }
}

/// How a request body still arriving would stream to an upstream, by what its head declares:
/// past `max_body` or [`STREAM_MIN_BODY`] as it comes, of unknown length re-framed; a short one
/// is read whole first (`None`), and so is a GET or HEAD without a length (it has no body).
/// Whether it does stream is the route's choice (`Router::streams_body_at`).
pub(crate) fn streamed_framing(
    method: lowlat_http::request::Method,
    content_length: Option<u64>,
    max_body: u64,
) -> Option<StreamedBody> {
    use lowlat_http::request::Method;
    match content_length {
        Some(n) if n > max_body || n > STREAM_MIN_BODY => Some(StreamedBody::Length(n)),
        Some(_) => None,
        None if matches!(method, Method::Get | Method::Head) => None,
        None => Some(StreamedBody::Chunked),
    }
}

/// The client's side of an upload: the body bytes it received, checked against the length the
/// client declared and the group's limit as they come, put into the [`Upload`].
#[derive(Debug)]
pub(crate) struct UploadFeed {
    pub(crate) pipe: UploadRef,
    /// Body bytes received so far.
    received: u64,
    /// The `content-length` the client declared, checked at the end.
    declared: Option<u64>,
    /// Most body bytes forwarded (the group's `max_body`).
    limit: u64,
}

impl UploadFeed {
    /// A feed for `pipe`, whose client declared `framing`, of at most `limit` bytes.
    pub(crate) fn new(pipe: UploadRef, framing: StreamedBody, limit: u64) -> Self {
        Self {
            pipe,
            received: 0,
            declared: match framing {
                StreamedBody::Length(n) => Some(n),
                StreamedBody::Chunked => None,
            },
            limit,
        }
    }

    /// Body bytes from the client: over the limit the upload fails with 413, past the declared
    /// length with 400 (either cuts the request upstream). Returns whether the client's side
    /// may read more now.
    pub(crate) fn put(&mut self, data: &[u8]) -> bool {
        self.received += data.len() as u64;
        let mut pipe = self.pipe.borrow_mut();
        if self.received > self.limit {
            pipe.fail(413);
        } else if self.declared.is_some_and(|n| self.received > n) {
            pipe.fail(400);
        } else {
            pipe.put(data);
        }
        pipe.has_room()
    }

    /// The client's body ended, with these trailer fields (those that may pass go on); short
    /// of the declared length it fails with 400.
    pub(crate) fn finish<'t>(&mut self, trailers: impl IntoIterator<Item = (&'t [u8], &'t [u8])>) {
        let mut pipe = self.pipe.borrow_mut();
        if self.declared.is_some_and(|n| n != self.received) {
            pipe.fail(400);
        }
        pipe.end_with_trailers(trailers);
    }

    /// Whether the client's side, stopped for room, may read again.
    pub(crate) fn drained(&self) -> bool {
        self.pipe.borrow().drained()
    }

    /// Whether the client's side may read more of the body now.
    pub(crate) fn has_room(&self) -> bool {
        self.pipe.borrow().has_room()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_pieces_are_framed_and_ended() {
        let up = Upload::new(StreamedBody::Chunked);
        let mut u = up.borrow_mut();
        u.put(b"hello");
        u.put(b"");
        u.put(&[b'x'; 17]);
        u.end();
        let mut want = b"5\r\nhello\r\n11\r\n".to_vec();
        want.extend_from_slice(&[b'x'; 17]);
        want.extend_from_slice(b"\r\n0\r\n\r\n");
        assert_eq!(u.pending(), &want[..]);
        assert!(!u.done());
        u.taken(3);
        assert_eq!(u.sent(), 3);
        let n = u.pending().len();
        u.taken(n);
        assert!(u.done());
    }

    #[test]
    fn trailers_end_the_chunks_and_stay_behind_when_they_must() {
        let up = Upload::new(StreamedBody::Chunked);
        let mut u = up.borrow_mut();
        u.put(b"ab");
        u.end_with_trailers([
            (&b"X-Checksum"[..], &b"9"[..]),
            (b"content-length", b"2"),
            (b"Connection", b"close"),
        ]);
        assert_eq!(u.pending(), b"2\r\nab\r\n0\r\nx-checksum: 9\r\n\r\n");
        assert_eq!(u.trailers(), &[(b"x-checksum".to_vec(), b"9".to_vec())]);
    }

    #[test]
    fn chunks_become_bare_bytes_for_http2_and_back() {
        let up = Upload::new(StreamedBody::Chunked);
        let mut u = up.borrow_mut();
        u.put(b"hello ");
        u.put(b"world");
        u.frame_for(UpstreamProtocol::Http2);
        assert_eq!(u.pending(), b"hello world");
        u.put(b"!");
        u.end_with_trailers([(&b"t"[..], &b"1"[..])]);
        assert_eq!(u.pending(), b"hello world!", "no chunk framing for HTTP/2");
        // Refused there before a byte went: an HTTP/1.1 server gets it as one chunk.
        u.frame_for(UpstreamProtocol::Http1);
        assert_eq!(u.pending(), b"c\r\nhello world!\r\n0\r\nt: 1\r\n\r\n");
        // A length is bare bytes whatever the upstream.
        let up = Upload::new(StreamedBody::Length(3));
        let mut u = up.borrow_mut();
        u.put(b"abc");
        u.frame_for(UpstreamProtocol::Http2);
        assert_eq!(u.pending(), b"abc");
    }

    #[test]
    fn a_fastcgi_upstream_gets_stdin_records_ended_by_an_empty_one() {
        let up = Upload::new(StreamedBody::Length(5));
        let mut u = up.borrow_mut();
        u.put(b"he");
        u.frame_for(UpstreamProtocol::FastCgi);
        u.put(b"llo");
        u.end_with_trailers([(&b"t"[..], &b"1"[..])]);
        assert_eq!(
            u.pending(),
            b"\x01\x05\x00\x01\x00\x02\x00\x00he\x01\x05\x00\x01\x00\x03\x00\x00llo\x01\x05\x00\x01\x00\x00\x00\x00"
        );
        // Refused there before a byte went: bare bytes again for an HTTP/2 server.
        u.frame_for(UpstreamProtocol::Http2);
        assert_eq!(u.pending(), b"hello");
        let up = Upload::new(StreamedBody::Chunked);
        let mut u = up.borrow_mut();
        u.put(&vec![b'x'; 70_000]);
        u.frame_for(UpstreamProtocol::FastCgi);
        assert_eq!(u.pending().len(), 2 * 8 + 70_000, "split at 64 KiB");
    }

    #[test]
    fn room_follows_the_water_marks() {
        let up = Upload::new(StreamedBody::Length(1 << 20));
        let mut u = up.borrow_mut();
        u.put(&vec![0; UPLOAD_HIGH_WATER]);
        assert!(!u.has_room());
        assert!(!u.drained());
        u.taken(UPLOAD_HIGH_WATER - UPLOAD_LOW_WATER + 1);
        assert!(u.has_room());
        assert!(u.drained());
        assert_eq!(u.pending().len(), UPLOAD_LOW_WATER - 1);
        u.close();
        assert!(u.has_room(), "a closed upload never holds the client back");
        u.put(b"more");
        assert!(u.pending().is_empty());
    }
}
