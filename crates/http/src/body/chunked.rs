//! `Transfer-Encoding: chunked` decoding (RFC 9112 §7.1), incremental and strict.
//!
//! Strict because a chunked parser that is lenient where another hop is strict is how requests
//! get smuggled: chunk sizes are hex digits only (at most 16 of them), every line ends in CRLF
//! (a bare LF or CR is an error here), chunk data must be followed by CRLF, and chunk extensions
//! and trailer fields are skipped but bounded — or, for a proxy that passes them on, kept
//! ([`ChunkedDecoder::keep_trailers`]). The decoded data goes to a callback, so the server can
//! collect it and the load generator can merely count it.

use crate::error::ParseError;
use crate::limits::MAX_TRAILER_BYTES;

/// Where the decoder is within the chunked body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading hex digits of a chunk size.
    Size,
    /// After the size: skipping a chunk extension up to CR.
    Extension,
    /// Expecting the LF of the size line.
    SizeLf,
    /// Inside chunk data; `remaining` bytes to go.
    Data,
    /// Expecting the CR after chunk data.
    DataCr,
    /// Expecting the LF after chunk data.
    DataLf,
    /// At the start of a trailer line (or of the final empty line).
    TrailerStart,
    /// Inside a trailer field line, up to CR.
    Trailer,
    /// Expecting the LF that ends a trailer line.
    TrailerLf,
    /// Expecting the LF of the final empty line.
    EndLf,
    /// The whole body has been read.
    Done,
}

/// Progress reported by [`ChunkedDecoder::decode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    /// Input bytes consumed by this call.
    pub consumed: usize,
    /// Whether the body ended (the bytes after `consumed` belong to the next message).
    pub done: bool,
}

/// The well-formed fields of a trailer section kept by [`ChunkedDecoder::keep_trailers`]:
/// `(name, value)`, the value's surrounding whitespace trimmed. A line that is not
/// `token ":" value` (or whose value holds a control character) is left out: a recipient may
/// discard trailer fields (RFC 9110 §6.5.1), and a proxy must not pass on what it cannot read.
pub fn trailer_fields(raw: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    raw.split(|&b| b == b'\n').filter_map(|line| {
        let colon = line.iter().position(|&b| b == b':')?;
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if name.is_empty() || !name.iter().all(|&b| token(b)) {
            return None;
        }
        let value = value.trim_ascii();
        if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return None;
        }
        Some((name, value))
    })
}

/// An incremental decoder for one chunked body.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    /// Bytes of chunk data still to come in the current chunk.
    remaining: u64,
    /// Hex digits seen in the current chunk size (at most 16 fit in a u64).
    size_digits: u8,
    /// Decoded body bytes so far.
    total: u64,
    /// Most decoded bytes allowed.
    max_body: u64,
    /// Bytes of chunk extensions and trailers seen, bounded by [`MAX_TRAILER_BYTES`].
    overhead: usize,
    /// The trailer section's lines (each ended by LF, CRs dropped), when kept; allocated only
    /// when a trailer arrives.
    trailers: Option<Vec<u8>>,
}

impl ChunkedDecoder {
    /// A decoder that refuses bodies larger than `max_body` bytes with [`ParseError::BodyTooLarge`].
    #[must_use]
    pub fn new(max_body: u64) -> Self {
        Self {
            state: State::Size,
            remaining: 0,
            size_digits: 0,
            total: 0,
            max_body,
            overhead: 0,
            trailers: None,
        }
    }

    /// Keeps the trailer fields instead of skipping them, for [`ChunkedDecoder::take_trailers`].
    #[must_use]
    pub fn keep_trailers(mut self) -> Self {
        self.trailers = Some(Vec::new());
        self
    }

    /// The trailer section's field lines as they came (without CR; each line ends in LF; at most
    /// [`MAX_TRAILER_BYTES`]), once the body is done; empty when there were none or they were not
    /// kept. [`trailer_fields`] splits them.
    pub fn take_trailers(&mut self) -> Vec<u8> {
        self.trailers
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Decoded bytes so far.
    #[must_use]
    pub fn decoded_len(&self) -> u64 {
        self.total
    }

    /// Whether the final chunk and trailer section have been read.
    #[must_use]
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consumes as much of `input` as belongs to the body, passing chunk data to `on_data`.
    ///
    /// # Errors
    /// [`ParseError::BadChunk`] for a framing error, [`ParseError::BodyTooLarge`] past the limit.
    pub fn decode(
        &mut self,
        input: &[u8],
        mut on_data: impl FnMut(&[u8]),
    ) -> Result<Decoded, ParseError> {
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            match self.state {
                State::Size => match hex_value(b) {
                    Some(v) => {
                        if self.size_digits == 16 {
                            return Err(ParseError::BadChunk);
                        }
                        self.size_digits += 1;
                        self.remaining = (self.remaining << 4) | u64::from(v);
                        i += 1;
                    }
                    None if self.size_digits == 0 => return Err(ParseError::BadChunk),
                    None => {
                        match b {
                            b'\r' => self.state = State::SizeLf,
                            // BWS before ';' is allowed by RFC 9112 §7.1.1.
                            b';' | b' ' | b'\t' => self.state = State::Extension,
                            _ => return Err(ParseError::BadChunk),
                        }
                        i += 1;
                    }
                },
                State::Extension => {
                    match b {
                        b'\r' => self.state = State::SizeLf,
                        b'\n' | 0 => return Err(ParseError::BadChunk),
                        _ => self.bump_overhead()?,
                    }
                    i += 1;
                }
                State::SizeLf => {
                    if b != b'\n' {
                        return Err(ParseError::BadChunk);
                    }
                    i += 1;
                    self.size_digits = 0;
                    if self.remaining == 0 {
                        self.state = State::TrailerStart;
                    } else {
                        self.total = self.total.saturating_add(self.remaining);
                        if self.total > self.max_body {
                            return Err(ParseError::BodyTooLarge);
                        }
                        self.state = State::Data;
                    }
                }
                State::Data => {
                    let available = input.len() - i;
                    let take =
                        usize::try_from(self.remaining).map_or(available, |r| r.min(available));
                    on_data(&input[i..i + take]);
                    i += take;
                    self.remaining -= take as u64;
                    if self.remaining == 0 {
                        self.state = State::DataCr;
                    }
                }
                State::DataCr => {
                    if b != b'\r' {
                        return Err(ParseError::BadChunk);
                    }
                    i += 1;
                    self.state = State::DataLf;
                }
                State::DataLf => {
                    if b != b'\n' {
                        return Err(ParseError::BadChunk);
                    }
                    i += 1;
                    self.state = State::Size;
                }
                State::TrailerStart => {
                    i += 1;
                    self.state = match b {
                        b'\r' => State::EndLf,
                        // A trailer line may not start with whitespace (obs-fold) or a bare LF.
                        b'\n' | b' ' | b'\t' | 0 => return Err(ParseError::BadChunk),
                        _ => {
                            self.bump_overhead()?;
                            if let Some(t) = &mut self.trailers {
                                t.push(b);
                            }
                            State::Trailer
                        }
                    };
                }
                State::Trailer => {
                    match b {
                        b'\r' => self.state = State::TrailerLf,
                        b'\n' | 0 => return Err(ParseError::BadChunk),
                        _ => {
                            self.bump_overhead()?;
                            if let Some(t) = &mut self.trailers {
                                t.push(b);
                            }
                        }
                    }
                    i += 1;
                }
                State::TrailerLf => {
                    if b != b'\n' {
                        return Err(ParseError::BadChunk);
                    }
                    i += 1;
                    if let Some(t) = &mut self.trailers {
                        t.push(b'\n');
                    }
                    self.state = State::TrailerStart;
                }
                State::EndLf => {
                    if b != b'\n' {
                        return Err(ParseError::BadChunk);
                    }
                    i += 1;
                    self.state = State::Done;
                }
                State::Done => break,
            }
        }
        Ok(Decoded {
            consumed: i,
            done: self.state == State::Done,
        })
    }

    fn bump_overhead(&mut self) -> Result<(), ParseError> {
        self.overhead += 1;
        if self.overhead > MAX_TRAILER_BYTES {
            return Err(ParseError::BadChunk);
        }
        Ok(())
    }
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `input` whole, then again one byte at a time; both must agree.
    fn decode_all(input: &[u8], max: u64) -> Result<(Vec<u8>, usize), ParseError> {
        let mut whole = Vec::new();
        let mut dec = ChunkedDecoder::new(max);
        let d = dec.decode(input, |b| whole.extend_from_slice(b))?;
        let mut bytewise = Vec::new();
        let mut dec2 = ChunkedDecoder::new(max);
        let mut consumed = 0;
        for i in 0..input.len() {
            let step = dec2.decode(&input[i..=i], |b| bytewise.extend_from_slice(b))?;
            consumed += step.consumed;
            if step.done {
                break;
            }
        }
        assert_eq!(whole, bytewise);
        assert_eq!(d.consumed, consumed);
        if d.done {
            Ok((whole, d.consumed))
        } else {
            Err(ParseError::Timeout) // "incomplete", for the table below
        }
    }

    #[test]
    fn valid_bodies() {
        let cases: &[(&[u8], &[u8], usize)] = &[
            (b"0\r\n\r\n", b"", 5),
            (b"5\r\nhello\r\n0\r\n\r\n", b"hello", 15),
            (
                b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\nGET",
                b"hello world",
                26,
            ),
            (b"A\r\n0123456789\r\n0\r\n\r\n", b"0123456789", 20),
            (b"5;ext=1\r\nhello\r\n0\r\n\r\n", b"hello", 21),
            (b"5 ;ext\r\nhello\r\n0\r\n\r\n", b"hello", 20),
            (b"5\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n", b"hello", 29),
            (b"005\r\nhello\r\n0\r\n\r\n", b"hello", 17),
        ];
        for (input, body, consumed) in cases {
            let (got, n) = decode_all(input, 1 << 20)
                .unwrap_or_else(|e| panic!("{:?}: {e:?}", String::from_utf8_lossy(input)));
            assert_eq!(&got[..], *body, "{:?}", String::from_utf8_lossy(input));
            assert_eq!(n, *consumed, "{:?}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn invalid_bodies() {
        let cases: &[&[u8]] = &[
            b"\r\nhello\r\n0\r\n\r\n",             // no size
            b"-5\r\nhello\r\n0\r\n\r\n",           // sign
            b"0x5\r\nhello\r\n0\r\n\r\n",          // 0x prefix
            b"5\nhello\r\n0\r\n\r\n",              // bare LF after size
            b"5\rhello\r\n0\r\n\r\n",              // bare CR after size
            b"5\r\nhelloX\r\n0\r\n\r\n",           // data longer than size
            b"5\r\nhello\n0\r\n\r\n",              // bare LF after data
            b"11111111111111111\r\n",              // 17 hex digits: overflow
            b"5\r\nhello\r\n0\r\n\n",              // bare LF at the end
            b"5\r\nhello\r\n0\r\n folded\r\n\r\n", // obs-fold in trailers
            b"5;a\nb\r\nhello\r\n0\r\n\r\n",       // LF inside an extension
            b"g\r\n",                              // not hex
        ];
        for input in cases {
            assert_eq!(
                decode_all(input, 1 << 20).map(|_| ()),
                Err(ParseError::BadChunk),
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn body_limit() {
        assert_eq!(
            decode_all(b"5\r\nhello\r\n0\r\n\r\n", 4).map(|_| ()),
            Err(ParseError::BodyTooLarge)
        );
        assert!(decode_all(b"5\r\nhello\r\n0\r\n\r\n", 5).is_ok());
        // The limit applies to the sum of chunks, and before the data arrives.
        assert_eq!(
            ChunkedDecoder::new(10).decode(b"3\r\nabc\r\n8\r\n", |_| {}),
            Err(ParseError::BodyTooLarge)
        );
    }

    #[test]
    fn incomplete_is_not_an_error() {
        let mut dec = ChunkedDecoder::new(100);
        let d = dec.decode(b"5\r\nhel", |_| {}).unwrap();
        assert_eq!(
            d,
            Decoded {
                consumed: 6,
                done: false
            }
        );
        let d = dec.decode(b"lo\r\n0\r\n\r\nrest", |_| {}).unwrap();
        assert_eq!(
            d,
            Decoded {
                consumed: 9,
                done: true
            }
        );
        assert!(dec.is_done());
        assert_eq!(dec.decoded_len(), 5);
    }

    #[test]
    fn kept_trailers_are_split_into_fields() {
        let input = b"5\r\nhello\r\n0\r\nX-Checksum: 5d41\r\ngrpc-status:  0 \r\nbad line\r\nX\x01: y\r\n\r\n";
        for step in [1, input.len()] {
            let mut d = ChunkedDecoder::new(u64::MAX).keep_trailers();
            let mut at = 0;
            while at < input.len() {
                let end = (at + step).min(input.len());
                at += d.decode(&input[at..end], |_| {}).unwrap().consumed;
            }
            assert!(d.is_done());
            let raw = d.take_trailers();
            let fields: Vec<_> = trailer_fields(&raw).collect();
            assert_eq!(
                fields,
                vec![(&b"X-Checksum"[..], &b"5d41"[..]), (b"grpc-status", b"0")],
                "step {step}"
            );
        }
        // Not kept: nothing.
        let mut d = ChunkedDecoder::new(u64::MAX);
        d.decode(input, |_| {}).unwrap();
        assert!(d.take_trailers().is_empty());
    }

    #[test]
    fn trailers_are_bounded() {
        let mut input = b"0\r\nX: ".to_vec();
        input.extend(std::iter::repeat_n(b'a', MAX_TRAILER_BYTES + 1));
        assert_eq!(
            ChunkedDecoder::new(100).decode(&input, |_| {}),
            Err(ParseError::BadChunk)
        );
    }
}
