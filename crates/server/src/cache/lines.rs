//! Header fields owned in one buffer ([`Lines`]): a stored response's fields, the copy of a
//! request's a fill keeps for `Vary`. Each field is a `Name: value\r\n` line, so a stored head
//! is copied into a response as it is, and its name and value are found by offsets kept beside
//! it. Two allocations for any number of fields, each sized once ([`Lines::with_capacity`]):
//! a field per `Box<str>` and `Box<[u8]>` was two allocations a field, most of the 44 a cache
//! miss made (callgrind; 11 since, docs/PERFORMANCE.md).

use lowlat_http::cache::Fields;

/// Fields as `Name: value\r\n` lines in one buffer.
#[derive(Debug, Default, Clone)]
pub(crate) struct Lines {
    bytes: Vec<u8>,
    /// Per field, where its name ends and its value starts and ends in `bytes` (its name
    /// starts where the line before it ended, `: ` and `\r\n` around the value).
    ends: Vec<[u32; 3]>,
}

impl Lines {
    /// Room for `count` fields whose names and values take `len` bytes together.
    pub(crate) fn with_capacity(count: usize, len: usize) -> Self {
        Lines {
            bytes: Vec::with_capacity(len + count * 4),
            ends: Vec::with_capacity(count),
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

    /// Adds a field line.
    pub(crate) fn push(&mut self, name: &str, value: &[u8]) {
        let b = &mut self.bytes;
        b.extend_from_slice(name.as_bytes());
        let name_end = b.len();
        b.extend_from_slice(b": ");
        let value_at = b.len();
        b.extend_from_slice(value);
        let value_end = b.len();
        b.extend_from_slice(b"\r\n");
        // Heads are at most tens of KiB (the head limits), far below u32.
        let at = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        self.ends.push([at(name_end), at(value_at), at(value_end)]);
    }

    /// The lines, ready to be copied into a head.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The bytes held, for a memory budget.
    pub(crate) fn heap_len(&self) -> usize {
        self.bytes.capacity() + self.ends.capacity() * 12
    }

    /// Where field `i`'s name starts and ends, and its value.
    fn spans(&self, i: usize) -> (usize, usize, usize, usize) {
        let start = match i {
            0 => 0,
            _ => self.ends[i - 1][2] as usize + 2,
        };
        let [n1, v0, v1] = self.ends[i].map(|v| v as usize);
        (start, n1, v0, v1)
    }

    /// Whether field `i` has one of `names` (ASCII case-insensitive; its offsets found once).
    pub(crate) fn name_is_one_of(&self, i: usize, names: &[&str]) -> bool {
        let name = self.name_bytes(i);
        names
            .iter()
            .any(|n| name.eq_ignore_ascii_case(n.as_bytes()))
    }

    fn name_bytes(&self, i: usize) -> &[u8] {
        let (n0, n1, _, _) = self.spans(i);
        &self.bytes[n0..n1]
    }
}

impl Fields for Lines {
    fn count(&self) -> usize {
        self.ends.len()
    }

    fn field(&self, i: usize) -> (&str, &[u8]) {
        let (n0, n1, v0, v1) = self.spans(i);
        // Names were `&str` when pushed, so the bytes are UTF-8.
        let name = std::str::from_utf8(&self.bytes[n0..n1]).unwrap_or("");
        (name, &self.bytes[v0..v1])
    }

    fn is_named(&self, i: usize, name: &str) -> bool {
        self.name_bytes(i).eq_ignore_ascii_case(name.as_bytes())
    }

    fn value(&self, i: usize) -> &[u8] {
        let (_, _, v0, v1) = self.spans(i);
        &self.bytes[v0..v1]
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
        assert!(lines.name_is_one_of(2, &["etag", "vary"]));
        assert!(!lines.name_is_one_of(2, &["etag", "varies"]));
        assert_eq!(
            lowlat_http::cache::first(&lines, "VARY"),
            Some(&b"Accept"[..])
        );
        // Sized once: nothing grew.
        assert_eq!(lines.bytes.len(), lines.bytes.capacity());
        assert_eq!(lines.ends.len(), lines.ends.capacity());
    }

    #[test]
    fn kept_fields_only() {
        let fields: [(&str, &[u8]); 2] = [("A", b"1"), ("B", b"2")];
        let lines = Lines::of(fields.iter().copied(), |n| n == "B");
        assert_eq!(lines.bytes(), b"B: 2\r\n");
        assert_eq!(lines.count(), 1);
        assert_eq!(lines.field(0), ("B", &b"2"[..]));
        assert_eq!(Lines::default().count(), 0);
    }
}
