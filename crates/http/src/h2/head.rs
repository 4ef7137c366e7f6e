//! A request's header block, decoded with HPACK ([`super::hpack`]) and checked as RFC 9113 §8.2–§8.3 asks: field
//! names in lower case, pseudo-header fields first, once each, only the request ones, none of
//! HTTP/1.1's connection-specific fields, no control characters, `:protocol` only on an extended
//! CONNECT (RFC 8441 §4), and the decoded list within its
//! limit — counted while decoding, so a small block that expands to megabytes (an "HPACK bomb")
//! is refused without ever being stored.
//!
//! The decoded fields are kept in one reused buffer per connection ([`RequestHead`]), so a
//! request allocates nothing here once the buffers are warm.

use std::ops::Range;

use super::hpack::Decoder;

/// Why a header block was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// The block could not be decoded: the HPACK state is lost, so the connection ends
    /// (COMPRESSION_ERROR).
    Compression,
    /// The request is malformed: the stream is reset (PROTOCOL_ERROR).
    Malformed,
    /// The decoded list is larger than allowed: answered 431.
    TooLarge,
}

/// A decoded request head: pseudo-header fields and regular fields, as ranges of `buf`.
#[derive(Debug, Default)]
pub struct RequestHead {
    buf: Vec<u8>,
    fields: Vec<(Range<usize>, Range<usize>)>,
    method: Option<Range<usize>>,
    scheme: Option<Range<usize>>,
    authority: Option<Range<usize>>,
    path: Option<Range<usize>>,
    /// `:protocol` (RFC 8441 §4): an extended CONNECT.
    protocol: Option<Range<usize>>,
    /// The declared body length (`content-length`).
    pub content_length: Option<u64>,
}

/// Connection-specific fields HTTP/2 forbids (RFC 9113 §8.2.2).
const CONNECTION_SPECIFIC: [&[u8]; 5] = [
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"transfer-encoding",
    b"upgrade",
];

impl RequestHead {
    /// Decodes `block` (a complete header block: HEADERS and its CONTINUATIONs) into this head.
    /// With `trailers`, the block is a trailer section: pseudo-header fields are refused and
    /// nothing is kept.
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
        self.buf.clear();
        self.fields.clear();
        self.method = None;
        self.scheme = None;
        self.authority = None;
        self.path = None;
        self.protocol = None;
        self.content_length = None;
        let mut size = 0usize;
        let mut problem: Option<HeadError> = None;
        let mut regular_seen = false;
        let result = decoder.decode(block, |name, value| {
            size = size.saturating_add(name.len() + value.len() + 32);
            if problem.is_some() {
                return;
            }
            if size > max_list_size {
                problem = Some(HeadError::TooLarge);
                return;
            }
            if let Err(e) = self.field(name, value, trailers, &mut regular_seen) {
                problem = Some(e);
            }
        });
        if result.is_err() {
            return Err(HeadError::Compression);
        }
        if let Some(p) = problem {
            return Err(p);
        }
        if trailers {
            return Ok(());
        }
        let is_connect = self.method() == Some("CONNECT");
        let complete = if self.protocol.is_some() {
            // RFC 8441 §4: only on CONNECT, which then carries all of `:scheme`, `:path` and
            // `:authority` like any request.
            is_connect
                && self.authority.is_some()
                && self.scheme.is_some()
                && self.path.as_ref().is_some_and(|p| !p.is_empty())
        } else if is_connect {
            self.authority.is_some() && self.scheme.is_none() && self.path.is_none()
        } else {
            self.method.is_some()
                && self.scheme.is_some()
                && self.path.as_ref().is_some_and(|p| !p.is_empty())
        };
        if complete {
            Ok(())
        } else {
            Err(HeadError::Malformed)
        }
    }

    fn field(
        &mut self,
        name: &[u8],
        value: &[u8],
        trailers: bool,
        regular_seen: &mut bool,
    ) -> Result<(), HeadError> {
        if value.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n')
            || value.first().is_some_and(|&b| b == b' ' || b == b'\t')
            || value.last().is_some_and(|&b| b == b' ' || b == b'\t')
        {
            return Err(HeadError::Malformed);
        }
        if let Some(pseudo) = name.strip_prefix(b":") {
            if trailers || *regular_seen {
                return Err(HeadError::Malformed);
            }
            let range = self.push(value);
            let slot = match pseudo {
                b"method" => &mut self.method,
                b"scheme" => &mut self.scheme,
                b"authority" => &mut self.authority,
                b"path" => &mut self.path,
                b"protocol" => &mut self.protocol,
                _ => return Err(HeadError::Malformed),
            };
            if slot.is_some() {
                return Err(HeadError::Malformed);
            }
            *slot = Some(range);
            if pseudo == b"path" && value.iter().any(|&b| !(0x21..0x7f).contains(&b)) {
                return Err(HeadError::Malformed);
            }
            return Ok(());
        }
        *regular_seen = true;
        if name.is_empty() || !name.iter().all(|&b| is_lower_token(b)) {
            return Err(HeadError::Malformed);
        }
        if CONNECTION_SPECIFIC.contains(&name) || (name == b"te" && value != b"trailers") {
            return Err(HeadError::Malformed);
        }
        if trailers {
            return Ok(());
        }
        if name == b"content-length" {
            let n = std::str::from_utf8(value)
                .ok()
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or(HeadError::Malformed)?;
            if self.content_length.is_some_and(|c| c != n) {
                return Err(HeadError::Malformed);
            }
            self.content_length = Some(n);
        }
        let n = self.push(name);
        let v = self.push(value);
        self.fields.push((n, v));
        Ok(())
    }

    fn push(&mut self, bytes: &[u8]) -> Range<usize> {
        let start = self.buf.len();
        self.buf.extend_from_slice(bytes);
        start..self.buf.len()
    }

    fn text(&self, r: Option<&Range<usize>>) -> Option<&str> {
        r.and_then(|r| std::str::from_utf8(&self.buf[r.clone()]).ok())
    }

    /// `:method`.
    #[must_use]
    pub fn method(&self) -> Option<&str> {
        self.text(self.method.as_ref())
    }

    /// `:path` (checked to be visible ASCII).
    #[must_use]
    pub fn path(&self) -> Option<&str> {
        self.text(self.path.as_ref())
    }

    /// `:authority`.
    #[must_use]
    pub fn authority(&self) -> Option<&[u8]> {
        self.authority.as_ref().map(|r| &self.buf[r.clone()])
    }

    /// `:scheme`.
    #[must_use]
    pub fn scheme(&self) -> Option<&str> {
        self.text(self.scheme.as_ref())
    }

    /// `:protocol` of an extended CONNECT (RFC 8441), e.g. `websocket`.
    #[must_use]
    pub fn protocol(&self) -> Option<&str> {
        self.text(self.protocol.as_ref())
    }

    /// How many regular fields there are.
    #[must_use]
    pub fn field_count(&self) -> usize {
        self.fields.len()
    }

    /// The regular fields, in order, names in lower case.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.fields.iter().map(|(n, v)| {
            (
                std::str::from_utf8(&self.buf[n.clone()]).unwrap_or(""),
                &self.buf[v.clone()],
            )
        })
    }
}

/// `tchar` of RFC 9110 §5.6.2, without upper-case letters.
fn is_lower_token(b: u8) -> bool {
    matches!(b,
        b'a'..=b'z' | b'0'..=b'9' | b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-'
        | b'.' | b'^' | b'_' | b'`' | b'|' | b'~')
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
        assert!(head.buf.len() < 70 << 10, "{}", head.buf.len());
    }
}
