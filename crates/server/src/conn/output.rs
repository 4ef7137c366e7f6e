//! Writing a connection's output: the buffered responses, then a file body (`sendfile(2)` in
//! clear, read and encrypted over TLS), a bounded turn at a time.

use std::io;

use super::{Conn, SENDFILE_TURN_BYTES, TLS_FILE_TURN_BYTES};
use crate::ctx::WorkerCtx;
use crate::transport::Flushed;

impl Conn {
    /// Writes pending output and file data. Returns true when everything is written.
    pub(super) fn flush(&mut self, ctx: &mut WorkerCtx<'_>) -> bool {
        if self.write_blocked {
            return false;
        }
        let before = self.wpos;
        // With a file to follow, the head may wait to leave with the file's first bytes.
        let flushed = self
            .io
            .write_from(&self.wbuf, &mut self.wpos, self.file.is_some());
        self.wrote |= self.wpos > before;
        match flushed {
            Flushed::Done => {}
            Flushed::Blocked => {
                self.write_blocked = true;
                return false;
            }
            Flushed::Failed => {
                self.close_now(ctx);
                return false;
            }
        }
        if self.wpos > 0 {
            self.wbuf.clear();
            self.wpos = 0;
        }
        if self.file.is_some() {
            return self.send_file(ctx);
        }
        if self.io.has_pending() {
            // Encrypted but not on the wire: the socket is full.
            self.write_blocked = true;
            self.wrote = true;
            return false;
        }
        true
    }

    /// Sends the pending file region (`sendfile(2)` in clear, read and encrypted over TLS), a
    /// turn's worth at a time.
    fn send_file(&mut self, ctx: &mut WorkerCtx<'_>) -> bool {
        let Some(file) = self.file.as_mut() else {
            return true;
        };
        let turn = if self.io.is_tls() {
            TLS_FILE_TURN_BYTES
        } else {
            SENDFILE_TURN_BYTES
        };
        let mut sent_this_turn = 0u64;
        while file.len > 0 {
            if sent_this_turn >= turn {
                ctx.deferred.push(ctx.token);
                return false;
            }
            let chunk = file.len.min(turn);
            match self
                .io
                .send_file(&file.file, file.offset, chunk, ctx.file_chunk)
            {
                Ok(0) => {
                    // The file is shorter than the Content-Length we announced: closing is the
                    // only way to not send a body of the wrong length.
                    self.close_now(ctx);
                    return false;
                }
                Ok(n) => {
                    file.offset += n;
                    file.len -= n;
                    sent_this_turn += n;
                    self.wrote = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.write_blocked = true;
                    return false;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.close_now(ctx);
                    return false;
                }
            }
        }
        self.file = None;
        // Requests pipelined behind the file can be answered now.
        self.unparsed = self.rlen > 0;
        if self.io.has_pending() {
            self.write_blocked = true;
            return false;
        }
        true
    }
}
