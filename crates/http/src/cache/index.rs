//! A response's fields indexed by the names the caching decisions ask for ([`Indexed`]): one
//! walk over the fields, after which a look-up by one of those names reads only the lines
//! that carry it, and a look-up of one the response lacks reads none.
//!
//! Storing a response asks for about a dozen fields by name (`Cache-Control` and the targeted
//! field, `Expires`, `Date`, `Age`, `Last-Modified`, `Set-Cookie`, `Vary`, `Connection`), each
//! a walk over every field line; most of them are absent, and each walk cost a cache miss
//! about 50 instructions over a typical response's eight fields (callgrind).

use std::ops::Range;

use super::fields::Fields;

/// The names indexed, in [`slot`]'s order.
const NAMES: [&str; 10] = [
    "age",
    "date",
    "vary",
    "etag",
    "expires",
    "connection",
    "set-cookie",
    "cache-control",
    "last-modified",
    "cdn-cache-control",
];

/// The class of `name` among [`NAMES`]: the one with its length and first letter (any case),
/// if any. Names are not compared in full: a class's span may hold lines of another name of
/// the same length and first letter, which [`values`](super::fields::values) then passes over
/// as it does any line not named as asked. Comparing in full cost more than the walks saved
/// (about 80 instructions a comparison, some twenty a response).
fn slot(name: &str) -> Option<usize> {
    let b = name.as_bytes();
    // On the length first (a jump table), then the letter: most names have a length none of
    // these has and cost one comparison.
    let first = || b[0] | 0x20;
    match b.len() {
        3 if first() == b'a' => Some(0),
        4 => match first() {
            b'd' => Some(1),
            b'v' => Some(2),
            b'e' => Some(3),
            _ => None,
        },
        7 if first() == b'e' => Some(4),
        10 => match first() {
            b'c' => Some(5),
            b's' => Some(6),
            _ => None,
        },
        13 => match first() {
            b'c' => Some(7),
            b'l' => Some(8),
            _ => None,
        },
        17 if first() == b'c' => Some(9),
        _ => None,
    }
}

/// Fields with, for each class of indexed names, the span of lines from the first to the last
/// of that class (empty when there is none). Everything else is asked of the fields themselves.
pub struct Indexed<'f, F: ?Sized> {
    fields: &'f F,
    spans: [Range<usize>; NAMES.len()],
}

impl<'f, F: Fields + ?Sized> Indexed<'f, F> {
    /// Indexes `fields` in one walk.
    pub fn new(fields: &'f F) -> Self {
        let mut spans: [Range<usize>; NAMES.len()] = Default::default();
        for i in 0..fields.count() {
            if let Some(k) = slot(fields.field(i).0) {
                let span = &mut spans[k];
                if span.start == span.end {
                    span.start = i;
                }
                span.end = i + 1;
            }
        }
        Indexed { fields, spans }
    }
}

impl<F: Fields + ?Sized> Fields for Indexed<'_, F> {
    fn count(&self) -> usize {
        self.fields.count()
    }
    fn field(&self, i: usize) -> (&str, &[u8]) {
        self.fields.field(i)
    }
    fn is_named(&self, i: usize, name: &str) -> bool {
        self.fields.is_named(i, name)
    }
    fn value(&self, i: usize) -> &[u8] {
        self.fields.value(i)
    }
    fn range_of(&self, name: &str) -> Range<usize> {
        match slot(name) {
            Some(k) => self.spans[k].clone(),
            None => 0..self.count(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::fields::values;

    #[test]
    fn every_name_is_its_own_class() {
        for (i, name) in NAMES.iter().enumerate() {
            assert_eq!(slot(name), Some(i), "{name}");
            assert_eq!(slot(&name.to_ascii_uppercase()), Some(i), "{name}");
        }
        for other in [
            "",
            "a",
            "agE2",
            "datum",
            "x-cache-control",
            "content-length",
        ] {
            assert_eq!(slot(other), None, "{other}");
        }
    }

    #[test]
    fn look_ups_answer_as_the_fields_do() {
        let fields: &[(&str, &[u8])] = &[
            ("Server", b"x"),
            ("Vary", b"a"),
            ("Cache-Control", b"max-age=1"),
            ("X-Other", b"o"),
            ("vary", b"b"),
            ("Set-Cookie", b"c"),
            ("Age", b"3"),
            // Of the class of `Date` and `Cache-Control`, but neither.
            ("Dave", b"d"),
            ("Cache-Controls", b"x"),
            ("Cxxxx-Xxxxxxx", b"y"),
        ];
        let indexed = Indexed::new(fields);
        for name in NAMES.iter().chain(&["server", "x-other", "content-type"]) {
            let want: Vec<&[u8]> = values(fields, name).collect();
            let got: Vec<&[u8]> = values(&indexed, name).collect();
            assert_eq!(got, want, "{name}");
        }
        assert_eq!(indexed.range_of("vary"), 1..5);
        assert_eq!(indexed.range_of("expires"), 0..0);
        assert_eq!(indexed.range_of("server"), 0..10);
        assert_eq!(indexed.range_of("date"), 7..8);
        assert!(values(&indexed, "date").next().is_none());
    }
}
