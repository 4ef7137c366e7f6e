//! One connection's WebSocket session (`--ws`): the opening handshake (an HTTP/1.1 `GET` with
//! `Upgrade: websocket`, answered `101` with the right `Sec-WebSocket-Accept`), then messages of
//! a fixed size sent as single masked binary frames and their echoes read back.
//!
//! The message frame is built once per connection (payload, mask and all) and copied into the
//! output per send, as HTTP requests are; echoes are only delimited, never copied or unmasked:
//! an echo ends with its message's final frame, and its payload length is checked against what
//! was sent. A server's ping is answered with a pong; its Close ends the connection. Framing is
//! the codec's ([`lowlat_http::ws`]).

use lowlat_http::client::{parse_upgrade_response, ResponseHeaderSlots};
use lowlat_http::limits::{MAX_HEADERS, MAX_HEAD_BYTES};
use lowlat_http::ws::{opcode, parse_server_frame_head, write_client_frame, FrameHead};
use lowlat_http::Status;

/// Why a session failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WsError {
    /// The handshake was not answered as it must be: the status, or what was wrong.
    Handshake(String),
    /// A frame the codec refused, or an echo of the wrong length.
    Frame,
}

/// What a read of the server's bytes brought.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// The handshake completed: messages may be sent.
    Upgraded,
    /// One message came back whole.
    Echo,
    /// The server sent Close.
    Closed,
}

/// One connection's session.
#[derive(Debug)]
pub(crate) struct Session {
    /// Bytes to write (`out[out_pos..]`): the handshake, messages, pongs.
    pub out: Vec<u8>,
    pub out_pos: usize,
    /// One message as a masked frame, built once.
    frame: Vec<u8>,
    message_len: u64,
    mask: [u8; 4],
    accept: String,
    upgraded: bool,
    /// The handshake's answer while it is incomplete.
    head: Vec<u8>,
    /// A frame head split across reads.
    frame_head: [u8; lowlat_http::ws::MAX_FRAME_HEAD],
    frame_head_len: usize,
    /// The frame being read, and its payload bytes still to come.
    current: Option<FrameHead>,
    left: u64,
    /// Payload bytes of the message being read so far.
    echoed: u64,
    /// A ping's payload, to return in the pong.
    ping: Vec<u8>,
}

impl Session {
    /// A session that opens with `handshake` (the upgrade request's bytes), expects `accept`
    /// back, and sends messages of `message_len` bytes.
    pub(crate) fn new(handshake: &[u8], accept: &str, message_len: usize, seed: u64) -> Self {
        let mask = (seed as u32 | 1).to_be_bytes();
        // The payload: a byte pattern (not compressible to nothing, not all one value).
        let payload: Vec<u8> = (0..message_len).map(|i| (i % 251) as u8).collect();
        let mut frame = Vec::with_capacity(message_len + lowlat_http::ws::MAX_FRAME_HEAD);
        write_client_frame(&mut frame, opcode::BINARY, &payload, mask);
        Self {
            out: handshake.to_vec(),
            out_pos: 0,
            frame,
            message_len: message_len as u64,
            mask,
            accept: accept.to_owned(),
            upgraded: false,
            head: Vec::new(),
            frame_head: [0; lowlat_http::ws::MAX_FRAME_HEAD],
            frame_head_len: 0,
            current: None,
            left: 0,
            echoed: 0,
            ping: Vec::new(),
        }
    }

    /// Whether the handshake is done.
    pub(crate) fn upgraded(&self) -> bool {
        self.upgraded
    }

    /// Queues one message.
    pub(crate) fn message(&mut self) {
        self.out.extend_from_slice(&self.frame);
    }

    /// Queues a Close (1000, normal closure): the run is over.
    pub(crate) fn close(&mut self) {
        write_client_frame(
            &mut self.out,
            opcode::CLOSE,
            &1000u16.to_be_bytes(),
            self.mask,
        );
    }

    pub(crate) fn has_output(&self) -> bool {
        self.out_pos < self.out.len()
    }

    /// Everything queued was written: the buffer is reused.
    pub(crate) fn written(&mut self) {
        self.out.clear();
        self.out_pos = 0;
    }

    /// Reads what the server sent, calling `on` for each [`Event`].
    ///
    /// # Errors
    /// A handshake answered wrongly, a frame the codec refuses, an echo of the wrong length.
    pub(crate) fn read(&mut self, data: &[u8], mut on: impl FnMut(Event)) -> Result<(), WsError> {
        if self.upgraded {
            return self.frames(data, &mut on);
        }
        self.head.extend_from_slice(data);
        let head = std::mem::take(&mut self.head);
        let mut slots: ResponseHeaderSlots<'_> =
            [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS];
        let parsed = match parse_upgrade_response(&head, &mut slots) {
            Ok(Status::Partial) if head.len() <= MAX_HEAD_BYTES => {
                self.head = head;
                return Ok(());
            }
            Ok(Status::Partial) => return Err(WsError::Handshake("head too large".into())),
            Ok(Status::Complete(p)) => p,
            Err(e) => return Err(WsError::Handshake(e.to_string())),
        };
        if parsed.head.status != 101 {
            return Err(WsError::Handshake(format!(
                "answered {} instead of 101 Switching Protocols",
                parsed.head.status
            )));
        }
        let accept = parsed
            .fields
            .iter()
            .find(|f| f.name.eq_ignore_ascii_case("sec-websocket-accept"))
            .map(|f| f.value.trim_ascii());
        if accept != Some(self.accept.as_bytes()) {
            return Err(WsError::Handshake(
                "Sec-WebSocket-Accept does not answer the key".into(),
            ));
        }
        let head_len = parsed.head.head_len;
        self.upgraded = true;
        on(Event::Upgraded);
        self.frames(&head[head_len..], &mut on)
    }

    /// Walks frames: heads parsed (a split one kept), payloads counted.
    fn frames(&mut self, data: &[u8], on: &mut impl FnMut(Event)) -> Result<(), WsError> {
        let mut i = 0;
        while i < data.len() {
            let Some(frame) = self.current else {
                // A head: from what an earlier read left, then this read's bytes.
                let had = self.frame_head_len;
                let take = (self.frame_head.len() - had).min(data.len() - i);
                self.frame_head[had..had + take].copy_from_slice(&data[i..i + take]);
                match parse_server_frame_head(&self.frame_head[..had + take]) {
                    Ok(Status::Partial) => {
                        self.frame_head_len = had + take;
                        i += take;
                    }
                    Ok(Status::Complete(h)) => {
                        self.frame_head_len = 0;
                        i += h.head_len - had;
                        self.current = Some(h);
                        self.left = h.len;
                        if h.len == 0 {
                            self.end_frame(h, on)?;
                        }
                    }
                    Err(_) => return Err(WsError::Frame),
                }
                continue;
            };
            let n = usize::try_from(self.left)
                .unwrap_or(usize::MAX)
                .min(data.len() - i);
            if frame.opcode == opcode::PING {
                self.ping.extend_from_slice(&data[i..i + n]);
            } else if !frame.is_control() {
                self.echoed += n as u64;
            }
            i += n;
            self.left -= n as u64;
            if self.left == 0 {
                self.end_frame(frame, on)?;
            }
        }
        Ok(())
    }

    fn end_frame(&mut self, frame: FrameHead, on: &mut impl FnMut(Event)) -> Result<(), WsError> {
        self.current = None;
        match frame.opcode {
            opcode::PING => {
                let ping = std::mem::take(&mut self.ping);
                write_client_frame(&mut self.out, opcode::PONG, &ping, self.mask);
                self.ping = ping;
                self.ping.clear();
            }
            opcode::PONG => {}
            opcode::CLOSE => on(Event::Closed),
            _ if frame.fin => {
                if std::mem::take(&mut self.echoed) != self.message_len {
                    return Err(WsError::Frame);
                }
                on(Event::Echo);
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lowlat_http::ws::accept_for;

    fn server_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0x80 | opcode];
        if payload.len() < 126 {
            f.push(payload.len() as u8);
        } else {
            f.push(126);
            f.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        }
        f.extend_from_slice(payload);
        f
    }

    /// The handshake, then echoes, a ping (answered) and a close, fed whole and a byte at a time.
    #[test]
    fn a_session_reads_its_echoes() {
        let accept = accept_for("dGhlIHNhbXBsZSBub25jZQ==");
        let mut input = format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: {accept}\r\n\r\n"
        )
        .into_bytes();
        input.extend(server_frame(opcode::BINARY, &[1; 300]));
        input.extend(server_frame(opcode::PING, b"hi"));
        // A message in two frames.
        input.extend([0x02, 100]);
        input.extend([0; 100]);
        input.extend(server_frame(opcode::CONTINUATION, &[0; 200]));
        input.extend(server_frame(opcode::CLOSE, &1000u16.to_be_bytes()));
        for piece in [input.len(), 1, 7] {
            let mut s = Session::new(b"GET / HTTP/1.1\r\n\r\n", &accept, 300, 42);
            s.written();
            let mut events = Vec::new();
            for chunk in input.chunks(piece) {
                s.read(chunk, |e| events.push(e)).unwrap();
            }
            assert_eq!(
                events,
                [Event::Upgraded, Event::Echo, Event::Echo, Event::Closed],
                "{piece}"
            );
            // The pong carries the ping's payload, masked.
            assert_eq!(s.out[..2], [0x8a, 0x82]);
        }
    }

    #[test]
    fn a_refused_handshake_is_an_error() {
        let mut s = Session::new(b"", "x", 10, 1);
        let err = s
            .read(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
                |_| {},
            )
            .unwrap_err();
        assert_eq!(
            err,
            WsError::Handshake("answered 404 instead of 101 Switching Protocols".into())
        );
        let mut s = Session::new(b"", "right", 10, 1);
        let err = s
            .read(
                b"HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: wrong\r\n\r\n",
                |_| {},
            )
            .unwrap_err();
        assert!(matches!(err, WsError::Handshake(_)));
        // An echo of another length than the message is a frame error.
        let mut s = Session::new(b"", "a", 10, 1);
        s.read(
            b"HTTP/1.1 101 OK\r\nSec-WebSocket-Accept: a\r\n\r\n",
            |_| {},
        )
        .unwrap();
        assert_eq!(
            s.read(&server_frame(2, &[0; 9]), |_| {}),
            Err(WsError::Frame)
        );
    }
}
