//! QPACK's decoder (RFC 9204 §2.2): the dynamic table the peer's encoder fills through the
//! encoder stream, field sections decoded against it, blocked streams, and the decoder stream
//! that tells the encoder what was received.
//!
//! The caller moves bytes: encoder-stream bytes go to [`Decoder::feed_encoder_stream`] (split
//! anywhere), each HEADERS frame's section to [`Decoder::decode_section`], and
//! [`Decoder::write_decoder_stream`] gives the bytes to send on this side's decoder stream.
//! A section whose Required Insert Count the table has not reached is [`Decoded::Blocked`]:
//! the caller keeps it (and its flow-control credit, §2.2.1) and decodes it again once the
//! stream is listed by [`Decoder::take_unblocked`].
//!
//! Bounds: the table holds at most the capacity this side announced
//! (SETTINGS_QPACK_MAX_TABLE_CAPACITY); at most SETTINGS_QPACK_BLOCKED_STREAMS streams wait;
//! a partial encoder instruction is buffered only up to what one entry can be; a decoded
//! section is counted as HTTP/2 counts a header list (name + value + 32 per field) and refused
//! past its limit while decoding, so a small section referencing large entries many times
//! (a "bomb") is never stored; the decoder-stream output owed is a few bytes per stream.

use std::collections::VecDeque;

use super::super::error::QpackError;
use super::table::STATIC;
use super::wire::{
    DecoderInstruction, EncoderInstruction, FieldLine, Reader, SectionPrefix, Short, Str,
};

/// Per RFC 9204 §3.2.1, an entry's size is its name, its value and 32.
const ENTRY_OVERHEAD: usize = 32;

/// One decoded field line. `never_indexed` is the N bit: an intermediary re-encoding the
/// field must keep it a literal (RFC 9204 §7.1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field<'a> {
    pub name: &'a [u8],
    pub value: &'a [u8],
    pub never_indexed: bool,
}

/// A stream whose section was blocked.
#[derive(Debug, Clone, Copy)]
struct Waiting {
    stream: u64,
    /// The section's Required Insert Count as decoded when it first came, and as sent: the
    /// decoding depends on the Insert Count then (§4.5.1.1), so a retry reuses it.
    encoded: u64,
    ric: u64,
    /// The table has reached `ric`: listed by `take_unblocked`, no longer counted as blocked.
    woken: bool,
}

/// A dynamic table entry: name and value.
type Entry = (Box<[u8]>, Box<[u8]>);

/// The outcome of decoding a field section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded {
    /// Every field was handed over.
    Done,
    /// The section needs table entries not yet received: nothing was handed over. Decode it
    /// again when [`Decoder::take_unblocked`] lists the stream.
    Blocked,
}

/// A QPACK decoder: one per connection.
#[derive(Debug)]
pub struct Decoder {
    /// SETTINGS_QPACK_MAX_TABLE_CAPACITY as this side announced it.
    max_capacity: usize,
    /// The capacity the encoder set (at most `max_capacity`).
    capacity: usize,
    /// Oldest first; the newest has absolute index `inserted - 1`.
    entries: VecDeque<Entry>,
    size: usize,
    /// The Insert Count: every insertion and duplication so far.
    inserted: u64,
    /// Insertions the encoder knows we have (§2.1.4).
    known_received: u64,
    max_blocked: usize,
    /// Streams whose section waits, until it is decoded again or cancelled.
    blocked: Vec<Waiting>,
    unblocked: Vec<u64>,
    max_section: usize,
    /// A partial encoder instruction, and how long it is known to be at least.
    encoder_buf: Vec<u8>,
    encoder_need: usize,
    /// Decoder instructions owed (acknowledgments and cancellations).
    pending: Vec<u8>,
    name_buf: Vec<u8>,
    value_buf: Vec<u8>,
}

impl Decoder {
    /// A decoder whose table may hold `max_table_capacity` bytes, with at most
    /// `max_blocked_streams` streams waiting (this side's SETTINGS_QPACK_MAX_TABLE_CAPACITY and
    /// SETTINGS_QPACK_BLOCKED_STREAMS), refusing decoded sections larger than
    /// `max_field_section_size` (SETTINGS_MAX_FIELD_SECTION_SIZE).
    #[must_use]
    pub fn new(
        max_table_capacity: usize,
        max_blocked_streams: usize,
        max_field_section_size: usize,
    ) -> Self {
        Self {
            max_capacity: max_table_capacity,
            capacity: 0,
            entries: VecDeque::new(),
            size: 0,
            inserted: 0,
            known_received: 0,
            max_blocked: max_blocked_streams,
            blocked: Vec::new(),
            unblocked: Vec::new(),
            max_section: max_field_section_size,
            encoder_buf: Vec::new(),
            encoder_need: 0,
            pending: Vec::new(),
            name_buf: Vec::new(),
            value_buf: Vec::new(),
        }
    }

    /// The Insert Count: entries inserted so far.
    #[must_use]
    pub fn insert_count(&self) -> u64 {
        self.inserted
    }

    /// The dynamic table's size in bytes (RFC 9204 §3.2.1).
    #[must_use]
    pub fn table_size(&self) -> usize {
        self.size
    }

    /// How many streams are blocked.
    #[must_use]
    pub fn blocked_streams(&self) -> usize {
        self.blocked.iter().filter(|w| !w.woken).count()
    }

    /// Streams that were blocked and can now be decoded, in the order they unblocked. Decode
    /// each one's section again (or cancel the stream): until then it is remembered.
    pub fn take_unblocked(&mut self) -> std::vec::Drain<'_, u64> {
        self.unblocked.drain(..)
    }

    /// Whether [`Decoder::write_decoder_stream`] has anything to write.
    #[must_use]
    pub fn has_decoder_stream_output(&self) -> bool {
        !self.pending.is_empty() || self.inserted > self.known_received
    }

    /// Appends what this side's decoder stream owes: Section Acknowledgments and Stream
    /// Cancellations in order, then one Insert Count Increment for inserts neither
    /// acknowledged (§2.2.2.3: coalesced, sent when the caller flushes).
    pub fn write_decoder_stream(&mut self, out: &mut Vec<u8>) {
        out.append(&mut self.pending);
        if self.inserted > self.known_received {
            DecoderInstruction::InsertCountIncrement(self.inserted - self.known_received)
                .write(out);
            self.known_received = self.inserted;
        }
    }

    /// The stream was reset, or this side stopped reading it before its sections were decoded
    /// (§2.2.2.2): it is no longer blocked, and the encoder is told (unless the table can hold
    /// nothing, when it cannot have referenced anything).
    pub fn cancel_stream(&mut self, stream_id: u64) {
        self.blocked.retain(|w| w.stream != stream_id);
        self.unblocked.retain(|&s| s != stream_id);
        if self.max_capacity > 0 {
            DecoderInstruction::StreamCancel(stream_id).write(&mut self.pending);
        }
    }

    /// Reads encoder-stream bytes (any split): table capacity changes and insertions.
    ///
    /// # Errors
    /// [`QpackError::EncoderStream`]: a capacity above ours, an entry larger than the
    /// capacity, a reference to an entry that is not in the table, a bad Huffman code or an
    /// integer too large. The connection must close.
    pub fn feed_encoder_stream(&mut self, input: &[u8]) -> Result<(), QpackError> {
        if self.encoder_buf.is_empty() {
            // The common case: whole instructions, read in place.
            let used = self.instructions(input)?;
            self.encoder_buf.extend_from_slice(&input[used..]);
        } else {
            self.encoder_buf.extend_from_slice(input);
            // Parsed again only once the bytes it was known to need are here, so an
            // instruction fed a byte at a time costs a few parses, not one per byte.
            if self.encoder_buf.len() >= self.encoder_need {
                let mut buf = std::mem::take(&mut self.encoder_buf);
                let used = self.instructions(&buf)?;
                buf.drain(..used);
                self.encoder_buf = buf;
            }
        }
        self.wake();
        Ok(())
    }

    /// Applies every whole instruction at the start of `input`; how many bytes they took.
    fn instructions(&mut self, input: &[u8]) -> Result<usize, QpackError> {
        let mut at = 0;
        self.encoder_need = 0;
        while at < input.len() {
            // An entry's name and value both fit in the capacity; Huffman codes at most 30
            // bits per byte, so a string on the wire is at most 4 times its value.
            let max_str = self.capacity.saturating_mul(4);
            let mut r = Reader::new(&input[at..]);
            match EncoderInstruction::parse(&mut r, max_str) {
                Ok(i) => {
                    self.apply(i)?;
                    at += r.at;
                }
                Err(Short::Partial { need }) => {
                    self.encoder_need = need;
                    break;
                }
                Err(Short::Overflow) => return Err(QpackError::EncoderStream("integer too large")),
                Err(Short::TooLong) => {
                    return Err(QpackError::EncoderStream("string longer than the table"))
                }
            }
        }
        Ok(at)
    }

    fn apply(&mut self, i: EncoderInstruction<'_>) -> Result<(), QpackError> {
        match i {
            EncoderInstruction::SetCapacity(c) => {
                let c = usize::try_from(c)
                    .ok()
                    .filter(|&c| c <= self.max_capacity)
                    .ok_or(QpackError::EncoderStream("capacity above the maximum"))?;
                self.capacity = c;
                self.evict(0);
            }
            EncoderInstruction::InsertNameRef {
                is_static,
                index,
                value,
            } => {
                let name: Box<[u8]> = if is_static {
                    let e = usize::try_from(index)
                        .ok()
                        .and_then(|i| STATIC.get(i))
                        .ok_or(QpackError::EncoderStream("static index out of range"))?;
                    Box::from(e.0)
                } else {
                    Box::from(&*self.relative(index)?.0)
                };
                let value = string(
                    value,
                    &mut self.value_buf,
                    QpackError::EncoderStream("bad Huffman code"),
                )?;
                let value = Box::from(value);
                self.insert(name, value)?;
            }
            EncoderInstruction::InsertLiteralName { name, value } => {
                let e = QpackError::EncoderStream("bad Huffman code");
                let name = Box::from(string(name, &mut self.name_buf, e)?);
                let value = Box::from(string(value, &mut self.value_buf, e)?);
                self.insert(name, value)?;
            }
            EncoderInstruction::Duplicate(index) => {
                let (n, v) = self.relative(index)?;
                let (n, v) = (n.clone(), v.clone());
                self.insert(n, v)?;
            }
        }
        Ok(())
    }

    /// The entry at a relative index of the encoder stream (0: the newest).
    fn relative(&self, index: u64) -> Result<&Entry, QpackError> {
        let err = QpackError::EncoderStream("reference to an entry not in the table");
        let back = usize::try_from(index).map_err(|_| err)?;
        let i = self.entries.len().checked_sub(back + 1).ok_or(err)?;
        Ok(&self.entries[i])
    }

    fn insert(&mut self, name: Box<[u8]>, value: Box<[u8]>) -> Result<(), QpackError> {
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        if size > self.capacity {
            return Err(QpackError::EncoderStream("entry larger than the table"));
        }
        self.evict(size);
        self.size += size;
        self.entries.push_back((name, value));
        self.inserted += 1;
        Ok(())
    }

    /// Evicts the oldest entries until `room` more bytes fit (§3.2.2).
    fn evict(&mut self, room: usize) {
        while self.size + room > self.capacity {
            let Some((n, v)) = self.entries.pop_front() else {
                break;
            };
            self.size -= n.len() + v.len() + ENTRY_OVERHEAD;
        }
    }

    /// Streams whose Required Insert Count is now reached move to the unblocked list.
    fn wake(&mut self) {
        for w in &mut self.blocked {
            if !w.woken && w.ric <= self.inserted {
                w.woken = true;
                self.unblocked.push(w.stream);
            }
        }
    }

    /// The Required Insert Count of a section (§4.5.1.1).
    fn required_insert_count(&self, encoded: u64) -> Result<u64, QpackError> {
        let err = QpackError::Decompression("bad Required Insert Count");
        if encoded == 0 {
            return Ok(0);
        }
        let max_entries = (self.max_capacity / 32) as u64;
        let full_range = 2 * max_entries;
        if encoded > full_range {
            return Err(err);
        }
        let max_value = self.inserted + max_entries;
        let max_wrapped = max_value / full_range * full_range;
        let mut ric = max_wrapped + encoded - 1;
        if ric > max_value {
            if ric <= full_range {
                return Err(err);
            }
            ric -= full_range;
        }
        if ric == 0 {
            return Err(err);
        }
        Ok(ric)
    }

    /// Decodes one encoded field section received on `stream_id`, calling `field` for each
    /// field line in order — unless the section is blocked, when nothing is called.
    ///
    /// A section with dynamic references is acknowledged on the decoder stream once decoded,
    /// and also when it was refused as too large (it was read: the encoder may drop its
    /// references).
    ///
    /// # Errors
    /// [`QpackError::Decompression`] for a section that cannot be decoded (a connection
    /// error); [`QpackError::SectionTooLarge`] when the decoded fields pass the limit (the
    /// stream's error; the fields already handed over are then to be dropped).
    pub fn decode_section(
        &mut self,
        stream_id: u64,
        section: &[u8],
        mut field: impl FnMut(Field<'_>),
    ) -> Result<Decoded, QpackError> {
        let mut r = Reader::new(section);
        let prefix = SectionPrefix::parse(&mut r)
            .map_err(|_| QpackError::Decompression("bad section prefix"))?;
        let encoded = prefix.encoded_insert_count;
        let waiting = self.blocked.iter().position(|w| w.stream == stream_id);
        let ric = match waiting.map(|i| self.blocked[i]) {
            Some(w) if w.encoded == encoded => w.ric,
            _ => self.required_insert_count(encoded)?,
        };
        let base = if prefix.sign {
            // Base = RIC - Delta Base - 1 must not be negative (§4.5.1.2).
            ric.checked_sub(prefix.delta_base)
                .and_then(|b| b.checked_sub(1))
                .ok_or(QpackError::Decompression("negative Base"))?
        } else {
            ric.checked_add(prefix.delta_base)
                .ok_or(QpackError::Decompression("Base too large"))?
        };
        if ric > self.inserted {
            if waiting.is_none() {
                if self.blocked_streams() >= self.max_blocked {
                    return Err(QpackError::Decompression(
                        "more blocked streams than allowed",
                    ));
                }
                self.blocked.push(Waiting {
                    stream: stream_id,
                    encoded,
                    ric,
                    woken: false,
                });
            }
            return Ok(Decoded::Blocked);
        }
        if let Some(i) = waiting {
            self.blocked.swap_remove(i);
        }
        let result = self.lines(&mut r, section.len(), ric, base, &mut field);
        if ric > 0 && matches!(result, Ok(()) | Err(QpackError::SectionTooLarge)) {
            DecoderInstruction::SectionAck(stream_id).write(&mut self.pending);
            self.known_received = self.known_received.max(ric);
        }
        result.map(|()| Decoded::Done)
    }

    fn lines(
        &mut self,
        r: &mut Reader<'_>,
        len: usize,
        ric: u64,
        base: u64,
        field: &mut impl FnMut(Field<'_>),
    ) -> Result<(), QpackError> {
        let dropped = self.inserted - self.entries.len() as u64;
        let Self {
            entries,
            name_buf,
            value_buf,
            max_section,
            ..
        } = self;
        // An entry by absolute index: below the Required Insert Count and still in the table.
        let dynamic = |abs: Option<u64>| -> Result<&Entry, QpackError> {
            abs.filter(|&a| a < ric && a >= dropped)
                .and_then(|a| entries.get(usize::try_from(a - dropped).ok()?))
                .ok_or(QpackError::Decompression(
                    "reference to an entry not in the table",
                ))
        };
        let stat = |index: u64| {
            usize::try_from(index)
                .ok()
                .and_then(|i| STATIC.get(i))
                .ok_or(QpackError::Decompression("static index out of range"))
        };
        let huffman = QpackError::Decompression("bad Huffman code");
        let mut size = 0usize;
        while r.at < len {
            let line = FieldLine::parse(r, *max_section).map_err(|e| match e {
                Short::Partial { .. } => {
                    QpackError::Decompression("section ends inside a field line")
                }
                Short::Overflow => QpackError::Decompression("integer too large"),
                Short::TooLong => QpackError::SectionTooLarge,
            })?;
            let (name, value, never_indexed): (&[u8], &[u8], bool) = match line {
                FieldLine::Indexed {
                    is_static: true,
                    index,
                } => {
                    let (n, v) = stat(index)?;
                    (n, v, false)
                }
                FieldLine::Indexed {
                    is_static: false,
                    index,
                } => {
                    let (n, v) = dynamic(base.checked_sub(index).and_then(|b| b.checked_sub(1)))?;
                    (n, v, false)
                }
                FieldLine::IndexedPostBase { index } => {
                    let (n, v) = dynamic(base.checked_add(index))?;
                    (n, v, false)
                }
                FieldLine::LiteralNameRef {
                    never_indexed,
                    is_static,
                    index,
                    value,
                } => {
                    let name: &[u8] = if is_static {
                        stat(index)?.0
                    } else {
                        &dynamic(base.checked_sub(index).and_then(|b| b.checked_sub(1)))?.0
                    };
                    (name, string(value, value_buf, huffman)?, never_indexed)
                }
                FieldLine::LiteralPostBaseNameRef {
                    never_indexed,
                    index,
                    value,
                } => {
                    let name: &[u8] = &dynamic(base.checked_add(index))?.0;
                    (name, string(value, value_buf, huffman)?, never_indexed)
                }
                FieldLine::LiteralName {
                    never_indexed,
                    name,
                    value,
                } => (
                    string(name, name_buf, huffman)?,
                    string(value, value_buf, huffman)?,
                    never_indexed,
                ),
            };
            size = size.saturating_add(name.len() + value.len() + ENTRY_OVERHEAD);
            if size > *max_section {
                return Err(QpackError::SectionTooLarge);
            }
            field(Field {
                name,
                value,
                never_indexed,
            });
        }
        Ok(())
    }
}

/// A string's value, Huffman-decoded into `buf` if need be.
fn string<'b>(s: Str<'b>, buf: &'b mut Vec<u8>, err: QpackError) -> Result<&'b [u8], QpackError> {
    if !s.huffman {
        return Ok(s.bytes);
    }
    buf.clear();
    crate::h2::hpack::huffman_decode(s.bytes, buf).map_err(|_| err)?;
    Ok(buf)
}
