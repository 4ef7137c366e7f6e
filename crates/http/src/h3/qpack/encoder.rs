//! QPACK's encoder, as this side uses it: the static table and literals only, never the
//! dynamic table. Every section's Required Insert Count is 0, so a peer's stream is never
//! blocked on ours, no encoder-stream instruction is ever sent (RFC 9204 §3.2.3 allows an
//! encoder stream with nothing on it), and nothing is tracked per stream. The cost is bytes:
//! a field whose name is in the static table takes a 1- or 2-byte reference and its value; the
//! others are literals, Huffman-coded when shorter (as HPACK's are).
//!
//! What the peer's decoder sends back is still read and checked ([`Encoder::feed_decoder_stream`]):
//! with no dynamic references, any Section Acknowledgment or Insert Count Increment is a
//! QPACK_DECODER_STREAM_ERROR (§4.4.1, §4.4.3).

use super::super::error::QpackError;
use super::table::{self, Match};
use super::wire::{put_int, put_str, DecoderInstruction, FieldLine, Reader, SectionPrefix, Short};

/// A QPACK encoder: one per connection.
#[derive(Debug, Clone)]
pub struct Encoder {
    huffman: bool,
    /// A partial decoder-stream instruction (an integer: at most 11 bytes).
    decoder_buf: Vec<u8>,
}

impl Default for Encoder {
    fn default() -> Self {
        Self::new(true)
    }
}

impl Encoder {
    /// An encoder; `huffman`: code string literals when that makes them shorter.
    #[must_use]
    pub fn new(huffman: bool) -> Self {
        Self {
            huffman,
            decoder_buf: Vec::new(),
        }
    }

    /// Appends the prefix every section this encoder writes starts with: Required Insert
    /// Count 0, Base 0.
    pub fn begin_section(&self, out: &mut Vec<u8>) {
        SectionPrefix::STATIC_ONLY.write(out);
    }

    /// Appends one field line (after [`Encoder::begin_section`]). `never_indexed`: the field
    /// must stay a literal on every hop (RFC 9204 §7.1.3), kept as the N bit.
    pub fn field(&self, name: &[u8], value: &[u8], never_indexed: bool, out: &mut Vec<u8>) {
        match table::find(name, value) {
            Some(Match::Full(i)) if !never_indexed => FieldLine::Indexed {
                is_static: true,
                index: u64::from(i),
            }
            .write(out),
            Some(Match::Full(i) | Match::Name(i)) => {
                // 01NT: N, and T for the static table.
                let n = if never_indexed { 0x20 } else { 0 };
                put_int(u64::from(i), 4, 0x40 | n | 0x10, out);
                put_str(value, 8, 0, self.huffman, out);
            }
            None => {
                // 001N, then the name's H bit and length.
                let n = if never_indexed { 0x10 } else { 0 };
                put_str(name, 4, 0x20 | n, self.huffman, out);
                put_str(value, 8, 0, self.huffman, out);
            }
        }
    }

    /// Appends a whole section of `fields` (a request's: pseudo-fields first, names in lower
    /// case).
    pub fn encode_section<'a>(
        &self,
        fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
        out: &mut Vec<u8>,
    ) {
        self.begin_section(out);
        for (name, value) in fields {
            self.field(name, value, false, out);
        }
    }

    /// Appends a response's section: `:status`, then `fields` (names in lower case).
    pub fn encode_response<'a>(
        &self,
        status: u16,
        fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
        out: &mut Vec<u8>,
    ) {
        self.begin_section(out);
        let mut code = itoa::Buffer::new();
        self.field(b":status", code.format(status).as_bytes(), false, out);
        for (name, value) in fields {
            self.field(name, value, false, out);
        }
    }

    /// Reads the peer decoder's stream (any split).
    ///
    /// # Errors
    /// [`QpackError::DecoderStream`] for a Section Acknowledgment or an Insert Count Increment
    /// (this encoder never references or inserts dynamic entries), or an integer too large.
    /// The connection must close.
    pub fn feed_decoder_stream(&mut self, input: &[u8]) -> Result<(), QpackError> {
        let mut buf = std::mem::take(&mut self.decoder_buf);
        buf.extend_from_slice(input);
        let mut at = 0;
        while at < buf.len() {
            let mut r = Reader::new(&buf[at..]);
            match DecoderInstruction::parse(&mut r) {
                Ok(DecoderInstruction::StreamCancel(_)) => at += r.at,
                Ok(DecoderInstruction::SectionAck(_)) => {
                    return Err(QpackError::DecoderStream(
                        "acknowledgment of a section without dynamic references",
                    ))
                }
                Ok(DecoderInstruction::InsertCountIncrement(_)) => {
                    return Err(QpackError::DecoderStream(
                        "Insert Count Increment beyond the inserts",
                    ))
                }
                Err(Short::Partial { .. }) => break,
                Err(_) => return Err(QpackError::DecoderStream("integer too large")),
            }
        }
        buf.drain(..at);
        self.decoder_buf = buf;
        Ok(())
    }
}
