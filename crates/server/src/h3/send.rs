//! A response written as its stream takes it: the handler's HTTP/1.1-form head as a HEADERS
//! frame (the last one's encoding reused when the same head comes again), its body as DATA, a
//! file read in 64 KiB pieces, and the stream finished after its last byte.

use std::os::unix::fs::FileExt;

use lowlat_http::h3::frame::{self};
use lowlat_http::h3::ErrorCode;

use super::conn::{H3Conn, MAX_CACHED_HEAD};
use crate::dispatch::{self};
use crate::quic::StreamIo;

/// A file is read into DATA this much at a time, as the stream takes it.
const FILE_CHUNK: u64 = 64 * 1024;

impl H3Conn {
    /// `res_buf` (an HTTP/1.1-form response) as HEADERS and DATA on stream `id`, then its file.
    pub(super) fn send_response(&mut self, io: &mut StreamIo<'_>, id: u64) {
        let Some(s) = self.requests.get_mut(&id) else {
            return;
        };
        s.answered = true;
        s.out.clear();
        s.out_at = 0;
        if s.out.capacity() == 0 {
            s.out = std::mem::take(&mut self.spare_out);
        }
        // At most one allocation (none with the last response's buffer): the HTTP/1.1 form is
        // longer than its QPACK encoding, and two frame headers take at most 18 bytes (grown
        // from empty, `out` was reallocated ~6 times).
        s.out.reserve(self.res_buf.len() + 18);
        let (last_head, last_frame) = &mut self.last_head;
        // The whole head, up to its blank line, is the last one: so is its encoding.
        let body_at = if !last_head.is_empty() && self.res_buf.starts_with(last_head) {
            s.out.extend_from_slice(last_frame);
            last_head.len()
        } else {
            // Kept as written: reading it lower-cases the names in place.
            last_head.clear();
            last_frame.clear();
            let kept = self.res_buf.len().min(MAX_CACHED_HEAD);
            last_head.extend_from_slice(&self.res_buf[..kept]);
            let Some((status, body_at)) =
                dispatch::translate_head(&mut self.res_buf, &mut self.res_fields)
            else {
                last_head.clear();
                io.reset(id, ErrorCode::InternalError.value());
                self.requests.remove(&id);
                return;
            };
            let res_buf = &self.res_buf;
            lowlat_http::h3::head::write_response(
                &self.encoder,
                status,
                self.res_fields
                    .iter()
                    .map(|(n, v)| (&res_buf[n.clone()], &res_buf[v.clone()])),
                &mut s.out,
            );
            if body_at <= kept {
                last_head.truncate(body_at);
                last_frame.extend_from_slice(&s.out);
            } else {
                last_head.clear();
            }
            body_at
        };
        let body = &self.res_buf[body_at..];
        let file_len = s.file.as_ref().map_or(0, |f| f.len);
        if !body.is_empty() || file_len > 0 {
            frame::put_data_header(&mut s.out, body.len() as u64 + file_len);
            s.out.extend_from_slice(body);
        }
        self.pump(io, id);
    }

    /// Writes what stream `id` has waiting, reading more of its file as the stream takes it;
    /// finishes the stream after the last byte.
    pub(super) fn pump(&mut self, io: &mut StreamIo<'_>, id: u64) {
        let Some(s) = self.requests.get_mut(&id) else {
            return;
        };
        loop {
            if s.out_at < s.out.len() {
                match io.write(id, &s.out[s.out_at..]) {
                    Ok(0) => {}
                    Ok(n) => {
                        s.out_at += n;
                        s.progress = io.now();
                    }
                    Err(_) => {
                        self.forget(id);
                        return;
                    }
                }
                if s.out_at < s.out.len() {
                    return; // stream_writable comes when it takes more
                }
            }
            if !s.chunk.is_empty() {
                match io.write_bytes(id, &mut s.chunk) {
                    Ok(0) => {}
                    Ok(_) => s.progress = io.now(),
                    Err(_) => {
                        self.forget(id);
                        return;
                    }
                }
                if !s.chunk.is_empty() {
                    return; // stream_writable comes when it takes more
                }
            }
            s.out.clear();
            s.out_at = 0;
            let Some(f) = s.file.as_mut() else {
                if s.relay.is_some() {
                    return; // more comes from the upstream
                }
                io.finish(id);
                if s.out.capacity() <= MAX_CACHED_HEAD * 4 && self.spare_out.capacity() == 0 {
                    self.spare_out = std::mem::take(&mut s.out);
                }
                self.requests.remove(&id);
                self.unacked.insert(id);
                return;
            };
            let n = f.len.min(FILE_CHUNK) as usize;
            // A buffer of its own, which quinn-proto keeps until the client acknowledges it
            // (reading into `out` and writing that cost a copy of every byte more).
            let mut chunk = bytes::BytesMut::zeroed(n);
            match f.file.read_at(&mut chunk, f.offset) {
                Ok(0) | Err(_) => {
                    // The file shrank or failed under us: the response cannot be completed.
                    io.reset(id, ErrorCode::InternalError.value());
                    self.forget(id);
                    return;
                }
                Ok(got) => {
                    chunk.truncate(got);
                    s.chunk = chunk.freeze();
                    f.offset += got as u64;
                    f.len -= got as u64;
                    if f.len == 0 {
                        s.file = None;
                    }
                }
            }
        }
    }
}

/// A bare status page in HTTP/1.1 form (`413 Content Too Large`), for `send_response`.
pub(super) fn write_status_page(out: &mut Vec<u8>, status: u16) {
    let reason = lowlat_http::response::reason(status);
    let body = format!("{status} {reason}\n");
    out.extend_from_slice(
        format!(
            "HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
}
