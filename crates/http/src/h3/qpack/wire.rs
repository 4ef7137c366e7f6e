//! QPACK's wire format (RFC 9204 §4): prefixed integers and string literals (§4.1, the same as
//! HPACK's, with prefixes of any width), the field line representations of an encoded field
//! section (§4.5), the encoder stream's instructions (§4.3) and the decoder stream's (§4.4).
//! Each is a type that parses and writes itself; what they mean for the tables is
//! [`super::decoder`]'s and [`super::encoder`]'s business.
//!
//! String literals are kept as they are on the wire ([`Str`]: bytes, and whether they are
//! Huffman-coded), so a parsed representation writes back byte for byte, the N ("never
//! indexed") bit included.

use crate::h2::hpack::{huffman_decode, huffman_encode, huffman_len};
pub use crate::prefix_int::put_int;
use crate::prefix_int::{read_int, IntError};

/// Integers beyond this are refused: QPACK needs 62 bits at most (RFC 9204 §4.1.1).
const MAX_INTEGER: u64 = (1 << 62) - 1;

/// Why a representation or an instruction could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Short {
    /// The input ends inside it; it is at least `need` bytes long.
    Partial { need: usize },
    /// An integer above 2^62 - 1.
    Overflow,
    /// A string longer than allowed.
    TooLong,
}

impl IntError for Short {
    fn partial(need: usize) -> Self {
        Self::Partial { need }
    }
    fn overflow() -> Self {
        Self::Overflow
    }
}

/// A string literal as sent: Huffman-coded or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Str<'a> {
    /// The bytes on the wire (Huffman-coded when `huffman`).
    pub bytes: &'a [u8],
    pub huffman: bool,
}

impl<'a> Str<'a> {
    /// A string sent as is.
    #[must_use]
    pub const fn plain(bytes: &'a [u8]) -> Self {
        Self {
            bytes,
            huffman: false,
        }
    }

    /// The string's value: the bytes themselves, or Huffman-decoded into `buf`. `None` for a
    /// Huffman code that is not valid (EOS inside, bad padding).
    pub fn decode<'b>(&'b self, buf: &'b mut Vec<u8>) -> Option<&'b [u8]> {
        if !self.huffman {
            return Some(self.bytes);
        }
        buf.clear();
        huffman_decode(self.bytes, buf).ok()?;
        Some(buf)
    }

    /// Appends it as an `n`-bit prefix string literal, the first byte's high bits `flags`.
    pub fn write(&self, n: u8, flags: u8, out: &mut Vec<u8>) {
        let h = if self.huffman { 1 << (n - 1) } else { 0 };
        put_int(self.bytes.len() as u64, n - 1, flags | h, out);
        out.extend_from_slice(self.bytes);
    }
}

/// Appends `s` as an `n`-bit prefix string literal, Huffman-coded when `huffman` allows and it
/// is shorter (RFC 7541 §5.2; the field's bytes are visible ASCII mostly, where Huffman saves
/// a fifth to a third).
pub fn put_str(s: &[u8], n: u8, flags: u8, huffman: bool, out: &mut Vec<u8>) {
    let coded = if huffman { huffman_len(s) } else { usize::MAX };
    if coded < s.len() {
        put_int(coded as u64, n - 1, flags | (1 << (n - 1)), out);
        out.reserve(coded);
        huffman_encode(s, out);
    } else {
        put_int(s.len() as u64, n - 1, flags, out);
        out.extend_from_slice(s);
    }
}

/// A cursor over a representation or an instruction.
pub(crate) struct Reader<'a> {
    input: &'a [u8],
    pub(crate) at: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(input: &'a [u8]) -> Self {
        Self { input, at: 0 }
    }

    fn byte(&self) -> Result<u8, Short> {
        self.input
            .get(self.at)
            .copied()
            .ok_or(Short::Partial { need: self.at + 1 })
    }

    /// An integer with an `n`-bit prefix (RFC 9204 §4.1.1), up to 62 bits.
    pub(crate) fn int(&mut self, n: u8) -> Result<u64, Short> {
        read_int(self.input, &mut self.at, n, MAX_INTEGER)
    }

    /// An `n`-bit prefix string literal of at most `max_len` bytes on the wire.
    pub(crate) fn string(&mut self, n: u8, max_len: usize) -> Result<Str<'a>, Short> {
        let huffman = self.byte()? & (1 << (n - 1)) != 0;
        let len = self.int(n - 1)?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= max_len)
            .ok_or(Short::TooLong)?;
        let end = self.at + len;
        let bytes = self
            .input
            .get(self.at..end)
            .ok_or(Short::Partial { need: end })?;
        self.at = end;
        Ok(Str { bytes, huffman })
    }
}

/// The prefix of an encoded field section (RFC 9204 §4.5.1), as sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SectionPrefix {
    /// The Required Insert Count, encoded (§4.5.1.1).
    pub encoded_insert_count: u64,
    /// The S bit: Base is below the Required Insert Count.
    pub sign: bool,
    pub delta_base: u64,
}

impl SectionPrefix {
    /// The prefix of a section that references no dynamic entry: "0000".
    pub const STATIC_ONLY: Self = Self {
        encoded_insert_count: 0,
        sign: false,
        delta_base: 0,
    };

    pub(crate) fn parse(r: &mut Reader<'_>) -> Result<Self, Short> {
        let encoded_insert_count = r.int(8)?;
        let sign = r.byte()? & 0x80 != 0;
        let delta_base = r.int(7)?;
        Ok(Self {
            encoded_insert_count,
            sign,
            delta_base,
        })
    }

    /// Appends the prefix.
    pub fn write(&self, out: &mut Vec<u8>) {
        put_int(self.encoded_insert_count, 8, 0, out);
        put_int(self.delta_base, 7, if self.sign { 0x80 } else { 0 }, out);
    }
}

/// A field line representation (RFC 9204 §4.5.2–§4.5.6). Dynamic indexes are relative to the
/// section's Base (or post-Base), as sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldLine<'a> {
    /// `1Txxxxxx`: a whole entry of the static table (T=1) or the dynamic one.
    Indexed { is_static: bool, index: u64 },
    /// `0001xxxx`: a whole dynamic entry at or after Base.
    IndexedPostBase { index: u64 },
    /// `01NTxxxx`: a name from a table, a literal value.
    LiteralNameRef {
        never_indexed: bool,
        is_static: bool,
        index: u64,
        value: Str<'a>,
    },
    /// `0000Nxxx`: a name from a dynamic entry at or after Base, a literal value.
    LiteralPostBaseNameRef {
        never_indexed: bool,
        index: u64,
        value: Str<'a>,
    },
    /// `001NHxxx`: literal name and value.
    LiteralName {
        never_indexed: bool,
        name: Str<'a>,
        value: Str<'a>,
    },
}

impl<'a> FieldLine<'a> {
    /// Reads one representation; strings at most `max_str` bytes on the wire.
    pub(crate) fn parse(r: &mut Reader<'a>, max_str: usize) -> Result<Self, Short> {
        let b = r.byte()?;
        Ok(if b & 0x80 != 0 {
            let is_static = b & 0x40 != 0;
            Self::Indexed {
                is_static,
                index: r.int(6)?,
            }
        } else if b & 0x40 != 0 {
            let index = r.int(4)?;
            Self::LiteralNameRef {
                never_indexed: b & 0x20 != 0,
                is_static: b & 0x10 != 0,
                index,
                value: r.string(8, max_str)?,
            }
        } else if b & 0x20 != 0 {
            let name = r.string(4, max_str)?;
            Self::LiteralName {
                never_indexed: b & 0x10 != 0,
                name,
                value: r.string(8, max_str)?,
            }
        } else if b & 0x10 != 0 {
            Self::IndexedPostBase { index: r.int(4)? }
        } else {
            let index = r.int(3)?;
            Self::LiteralPostBaseNameRef {
                never_indexed: b & 0x08 != 0,
                index,
                value: r.string(8, max_str)?,
            }
        })
    }

    /// Appends the representation.
    pub fn write(&self, out: &mut Vec<u8>) {
        let n = |never: bool, bit: u8| if never { bit } else { 0 };
        match *self {
            Self::Indexed { is_static, index } => {
                put_int(index, 6, 0x80 | n(is_static, 0x40), out);
            }
            Self::IndexedPostBase { index } => put_int(index, 4, 0x10, out),
            Self::LiteralNameRef {
                never_indexed,
                is_static,
                index,
                value,
            } => {
                put_int(
                    index,
                    4,
                    0x40 | n(never_indexed, 0x20) | n(is_static, 0x10),
                    out,
                );
                value.write(8, 0, out);
            }
            Self::LiteralPostBaseNameRef {
                never_indexed,
                index,
                value,
            } => {
                put_int(index, 3, n(never_indexed, 0x08), out);
                value.write(8, 0, out);
            }
            Self::LiteralName {
                never_indexed,
                name,
                value,
            } => {
                name.write(4, 0x20 | n(never_indexed, 0x10), out);
                value.write(8, 0, out);
            }
        }
    }
}

/// An instruction on the encoder stream (RFC 9204 §4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncoderInstruction<'a> {
    /// `001xxxxx`.
    SetCapacity(u64),
    /// `1Txxxxxx`: a name from the static table (T=1) or a dynamic entry (relative to the
    /// newest), a literal value.
    InsertNameRef {
        is_static: bool,
        index: u64,
        value: Str<'a>,
    },
    /// `01Hxxxxx`: literal name and value.
    InsertLiteralName { name: Str<'a>, value: Str<'a> },
    /// `000xxxxx`: a dynamic entry (relative to the newest) inserted again.
    Duplicate(u64),
}

impl<'a> EncoderInstruction<'a> {
    /// Reads one instruction; strings at most `max_str` bytes on the wire.
    pub(crate) fn parse(r: &mut Reader<'a>, max_str: usize) -> Result<Self, Short> {
        let b = r.byte()?;
        Ok(if b & 0x80 != 0 {
            let index = r.int(6)?;
            Self::InsertNameRef {
                is_static: b & 0x40 != 0,
                index,
                value: r.string(8, max_str)?,
            }
        } else if b & 0x40 != 0 {
            let name = r.string(6, max_str)?;
            Self::InsertLiteralName {
                name,
                value: r.string(8, max_str)?,
            }
        } else if b & 0x20 != 0 {
            Self::SetCapacity(r.int(5)?)
        } else {
            Self::Duplicate(r.int(5)?)
        })
    }

    /// Appends the instruction.
    pub fn write(&self, out: &mut Vec<u8>) {
        match *self {
            Self::SetCapacity(c) => put_int(c, 5, 0x20, out),
            Self::InsertNameRef {
                is_static,
                index,
                value,
            } => {
                put_int(index, 6, if is_static { 0xc0 } else { 0x80 }, out);
                value.write(8, 0, out);
            }
            Self::InsertLiteralName { name, value } => {
                name.write(6, 0x40, out);
                value.write(8, 0, out);
            }
            Self::Duplicate(i) => put_int(i, 5, 0x00, out),
        }
    }
}

/// An instruction on the decoder stream (RFC 9204 §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecoderInstruction {
    /// `1xxxxxxx`: the oldest unacknowledged section with dynamic references on this stream
    /// was decoded.
    SectionAck(u64),
    /// `01xxxxxx`: the stream was reset or abandoned.
    StreamCancel(u64),
    /// `00xxxxxx`: this many more inserts were received.
    InsertCountIncrement(u64),
}

impl DecoderInstruction {
    pub(crate) fn parse(r: &mut Reader<'_>) -> Result<Self, Short> {
        let b = r.byte()?;
        Ok(if b & 0x80 != 0 {
            Self::SectionAck(r.int(7)?)
        } else if b & 0x40 != 0 {
            Self::StreamCancel(r.int(6)?)
        } else {
            Self::InsertCountIncrement(r.int(6)?)
        })
    }

    /// Appends the instruction.
    pub fn write(&self, out: &mut Vec<u8>) {
        match *self {
            Self::SectionAck(s) => put_int(s, 7, 0x80, out),
            Self::StreamCancel(s) => put_int(s, 6, 0x40, out),
            Self::InsertCountIncrement(n) => put_int(n, 6, 0x00, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// QPACK's ceiling on the prefixed integers of `prefix_int` (whose own tests have RFC 7541's
    /// cases): 2^62 - 1 is read, byte by byte too.
    #[test]
    fn integers() {
        let bytes = [0x07, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x3f];
        let mut out = Vec::new();
        put_int(MAX_INTEGER, 3, 0, &mut out);
        assert_eq!(out, bytes);
        assert_eq!(Reader::new(&bytes).int(3), Ok(MAX_INTEGER));
        for cut in 0..bytes.len() {
            assert_eq!(
                Reader::new(&bytes[..cut]).int(3),
                Err(Short::Partial { need: cut + 1 })
            );
        }
        // 2^62 and padding with zero continuation bytes forever.
        assert_eq!(
            Reader::new(&[0x07, 0xf9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x3f]).int(3),
            Err(Short::Overflow)
        );
        let mut padded = vec![0xff];
        padded.extend([0x80; 20]);
        padded.push(0);
        assert_eq!(Reader::new(&padded).int(8), Err(Short::Overflow));
    }

    #[test]
    fn strings() {
        let mut out = Vec::new();
        put_str(b"custom-key", 8, 0, true, &mut out);
        // RFC 7541 C.4.3: "custom-key" Huffman-coded.
        assert_eq!(out, [0x88, 0x25, 0xa8, 0x49, 0xe9, 0x5b, 0xa9, 0x7d, 0x7f]);
        let s = Reader::new(&out).string(8, 100).unwrap();
        assert_eq!(s.decode(&mut Vec::new()), Some(&b"custom-key"[..]));
        // Not shorter coded: sent as is.
        let mut out = Vec::new();
        put_str(b"\x00\x01", 4, 0x20, true, &mut out);
        assert_eq!(out, [0x22, 0, 1]);
        assert_eq!(
            Reader::new(&out).string(4, 1),
            Err(Short::TooLong),
            "longer than allowed"
        );
        assert_eq!(
            Reader::new(&out[..2]).string(4, 10),
            Err(Short::Partial { need: 3 })
        );
        let bad = Str {
            bytes: &[0x00],
            huffman: true,
        };
        assert_eq!(bad.decode(&mut Vec::new()), None);
    }

    /// Every representation writes back to the bytes it was read from, N bit included.
    #[test]
    fn representations_round_trip() {
        let v = Str::plain(b"v");
        let h = Str {
            bytes: &[0x88, 0x25],
            huffman: true,
        };
        let lines = [
            FieldLine::Indexed {
                is_static: true,
                index: 98,
            },
            FieldLine::Indexed {
                is_static: false,
                index: 0,
            },
            FieldLine::IndexedPostBase { index: 20 },
            FieldLine::LiteralNameRef {
                never_indexed: true,
                is_static: true,
                index: 1,
                value: h,
            },
            FieldLine::LiteralNameRef {
                never_indexed: false,
                is_static: false,
                index: 300,
                value: v,
            },
            FieldLine::LiteralPostBaseNameRef {
                never_indexed: true,
                index: 7,
                value: v,
            },
            FieldLine::LiteralName {
                never_indexed: true,
                name: h,
                value: v,
            },
            FieldLine::LiteralName {
                never_indexed: false,
                name: Str::plain(b"abcdefgh"),
                value: h,
            },
        ];
        for line in lines {
            let mut out = Vec::new();
            line.write(&mut out);
            let mut r = Reader::new(&out);
            assert_eq!(FieldLine::parse(&mut r, 100), Ok(line));
            assert_eq!(r.at, out.len());
        }
        let instructions = [
            EncoderInstruction::SetCapacity(220),
            EncoderInstruction::InsertNameRef {
                is_static: false,
                index: 1,
                value: h,
            },
            EncoderInstruction::InsertLiteralName { name: v, value: h },
            EncoderInstruction::Duplicate(40),
        ];
        for i in instructions {
            let mut out = Vec::new();
            i.write(&mut out);
            let mut r = Reader::new(&out);
            assert_eq!(EncoderInstruction::parse(&mut r, 100), Ok(i));
            assert_eq!(r.at, out.len());
        }
        for i in [
            DecoderInstruction::SectionAck(200),
            DecoderInstruction::StreamCancel(8),
            DecoderInstruction::InsertCountIncrement(64),
        ] {
            let mut out = Vec::new();
            i.write(&mut out);
            assert_eq!(DecoderInstruction::parse(&mut Reader::new(&out)), Ok(i));
        }
    }
}
