//! Header fields owned in one buffer ([`Lines`]): a stored response's fields, the copy of a
//! request's a fill keeps for `Vary`. Each field is a `Name: value\r\n` line, so a stored head
//! is copied into a response as it is, and its name and value are found by offsets kept in a
//! table at the front of the same buffer. One allocation for any number of fields, sized once
//! ([`Lines::with_capacity`]): a field per `Box<str>` and `Box<[u8]>` was two allocations a
//! field, most of the 44 a cache miss made, and the table in a `Vec` of its own one more per
//! copy (callgrind; docs/PERFORMANCE.md).

use lowlat_http::cache::Fields;

/// Bytes of one table entry: where a field's name ends and its value starts and ends, three
/// `u32` offsets into the lines.
const ENTRY: usize = 12;

/// Fields as `Name: value\r\n` lines in one buffer.
#[derive(Debug, Default, Clone)]
pub(crate) struct Lines {
    /// `room` table entries, then the lines.
    buf: Vec<u8>,
    /// Table entries the buffer has room for (the lines start at `room * ENTRY`).
    room: u32,
    /// Fields held (table entries used).
    count: u32,
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
        }
    }

    /// The lines of every field `keep` accepts (asked once a field), sized for all of them in
    /// one pass first: what is left out is a few bytes of slack, where asking twice would cost
    /// more than they do.
    pub(crate) fn of<'a, I>(fields: I, mut keep: impl FnMut(&str) -> bool) -> Self
    where
        I: Iterator<Item = (&'a str, &'a [u8])> + Clone,
    {
        let (count, len) = fields
            .clone()
            .fold((0, 0), |(c, l), (n, v)| (c + 1, l + n.len() + v.len()));
        let mut lines = Lines::with_capacity(count, len);
        for (n, v) in fields {
            if keep(n) {
                lines.push(n, v);
            }
        }
        lines
    }

    /// Where the lines start in the buffer.
    fn start(&self) -> usize {
        self.room as usize * ENTRY
    }

    /// Adds a field line.
    pub(crate) fn push(&mut self, name: &str, value: &[u8]) {
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
    }

    /// The lines, ready to be copied into a head.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf[self.start()..]
    }

    /// The bytes held, for a memory budget.
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
