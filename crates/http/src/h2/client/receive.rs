//! What the server sends, as the client state machine reads it: each whole frame checked and
//! applied (SETTINGS, WINDOW_UPDATE, PING, GOAWAY, RST_STREAM), a stream's HEADERS (with its
//! CONTINUATIONs) decoded and DATA counted against this side's windows, and what it means for
//! the caller handed over as [`Event`]s.

use super::*;

impl ClientConn {
    /// Consumes the whole frames at the start of `input`, reporting what they mean to `on`.
    /// Returns how many bytes were consumed (the rest is an incomplete frame: keep it, read
    /// more). Replies (SETTINGS and PING acknowledgements, window updates) join
    /// [`ClientConn::out`].
    ///
    /// # Errors
    /// A connection error (RFC 9113 §5.4.1): GOAWAY is queued; write it and close.
    pub fn receive(
        &mut self,
        input: &[u8],
        mut on: impl FnMut(Event<'_>),
    ) -> Result<usize, ErrorCode> {
        let mut at = 0;
        loop {
            let Some(h) = FrameHeader::parse(&input[at..]) else {
                return Ok(at);
            };
            if h.len > frame::DEFAULT_MAX_FRAME {
                return self.fail(ErrorCode::FrameSize);
            }
            let end = at + HEADER_LEN + h.len as usize;
            if input.len() < end {
                return Ok(at);
            }
            let payload = &input[at + HEADER_LEN..end];
            at = end;
            if self.continuing.is_some() && h.kind != kind::CONTINUATION {
                return self.fail(ErrorCode::Protocol);
            }
            match h.kind {
                kind::DATA => self.on_data(h, payload, &mut on)?,
                kind::HEADERS | kind::CONTINUATION => self.on_headers(h, payload, &mut on)?,
                kind::RST_STREAM => {
                    if payload.len() != 4 {
                        return self.fail(ErrorCode::FrameSize);
                    }
                    let code = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
                    if let Some(i) = self.index(h.stream) {
                        self.streams.swap_remove(i);
                        on(Event::Reset {
                            stream: h.stream,
                            code,
                        });
                    }
                }
                kind::SETTINGS => {
                    if h.stream != 0 {
                        return self.fail(ErrorCode::Protocol);
                    }
                    if h.has(flag::ACK) {
                        continue;
                    }
                    let before = self.peer.initial_window_size;
                    if let Err(code) = self.peer.apply(payload) {
                        return self.fail(code);
                    }
                    self.peer_settings_seen = true;
                    self.enc.set_peer_table_size(self.peer.header_table_size);
                    let delta = i64::from(self.peer.initial_window_size) - i64::from(before);
                    for s in &mut self.streams {
                        s.send_window += delta;
                    }
                    frame::write_settings_ack(&mut self.out);
                    self.pump();
                }
                kind::PING => {
                    if payload.len() != 8 {
                        return self.fail(ErrorCode::FrameSize);
                    }
                    if !h.has(flag::ACK) {
                        let mut data = [0u8; 8];
                        data.copy_from_slice(payload);
                        frame::write_ping(&mut self.out, true, &data);
                    }
                }
                kind::GOAWAY => {
                    if payload.len() < 8 {
                        return self.fail(ErrorCode::FrameSize);
                    }
                    let last = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
                        & 0x7fff_ffff;
                    let code = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
                    self.goaway = Some(self.goaway.map_or(last, |g| g.min(last)));
                    on(Event::GoAway {
                        last_stream: last,
                        code,
                    });
                    // Streams the server will not process: gone, and safe to send elsewhere.
                    let mut k = 0;
                    while k < self.streams.len() {
                        if self.streams[k].id > last {
                            let s = self.streams.swap_remove(k);
                            on(Event::Reset {
                                stream: s.id,
                                code: ErrorCode::RefusedStream as u32,
                            });
                        } else {
                            k += 1;
                        }
                    }
                }
                kind::WINDOW_UPDATE => {
                    if payload.len() != 4 {
                        return self.fail(ErrorCode::FrameSize);
                    }
                    let inc = i64::from(
                        u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
                            & 0x7fff_ffff,
                    );
                    if h.stream == 0 {
                        if inc == 0 {
                            return self.fail(ErrorCode::Protocol);
                        }
                        self.send_window += inc;
                        if self.send_window > frame::MAX_WINDOW {
                            return self.fail(ErrorCode::FlowControl);
                        }
                    } else if let Some(i) = self.index(h.stream) {
                        let s = &mut self.streams[i];
                        s.send_window += inc;
                        if inc == 0 || s.send_window > frame::MAX_WINDOW {
                            let id = s.id;
                            self.stream_error(id, ErrorCode::FlowControl, &mut on);
                        }
                    }
                    self.pump();
                }
                kind::PUSH_PROMISE => return self.fail(ErrorCode::Protocol),
                // PRIORITY and unknown frame types are ignored (RFC 9113 §5.5).
                _ => {}
            }
        }
    }

    /// A stream error: RST_STREAM sent, the stream reported reset.
    pub(super) fn stream_error(
        &mut self,
        id: u32,
        code: ErrorCode,
        on: &mut impl FnMut(Event<'_>),
    ) {
        if let Some(i) = self.index(id) {
            self.streams.swap_remove(i);
        }
        frame::write_rst_stream(&mut self.out, id, code);
        on(Event::Reset {
            stream: id,
            code: code as u32,
        });
    }

    pub(super) fn on_data(
        &mut self,
        h: FrameHeader,
        payload: &[u8],
        on: &mut impl FnMut(Event<'_>),
    ) -> Result<(), ErrorCode> {
        if h.stream == 0 {
            return self.fail(ErrorCode::Protocol).map(|_| ());
        }
        let len = i64::from(h.len);
        self.recv_window -= len;
        if self.recv_window < 0 {
            return self.fail(ErrorCode::FlowControl).map(|_| ());
        }
        let data = match frame::unpad(h.flags, payload) {
            Ok(d) => d,
            Err(code) => return self.fail(code).map(|_| ()),
        };
        // Padding is never passed on: released at once.
        let padding = payload.len() - data.len();
        let Some(i) = self.index(h.stream) else {
            // A stream already reset or finished: its window is the connection's to give back.
            if h.stream >= self.next_id {
                return self.fail(ErrorCode::Protocol).map(|_| ());
            }
            self.release(0, payload.len());
            return Ok(());
        };
        let s = &mut self.streams[i];
        s.recv_window -= len;
        if s.recv_window < 0 || !s.head_seen {
            let code = if s.head_seen {
                ErrorCode::FlowControl
            } else {
                ErrorCode::Protocol
            };
            self.release(0, payload.len());
            self.stream_error(h.stream, code, on);
            return Ok(());
        }
        let end = h.has(flag::END_STREAM);
        if end {
            self.server_ended(i);
        }
        if padding > 0 {
            self.release(h.stream, padding);
        }
        on(Event::Data {
            stream: h.stream,
            data,
            end_stream: end,
        });
        Ok(())
    }

    pub(super) fn on_headers(
        &mut self,
        h: FrameHeader,
        payload: &[u8],
        on: &mut impl FnMut(Event<'_>),
    ) -> Result<(), ErrorCode> {
        let (stream, end_stream, mut block) = if h.kind == kind::CONTINUATION {
            match self.continuing.take() {
                Some((s, e, b)) if s == h.stream => (s, e, b),
                _ => return self.fail(ErrorCode::Protocol).map(|_| ()),
            }
        } else {
            let mut fragment = match frame::unpad(h.flags, payload) {
                Ok(f) => f,
                Err(code) => return self.fail(code).map(|_| ()),
            };
            if h.has(flag::PRIORITY) {
                fragment = fragment.get(5..).unwrap_or_default();
            }
            if h.stream == 0 || h.stream.is_multiple_of(2) || h.stream >= self.next_id {
                return self.fail(ErrorCode::Protocol).map(|_| ());
            }
            let mut b = std::mem::take(&mut self.block);
            b.clear();
            b.extend_from_slice(fragment);
            (h.stream, h.has(flag::END_STREAM), b)
        };
        if h.kind == kind::CONTINUATION {
            block.extend_from_slice(payload);
        }
        if block.len() > MAX_BLOCK {
            return self.fail(ErrorCode::EnhanceYourCalm).map(|_| ());
        }
        if !h.has(flag::END_HEADERS) {
            self.continuing = Some((stream, end_stream, block));
            return Ok(());
        }
        // Decoded even for a stream already gone: HPACK's table must follow every block.
        self.decoded.clear();
        self.ranges.clear();
        let (decoded, ranges) = (&mut self.decoded, &mut self.ranges);
        let result = self.dec.decode(&block, |n, v| {
            let ns = decoded.len();
            decoded.extend_from_slice(n);
            let vs = decoded.len();
            decoded.extend_from_slice(v);
            ranges.push((ns..vs, vs..decoded.len()));
        });
        self.block = block;
        if result.is_err() {
            return self.fail(ErrorCode::Compression).map(|_| ());
        }
        let Some(i) = self.index(stream) else {
            return Ok(());
        };
        let fields = Fields {
            buf: &self.decoded,
            ranges: &self.ranges,
        };
        if self.streams[i].head_seen {
            // A second block is trailers, and must end the stream (RFC 9113 §8.1).
            let pseudo = fields.iter().any(|(n, _)| n.starts_with(b":"));
            if !end_stream || pseudo {
                self.stream_error(stream, ErrorCode::Protocol, on);
                return Ok(());
            }
            self.server_ended(i);
            let fields = Fields {
                buf: &self.decoded,
                ranges: &self.ranges,
            };
            on(Event::Trailers { stream, fields });
            return Ok(());
        }
        let status = fields
            .iter()
            .next()
            .filter(|(n, _)| *n == b":status")
            .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse::<u16>().ok())
            .filter(|s| (100..=999).contains(s));
        let Some(status) = status else {
            self.stream_error(stream, ErrorCode::Protocol, on);
            return Ok(());
        };
        if status < 200 {
            // An interim response; 101 has no meaning in HTTP/2 (RFC 9113 §8.6).
            if end_stream || status == 101 {
                self.stream_error(stream, ErrorCode::Protocol, on);
            }
            return Ok(());
        }
        self.streams[i].head_seen = true;
        if end_stream {
            self.server_ended(i);
        }
        let fields = Fields {
            buf: &self.decoded,
            ranges: &self.ranges,
        };
        on(Event::Head {
            stream,
            status,
            fields,
            end_stream,
        });
        Ok(())
    }
}
