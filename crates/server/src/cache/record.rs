//! One stored entry as the disk tier writes it to a file ([`encode`]) and reads it back
//! ([`decode`], [`Summary::read`]): no I/O here beyond reading a file's first bytes.
//!
//! ```text
//! "LLC1"  head length (u32)  head  body
//! head:   kind (u8) · key (u32 length + bytes) · then, for a response:
//!         status (u16) · reason (u16 length + bytes) · fields (u32 count, then per field
//!         u16 name length, u32 value length, name, value) · corrected initial age,
//!         response time, lifetime, stale-while-revalidate, stale-if-error (u64 each) ·
//!         flags (u8: no-cache, no-stale) · body length (u64)
//!         or, for a Vary marker: the Vary value (u32 length + bytes) · its id (u64)
//! ```
//!
//! Integers are little-endian. The key is in the file (not only in its name) so that the index
//! can be rebuilt from the files alone after a restart, and so that a read can check it found
//! what it looked for. A file that is cut short, of another version or otherwise malformed
//! reads as [`Malformed`] and is dropped: the entry is then a miss, never a wrong answer.

use std::sync::Arc;

use bytes::Bytes;
use lowlat_http::cache::freshness::{AgeBase, Stored};
use lowlat_http::cache::Fields;

use super::entry::Entry;
use super::lines::Lines;
use super::object::{reason_of, tags_of, Object};

const MAGIC: &[u8; 4] = b"LLC1";
const OBJECT: u8 = 0;
const VARY: u8 = 1;

/// Bytes before the head: the magic and the head's length.
pub(crate) const PREAMBLE: usize = 8;

/// The largest head read back (a key and a response head are bounded far below this by the
/// server's own limits; a larger claim is a damaged file).
const MAX_HEAD: usize = 1 << 20;

/// A file that is not a whole record of this version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Malformed;

/// The head and body of `entry` stored under `key`: write `head`, then `body`.
pub(crate) fn encode<'e>(key: &[u8], entry: &'e Entry) -> (Vec<u8>, &'e [u8]) {
    let mut h = Vec::with_capacity(128 + key.len());
    h.extend_from_slice(MAGIC);
    h.extend_from_slice(&[0; 4]);
    match entry {
        Entry::Object(o) => {
            h.push(OBJECT);
            put_bytes32(&mut h, key);
            h.extend_from_slice(&o.status.to_le_bytes());
            let reason = o.reason.as_bytes();
            let reason = &reason[..reason.len().min(usize::from(u16::MAX))];
            h.extend_from_slice(&(reason.len() as u16).to_le_bytes());
            h.extend_from_slice(reason);
            h.extend_from_slice(&(o.lines.count() as u32).to_le_bytes());
            for i in 0..o.lines.count() {
                let (name, value) = o.lines.field(i);
                h.extend_from_slice(&(name.len() as u16).to_le_bytes());
                h.extend_from_slice(&(value.len() as u32).to_le_bytes());
                h.extend_from_slice(name.as_bytes());
                h.extend_from_slice(value);
            }
            let f = &o.fresh;
            for v in [
                o.age.initial,
                o.age.response_time,
                f.lifetime,
                f.stale_while_revalidate,
                f.stale_if_error,
            ] {
                h.extend_from_slice(&v.to_le_bytes());
            }
            h.push(u8::from(f.no_cache) | u8::from(f.no_stale) << 1);
            h.extend_from_slice(&(o.body().len() as u64).to_le_bytes());
        }
        Entry::Vary { value, id } => {
            h.push(VARY);
            put_bytes32(&mut h, key);
            put_bytes32(&mut h, value);
            h.extend_from_slice(&id.to_le_bytes());
        }
    }
    let head_len = (h.len() - PREAMBLE) as u32;
    h[4..8].copy_from_slice(&head_len.to_le_bytes());
    let body = match entry {
        Entry::Object(o) => o.body(),
        Entry::Vary { .. } => &[],
    };
    (h, body)
}

fn put_bytes32(h: &mut Vec<u8>, b: &[u8]) {
    h.extend_from_slice(&(b.len() as u32).to_le_bytes());
    h.extend_from_slice(b);
}

/// How long the head is, from a file's first [`PREAMBLE`] bytes.
pub(crate) fn head_len(preamble: &[u8]) -> Result<usize, Malformed> {
    if preamble.len() < PREAMBLE || &preamble[..4] != MAGIC {
        return Err(Malformed);
    }
    let n = u32::from_le_bytes([preamble[4], preamble[5], preamble[6], preamble[7]]) as usize;
    if n > MAX_HEAD {
        return Err(Malformed);
    }
    Ok(n)
}

/// A cursor over a head.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if self.0.len() < n {
            return Err(Malformed);
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, Malformed> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, Malformed> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, Malformed> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes(b.try_into().map_err(|_| Malformed)?))
    }
    fn bytes32(&mut self) -> Result<&'a [u8], Malformed> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

/// What the index keeps of a file: its key, its tags (for purging by tag) and what its
/// body and head add up to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Summary {
    pub(crate) key: Box<[u8]>,
    pub(crate) tags: Box<[Box<[u8]>]>,
    /// The whole file's length, as the record says it should be.
    pub(crate) len: u64,
}

/// Decoded head: the entry without its body, and the body's length.
struct Head<'a> {
    key: &'a [u8],
    parts: Parts<'a>,
}

enum Parts<'a> {
    Object {
        status: u16,
        reason: &'a str,
        lines: Lines,
        age: AgeBase,
        fresh: Stored,
        body_len: u64,
    },
    Vary {
        value: &'a [u8],
        id: u64,
    },
}

fn parse_head(head: &[u8]) -> Result<Head<'_>, Malformed> {
    let mut r = Reader(head);
    let kind = r.u8()?;
    let key = r.bytes32()?;
    let parts = match kind {
        OBJECT => {
            let status = r.u16()?;
            let n = usize::from(r.u16()?);
            let reason = std::str::from_utf8(r.take(n)?).map_err(|_| Malformed)?;
            let count = r.u32()? as usize;
            let mut lines = Lines::with_capacity(count.min(1024), head.len());
            for _ in 0..count {
                let name_len = usize::from(r.u16()?);
                let value_len = r.u32()? as usize;
                let name = std::str::from_utf8(r.take(name_len)?).map_err(|_| Malformed)?;
                lines.push(name, r.take(value_len)?);
            }
            let age = AgeBase {
                initial: r.u64()?,
                response_time: r.u64()?,
            };
            let lifetime = r.u64()?;
            let stale_while_revalidate = r.u64()?;
            let stale_if_error = r.u64()?;
            let flags = r.u8()?;
            let fresh = Stored {
                lifetime,
                stale_while_revalidate,
                stale_if_error,
                no_cache: flags & 1 != 0,
                no_stale: flags & 2 != 0,
            };
            Parts::Object {
                status,
                reason,
                lines,
                age,
                fresh,
                body_len: r.u64()?,
            }
        }
        VARY => Parts::Vary {
            value: r.bytes32()?,
            id: r.u64()?,
        },
        _ => return Err(Malformed),
    };
    if !r.0.is_empty() {
        return Err(Malformed);
    }
    Ok(Head { key, parts })
}

impl Summary {
    /// The summary of a record whose head (after the preamble) is `head`.
    pub(crate) fn of_head(head: &[u8]) -> Result<Self, Malformed> {
        let h = parse_head(head)?;
        let (tags, body_len) = match h.parts {
            Parts::Object {
                lines, body_len, ..
            } => (tags_of(&lines), body_len),
            Parts::Vary { .. } => (Box::default(), 0),
        };
        Ok(Summary {
            key: h.key.into(),
            tags,
            len: (PREAMBLE + head.len()) as u64 + body_len,
        })
    }
}

/// The entry a whole file holds, and its key. The body is a slice of `file`, not a copy.
pub(crate) fn decode(file: &Bytes) -> Result<(&[u8], Entry), Malformed> {
    let n = head_len(file)?;
    let head = file.get(PREAMBLE..PREAMBLE + n).ok_or(Malformed)?;
    let body = file.slice(PREAMBLE + n..);
    let h = parse_head(head)?;
    let entry = match h.parts {
        Parts::Object {
            status,
            reason,
            lines,
            age,
            fresh,
            body_len,
        } => {
            if body.len() as u64 != body_len {
                return Err(Malformed);
            }
            Entry::Object(Arc::new(Object::new(
                status,
                reason_of(status, reason),
                lines,
                body,
                age,
                fresh,
            )))
        }
        Parts::Vary { value, id } => {
            if !body.is_empty() {
                return Err(Malformed);
            }
            Entry::Vary {
                value: value.into(),
                id,
            }
        }
    };
    Ok((h.key, entry))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lowlat_http::cache::Directives;

    fn object() -> Entry {
        let fields: [(&str, &[u8]); 3] = [
            ("Content-Type", b"text/plain"),
            ("Cache-Tag", b"a,b"),
            ("ETag", b"\"x\""),
        ];
        let mut fresh = Stored::new(60, &Directives::default());
        fresh.stale_if_error = 7;
        fresh.no_stale = true;
        Entry::Object(Arc::new(Object::new(
            203,
            reason_of(203, "Mine"),
            Lines::of(fields.iter().copied(), |_| true),
            Bytes::from_static(b"hello"),
            AgeBase {
                initial: 3,
                response_time: 1_700_000_000,
            },
            fresh,
        )))
    }

    fn whole(key: &[u8], e: &Entry) -> Bytes {
        let (mut head, body) = encode(key, e);
        head.extend_from_slice(body);
        head.into()
    }

    #[test]
    fn an_object_reads_back_as_written() {
        let file = whole(b"http://h/x", &object());
        let (key, entry) = decode(&file).unwrap();
        assert_eq!(key, b"http://h/x");
        let (Entry::Object(a), Entry::Object(b)) = (&entry, &object()) else {
            panic!("not an object")
        };
        assert_eq!((a.status, &a.reason[..]), (203, "Mine"));
        assert_eq!(a.lines.bytes(), b.lines.bytes());
        assert_eq!(a.body(), b.body());
        assert_eq!(a.age, b.age);
        assert_eq!(a.fresh, b.fresh);
        assert_eq!(a.tags, b.tags);
        let s = Summary::of_head(&file[PREAMBLE..PREAMBLE + head_len(&file).unwrap()]).unwrap();
        assert_eq!(&s.key[..], b"http://h/x");
        assert_eq!(s.len, file.len() as u64);
        let tags: Vec<&[u8]> = s.tags.iter().map(|t| &t[..]).collect();
        assert_eq!(tags, [b"a", b"b"]);
    }

    #[test]
    fn a_vary_marker_reads_back_as_written() {
        let e = Entry::Vary {
            value: Arc::from(&b"accept-encoding"[..]),
            id: 42,
        };
        let file = whole(b"k", &e);
        let (key, entry) = decode(&file).unwrap();
        assert_eq!(key, b"k");
        assert!(matches!(entry, Entry::Vary { value, id: 42 } if &value[..] == b"accept-encoding"));
    }

    #[test]
    fn every_cut_and_every_damaged_preamble_is_refused() {
        let file = whole(b"http://h/x", &object());
        for n in 0..file.len() {
            assert_eq!(
                decode(&file.slice(..n)).err(),
                Some(Malformed),
                "cut at {n}"
            );
        }
        let mut longer = file.to_vec();
        longer.push(0);
        assert!(decode(&longer.into()).is_err());
        for i in 0..PREAMBLE {
            let mut bad = file.to_vec();
            bad[i] ^= 0x40;
            assert!(decode(&bad.into()).is_err(), "byte {i}");
        }
    }

    #[test]
    fn any_damage_in_the_head_is_never_a_panic() {
        let file = whole(b"http://h/x", &object());
        for i in PREAMBLE..file.len() {
            for bit in [0x01, 0x80] {
                let mut bad = file.to_vec();
                bad[i] ^= bit;
                let _ = decode(&bad.into());
            }
        }
    }
}
