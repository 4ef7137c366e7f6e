//! Header fields as the caching policy reads them ([`Fields`]: parsed heads and stored
//! responses alike), and the pieces of RFC 9110 syntax every part of it needs: list elements,
//! HTTP-dates, the delta-seconds ceiling.

/// A list of header fields, whatever holds them: parsed heads borrow from a buffer
/// (`httparse::Header`), stored responses own theirs.
pub trait Fields {
    /// How many field lines.
    fn count(&self) -> usize;
    /// The `i`th field line's name and value.
    fn field(&self, i: usize) -> (&str, &[u8]);
    /// Whether the `i`th field line is named `name` (ASCII case-insensitive). Holders that keep
    /// names as bytes answer without making them a `&str` first: every look-up by name asks
    /// this of each line.
    fn is_named(&self, i: usize, name: &str) -> bool {
        self.field(i).0.eq_ignore_ascii_case(name)
    }
    /// The `i`th field line's value.
    fn value(&self, i: usize) -> &[u8] {
        self.field(i).1
    }
    /// Lines that may be named `name`: all of them, unless the holder knows better
    /// (`index::Indexed`).
    fn range_of(&self, _name: &str) -> std::ops::Range<usize> {
        0..self.count()
    }
}

impl Fields for [httparse::Header<'_>] {
    fn count(&self) -> usize {
        self.len()
    }
    fn field(&self, i: usize) -> (&str, &[u8]) {
        (self[i].name, self[i].value)
    }
}

impl<N: AsRef<str>, V: AsRef<[u8]>> Fields for [(N, V)] {
    fn count(&self) -> usize {
        self.len()
    }
    fn field(&self, i: usize) -> (&str, &[u8]) {
        (self[i].0.as_ref(), self[i].1.as_ref())
    }
}

/// The values of every field line named `name` (ASCII case-insensitive), in order.
pub fn values<'a: 'n, 'n, F: Fields + ?Sized>(
    fields: &'a F,
    name: &'n str,
) -> impl Iterator<Item = &'a [u8]> + 'n {
    fields
        .range_of(name)
        .filter(move |&i| fields.is_named(i, name))
        .map(move |i| fields.value(i))
}

/// The first value of the field `name`.
pub fn first<'a, F: Fields + ?Sized>(fields: &'a F, name: &str) -> Option<&'a [u8]> {
    values(fields, name).next()
}

/// Seconds since the Unix epoch of an HTTP-date (RFC 9110 §5.6.7), if it is one.
#[must_use]
pub fn parse_date(value: &[u8]) -> Option<u64> {
    crate::date::parse(value)
}

/// The largest delta-seconds a cache keeps (RFC 9111 §1.2.2: a larger one, or an overflow,
/// counts as 2^31).
pub const DELTA_MAX: u64 = 2_147_483_648;

/// The elements of a comma-separated list (RFC 9110 §5.6.1), trimmed, empty ones skipped;
/// commas inside a quoted string do not split.
pub(crate) fn list_elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = value;
    std::iter::from_fn(move || loop {
        if rest.is_empty() {
            return None;
        }
        let end = element_end(rest);
        let element = trim(&rest[..end]);
        rest = rest.get(end + 1..).unwrap_or(&[]);
        if !element.is_empty() {
            return Some(element);
        }
    })
}

/// Where the list element at the start of `rest` ends: its comma's index, or `rest.len()`.
/// Bytes are only compared with `,` and `"` outside a quoted string (a string's escapes are
/// walked apart): most values hold no quote, and a byte-at-a-time state machine cost about
/// 20 instructions a byte (callgrind, a cache miss's `Cache-Control`).
pub(crate) fn element_end(rest: &[u8]) -> usize {
    let mut i = 0;
    while i < rest.len() {
        match rest[i] {
            b',' => return i,
            b'"' => {
                // The quoted string, to its closing quote (escapes skipped), or to the end.
                i += 1;
                while i < rest.len() && rest[i] != b'"' {
                    i += if rest[i] == b'\\' { 2 } else { 1 };
                }
            }
            _ => {}
        }
        i += 1;
    }
    rest.len()
}

/// `value` without leading and trailing spaces and tabs.
pub(crate) fn trim(value: &[u8]) -> &[u8] {
    let start = value
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(start, |e| e + 1);
    &value[start..end.max(start)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_elements_respect_quotes() {
        let cases: &[(&[u8], &[&[u8]])] = &[
            (b"a, b,c", &[b"a", b"b", b"c"]),
            (b" , a ,, ", &[b"a"]),
            (
                b"no-cache=\"a, b\", max-age=1",
                &[b"no-cache=\"a, b\"", b"max-age=1"],
            ),
            (b"x=\"a\\\",b\", y", &[b"x=\"a\\\",b\"", b"y"]),
            (b"", &[]),
        ];
        for (input, want) in cases {
            let got: Vec<&[u8]> = list_elements(input).collect();
            assert_eq!(&got, want, "{}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn dates() {
        assert_eq!(
            parse_date(b"Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(
            parse_date(b" Sun, 06 Nov 1994 08:49:37 GMT "),
            Some(784_111_777)
        );
        assert_eq!(
            parse_date(b"Sunday, 06-Nov-94 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(parse_date(b"0"), None);
        assert_eq!(parse_date(b"\xff"), None);
    }

    #[test]
    fn fields_of_both_kinds() {
        let owned = [("Vary", b"a".to_vec()), ("vary", b"b".to_vec())];
        let got: Vec<&[u8]> = values(&owned[..], "VARY").collect();
        assert_eq!(got, [b"a", b"b"]);
        let parsed = [httparse::Header {
            name: "ETag",
            value: b"\"x\"",
        }];
        assert_eq!(first(&parsed[..], "etag"), Some(&b"\"x\""[..]));
        assert_eq!(first(&parsed[..], "age"), None);
    }
}
