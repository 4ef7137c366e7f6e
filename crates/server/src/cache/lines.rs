//! Header fields owned in one buffer ([`Lines`]): a stored response's fields, the copy of a
//! request's a fill keeps for `Vary`. Each field is a `Name: value\r\n` line, so a stored head
//! is copied into a response as it is, and its name and value are found by offsets kept in a
//! table at the front of the same buffer. One allocation for any number of fields, sized once
//! ([`Lines::with_capacity`]): a field per `Box<str>` and `Box<[u8]>` was two allocations a
//! field, most of the 44 a cache miss made, and the table in a `Vec` of its own one more per
//! copy (callgrind; docs/PERFORMANCE.md). A stored response's body may follow its lines in the
//! same buffer (the lines' tail, [`Lines::push_tail`]): one allocation for the whole object's
//! bytes.

use lowlat_http::cache::Fields;

/// Bytes of one table entry: where a field's name ends and its value starts and ends, three
/// `u32` offsets into the lines.
const ENTRY: usize = 12;

/// Fields as `Name: value\r\n` lines in one buffer, and bytes after them (the tail).
#[derive(Debug, Default, Clone)]
pub(crate) struct Lines {
    /// `room` table entries, then the lines, then the tail.
    buf: Vec<u8>,
    /// Table entries the buffer has room for (the lines start at `room * ENTRY`).
    room: u32,
    /// Fields held (table entries used).
    count: u32,
    /// Where the lines end and the tail starts (0 until the first line: the end of the table).
    end: u32,
}

impl Lines {
    /// Room for `count` fields whose names and values take `len` bytes together.
    pub(crate) fn with_capacity(count: usize, len: usize) -> Self {
        // Heads are at most tens of KiB (the head limits), far below u32.
        let room = u32::try_from(count).unwrap_or(u32::MAX);
        let table = count * ENTRY;
        let mut buf = Vec::with_capacity(table + len + count * 4);
        buf.resize(table, 0);
        Lines {
            buf,
            room,
            count: 0,
            end: u32::try_from(table).unwrap_or(u32::MAX),
        }
    }

    /// The lines of every field `keep` accepts (asked once a field), sized for all of them in
    /// one pass first: what is left out is a few bytes of slack, where asking twice would cost
    /// more than they do. The buffer is zeroed to that size once and each line written into
    /// its place ([`copy_short`]), then cut to what was written.
    pub(crate) fn of<'a, I>(fields: I, keep: impl FnMut(&str) -> bool) -> Self
    where
        I: Iterator<Item = (&'a str, &'a [u8])> + Clone,
    {
        Lines::of_with_tail(fields, keep, 0)
    }

    /// [`Lines::of`], with room for a tail of `tail` bytes after the lines.
    pub(crate) fn of_with_tail<'a, I>(
        fields: I,
        mut keep: impl FnMut(&str) -> bool,
        tail: usize,
    ) -> Self
    where
        I: Iterator<Item = (&'a str, &'a [u8])> + Clone,
    {
        let (count, len) = fields
            .clone()
            .fold((0, 0), |(c, l), (n, v)| (c + 1, l + n.len() + v.len()));
        let table = count * ENTRY;
        // Not `vec![0; n]`: that is `calloc`, which glibc serves without its thread cache.
        let mut buf = Vec::with_capacity(table + len + count * 4 + tail);
        buf.resize(table + len + count * 4, 0);
        let (mut at, mut used) = (table, 0);
        for (n, v) in fields {
            if !keep(n) {
                continue;
            }
            let line = &mut buf[at..at + n.len() + v.len() + 4];
            let (name, rest) = line.split_at_mut(n.len());
            copy_short(name, n.as_bytes());
            let (sep, rest) = rest.split_at_mut(2);
            sep.copy_from_slice(b": ");
            let (value, end) = rest.split_at_mut(v.len());
            copy_short(value, v);
            end.copy_from_slice(b"\r\n");
            // Heads are at most tens of KiB (the head limits): an offset fits a u32.
            #[allow(clippy::cast_possible_truncation)]
            let offset = |v: usize| ((v - table) as u32).to_ne_bytes();
            let entry = &mut buf[used * ENTRY..(used + 1) * ENTRY];
            entry[..4].copy_from_slice(&offset(at + n.len()));
            entry[4..8].copy_from_slice(&offset(at + n.len() + 2));
            entry[8..].copy_from_slice(&offset(at + n.len() + 2 + v.len()));
            at += n.len() + v.len() + 4;
            used += 1;
        }
        buf.truncate(at);
        Lines {
            buf,
            room: u32::try_from(count).unwrap_or(u32::MAX),
            count: u32::try_from(used).unwrap_or(u32::MAX),
            end: u32::try_from(at).unwrap_or(u32::MAX),
        }
    }

    /// Where the lines start in the buffer.
    fn start(&self) -> usize {
        self.room as usize * ENTRY
    }

    /// Adds a field line (before any tail).
    pub(crate) fn push(&mut self, name: &str, value: &[u8]) {
        debug_assert_eq!(
            self.buf.len(),
            self.lines_end(),
            "a line pushed after the tail"
        );
        if self.count == self.room {
            self.grow_table();
        }
        let start = self.start();
        let b = &mut self.buf;
        b.extend_from_slice(name.as_bytes());
        let name_end = b.len() - start;
        b.extend_from_slice(b": ");
        let value_at = b.len() - start;
        b.extend_from_slice(value);
        let value_end = b.len() - start;
        b.extend_from_slice(b"\r\n");
        let at = |v: usize| u32::try_from(v).unwrap_or(u32::MAX).to_ne_bytes();
        let mut entry = [0; ENTRY];
        entry[..4].copy_from_slice(&at(name_end));
        entry[4..8].copy_from_slice(&at(value_at));
        entry[8..].copy_from_slice(&at(value_end));
        let e = self.count as usize * ENTRY;
        b[e..e + ENTRY].copy_from_slice(&entry);
        self.count += 1;
        self.end = u32::try_from(b.len()).unwrap_or(u32::MAX);
    }

    /// Where the lines end in the buffer.
    fn lines_end(&self) -> usize {
        (self.end as usize).max(self.start())
    }

    /// Adds bytes to the tail.
    pub(crate) fn push_tail(&mut self, data: &[u8]) {
        if self.end == 0 {
            self.end = u32::try_from(self.buf.len()).unwrap_or(u32::MAX);
        }
        self.buf.extend_from_slice(data);
    }

    /// The tail: what follows the lines.
    pub(crate) fn tail(&self) -> &[u8] {
        &self.buf[self.lines_end()..]
    }

    /// Room for more table entries than sized for (the lines move up behind them): cold, as
    /// every builder sizes the table for the fields it may push.
    #[cold]
    fn grow_table(&mut self) {
        let more = (self.room as usize).max(4);
        let at = self.start();
        self.buf
            .splice(at..at, std::iter::repeat_n(0, more * ENTRY));
        self.room += u32::try_from(more).unwrap_or(0);
        // The lines (and the end of them) moved up behind the new entries.
        if self.end != 0 {
            self.end += u32::try_from(more * ENTRY).unwrap_or(0);
        }
    }

    /// The lines, ready to be copied into a head.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf[self.start()..self.lines_end()]
    }

    /// The bytes held (the tail's too), for a memory budget.
    pub(crate) fn heap_len(&self) -> usize {
        self.buf.capacity()
    }

    /// Field `i`'s table entry.
    fn entry(&self, i: usize) -> [usize; 3] {
        let e = &self.buf[i * ENTRY..(i + 1) * ENTRY];
        let word = |k: usize| {
            let mut w = [0; 4];
            w.copy_from_slice(&e[k..k + 4]);
            u32::from_ne_bytes(w) as usize
        };
        [word(0), word(4), word(8)]
    }

    /// Where field `i`'s name starts and ends, and its value, in the buffer.
    fn spans(&self, i: usize) -> (usize, usize, usize, usize) {
        let start = self.start();
        let first = match i {
            0 => 0,
            _ => self.entry(i - 1)[2] + 2,
        };
        let [n1, v0, v1] = self.entry(i);
        (start + first, start + n1, start + v0, start + v1)
    }

    fn name_bytes(&self, i: usize) -> &[u8] {
        let (n0, n1, _, _) = self.spans(i);
        &self.buf[n0..n1]
    }
}

/// Copies `src` into `dst` (as long): header names and values are a few to a few tens of
/// bytes, where two overlapping word loads and stores beat a call to `memcpy` and its size
/// dispatch; longer ones go to `copy_from_slice`. Hand-written for a cache miss, which copies
/// every field of the request and of the response it stores: measured in docs/PERFORMANCE.md
/// ("Later still on 2026-11-30").
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if n > 32 {
        dst.copy_from_slice(src);
    } else if n >= 16 {
        dst[..16].copy_from_slice(&src[..16]);
        dst[n - 16..].copy_from_slice(&src[n - 16..]);
    } else if n >= 8 {
        dst[..8].copy_from_slice(&src[..8]);
        dst[n - 8..].copy_from_slice(&src[n - 8..]);
    } else if n >= 4 {
        dst[..4].copy_from_slice(&src[..4]);
        dst[n - 4..].copy_from_slice(&src[n - 4..]);
    } else {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = *s;
        }
    }
}

impl Fields for Lines {
    fn count(&self) -> usize {
        self.count as usize
    }

    fn field(&self, i: usize) -> (&str, &[u8]) {
        let (n0, n1, v0, v1) = self.spans(i);
        // Names were `&str` when pushed, so the bytes are UTF-8.
        let name = std::str::from_utf8(&self.buf[n0..n1]).unwrap_or("");
        (name, &self.buf[v0..v1])
    }

    fn is_named(&self, i: usize, name: &str) -> bool {
        self.name_bytes(i).eq_ignore_ascii_case(name.as_bytes())
    }

    fn value(&self, i: usize) -> &[u8] {
        let (_, _, v0, v1) = self.spans(i);
        &self.buf[v0..v1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_offsets() {
        let fields: [(&str, &[u8]); 3] = [
            ("Content-Type", b"text/plain"),
            ("X-Empty", b""),
            ("Vary", b"Accept"),
        ];
        let lines = Lines::of(fields.iter().copied(), |n| n != "X-Skip");
        assert_eq!(
            lines.bytes(),
            b"Content-Type: text/plain\r\nX-Empty: \r\nVary: Accept\r\n"
        );
        assert_eq!(lines.count(), 3);
        assert_eq!(lines.field(1), ("X-Empty", &b""[..]));
        assert_eq!(lines.field(2), ("Vary", &b"Accept"[..]));
        assert!(lines.is_named(0, "content-type"));
        assert!(!lines.is_named(0, "content-typ"));
        assert_eq!(
            lowlat_http::cache::first(&lines, "VARY"),
            Some(&b"Accept"[..])
        );
        // Sized once: nothing grew.
        assert_eq!(lines.buf.len(), lines.buf.capacity());
    }

    #[test]
    fn kept_fields_only() {
        let fields: [(&str, &[u8]); 2] = [("A", b"1"), ("B", b"2")];
        let lines = Lines::of(fields.iter().copied(), |n| n == "B");
        assert_eq!(lines.bytes(), b"B: 2\r\n");
        assert_eq!(lines.count(), 1);
        assert_eq!(lines.field(0), ("B", &b"2"[..]));
        assert_eq!(Lines::default().count(), 0);
        assert_eq!(Lines::default().bytes(), b"");
    }

    #[test]
    fn a_tail_follows_the_lines() {
        let fields: [(&str, &[u8]); 2] = [("A", b"1"), ("B", b"2")];
        let mut lines = Lines::of_with_tail(fields.iter().copied(), |_| true, 5);
        assert_eq!(lines.tail(), b"");
        lines.push_tail(b"hel");
        lines.push_tail(b"lo");
        assert_eq!(lines.bytes(), b"A: 1\r\nB: 2\r\n");
        assert_eq!(lines.tail(), b"hello");
        assert_eq!(lines.field(1), ("B", &b"2"[..]));
        // One allocation, sized for both.
        assert_eq!(lines.buf.len(), lines.buf.capacity());

        let mut pushed = Lines::with_capacity(1, 4);
        pushed.push("N", b"v");
        pushed.push("M", b"w");
        pushed.push_tail(b"body");
        assert_eq!(pushed.bytes(), b"N: v\r\nM: w\r\n");
        assert_eq!(pushed.tail(), b"body");
        assert_eq!(Lines::default().tail(), b"");
        let mut bare = Lines::default();
        bare.push_tail(b"x");
        assert_eq!((bare.bytes(), bare.tail()), (&b""[..], &b"x"[..]));
    }

    #[test]
    fn short_copies_of_every_length() {
        let src: Vec<u8> = (1..=40).collect();
        for n in 0..=40 {
            let mut dst = vec![0; n];
            copy_short(&mut dst, &src[..n]);
            assert_eq!(dst, src[..n], "{n} bytes");
        }
    }

    #[test]
    fn more_fields_than_sized_for() {
        let mut lines = Lines::with_capacity(1, 4);
        for i in 0..9 {
            lines.push(&format!("N{i}"), format!("v{i}").as_bytes());
        }
        assert_eq!(lines.count(), 9);
        for i in 0..9 {
            let (n, v) = lines.field(i);
            assert_eq!((n, v), (&*format!("N{i}"), format!("v{i}").as_bytes()));
        }
        assert!(lines.bytes().starts_with(b"N0: v0\r\nN1: v1\r\n"));
        assert!(lines.bytes().ends_with(b"N8: v8\r\n"));
    }
}
