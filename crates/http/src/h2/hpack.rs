//! HPACK (RFC 7541). [`Decoder`]: integers, string literals (plain or Huffman-coded), the
//! static and dynamic tables, dynamic table size updates. [`Encoder`]: a response's fields,
//! each sent once as a literal that enters the client's dynamic table and afterwards as a
//! one- or two-byte index, while it stays in the table.
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
use crate::prefix_int::{put_int, read_int, IntError};

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

/// Response fields larger than this are sent as literals, never indexed: a large value would
/// push every small repeated field out of the client's table.
const MAX_INDEXED_ENTRY: usize = 512;
/// The most of the client's table the encoder uses (the protocol's default size).
const ENCODER_TABLE: usize = 4096;

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

/// An encoder's state: a mirror of the client's dynamic table, as our blocks have filled it.
///
/// Hand-written like the decoder: responses repeat most of their fields (server, type,
/// validators, length of the same file), so after the first response a head is a few index
/// bytes — less to encrypt and send, and less for the client to decode; the peers' encoders do
/// the same. `loona-hpack`'s encoder indexed only fields whose name is in no table.
#[derive(Debug)]
pub struct Encoder {
    /// Newest first, as the client's decoder holds them.
    table: VecDeque<Entry>,
    size: usize,
    max_size: usize,
    /// A smaller table size to announce at the start of the next block.
    size_update: Option<usize>,
    generation: u64,
}

impl Default for Encoder {
    fn default() -> Self {
        Self {
            table: VecDeque::new(),
            size: 0,
            max_size: ENCODER_TABLE,
            size_update: None,
            generation: 0,
        }
    }
}

impl Encoder {
    /// The client's SETTINGS_HEADER_TABLE_SIZE: the table the encoder may use shrinks to fit
    /// (announced in the next block); it never grows past the protocol's default.
    pub fn set_peer_table_size(&mut self, size: u32) {
        let size = (size as usize).min(ENCODER_TABLE);
        if size != self.max_size {
            self.max_size = size;
            self.size_update = Some(self.size_update.map_or(size, |u| u.min(size)));
            self.evict(0);
            self.generation += 1;
        }
    }

    /// Appends the block of a response: `:status`, then `fields` (names in lower case).
    pub fn encode_response<'a>(
        &mut self,
        status: u16,
        fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
        out: &mut Vec<u8>,
    ) {
        self.begin_block(out);
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
                put_string(code.format(status).as_bytes(), out);
            }
        }
        for (name, value) in fields {
            self.field(name, value, out);
        }
    }

    /// Appends a block of `fields` (a request's, pseudo-fields first, names in lower case).
    pub fn encode_fields<'a>(
        &mut self,
        fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
        out: &mut Vec<u8>,
    ) {
        self.begin_block(out);
        for (name, value) in fields {
            self.field(name, value, out);
        }
    }

    /// Bumped whenever the table changes: a block encoded at the same count encodes the same
    /// fields to the same bytes (all of them indexed), so it can be reused.
    #[must_use]
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// A block starts with the table size updates owed since the last one (RFC 7541 §4.2: the
    /// smallest size, then the current one).
    fn begin_block(&mut self, out: &mut Vec<u8>) {
        if let Some(size) = self.size_update.take() {
            put_int(size as u64, 5, 0x20, out);
            if size != self.max_size {
                put_int(self.max_size as u64, 5, 0x20, out);
            }
        }
    }

    fn field(&mut self, name: &[u8], value: &[u8], out: &mut Vec<u8>) {
        if let Some(i) = self
            .table
            .iter()
            .position(|(n, v)| v.len() == value.len() && **v == *value && **n == *name)
        {
            return put_int(62 + i as u64, 7, 0x80, out);
        }
        let static_name = STATIC_NAMES.iter().find(|(n, _)| *n == name).map(|e| e.1);
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        let index = size <= MAX_INDEXED_ENTRY.min(self.max_size);
        let (prefix, flags) = if index { (6, 0x40) } else { (4, 0x00) };
        match static_name {
            Some(i) => put_int(u64::from(i), prefix, flags, out),
            None => {
                out.push(flags);
                put_string(name, out);
            }
        }
        put_string(value, out);
        if index {
            self.evict(size);
            self.size += size;
            self.table.push_front((Box::from(name), Box::from(value)));
            self.generation += 1;
        }
    }

    /// Evicts the oldest entries until `room` more bytes fit, as the client's decoder does.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max_size {
            let Some((n, v)) = self.table.pop_back() else {
                break;
            };
            self.size -= n.len() + v.len() + ENTRY_OVERHEAD;
        }
    }
}

/// A string literal, not Huffman-coded (RFC 7541 §5.2): Huffman coding would save a fifth of
/// the bytes of a field sent once, and cost a table walk on both sides.
fn put_string(s: &[u8], out: &mut Vec<u8>) {
    put_int(s.len() as u64, 7, 0x00, out);
    out.extend_from_slice(s);
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

/// An integer with an `n`-bit prefix starting at `block[*at]` (RFC 7541 §5.1); past the block
/// or past [`MAX_INTEGER`] alike, the block is [`HpackError::Truncated`].
fn integer(block: &[u8], at: &mut usize, n: u8) -> Result<usize, HpackError> {
    // At most MAX_INTEGER (2^28): a usize.
    read_int(block, at, n, MAX_INTEGER as u64).map(|v| v as usize)
}

impl IntError for HpackError {
    fn partial(_need: usize) -> Self {
        Self::Truncated
    }
    fn overflow() -> Self {
        Self::Truncated
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

/// The length of `input` Huffman-coded (RFC 7541 Appendix B), in bytes.
pub(crate) fn huffman_len(input: &[u8]) -> usize {
    let bits: usize = input
        .iter()
        .map(|&b| usize::from(HUFFMAN[usize::from(b)].1))
        .sum();
    bits.div_ceil(8)
}

/// Appends `input` Huffman-coded, padded with the EOS code's leading ones (RFC 7541 §5.2).
pub(crate) fn huffman_encode(input: &[u8], out: &mut Vec<u8>) {
    // Codes are at most 30 bits: with fewer than 32 bits pending, 62 fit in the 64-bit window,
    // and whole 32-bit words go out at once (a byte at a time cost ~40 instructions a byte of
    // input, most of a QPACK response head's encoding).
    let (mut acc, mut bits) = (0u64, 0u32);
    for &b in input {
        let (code, len) = HUFFMAN[usize::from(b)];
        acc = (acc << len) | u64::from(code);
        bits += u32::from(len);
        if bits >= 32 {
            bits -= 32;
            out.extend_from_slice(&((acc >> bits) as u32).to_be_bytes());
            acc &= (1u64 << bits) - 1;
        }
    }
    while bits >= 8 {
        bits -= 8;
        out.push((acc >> bits) as u8);
    }
    if bits > 0 {
        let rest = acc & ((1u64 << bits) - 1);
        out.push(((rest << (8 - bits)) as u8) | (0xff >> bits));
    }
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
        // An index padded with zero continuation bytes past 62 bits: refused, not shifted out.
        let mut padded = vec![0xff];
        padded.extend([0x80; 20]);
        padded.push(0);
        assert_eq!(fields(&mut d, &padded), Err(HpackError::Truncated));
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

    /// Responses encoded one after another decode to the same fields with a decoder that
    /// keeps its table across them; repeated fields shrink to indexes; a smaller peer table is
    /// announced and respected.
    #[test]
    fn encoder_and_decoder_stay_in_step() {
        let mut enc = Encoder::default();
        let mut dec = Decoder::default();
        let long = "L".repeat(600);
        let date = |i: usize| format!("Tue, 24 Nov 2026 11:00:{i:02} GMT");
        let mut sizes = Vec::new();
        for i in 0..200 {
            if i == 100 {
                enc.set_peer_table_size(100);
            }
            let d = date(i / 10);
            let len = (i % 7).to_string();
            let fields: Vec<(&[u8], &[u8])> = vec![
                (b"server", b"lowlat"),
                (b"date", d.as_bytes()),
                (b"content-length", len.as_bytes()),
                (b"x-long", long.as_bytes()),
            ];
            let mut out = Vec::new();
            enc.encode_response(
                if i % 3 == 0 { 200 } else { 418 },
                fields.iter().copied(),
                &mut out,
            );
            sizes.push(out.len());
            let mut got = Vec::new();
            dec.decode(&out, |n, v| got.push((n.to_vec(), v.to_vec())))
                .unwrap();
            assert_eq!(got.len(), 5);
            for ((n, v), (gn, gv)) in fields.iter().zip(&got[1..]) {
                assert_eq!((&gn[..], &gv[..]), (*n, *v), "response {i}");
            }
            assert!(dec.size <= enc.max_size.max(100));
            assert_eq!(dec.size, enc.size, "response {i}");
        }
        assert!(
            sizes[1] < 620 + 20,
            "server and the length indexed: {}",
            sizes[1]
        );
        assert_eq!(dec.max_size, 100);
    }

    #[test]
    fn huffman_round_trips_every_byte() {
        // RFC 7541 C.4.1: "www.example.com".
        let mut enc = Vec::new();
        huffman_encode(b"www.example.com", &mut enc);
        assert_eq!(enc, hex("f1e3 c2e5 f23a 6ba0 ab90 f4ff"));
        // Encode with the table, decode with the state machine.
        for len in [1usize, 7, 64] {
            for start in 0..=255u8 {
                let input: Vec<u8> = (0..len)
                    .map(|i| start.wrapping_add((i as u8).wrapping_mul(37)))
                    .collect();
                let mut enc = Vec::new();
                huffman_encode(&input, &mut enc);
                assert_eq!(enc.len(), huffman_len(&input));
                let mut out = Vec::new();
                huffman_decode(&enc, &mut out).unwrap();
                assert_eq!(out, input);
            }
        }
    }
}
