//! WebSocket frames (RFC 6455 §5): a server's frame heads as the load generator and the proxy's
//! tunnel read them, and the client's frames as they are written.

use lowlat_http::ws::{self, opcode, FrameError, FrameHead, MAX_FRAME_HEAD};
use lowlat_http::Status;

/// A server's frames on any bytes, walked head by head (payloads skipped), whole and in
/// pieces of the size the first byte says: the same heads and verdict either way, every head
/// within [`MAX_FRAME_HEAD`] and the bytes it was given. Then a client frame written around
/// the input, unmasked as a server would see it, reads back as what was written.
pub fn frames(data: &[u8]) {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let whole = walk(rest, rest.len().max(1));
    let pieces = walk(rest, usize::from(control) + 1);
    assert_eq!(whole, pieces);

    let op = [opcode::TEXT, opcode::BINARY, opcode::CONTINUATION][usize::from(control % 3)];
    // The 7-bit and the 16-bit length encodings per input; the 64-bit one (a 64 KiB payload,
    // which would cost a thousand parses each time) once per process.
    let len = if control & 0x80 == 0 {
        rest.len() % 126
    } else {
        126 + rest.len() % 300
    };
    let payload: Vec<u8> = rest.iter().copied().cycle().take(len).collect();
    if payload.len() == len {
        roundtrip(op, &payload, [control, 0x5a, 0xa5, control ^ 0xff]);
    }
    LONG.call_once(|| roundtrip(opcode::BINARY, &vec![7; 65_536 + 3], [1, 2, 3, 4]));
}

/// A client frame written, unmasked as a server would see it, reads back as what was written.
fn roundtrip(op: u8, payload: &[u8], mask: [u8; 4]) {
    let mut out = Vec::new();
    ws::write_client_frame(&mut out, op, payload, mask);
    let server_view = unmask(&out);
    let Ok(Status::Complete(head)) = ws::parse_server_frame_head(&server_view) else {
        panic!("a written frame does not read back");
    };
    assert!(head.fin && head.opcode == op && head.len == payload.len() as u64);
    assert_eq!(&server_view[head.head_len..], payload);
}

/// The 64-bit length's round trip, done once per process.
static LONG: std::sync::Once = std::sync::Once::new();

type Walked = (Vec<FrameHead>, Option<FrameError>);

/// Heads found walking `input` read in pieces of `piece` bytes, keeping an incomplete head.
fn walk(input: &[u8], piece: usize) -> Walked {
    let mut heads = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    let mut skip: u64 = 0;
    for chunk in input.chunks(piece) {
        let mut chunk = chunk;
        let s = usize::try_from(skip).unwrap_or(usize::MAX).min(chunk.len());
        skip -= s as u64;
        chunk = &chunk[s..];
        pending.extend_from_slice(chunk);
        loop {
            match ws::parse_server_frame_head(&pending) {
                Err(e) => return (heads, Some(e)),
                Ok(Status::Partial) => {
                    assert!(pending.len() < MAX_FRAME_HEAD);
                    break;
                }
                Ok(Status::Complete(h)) => {
                    assert!(h.head_len <= pending.len() && h.head_len <= MAX_FRAME_HEAD);
                    assert!(!h.is_control() || (h.fin && h.len <= ws::MAX_CONTROL_PAYLOAD));
                    pending.drain(..h.head_len);
                    let s = usize::try_from(h.len)
                        .unwrap_or(usize::MAX)
                        .min(pending.len());
                    pending.drain(..s);
                    skip = h.len - s as u64;
                    heads.push(h);
                    if skip > 0 {
                        break;
                    }
                }
            }
        }
    }
    (heads, None)
}

/// A client's frame as a server's: the mask bit cleared, the key removed, the payload unmasked.
fn unmask(frame: &[u8]) -> Vec<u8> {
    let len_bytes = match frame[1] & 0x7f {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    let key_at = 2 + len_bytes;
    let key = &frame[key_at..key_at + 4];
    let mut out = vec![frame[0], frame[1] & 0x7f];
    out.extend_from_slice(&frame[2..key_at]);
    out.extend(
        frame[key_at + 4..]
            .iter()
            .zip(key.iter().cycle())
            .map(|(b, m)| b ^ m),
    );
    out
}
