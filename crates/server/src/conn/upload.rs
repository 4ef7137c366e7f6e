//! The client's side of a request body streaming to an upstream (`proxy::upload`): what the
//! read buffer holds of it goes into the shared upload, and the upstream side is woken for it.

use mio::Token;

use super::{Conn, UploadLeft};

impl Conn {
    /// Whether a streaming body may be read now: the upstream side took enough of what it was
    /// given (or wants no more).
    pub(super) fn upload_has_room(&self) -> bool {
        self.upload
            .as_ref()
            .is_some_and(|u| u.pipe.borrow().has_room())
    }

    /// Passes what the read buffer holds of a streaming body to the upstream side: the bytes of
    /// a length, the decoded data of chunks (re-framed there). A malformed or over-long chunked
    /// body fails the exchange (400 or 413 if the upstream has not answered yet). What follows
    /// the body stays in the buffer: the next pipelined request.
    pub(super) fn feed_upload(&mut self) {
        let Some(up) = self.upload.as_mut() else {
            return;
        };
        let mut pipe = up.pipe.borrow_mut();
        if pipe.is_closed() {
            // The upstream answered before the body ended (or the exchange ended): the rest
            // is not read, and the connection closes after the response.
            drop(pipe);
            self.upload = None;
            self.rlen = 0;
            return;
        }
        let data = &self.rbuf[..self.rlen];
        let (used, done) = match &mut up.left {
            UploadLeft::Length(left) => {
                let n = data.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                pipe.put(&data[..n]);
                *left -= n as u64;
                (n, *left == 0)
            }
            UploadLeft::Chunked(decoder) => match decoder.decode(data, |d| pipe.put(d)) {
                Ok(progress) => (progress.consumed, progress.done),
                Err(e) => {
                    pipe.fail(e.status());
                    drop(pipe);
                    self.upload = None;
                    self.upload_fed = true;
                    self.rlen = 0;
                    // The rest of the body may still come: read and dropped after the answer.
                    self.lingering = true;
                    if let Some(relay) = &mut self.relay {
                        relay.keep_alive = false;
                    }
                    return;
                }
            },
        };
        if done {
            match &mut up.left {
                UploadLeft::Chunked(decoder) => {
                    let raw = decoder.take_trailers();
                    pipe.end_with_trailers(lowlat_http::body::trailer_fields(&raw));
                }
                UploadLeft::Length(_) => pipe.end(),
            }
        }
        drop(pipe);
        self.upload_fed |= used > 0 || done;
        self.rbuf.copy_within(used..self.rlen, 0);
        self.rlen -= used;
        if done {
            self.upload = None;
        }
    }

    /// The upstream connection to drive for body bytes just passed to it, once.
    /// Whether body bytes were read for a streaming upload since the last
    /// [`Conn::take_upload_wake`].
    pub(crate) fn upload_fed(&self) -> bool {
        self.upload_fed
    }

    pub(crate) fn take_upload_wake(&mut self) -> Option<Token> {
        if std::mem::take(&mut self.upload_fed) {
            self.upstream
        } else {
            None
        }
    }

    /// The exchange a body was streaming to ended: the upstream side wants no more. Returns
    /// whether part of the body was left unread (the connection must then close, lingering).
    pub(super) fn end_upload(&mut self) -> bool {
        match self.upload.take() {
            Some(up) => {
                up.pipe.borrow_mut().close();
                self.rlen = 0;
                true
            }
            None => false,
        }
    }
}
