//! HTTP/2's codec (RFC 9113, RFC 7541): frames in [`frame`], request header blocks in [`head`],
//! HPACK in [`hpack`] (decoding) and [`encode_response`] (a response's header block). Both are
//! written here: the crates measured allocate per field or rebuild their Huffman tables per
//! string (see [`hpack`]).

pub mod frame;
pub mod head;
pub mod hpack;
mod hpack_tables;

pub use frame::{ErrorCode, FrameHeader, Settings};
pub use head::{HeadError, RequestHead};
pub use hpack::{Decoder, HpackError};

/// Response fields whose names are in HPACK's static table (RFC 7541 Appendix A), by index.
const STATIC_NAMES: [(&[u8], u8); 27] = [
    (b"accept-ranges", 18),
    (b"access-control-allow-origin", 20),
    (b"age", 21),
    (b"allow", 22),
    (b"cache-control", 24),
    (b"content-disposition", 25),
    (b"content-encoding", 26),
    (b"content-language", 27),
    (b"content-length", 28),
    (b"content-location", 29),
    (b"content-range", 30),
    (b"content-type", 31),
    (b"date", 33),
    (b"etag", 34),
    (b"expires", 36),
    (b"last-modified", 44),
    (b"link", 45),
    (b"location", 46),
    (b"proxy-authenticate", 48),
    (b"refresh", 52),
    (b"retry-after", 53),
    (b"server", 54),
    (b"set-cookie", 55),
    (b"strict-transport-security", 56),
    (b"vary", 59),
    (b"via", 60),
    (b"www-authenticate", 61),
];

/// Appends the HPACK block of a response: `:status`, then `fields` (names in lower case).
///
/// Hand-written rather than `loona_hpack::Encoder`: every field is a literal *without indexing*
/// (its name from the static table when it is there), so the encoder keeps no dynamic table —
/// nothing to evict, no table size to follow when the client lowers SETTINGS_HEADER_TABLE_SIZE,
/// and no per-field search of a table. Response heads are small and mostly change per response
/// (date, length, etag), so indexing would rarely pay.
pub fn encode_response<'a>(
    status: u16,
    fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    out: &mut Vec<u8>,
) {
    match status {
        200 => out.push(0x80 | 8),
        204 => out.push(0x80 | 9),
        206 => out.push(0x80 | 10),
        304 => out.push(0x80 | 11),
        400 => out.push(0x80 | 12),
        404 => out.push(0x80 | 13),
        500 => out.push(0x80 | 14),
        _ => {
            let mut code = itoa::Buffer::new();
            out.push(8); // literal without indexing, name :status
            string(code.format(status).as_bytes(), out);
        }
    }
    for (name, value) in fields {
        match STATIC_NAMES.iter().find(|(n, _)| *n == name) {
            Some(&(_, index)) => integer(usize::from(index), 4, 0x00, out),
            None => {
                out.push(0x00);
                string(name, out);
            }
        }
        string(value, out);
    }
}

/// An HPACK integer with an `n`-bit prefix, the first byte's high bits `flags` (RFC 7541 §5.1).
fn integer(mut v: usize, n: u8, flags: u8, out: &mut Vec<u8>) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(flags | v as u8);
        return;
    }
    out.push(flags | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// An HPACK string literal, not Huffman-coded (RFC 7541 §5.2).
fn string(s: &[u8], out: &mut Vec<u8>) {
    integer(s.len(), 7, 0x00, out);
    out.extend_from_slice(s);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_block_decodes() {
        let long = "v".repeat(300);
        for status in [200, 404, 418] {
            let mut out = Vec::new();
            encode_response(
                status,
                [
                    (&b"content-type"[..], &b"text/plain"[..]),
                    (b"x-custom", long.as_bytes()),
                    (b"www-authenticate", b"Basic"),
                ],
                &mut out,
            );
            let mut got = Vec::new();
            Decoder::default()
                .decode(&out, |n, v| got.push((n.to_vec(), v.to_vec())))
                .unwrap();
            assert_eq!(
                got,
                vec![
                    (b":status".to_vec(), status.to_string().into_bytes()),
                    (b"content-type".to_vec(), b"text/plain".to_vec()),
                    (b"x-custom".to_vec(), long.clone().into_bytes()),
                    (b"www-authenticate".to_vec(), b"Basic".to_vec()),
                ]
            );
        }
    }
}
