//! HPACK decoding (RFC 7541): integers, string literals (plain or Huffman-coded), the static
//! and dynamic tables, and dynamic table size updates.
//!
//! Hand-written, not taken from a crate: `loona-hpack` (the maintained `hpack`) rebuilds a hash
//! map of the Huffman code for every Huffman-coded string and walks it bit by bit, and measured
//! 85% of the server's CPU time under h2load (docs/PERFORMANCE.md); `httlib-hpack` allocates per
//! field. Here Huffman decoding walks a 4-bit state table built once, fields are handed to a
//! callback as slices (of the block, the tables, or a reused buffer), and a field allocates only
//! when it is added to the dynamic table.

use std::collections::VecDeque;
use std::sync::OnceLock;

use super::hpack_tables::{HUFFMAN, STATIC};

/// Why a header block could not be decoded (a COMPRESSION_ERROR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HpackError {
    /// An integer or string runs past the block, or an integer is absurdly large.
    Truncated,
    /// Index 0, or past both tables.
    BadIndex,
    /// A Huffman string with the EOS symbol, or padding that is not a short run of 1 bits.
    BadHuffman,
    /// A dynamic table size update above the allowed size, or after a field.
    BadSizeUpdate,
}

/// Per RFC 7541 §4.1, an entry's size is its name, its value and 32.
const ENTRY_OVERHEAD: usize = 32;
/// Integers beyond this are refused (no legitimate length or index comes near).
const MAX_INTEGER: usize = 1 << 28;

/// A dynamic table entry: name and value.
type Entry = (Box<[u8]>, Box<[u8]>);

/// A decoder's state: the dynamic table, shared by every block on a connection.
#[derive(Debug)]
pub struct Decoder {
    /// Newest first.
    table: VecDeque<Entry>,
    size: usize,
    max_size: usize,
    /// What our SETTINGS_HEADER_TABLE_SIZE allows the encoder to ask for.
    allowed: usize,
    name_buf: Vec<u8>,
    value_buf: Vec<u8>,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new(4096)
    }
}

impl Decoder {
    /// A decoder whose table may grow to `allowed` bytes (our SETTINGS_HEADER_TABLE_SIZE).
    #[must_use]
    pub fn new(allowed: usize) -> Self {
        Self {
            table: VecDeque::new(),
            size: 0,
            max_size: allowed,
            allowed,
            name_buf: Vec::new(),
            value_buf: Vec::new(),
        }
    }

    /// Decodes a complete header block, calling `field(name, value)` for each field in order.
    ///
    /// # Errors
    /// See [`HpackError`]; the table is then out of step with the encoder's, so the connection
    /// must end.
    pub fn decode(
        &mut self,
        block: &[u8],
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), HpackError> {
        let mut at = 0;
        let mut fields_seen = false;
        while at < block.len() {
            let b = block[at];
            if b & 0x80 != 0 {
                // Indexed field.
                let index = integer(block, &mut at, 7)?;
                let (name, value) = entry(&self.table, index)?;
                field(name, value);
                fields_seen = true;
            } else if b & 0xe0 == 0x20 {
                // Dynamic table size update: only at the start of a block.
                if fields_seen {
                    return Err(HpackError::BadSizeUpdate);
                }
                let size = integer(block, &mut at, 5)?;
                if size > self.allowed {
                    return Err(HpackError::BadSizeUpdate);
                }
                self.max_size = size;
                self.evict(0);
            } else {
                // A literal: with incremental indexing (01xxxxxx, 6-bit index), without
                // indexing (0000xxxx) or never indexed (0001xxxx), 4-bit index.
                let indexing = b & 0x40 != 0;
                let index = integer(block, &mut at, if indexing { 6 } else { 4 })?;
                fields_seen = true;
                let Self {
                    table,
                    name_buf,
                    value_buf,
                    ..
                } = self;
                let name: &[u8] = if index != 0 {
                    entry(table, index)?.0
                } else {
                    string(block, &mut at, name_buf)?
                };
                let value = string(block, &mut at, value_buf)?;
                field(name, value);
                let added = indexing.then(|| (Box::from(name), Box::from(value)));
                if let Some(added) = added {
                    self.insert(added);
                }
            }
        }
        Ok(())
    }

    fn insert(&mut self, entry: Entry) {
        let size = entry.0.len() + entry.1.len() + ENTRY_OVERHEAD;
        if size > self.max_size {
            // An entry larger than the table empties it (RFC 7541 §4.4).
            self.table.clear();
            self.size = 0;
            return;
        }
        self.evict(size);
        self.size += size;
        self.table.push_front(entry);
    }

    /// Evicts the oldest entries until `room` more bytes fit.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max_size {
            let Some((n, v)) = self.table.pop_back() else {
                break;
            };
            self.size -= n.len() + v.len() + ENTRY_OVERHEAD;
        }
    }
}

/// Entry `index` of the static table (1..=61) or the dynamic one (62..).
fn entry(table: &VecDeque<Entry>, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
    match index {
        0 => Err(HpackError::BadIndex),
        1..=61 => Ok(STATIC[index - 1]),
        _ => table
            .get(index - 62)
            .map(|(n, v)| (&n[..], &v[..]))
            .ok_or(HpackError::BadIndex),
    }
}

/// An integer with an `n`-bit prefix starting at `block[*at]` (RFC 7541 §5.1).
fn integer(block: &[u8], at: &mut usize, n: u8) -> Result<usize, HpackError> {
    let max = (1usize << n) - 1;
    let first = usize::from(*block.get(*at).ok_or(HpackError::Truncated)?) & max;
    *at += 1;
    if first < max {
        return Ok(first);
    }
    let mut value = max;
    let mut shift = 0;
    loop {
        let b = *block.get(*at).ok_or(HpackError::Truncated)?;
        *at += 1;
        value += usize::from(b & 0x7f) << shift;
        if value > MAX_INTEGER {
            return Err(HpackError::Truncated);
        }
        if b & 0x80 == 0 {
            return Ok(value);
        }
        shift += 7;
    }
}

/// A string literal (RFC 7541 §5.2): a slice of the block, or Huffman-decoded into `buf`.
fn string<'a>(
    block: &'a [u8],
    at: &mut usize,
    buf: &'a mut Vec<u8>,
) -> Result<&'a [u8], HpackError> {
    let huffman = block.get(*at).ok_or(HpackError::Truncated)? & 0x80 != 0;
    let len = integer(block, at, 7)?;
    let end = at.checked_add(len).ok_or(HpackError::Truncated)?;
    let raw = block.get(*at..end).ok_or(HpackError::Truncated)?;
    *at = end;
    if !huffman {
        return Ok(raw);
    }
    buf.clear();
    huffman_decode(raw, buf)?;
    Ok(buf)
}

/// One step of the Huffman decoder: from a state (a node of the code tree), four bits lead to
/// `next`, maybe emitting `symbol`.
#[derive(Debug, Clone, Copy, Default)]
struct Step {
    next: u16,
    /// The symbol completed on the way, if any (codes are at least 5 bits, so at most one).
    emit: Option<u8>,
    /// The EOS symbol was completed: an error.
    fail: bool,
}

/// The decoding table: for each internal node of the code tree, its 16 four-bit steps; and for
/// each node whether the string may end there (the bits since the last symbol are at most 7
/// ones: EOS's prefix, which is the only padding allowed).
struct Table {
    steps: Vec<[Step; 16]>,
    may_end: Vec<bool>,
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        // The code tree: node 0 is the root; children[i] = [zero, one]; leaves hold symbols.
        let mut children: Vec<[u16; 2]> = vec![[0, 0]];
        let mut leaf: Vec<Option<u16>> = vec![None];
        for (symbol, &(code, len)) in HUFFMAN.iter().enumerate() {
            let mut node = 0usize;
            for i in (0..len).rev() {
                let bit = ((code >> i) & 1) as usize;
                if children[node][bit] == 0 {
                    children.push([0, 0]);
                    leaf.push(None);
                    children[node][bit] = (children.len() - 1) as u16;
                }
                node = children[node][bit] as usize;
            }
            leaf[node] = Some(symbol as u16);
        }
        // Internal nodes get state numbers; for each, where 4 bits lead.
        let internal: Vec<usize> = (0..children.len()).filter(|&n| leaf[n].is_none()).collect();
        let mut state_of = vec![0u16; children.len()];
        for (s, &n) in internal.iter().enumerate() {
            state_of[n] = s as u16;
        }
        // Whether a node is reached from the root by at most 7 one-bits.
        let mut may_end = vec![false; internal.len()];
        let mut node = 0usize;
        may_end[0] = true;
        for _ in 0..7 {
            node = children[node][1] as usize;
            if leaf[node].is_some() {
                break;
            }
            may_end[state_of[node] as usize] = true;
        }
        let steps = internal
            .iter()
            .map(|&start| {
                let mut row = [Step::default(); 16];
                for (nibble, step) in row.iter_mut().enumerate() {
                    let mut node = start;
                    for i in (0..4).rev() {
                        node = children[node][(nibble >> i) & 1] as usize;
                        if let Some(symbol) = leaf[node] {
                            if symbol == 256 {
                                step.fail = true;
                            } else {
                                step.emit = Some(symbol as u8);
                            }
                            node = 0;
                        }
                    }
                    step.next = state_of[node];
                }
                row
            })
            .collect();
        Table { steps, may_end }
    })
}

/// Decodes a Huffman-coded string (RFC 7541 §5.2, Appendix B) onto `out`.
///
/// # Errors
/// [`HpackError::BadHuffman`] for the EOS symbol or bad padding.
pub fn huffman_decode(input: &[u8], out: &mut Vec<u8>) -> Result<(), HpackError> {
    let t = table();
    let mut state = 0usize;
    for &b in input {
        for nibble in [b >> 4, b & 0x0f] {
            let step = t.steps[state][usize::from(nibble)];
            if step.fail {
                return Err(HpackError::BadHuffman);
            }
            if let Some(c) = step.emit {
                out.push(c);
            }
            state = usize::from(step.next);
        }
    }
    if t.may_end[state] {
        Ok(())
    } else {
        Err(HpackError::BadHuffman)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(d: &mut Decoder, block: &[u8]) -> Result<Vec<(String, String)>, HpackError> {
        let mut v = Vec::new();
        d.decode(block, |n, val| {
            v.push((
                String::from_utf8_lossy(n).into_owned(),
                String::from_utf8_lossy(val).into_owned(),
            ));
        })?;
        Ok(v)
    }

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 7541 C.4: three requests with Huffman coding, sharing one dynamic table.
    #[test]
    fn rfc7541_c4() {
        let mut d = Decoder::default();
        let r1 = fields(&mut d, &hex("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff")).unwrap();
        assert_eq!(r1[3], (":authority".into(), "www.example.com".into()));
        let r2 = fields(&mut d, &hex("8286 84be 5886 a8eb 1064 9cbf")).unwrap();
        assert_eq!(r2[3], (":authority".into(), "www.example.com".into()));
        assert_eq!(r2[4], ("cache-control".into(), "no-cache".into()));
        let r3 = fields(
            &mut d,
            &hex("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf"),
        )
        .unwrap();
        assert_eq!(r3[2], (":path".into(), "/index.html".into()));
        assert_eq!(r3[4], ("custom-key".into(), "custom-value".into()));
        assert_eq!(d.size, 164, "RFC 7541 C.4.3's table size");
    }

    /// RFC 7541 C.5.1: a response without Huffman coding in a 256-byte table (evicts in C.5.2).
    #[test]
    fn rfc7541_c5_eviction() {
        let mut d = Decoder::new(256);
        fields(
            &mut d,
            &hex(
                "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 \
                 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 \
                 6c65 2e63 6f6d",
            ),
        )
        .unwrap();
        assert_eq!(d.size, 222);
        let r2 = fields(&mut d, &hex("4803 3330 37c1 c0bf")).unwrap();
        assert_eq!(r2[0], (":status".into(), "307".into()));
        assert_eq!(d.size, 222);
        assert_eq!(d.table.len(), 4);
    }

    #[test]
    fn errors() {
        let mut d = Decoder::default();
        assert_eq!(fields(&mut d, &[0x80]), Err(HpackError::BadIndex));
        assert_eq!(fields(&mut d, &[0xbe]), Err(HpackError::BadIndex));
        assert_eq!(
            fields(&mut d, &[0x82, 0x3f, 0xe1, 0x1f]),
            Err(HpackError::BadSizeUpdate)
        );
        assert_eq!(
            fields(&mut d, &[0x3f, 0xe2, 0x1f]),
            Err(HpackError::BadSizeUpdate)
        );
        assert_eq!(
            fields(&mut d, &[0x40, 0x05, b'a']),
            Err(HpackError::Truncated)
        );
        assert_eq!(
            fields(&mut d, &[0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]),
            Err(HpackError::Truncated)
        );
        // Huffman: EOS inside a string (30 one-bits), and padding of 8 one-bits.
        let mut out = Vec::new();
        assert_eq!(
            huffman_decode(&[0xff, 0xff, 0xff, 0xff], &mut out),
            Err(HpackError::BadHuffman)
        );
        assert_eq!(
            huffman_decode(&[0x1f, 0xff], &mut out),
            Err(HpackError::BadHuffman)
        );
        // Padding with a zero bit.
        assert_eq!(
            huffman_decode(&[0x00], &mut out),
            Err(HpackError::BadHuffman)
        );
    }

    #[test]
    fn huffman_round_trips_every_byte() {
        // Encode with the table, decode with the state machine.
        for len in [1usize, 7, 64] {
            for start in 0..=255u8 {
                let input: Vec<u8> = (0..len)
                    .map(|i| start.wrapping_add((i as u8).wrapping_mul(37)))
                    .collect();
                let (mut acc, mut bits, mut enc) = (0u64, 0u32, Vec::new());
                for &c in &input {
                    let (code, l) = HUFFMAN[usize::from(c)];
                    acc = (acc << l) | u64::from(code);
                    bits += u32::from(l);
                    while bits >= 8 {
                        enc.push((acc >> (bits - 8)) as u8);
                        bits -= 8;
                    }
                    acc &= (1u64 << bits) - 1;
                }
                if bits > 0 {
                    enc.push(((acc << (8 - bits)) as u8) | (0xff >> bits));
                }
                let mut out = Vec::new();
                huffman_decode(&enc, &mut out).unwrap();
                assert_eq!(out, input);
            }
        }
    }
}
