//! WebSocket framing (RFC 6455 §5), the client's side: frame heads parsed from the server's
//! bytes and written for the client's, with the client's mask. No I/O, no allocation; the
//! handshake's HTTP/1.1 part is the rest of this crate's (a `101` through
//! [`crate::client::parse_upgrade_response`]), but its key and accept values are here — made by
//! the load generator's `--ws` and by the proxy when it turns an HTTP/2 client's extended
//! CONNECT (RFC 8441) into an HTTP/1.1 handshake, and checked by both.
//!
//! Why not a WebSocket crate: `tungstenite` owns its stream and hands back each message as an
//! allocated `Message`; the load generator drives its sockets from its own epoll loop and only
//! needs to know where each echoed message ends, which is the 2–14 bytes of a frame head.
//! Payloads are never copied or unmasked here: the caller counts them.
//!
//! Refused (RFC 6455 §5.2, §5.5): reserved bits without a negotiated extension, an unknown
//! opcode, a control frame that is fragmented or longer than 125 bytes, a 64-bit length with its
//! top bit set, and — for a client reading a server — a masked frame.

use std::hash::{BuildHasher, Hasher};

use base64::Engine as _;
use sha1::{Digest, Sha1};

use crate::Status;

/// A frame head is at most this long: 2 bytes, 8 of extended length, 4 of mask.
pub const MAX_FRAME_HEAD: usize = 14;

/// Opcodes (RFC 6455 §5.2).
pub mod opcode {
    pub const CONTINUATION: u8 = 0x0;
    pub const TEXT: u8 = 0x1;
    pub const BINARY: u8 = 0x2;
    pub const CLOSE: u8 = 0x8;
    pub const PING: u8 = 0x9;
    pub const PONG: u8 = 0xA;
}

/// Longest payload of a control frame (RFC 6455 §5.5).
pub const MAX_CONTROL_PAYLOAD: u64 = 125;

/// Why a frame head cannot be read. The connection is failed after any of these (§7.1.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// RSV1–3 set, and no extension was negotiated that would give them a meaning.
    #[error("reserved bits set in a WebSocket frame")]
    Reserved,
    /// An opcode RFC 6455 leaves reserved.
    #[error("unknown WebSocket opcode {0:#x}")]
    Opcode(u8),
    /// A control frame that is fragmented or has more than 125 bytes of payload.
    #[error("invalid WebSocket control frame")]
    Control,
    /// A 64-bit length with its most significant bit set.
    #[error("invalid WebSocket frame length")]
    Length,
    /// A masked frame from a server (§5.1: the client must fail the connection).
    #[error("masked WebSocket frame from the server")]
    Masked,
}

/// RFC 6455 §1.3: appended to the key before hashing it into `Sec-WebSocket-Accept`.
const ACCEPT_GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// A fresh `Sec-WebSocket-Key` (16 random bytes, base64) and the `Sec-WebSocket-Accept` that
/// answers it.
pub fn handshake_key() -> (String, String) {
    // `RandomState` is seeded from the system's randomness once per thread and stepped per
    // instance: unpredictable enough for a nonce whose job is to prove the server read it.
    let mut bytes = [0u8; 16];
    for (i, chunk) in bytes.chunks_mut(8).enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_usize(i);
        chunk.copy_from_slice(&h.finish().to_le_bytes()[..chunk.len()]);
    }
    let key = base64::engine::general_purpose::STANDARD.encode(bytes);
    let accept = accept_for(&key);
    (key, accept)
}

/// The `Sec-WebSocket-Accept` value for `key` (RFC 6455 §4.2.2).
pub fn accept_for(key: &str) -> String {
    let mut sha = Sha1::new();
    sha.update(key.as_bytes());
    sha.update(ACCEPT_GUID);
    base64::engine::general_purpose::STANDARD.encode(sha.finalize())
}

/// A frame head as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHead {
    /// The last frame of its message.
    pub fin: bool,
    pub opcode: u8,
    /// Payload bytes after the head.
    pub len: u64,
    /// Bytes of the head itself.
    pub head_len: usize,
}

impl FrameHead {
    /// Whether this is a control frame (close, ping, pong).
    #[must_use]
    pub fn is_control(&self) -> bool {
        self.opcode & 0x8 != 0
    }
}

/// Parses the head of a server's frame at the start of `buf`: [`Status::Partial`] until all of
/// it is there.
///
/// # Errors
/// Any [`FrameError`].
pub fn parse_server_frame_head(buf: &[u8]) -> Result<Status<FrameHead>, FrameError> {
    let [b0, b1, ..] = *buf else {
        return Ok(Status::Partial);
    };
    if b0 & 0x70 != 0 {
        return Err(FrameError::Reserved);
    }
    let opcode = b0 & 0x0f;
    if !matches!(opcode, 0x0..=0x2 | 0x8..=0xA) {
        return Err(FrameError::Opcode(opcode));
    }
    if b1 & 0x80 != 0 {
        return Err(FrameError::Masked);
    }
    let fin = b0 & 0x80 != 0;
    let (len, head_len) = match b1 & 0x7f {
        126 => {
            let Some(b) = buf.get(2..4) else {
                return Ok(Status::Partial);
            };
            (u64::from(u16::from_be_bytes([b[0], b[1]])), 4)
        }
        127 => {
            let Some(b) = buf.get(2..10) else {
                return Ok(Status::Partial);
            };
            let mut n = [0u8; 8];
            n.copy_from_slice(b);
            let len = u64::from_be_bytes(n);
            if len >> 63 != 0 {
                return Err(FrameError::Length);
            }
            (len, 10)
        }
        n => (u64::from(n), 2),
    };
    let head = FrameHead {
        fin,
        opcode,
        len,
        head_len,
    };
    if head.is_control() && (!fin || len > MAX_CONTROL_PAYLOAD) {
        return Err(FrameError::Control);
    }
    Ok(Status::Complete(head))
}

/// Appends a client frame to `out`: a final frame of `opcode` carrying `payload`, masked with
/// `mask` (§5.3: every client frame is masked).
pub fn write_client_frame(out: &mut Vec<u8>, opcode: u8, payload: &[u8], mask: [u8; 4]) {
    out.push(0x80 | (opcode & 0x0f));
    let len = payload.len();
    if len < 126 {
        // Below 126 by the branch: fits the 7 bits.
        out.push(0x80 | u8::try_from(len).unwrap_or(0));
    } else if let Ok(len) = u16::try_from(len) {
        out.push(0x80 | 126);
        out.extend_from_slice(&len.to_be_bytes());
    } else {
        out.push(0x80 | 127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
    out.extend_from_slice(&mask);
    out.extend(payload.iter().zip(mask.iter().cycle()).map(|(b, m)| b ^ m));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 6455 §1.3's example key and accept value.
    #[test]
    fn accept_value() {
        assert_eq!(
            accept_for("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        let (key, accept) = handshake_key();
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(&key)
                .unwrap()
                .len(),
            16
        );
        assert_eq!(accept, accept_for(&key));
    }

    macro_rules! heads {
        ($($name:ident: $bytes:expr => $want:expr;)*) => {$(
            #[test]
            fn $name() {
                let bytes: &[u8] = $bytes;
                let want: Result<Status<FrameHead>, FrameError> = $want;
                assert_eq!(parse_server_frame_head(bytes), want);
                // Every strict prefix of a good head is partial.
                if let Ok(Status::Complete(h)) = want {
                    for n in 0..h.head_len {
                        assert_eq!(parse_server_frame_head(&bytes[..n]), Ok(Status::Partial), "{n}");
                    }
                }
            }
        )*};
    }

    fn head(
        fin: bool,
        opcode: u8,
        len: u64,
        head_len: usize,
    ) -> Result<Status<FrameHead>, FrameError> {
        Ok(Status::Complete(FrameHead {
            fin,
            opcode,
            len,
            head_len,
        }))
    }

    heads! {
        short_text: b"\x81\x05hello" => head(true, 1, 5, 2);
        sixteen_bit_binary: b"\x82\x7e\x01\x00" => head(true, 2, 256, 4);
        sixty_four_bit: b"\x02\x7f\x00\x00\x00\x00\x00\x10\x00\x00" => head(false, 2, 1 << 20, 10);
        continuation: b"\x80\x00" => head(true, 0, 0, 2);
        ping: b"\x89\x00" => head(true, 9, 0, 2);
        close: b"\x88\x02\x03\xe8" => head(true, 8, 2, 2);
        masked: b"\x81\x85abcd" => Err(FrameError::Masked);
        reserved: b"\xc1\x00" => Err(FrameError::Reserved);
        unknown_opcode: b"\x83\x00" => Err(FrameError::Opcode(3));
        fragmented_ping: b"\x09\x00" => Err(FrameError::Control);
        long_ping: b"\x89\x7e\x00\x7e" => Err(FrameError::Control);
        top_bit_length: b"\x82\x7f\x80\x00\x00\x00\x00\x00\x00\x00" => Err(FrameError::Length);
    }

    /// RFC 6455 §5.7's masked "Hello", and lengths at each size boundary.
    #[test]
    fn client_frames() {
        let mut out = Vec::new();
        write_client_frame(&mut out, opcode::TEXT, b"Hello", [0x37, 0xfa, 0x21, 0x3d]);
        assert_eq!(out, b"\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58");
        for (len, head_len) in [(125, 6), (126, 8), (65535, 8), (65536, 14)] {
            out.clear();
            write_client_frame(&mut out, opcode::BINARY, &vec![7; len], [1, 2, 3, 4]);
            assert_eq!(out.len(), head_len + len, "{len}");
            // Unmasked by the same mask, the payload comes back.
            let payload: Vec<u8> = out[head_len..]
                .iter()
                .zip([1u8, 2, 3, 4].iter().cycle())
                .map(|(b, m)| b ^ m)
                .collect();
            assert!(payload.iter().all(|&b| b == 7));
        }
    }
}
