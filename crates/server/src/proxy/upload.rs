//! A request body on its way to an upstream while it is still arriving ([`Upload`]): the client's
//! side puts body bytes in as it reads them, framed for the upstream; the upstream side takes
//! them out as its socket accepts them. Shared by the two sides of one exchange in one worker
//! (`Rc<RefCell<_>>`: no lock, no thread).
//!
//! Back-pressure both ways: the client's side stops reading its socket while more than
//! [`UPLOAD_HIGH_WATER`] bytes wait here, and is driven again once the upstream side has taken
//! them below [`UPLOAD_LOW_WATER`]; so an upload of any size holds at most a few hundred KiB.
//!
//! Invariant: bytes leave in the order they came, each once; `sent` counts them, and a request
//! with any sent cannot be retried (the body is gone).

use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;

use super::headers::StreamedBody;

/// A body longer than this that is not all here when its head arrives streams to an upstream as
/// it comes, when the request is forwarded (smaller ones are read whole first: the request can
/// then be retried on another server, and goes out in one write).
pub(crate) const STREAM_MIN_BODY: u64 = 64 * 1024;

/// The client's side stops reading while this much waits for the upstream.
pub(crate) const UPLOAD_HIGH_WATER: usize = 256 * 1024;
/// ...and reads again once the upstream side has taken it below this.
pub(crate) const UPLOAD_LOW_WATER: usize = 64 * 1024;

/// A body streaming from a client to an upstream.
#[derive(Debug)]
pub(crate) struct Upload {
    framing: StreamedBody,
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
            framing,
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
        if self.framing == StreamedBody::Chunked {
            // Into the buffer directly: no string per chunk.
            let _ = write!(self.buf, "{:x}\r\n", data.len());
            self.buf.extend_from_slice(data);
            self.buf.extend_from_slice(b"\r\n");
        } else {
            self.buf.extend_from_slice(data);
        }
    }

    /// The client's body ended.
    pub(crate) fn end(&mut self) {
        if self.framing == StreamedBody::Chunked && !self.closed {
            self.buf.extend_from_slice(b"0\r\n\r\n");
        }
        self.complete = true;
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
