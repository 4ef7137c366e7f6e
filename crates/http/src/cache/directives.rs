//! `Cache-Control` directives (RFC 9111 §5.2), for requests and responses, and the targeted
//! fields of RFC 9213 (`CDN-Cache-Control`, or one a configuration names) that replace it.
//!
//! Parsing is lenient where RFC 9111 asks it to be and strict where freshness is concerned:
//! directive names are case-insensitive, an argument may be a token or a quoted string
//! (`max-age="5"`, §5.2), unknown directives are ignored (§5.2.3). A freshness argument that
//! is not a non-negative integer counts as 0, so the response is stale (§4.2.1: caches are
//! "encouraged to consider responses that have invalid freshness information ... to be
//! stale"); a repeated one keeps its first occurrence (§4.2.1 allows either). Values above
//! 2^31 count as 2^31 (§1.2.2). Nothing allocates: qualified forms borrow their field lists.

use super::fields::{element_end, list_elements, trim, values, Fields, DELTA_MAX};

/// The directives of one message's `Cache-Control` lines (or of its targeted field).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Directives<'a> {
    /// `max-age=N` (both sides).
    pub max_age: Option<u64>,
    /// `s-maxage=N` (response): a shared cache's lifetime, and implies `proxy-revalidate`.
    pub s_maxage: Option<u64>,
    /// `no-store` (both sides).
    pub no_store: bool,
    /// `no-cache` without field names (both sides): use only after revalidation.
    pub no_cache: bool,
    /// `no-cache="a, b"` (response): these fields need revalidation; the rest may be used.
    pub no_cache_fields: Option<&'a [u8]>,
    /// `private` without field names: a shared cache stores nothing.
    pub private: bool,
    /// `private="a, b"`: a shared cache may store the response without these fields.
    pub private_fields: Option<&'a [u8]>,
    /// `public`.
    pub public: bool,
    /// `must-revalidate`: never served stale.
    pub must_revalidate: bool,
    /// `proxy-revalidate`: never served stale by a shared cache.
    pub proxy_revalidate: bool,
    /// `must-understand`: stored only by a cache that knows the status code's rules, which
    /// may then ignore `no-store`.
    pub must_understand: bool,
    /// `no-transform`: the body is not to be changed (no compression on the way).
    pub no_transform: bool,
    /// `immutable` (RFC 8246).
    pub immutable: bool,
    /// `stale-while-revalidate=N` (RFC 5861 §3).
    pub stale_while_revalidate: Option<u64>,
    /// `stale-if-error=N` (RFC 5861 §4, both sides).
    pub stale_if_error: Option<u64>,
    /// `max-stale[=N]` (request); a bare `max-stale` is any staleness, [`DELTA_MAX`].
    pub max_stale: Option<u64>,
    /// `min-fresh=N` (request).
    pub min_fresh: Option<u64>,
    /// `only-if-cached` (request).
    pub only_if_cached: bool,
    /// Whether any directive at all was found (RFC 9213 §2.2: a targeted field counts only
    /// when it holds a valid, non-empty value).
    pub present: bool,
}

impl<'a> Directives<'a> {
    /// Parses every line of the field `name` in `fields`.
    pub fn parse<F: Fields + ?Sized>(fields: &'a F, name: &str) -> Self {
        let mut d = Directives::default();
        for value in values(fields, name) {
            d.add(value);
        }
        d
    }

    /// Adds the directives of one field line.
    pub fn add(&mut self, value: &'a [u8]) {
        // The list walked here rather than through `list_elements`' iterator: its closure is
        // not inlined, and a cache miss's `Cache-Control` paid ~90 instructions a call for it
        // (callgrind).
        let mut rest = value;
        while !rest.is_empty() {
            let end = element_end(rest);
            let element = trim(&rest[..end]);
            rest = rest.get(end + 1..).unwrap_or(&[]);
            if element.is_empty() {
                continue;
            }
            let (name, arg) = match element.iter().position(|&b| b == b'=') {
                Some(eq) => (
                    trim(&element[..eq]),
                    Some(unquote(trim(&element[eq + 1..]))),
                ),
                None => (element, None),
            };
            if name.is_empty() {
                continue;
            }
            self.present = true;
            self.set(name, arg);
        }
    }

    /// Sets the directive `name` (any case) with its argument. By length first, then one
    /// comparison: every response stored has its `Cache-Control` read here, and asking each
    /// of the sixteen names in turn cost a miss about 300 instructions (callgrind).
    fn set(&mut self, name: &[u8], arg: Option<&'a [u8]>) {
        let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
        let first = name[0] | 0x20;
        match name.len() {
            6 if is("public") => self.public = true,
            7 if first == b'm' && is("max-age") => first_delta(&mut self.max_age, arg),
            7 if is("private") => match arg {
                Some(list) if !list.is_empty() => self.private_fields = Some(list),
                _ => self.private = true,
            },
            8 if first == b's' && is("s-maxage") => first_delta(&mut self.s_maxage, arg),
            8 if is("no-store") => self.no_store = true,
            8 if is("no-cache") => match arg {
                Some(list) if !list.is_empty() => self.no_cache_fields = Some(list),
                _ => self.no_cache = true,
            },
            9 if is("immutable") => self.immutable = true,
            9 if is("max-stale") && self.max_stale.is_none() => {
                self.max_stale = Some(arg.map_or(DELTA_MAX, delta));
            }
            9 if is("min-fresh") => first_delta(&mut self.min_fresh, arg),
            12 if is("no-transform") => self.no_transform = true,
            14 if is("stale-if-error") => first_delta(&mut self.stale_if_error, arg),
            14 if is("only-if-cached") => self.only_if_cached = true,
            15 if is("must-revalidate") => self.must_revalidate = true,
            15 if is("must-understand") => self.must_understand = true,
            16 if is("proxy-revalidate") => self.proxy_revalidate = true,
            22 if is("stale-while-revalidate") => {
                first_delta(&mut self.stale_while_revalidate, arg);
            }
            _ => {}
        }
    }

    /// The directives a shared cache follows for a response (RFC 9213 §2.2): the first of the
    /// `targeted` fields (in order of precedence) that holds a directive, else `Cache-Control`.
    /// The second value says whether a targeted field was chosen: then `Expires` is ignored too.
    pub fn for_response<F: Fields + ?Sized, T: AsRef<str>>(
        fields: &'a F,
        targeted: &[T],
    ) -> (Self, bool) {
        for name in targeted {
            let d = Directives::parse(fields, name.as_ref());
            if d.present {
                return (d, true);
            }
        }
        (Directives::parse(fields, "cache-control"), false)
    }
}

/// Sets `slot` from a delta-seconds argument unless it already holds one (first occurrence).
fn first_delta(slot: &mut Option<u64>, arg: Option<&[u8]>) {
    if slot.is_none() {
        *slot = Some(arg.map_or(0, delta));
    }
}

/// A delta-seconds value (RFC 9111 §1.2.2): digits only; anything else counts as 0 (stale);
/// an overflow counts as 2^31.
fn delta(arg: &[u8]) -> u64 {
    if arg.is_empty() || !arg.iter().all(u8::is_ascii_digit) {
        return 0;
    }
    let mut n: u64 = 0;
    for &b in arg {
        n = n * 10 + u64::from(b - b'0');
        if n >= DELTA_MAX {
            return DELTA_MAX;
        }
    }
    n
}

/// A quoted string's content (escapes left in place: field names and numbers have none).
fn unquote(arg: &[u8]) -> &[u8] {
    match arg {
        [b'"', inner @ .., b'"'] => inner,
        _ => arg,
    }
}

/// Whether the comma-separated field-name list `list` names `field` (case-insensitive).
#[must_use]
pub fn names_field(list: &[u8], field: &str) -> bool {
    list_elements(list).any(|n| n.eq_ignore_ascii_case(field.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(lines: &[&'static str]) -> Directives<'static> {
        let fields: Vec<(&str, &[u8])> = lines
            .iter()
            .map(|l| ("Cache-Control", l.as_bytes()))
            .collect();
        let fields: &'static [(&str, &[u8])] = Box::leak(fields.into_boxed_slice());
        Directives::parse(fields, "cache-control")
    }

    #[test]
    fn directive_table() {
        let d = |f: fn(&mut Directives<'static>)| {
            let mut d = Directives {
                present: true,
                ..Directives::default()
            };
            f(&mut d);
            d
        };
        let cases: &[(&[&str], Directives<'static>)] = &[
            (&["max-age=60"], d(|d| d.max_age = Some(60))),
            (&["MAX-AGE=60"], d(|d| d.max_age = Some(60))),
            (&["max-age=\"60\""], d(|d| d.max_age = Some(60))),
            (&["max-age = 60"], d(|d| d.max_age = Some(60))),
            // Invalid freshness is stale (§4.2.1).
            (&["max-age=-1"], d(|d| d.max_age = Some(0))),
            (&["max-age=1.5"], d(|d| d.max_age = Some(0))),
            (&["max-age"], d(|d| d.max_age = Some(0))),
            (&["max-age=abc"], d(|d| d.max_age = Some(0))),
            // Overflow is 2^31 (§1.2.2).
            (
                &["max-age=99999999999999999999"],
                d(|d| d.max_age = Some(DELTA_MAX)),
            ),
            // The first occurrence wins, across lines too.
            (&["max-age=60, max-age=10"], d(|d| d.max_age = Some(60))),
            (&["max-age=60", "max-age=10"], d(|d| d.max_age = Some(60))),
            (
                &["public, s-maxage=30, must-revalidate"],
                d(|d| {
                    d.public = true;
                    d.s_maxage = Some(30);
                    d.must_revalidate = true;
                }),
            ),
            (&["no-store"], d(|d| d.no_store = true)),
            (&["No-Cache"], d(|d| d.no_cache = true)),
            (
                &["no-cache=\"Set-Cookie, X-A\""],
                d(|d| d.no_cache_fields = Some(b"Set-Cookie, X-A")),
            ),
            (&["private"], d(|d| d.private = true)),
            (
                &["private=\"x-user\""],
                d(|d| d.private_fields = Some(b"x-user")),
            ),
            (&["private=\"\""], d(|d| d.private = true)),
            (&["proxy-revalidate"], d(|d| d.proxy_revalidate = true)),
            (
                &["must-understand, no-store"],
                d(|d| {
                    d.must_understand = true;
                    d.no_store = true;
                }),
            ),
            (&["no-transform"], d(|d| d.no_transform = true)),
            (&["immutable"], d(|d| d.immutable = true)),
            (
                &["max-age=1, stale-while-revalidate=30, stale-if-error=600"],
                d(|d| {
                    d.max_age = Some(1);
                    d.stale_while_revalidate = Some(30);
                    d.stale_if_error = Some(600);
                }),
            ),
            (&["max-stale"], d(|d| d.max_stale = Some(DELTA_MAX))),
            (&["max-stale=5"], d(|d| d.max_stale = Some(5))),
            (&["min-fresh=5"], d(|d| d.min_fresh = Some(5))),
            (&["only-if-cached"], d(|d| d.only_if_cached = true)),
            // Unknown directives are ignored but make the field present.
            (&["foo=\"a,b\", bar"], d(|_| {})),
            (&[""], Directives::default()),
            (&[" , "], Directives::default()),
        ];
        for (lines, want) in cases {
            assert_eq!(&parse(lines), want, "{lines:?}");
        }
    }

    #[test]
    fn targeted_field_replaces_cache_control() {
        let fields: &[(&str, &[u8])] = &[
            ("Cache-Control", b"no-store"),
            ("CDN-Cache-Control", b"max-age=600"),
        ];
        let (d, targeted) =
            Directives::for_response(fields, &["x-edge-cache", "cdn-cache-control"]);
        assert!(targeted);
        assert_eq!(d.max_age, Some(600));
        assert!(!d.no_store);
        // An empty targeted field does not count (RFC 9213 §2.2).
        let fields: &[(&str, &[u8])] =
            &[("Cache-Control", b"max-age=5"), ("CDN-Cache-Control", b"")];
        let (d, targeted) = Directives::for_response(fields, &["cdn-cache-control"]);
        assert!(!targeted);
        assert_eq!(d.max_age, Some(5));
    }

    #[test]
    fn field_lists() {
        assert!(names_field(b"Set-Cookie, x-a", "set-cookie"));
        assert!(names_field(b"x-a", "X-A"));
        assert!(!names_field(b"x-ab", "x-a"));
    }
}
