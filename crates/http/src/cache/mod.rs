//! HTTP caching semantics for a shared cache (RFC 9111, with RFC 5861's stale extensions,
//! RFC 9211's `Cache-Status` and RFC 9213's targeted fields): what may be stored, for how long,
//! when a stored response may be used, how it is revalidated and what a response invalidates.
//!
//! No I/O and no clock: every function that needs the time is given `now` (seconds since the
//! epoch) by its caller, so the tables of cases below each file are the whole behaviour. The
//! storage (memory budget, eviction, collapsing) is the server's; this module only decides.
//!
//! # Layout
//! - [`directives`]: `Cache-Control` (and a targeted field such as `CDN-Cache-Control`) parsed
//!   into [`Directives`], for requests and responses.
//! - [`storable`]: whether a response may be stored (§3, §3.5), and why not.
//! - [`freshness`]: freshness lifetime (§4.2.1, heuristics §4.2.2), current age (§4.2.3), and
//!   whether a stored response may be used as it is, stale, or only after revalidation.
//! - [`vary`]: the secondary key a `Vary` response field makes of a request (§4.1).
//! - [`revalidate`]: the conditional request (§4.3.1) and the 304's fields merged in (§4.3.4).
//! - [`invalidate`]: what an unsafe method's response invalidates (§4.4).
//! - [`status`]: the `Cache-Status` field value (RFC 9211).

pub mod directives;
pub mod freshness;
pub mod invalidate;
pub mod revalidate;
pub mod status;
pub mod storable;
pub mod vary;

pub use directives::Directives;

/// A list of header fields, whatever holds them: parsed heads borrow from a buffer
/// (`httparse::Header`), stored responses own theirs.
pub trait Fields {
    /// How many field lines.
    fn count(&self) -> usize;
    /// The `i`th field line's name and value.
    fn field(&self, i: usize) -> (&str, &[u8]);
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
pub fn values<'a, F: Fields + ?Sized>(
    fields: &'a F,
    name: &'a str,
) -> impl Iterator<Item = &'a [u8]> + 'a {
    (0..fields.count()).filter_map(move |i| {
        let (n, v) = fields.field(i);
        n.eq_ignore_ascii_case(name).then_some(v)
    })
}

/// The first value of the field `name`.
pub fn first<'a, F: Fields + ?Sized>(fields: &'a F, name: &'a str) -> Option<&'a [u8]> {
    values(fields, name).next()
}

/// Seconds since the Unix epoch of an HTTP-date (RFC 9110 §5.6.7), if it is one.
#[must_use]
pub fn parse_date(value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(value).ok()?;
    let time = httpdate::parse_http_date(text.trim()).ok()?;
    time.duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs())
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
        let mut quoted = false;
        let mut escaped = false;
        let mut end = rest.len();
        for (i, &b) in rest.iter().enumerate() {
            if escaped {
                escaped = false;
            } else if quoted && b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                quoted = !quoted;
            } else if b == b',' && !quoted {
                end = i;
                break;
            }
        }
        let element = trim(&rest[..end]);
        rest = if end < rest.len() {
            &rest[end + 1..]
        } else {
            &[]
        };
        if !element.is_empty() {
            return Some(element);
        }
    })
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
