//! HTTP/2's codec (RFC 9113, RFC 7541): frames in [`frame`], request header blocks in [`head`],
//! HPACK in [`hpack`]: decoding request blocks, encoding response blocks; and the client side
//! of a connection as a state machine without I/O in [`client`]. Written here: the
//! crates measured allocate per field or rebuild their Huffman tables per string (see
//! [`hpack`]).

pub mod client;
pub mod frame;
pub mod head;
pub mod hpack;
mod hpack_tables;

pub use frame::{ErrorCode, FrameHeader, Settings};
pub use head::{HeadError, RequestHead};
pub use hpack::{Decoder, Encoder, HpackError};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_block_decodes() {
        let long = "v".repeat(300);
        for status in [200, 404, 418] {
            let mut out = Vec::new();
            Encoder::default().encode_response(
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
