//! QUIC variable-length integers (RFC 9000 §16): the two high bits of the first byte give the
//! length (1, 2, 4 or 8 bytes), the rest is the value in network byte order, up to 2^62 - 1.
//! HTTP/3 uses them for frame types and lengths, setting identifiers and values, stream types
//! and push and stream ids.
//!
//! Reading reports a value cut off by the end of the input as [`Status::Partial`] (the caller
//! waits for more bytes), never as an error: every bit pattern is a valid integer. Non-minimal
//! encodings are accepted, as RFC 9000 §16 allows; writing always picks the shortest.

use crate::Status;

/// The largest value a variable-length integer holds (2^62 - 1).
pub const MAX: u64 = (1 << 62) - 1;

/// The longest encoding, in bytes.
pub const MAX_LEN: usize = 8;

/// Reads one integer from the start of `input`: its value and how many bytes it took.
#[must_use]
pub fn decode(input: &[u8]) -> Status<(u64, usize)> {
    let Some(&first) = input.first() else {
        return Status::Partial;
    };
    let len = 1usize << (first >> 6);
    let Some(bytes) = input.get(..len) else {
        return Status::Partial;
    };
    let mut v = u64::from(first & 0x3f);
    for &b in &bytes[1..] {
        v = (v << 8) | u64::from(b);
    }
    Status::Complete((v, len))
}

/// How many bytes the shortest encoding of `v` takes. Values above [`MAX`] are clamped to it.
#[must_use]
pub const fn len(v: u64) -> usize {
    if v < 1 << 6 {
        1
    } else if v < 1 << 14 {
        2
    } else if v < 1 << 30 {
        4
    } else {
        8
    }
}

/// Writes `v` in its shortest encoding into the start of `buf`, returning the length.
/// Values above [`MAX`] are clamped to it (no HTTP/3 quantity comes near: lengths are `usize`
/// and ids are bounded by QUIC well below).
pub fn write_to(v: u64, buf: &mut [u8; MAX_LEN]) -> usize {
    let v = v.min(MAX);
    let n = len(v);
    let tag: u64 = match n {
        1 => 0,
        2 => 0b01,
        4 => 0b10,
        _ => 0b11,
    };
    let all = (v | (tag << (n * 8 - 2))).to_be_bytes();
    buf[..n].copy_from_slice(&all[8 - n..]);
    n
}

/// Appends `v` in its shortest encoding.
pub fn put(v: u64, out: &mut Vec<u8>) {
    let mut buf = [0u8; MAX_LEN];
    let n = write_to(v, &mut buf);
    out.extend_from_slice(&buf[..n]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 9000 Appendix A.1's examples, and the edges of each length.
    #[test]
    fn rfc9000_examples() {
        let cases: &[(&[u8], u64)] = &[
            (
                &[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c],
                151_288_809_941_952_652,
            ),
            (&[0x9d, 0x7f, 0x3e, 0x7d], 494_878_333),
            (&[0x7b, 0xbd], 15_293),
            (&[0x25], 37),
            // A non-minimal encoding of 37 is accepted.
            (&[0x40, 0x25], 37),
        ];
        for &(bytes, v) in cases {
            assert_eq!(
                decode(bytes),
                Status::Complete((v, bytes.len())),
                "{bytes:x?}"
            );
            for cut in 0..bytes.len() {
                assert_eq!(decode(&bytes[..cut]), Status::Partial);
            }
        }
    }

    #[test]
    fn round_trips_at_every_edge() {
        for v in [0, 63, 64, 16_383, 16_384, (1 << 30) - 1, 1 << 30, MAX] {
            let mut out = Vec::new();
            put(v, &mut out);
            assert_eq!(out.len(), len(v));
            let mut with_tail = out.clone();
            with_tail.push(0xff);
            assert_eq!(decode(&with_tail), Status::Complete((v, out.len())));
        }
        let mut out = Vec::new();
        put(u64::MAX, &mut out);
        assert_eq!(decode(&out), Status::Complete((MAX, 8)), "clamped");
    }
}
