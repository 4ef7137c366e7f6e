//! Flow control (RFC 9113 §5.2, §6.9): the client's windows, WINDOW_UPDATE, and the rounds of
//! DATA frames that share the connection fairly between the streams waiting to send.
use std::io;
use std::os::unix::fs::FileExt;
use std::time::Instant;

use lowlat_http::h2::frame::{self, flag, kind, ErrorCode, FrameHeader, HEADER_LEN, MAX_WINDOW};

use super::conn::{forget, H2Conn, OUTPUT_HIGH_WATER};
use super::stream::State;

impl H2Conn {
    /// Whether some response body can go out now (data waiting, and window for it).
    pub(super) fn can_send(&self) -> bool {
        self.send_window > 0
            && self
                .streams
                .iter()
                .any(|s| s.state != State::Done && s.send_window > 0 && s.pending() > 0)
    }

    /// Writes DATA frames for streams with pending bodies: one frame per stream per round,
    /// while the windows and `budget` allow and the output is below its high-water mark.
    /// Returns what is left of the budget.
    pub(super) fn pump(&mut self, mut budget: usize) -> usize {
        let max_frame = self.peer_settings.max_frame_size as u64;
        loop {
            if self.streams.is_empty()
                || budget == 0
                || self.send_window <= 0
                || self.wbuf.len() - self.wpos >= OUTPUT_HIGH_WATER
            {
                return budget;
            }
            let mut progress = false;
            let mut done = false;
            let count = self.streams.len();
            for k in 0..count {
                let i = (self.rr + k) % count;
                let s = &mut self.streams[i];
                // An open stream has output only when an upstream answers while the request
                // body still arrives, or when it is a tunnel.
                if s.state == State::Done || s.send_window <= 0 {
                    continue;
                }
                let pending = s.pending();
                if pending == 0 {
                    continue;
                }
                let n = pending
                    .min(max_frame)
                    .min(s.send_window as u64)
                    .min(self.send_window.max(0) as u64)
                    .min(budget as u64) as usize;
                if n == 0 {
                    continue;
                }
                progress = true;
                let more_to_come = s.more_to_come();
                let mem_left = s.out.len() - s.out_pos;
                let sent = if mem_left > 0 {
                    let n = n.min(mem_left);
                    let last = n as u64 == pending && !more_to_come && s.trailers.is_none();
                    frame::write_data_header(&mut self.wbuf, s.id, n, last);
                    self.wbuf
                        .extend_from_slice(&s.out[s.out_pos..s.out_pos + n]);
                    s.out_pos += n;
                    if s.out_pos == s.out.len() {
                        s.out = Vec::new();
                        s.out_pos = 0;
                    }
                    n
                } else if let Some(f) = &mut s.file {
                    // Read straight into the output, behind room for the frame header.
                    let at = self.wbuf.len();
                    self.wbuf.resize(at + HEADER_LEN + n, 0);
                    let got = loop {
                        match f.file.read_at(&mut self.wbuf[at + HEADER_LEN..], f.offset) {
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            other => break other,
                        }
                    };
                    let Ok(got @ 1..) = got else {
                        // The file shrank or failed under us: the body cannot be completed.
                        self.wbuf.truncate(at);
                        frame::write_rst_stream(&mut self.wbuf, s.id, ErrorCode::Internal);
                        s.state = State::Done;
                        done = true;
                        continue;
                    };
                    self.wbuf.truncate(at + HEADER_LEN + got);
                    f.offset += got as u64;
                    f.len -= got as u64;
                    let last = got as u64 == pending && !more_to_come && s.trailers.is_none();
                    self.wbuf[at..at + HEADER_LEN].copy_from_slice(&frame::header_bytes(
                        got,
                        kind::DATA,
                        if last { flag::END_STREAM } else { 0 },
                        s.id,
                    ));
                    if f.len == 0 {
                        s.file = None;
                    }
                    got
                } else {
                    continue;
                };
                s.send_window -= sent as i64;
                self.send_window -= sent as i64;
                budget = budget.saturating_sub(sent);
                if s.pending() == 0
                    && !s.more_to_come()
                    && !s.tunnel.as_ref().is_some_and(|t| t.open)
                {
                    // (A tunnel's END_STREAM went on its last frame; the stream stays until the
                    // tunnel ends, as the client may still be sending.)
                    s.state = State::Done;
                    done = true;
                    if let Some(trailers) = s.trailers.take() {
                        let id = s.id;
                        self.write_trailers(id, &trailers);
                    }
                }
                if budget == 0 || self.send_window <= 0 {
                    self.rr = i + 1;
                    break;
                }
            }
            if done {
                let (closed_ids, reset_ids, wbuf) =
                    (&mut self.closed_ids, &mut self.reset_ids, &mut self.wbuf);
                self.streams.retain(|s| {
                    if s.state == State::Done {
                        forget(s, wbuf, closed_ids, reset_ids);
                    }
                    s.state != State::Done
                });
            }
            if !progress {
                return budget;
            }
        }
    }

    pub(super) fn window_update(
        &mut self,
        now: Instant,
        h: FrameHeader,
        p: std::ops::Range<usize>,
    ) {
        if p.len() != 4 {
            return self.conn_error(ErrorCode::FrameSize, "WINDOW_UPDATE of the wrong size");
        }
        let b = &self.rbuf[p];
        let inc = i64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff);
        if h.stream == 0 {
            if inc == 0 {
                return self.conn_error(ErrorCode::Protocol, "WINDOW_UPDATE of 0");
            }
            self.send_window += inc;
            if self.send_window > MAX_WINDOW {
                return self.conn_error(ErrorCode::FlowControl, "window above 2^31-1");
            }
            self.last_progress = now;
            return;
        }
        if h.stream > self.last_stream {
            return self.conn_error(ErrorCode::Protocol, "WINDOW_UPDATE on an idle stream");
        }
        let Some(s) = self.streams.iter_mut().find(|s| s.id == h.stream) else {
            return;
        };
        if inc == 0 {
            return self.stream_error(h.stream, ErrorCode::Protocol);
        }
        s.send_window += inc;
        if s.send_window > MAX_WINDOW {
            return self.stream_error(h.stream, ErrorCode::FlowControl);
        }
        self.last_progress = now;
    }
}
