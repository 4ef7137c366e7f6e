//! A request's header block decoded with HPACK ([`super::hpack`]) into a [`RequestHead`],
//! checked by the rules HTTP/2 and HTTP/3 share ([`crate::head`]): a block that breaks them is
//! [`HeadError::Malformed`] (the stream is reset), one larger than allowed
//! [`HeadError::TooLarge`] (431), one that cannot be decoded [`HeadError::Compression`] (the
//! connection ends).

use super::hpack::Decoder;
use crate::head::{HeadCheck, Rules};
pub use crate::head::{HeadError, RequestHead};

impl RequestHead {
    /// Decodes `block` (a complete header block: HEADERS and its CONTINUATIONs) into this head.
    /// With `trailers`, the block is a trailer section: pseudo-header fields are refused, and
    /// the fields are kept for a proxy that passes them on ([`RequestHead::fields`]). `:protocol` is accepted on CONNECT: the server announces extended
    /// CONNECT (RFC 8441), for WebSocket over HTTP/2.
    ///
    /// # Errors
    /// See [`HeadError`]. The decoder's table is kept in step even when the request is refused
    /// (every field is decoded), unless the error is [`HeadError::Compression`].
    pub fn decode(
        &mut self,
        decoder: &mut Decoder,
        block: &[u8],
        max_list_size: usize,
        trailers: bool,
    ) -> Result<(), HeadError> {
        let mut check = HeadCheck::new(
            self,
            Rules {
                max_list_size,
                trailers,
                extended_connect: true,
                require_authority: false,
            },
        );
        if decoder
            .decode(block, |name, value| check.field(name, value))
            .is_err()
        {
            return Err(HeadError::Compression);
        }
        check.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Literals with incremental indexing, names and values not Huffman-coded.
    fn encode(fields: &[(&str, &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (n, v) in fields {
            out.push(0x40);
            for s in [n, v] {
                assert!(s.len() < 127);
                out.push(s.len() as u8);
                out.extend_from_slice(s.as_bytes());
            }
        }
        out
    }

    fn decode(fields: &[(&str, &str)], max: usize) -> Result<RequestHead, HeadError> {
        let block = encode(fields);
        let mut head = RequestHead::default();
        head.decode(&mut Decoder::default(), &block, max, false)
            .map(|()| head)
    }

    const BASE: [(&str, &str); 4] = [
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/a?b"),
        (":authority", "example.com"),
    ];

    #[test]
    fn a_request() {
        let mut f = BASE.to_vec();
        f.push(("user-agent", "t"));
        f.push(("content-length", "5"));
        let h = decode(&f, 16 << 10).unwrap();
        assert_eq!(h.method(), Some("GET"));
        assert_eq!(h.path(), Some("/a?b"));
        assert_eq!(h.authority(), Some(&b"example.com"[..]));
        assert_eq!(h.content_length, Some(5));
        let fields: Vec<_> = h.fields().collect();
        assert_eq!(fields[0], ("user-agent", &b"t"[..]));
    }

    #[test]
    fn malformed_shapes() {
        let cases: &[&[(&str, &str)]] = &[
            &[(":method", "GET"), (":scheme", "https")],
            &[(":method", "GET"), (":scheme", "https"), (":path", "")],
            &[
                (":method", "GET"),
                (":method", "GET"),
                (":scheme", "h"),
                (":path", "/"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "h"),
                (":path", "/"),
                (":status", "200"),
            ],
            &[
                (":method", "GET"),
                ("a", "b"),
                (":scheme", "h"),
                (":path", "/"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "h"),
                (":path", "/"),
                ("Upper", "x"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "h"),
                (":path", "/"),
                ("connection", "close"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "h"),
                (":path", "/"),
                ("te", "gzip"),
            ],
            &[
                (":method", "GET"),
                (":scheme", "h"),
                (":path", "/"),
                ("a", " padded"),
            ],
            &[(":method", "GET"), (":scheme", "h"), (":path", "/a b")],
            &[
                (":method", "GET"),
                (":scheme", "h"),
                (":path", "/"),
                ("content-length", "x"),
            ],
        ];
        for c in cases {
            assert_eq!(
                decode(c, 16 << 10).err(),
                Some(HeadError::Malformed),
                "{c:?}"
            );
        }
        let mut ok = BASE.to_vec();
        ok.push(("te", "trailers"));
        assert!(decode(&ok, 16 << 10).is_ok());
    }

    #[test]
    fn extended_connect() {
        let ws = [
            (":method", "CONNECT"),
            (":protocol", "websocket"),
            (":scheme", "https"),
            (":path", "/chat"),
            (":authority", "example.com"),
            ("sec-websocket-version", "13"),
        ];
        let h = decode(&ws, 16 << 10).unwrap();
        assert_eq!(h.method(), Some("CONNECT"));
        assert_eq!(h.protocol(), Some("websocket"));
        assert_eq!(h.path(), Some("/chat"));
        // `:protocol` on another method, or an extended CONNECT missing `:path`, `:scheme` or
        // `:authority` (RFC 8441 §4), is malformed.
        let mut get = ws;
        get[0] = (":method", "GET");
        assert_eq!(decode(&get, 16 << 10).err(), Some(HeadError::Malformed));
        for missing in [":scheme", ":path", ":authority"] {
            let f: Vec<_> = ws.iter().copied().filter(|(n, _)| *n != missing).collect();
            assert_eq!(
                decode(&f, 16 << 10).err(),
                Some(HeadError::Malformed),
                "{missing}"
            );
        }
        // A plain CONNECT still has only `:authority`, and no `:protocol` is reported.
        let plain = decode(&[(":method", "CONNECT"), (":authority", "a:443")], 16 << 10).unwrap();
        assert_eq!(plain.protocol(), None);
    }

    #[test]
    fn too_large_and_garbage() {
        let big = "x".repeat(100);
        let mut f = BASE.to_vec();
        f.push(("a", &big));
        assert_eq!(decode(&f, 200).err(), Some(HeadError::TooLarge));
        let mut head = RequestHead::default();
        // Index 0 and an index far past both tables.
        for block in [&[0x80u8][..], &[0xff, 0xff, 0xff, 0x7f]] {
            assert_eq!(
                head.decode(&mut Decoder::default(), block, 4096, false),
                Err(HeadError::Compression)
            );
        }
    }

    #[test]
    fn a_bomb_is_counted_not_stored() {
        // One 4000-byte entry in the dynamic table, then referenced 1000 times (1 byte each).
        let mut block = encode(&BASE);
        block.extend_from_slice(&[0x40, 4]);
        block.extend_from_slice(b"bomb");
        // 4000 as a 7-bit-prefix integer: 127, then 3873 in 7-bit groups.
        block.extend_from_slice(&[0x7f, 0x80 | (3873 % 128) as u8, (3873 / 128) as u8]);
        block.extend(std::iter::repeat_n(b'y', 4000));
        // Newest entry: index 62.
        block.extend(std::iter::repeat_n(0x80 | 62, 1000));
        let mut head = RequestHead::default();
        assert_eq!(
            head.decode(&mut Decoder::default(), &block, 64 << 10, false),
            Err(HeadError::TooLarge)
        );
        assert!(head.held() < 70 << 10, "{}", head.held());
    }
}
