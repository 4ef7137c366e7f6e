//! Revalidation (RFC 9111 §4.3): the validators a conditional request to the origin carries
//! (§4.3.1), whether a 304 answers for the stored response (§4.3.4), and the stored fields
//! updated from it (§3.2).

use super::fields::{first, trim, Fields};

/// The conditional fields for revalidating a stored response (§4.3.1): its entity-tag as
/// `If-None-Match`, its `Last-Modified` as `If-Modified-Since` (a date the origin itself sent,
/// never the cache's own clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Conditional<'a> {
    pub if_none_match: Option<&'a [u8]>,
    pub if_modified_since: Option<&'a [u8]>,
}

impl<'a> Conditional<'a> {
    /// The validators of a stored response's fields.
    pub fn of<F: Fields + ?Sized>(stored: &'a F) -> Self {
        Conditional {
            if_none_match: first(stored, "etag"),
            if_modified_since: first(stored, "last-modified"),
        }
    }

    /// Whether there is anything to revalidate with: without, the request goes unconditional.
    #[must_use]
    pub fn any(&self) -> bool {
        self.if_none_match.is_some() || self.if_modified_since.is_some()
    }
}

/// Whether a 304 `fresh` applies to the stored response `stored` (§4.3.4): a strong
/// entity-tag in the 304 must be the stored one's; else a `Last-Modified` in it must equal the
/// stored one; a 304 with no validator applies to the one response that was revalidated.
pub fn not_modified_applies<S: Fields + ?Sized, N: Fields + ?Sized>(stored: &S, fresh: &N) -> bool {
    if let Some(tag) = first(fresh, "etag") {
        let tag = trim(tag);
        if !tag.starts_with(b"W/") {
            return first(stored, "etag").is_some_and(|s| trim(s) == tag);
        }
        // A weak tag: the stored response must carry the same, weak or strong.
        return first(stored, "etag").is_some_and(|s| {
            let s = trim(s);
            s.strip_prefix(b"W/").unwrap_or(s) == &tag[2..]
        });
    }
    if let Some(modified) = first(fresh, "last-modified") {
        return first(stored, "last-modified").is_some_and(|s| trim(s) == trim(modified));
    }
    true
}

/// Whether a 304's field replaces the stored ones of that name (§3.2): every field but the
/// framing (`Content-Length` and `Transfer-Encoding` describe the 304's own empty body) and
/// those that describe the stored body's bytes (`Content-Encoding`, `Content-Range`) or
/// vouch for them (`Content-MD5`, `Digest`, `Content-Digest`, `Repr-Digest`): the body is
/// not replaced, so a checksum of other bytes would make the stored response fail its own
/// check (§3.2 lets a cache keep the fields that assure the stored response's integrity).
#[must_use]
pub fn updates(name: &str) -> bool {
    const KEEP: [&str; 8] = [
        "content-length",
        "content-encoding",
        "content-range",
        "transfer-encoding",
        "content-md5",
        "digest",
        "content-digest",
        "repr-digest",
    ];
    !KEEP.iter().any(|k| name.eq_ignore_ascii_case(k))
}

/// The stored fields updated by a 304's (§3.2): each name the 304 carries (and [`updates`]
/// allows, and `fresh_kept` keeps: not hop-by-hop, not `Age`) replaces the stored lines of
/// that name; the others stay.
pub fn merge<S, N>(
    stored: &S,
    fresh: &N,
    fresh_kept: impl Fn(&str) -> bool,
) -> Vec<(Box<str>, Box<[u8]>)>
where
    S: Fields + ?Sized,
    N: Fields + ?Sized,
{
    let replaced = |name: &str| {
        updates(name)
            && fresh_kept(name)
            && (0..fresh.count()).any(|i| fresh.field(i).0.eq_ignore_ascii_case(name))
    };
    let mut out: Vec<(Box<str>, Box<[u8]>)> = (0..stored.count())
        .map(|i| stored.field(i))
        .filter(|(n, _)| !replaced(n))
        .map(|(n, v)| (n.into(), v.into()))
        .collect();
    for i in 0..fresh.count() {
        let (n, v) = fresh.field(i);
        if updates(n) && fresh_kept(n) {
            out.push((n.into(), v.into()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    type F = [(&'static str, &'static [u8])];

    #[test]
    fn conditionals() {
        let stored: &F = &[
            ("ETag", b"\"v1\""),
            ("Last-Modified", b"Sun, 06 Nov 1994 08:49:37 GMT"),
        ];
        let c = Conditional::of(stored);
        assert_eq!(c.if_none_match, Some(&b"\"v1\""[..]));
        assert_eq!(
            c.if_modified_since,
            Some(&b"Sun, 06 Nov 1994 08:49:37 GMT"[..])
        );
        assert!(c.any());
        let none: &F = &[("Content-Type", b"text/plain")];
        assert!(!Conditional::of(none).any());
    }

    #[test]
    fn applies_table() {
        let lm: &[u8] = b"Sun, 06 Nov 1994 08:49:37 GMT";
        let cases: &[(&F, &F, bool)] = &[
            (&[("ETag", b"\"a\"")], &[("ETag", b"\"a\"")], true),
            (&[("ETag", b"\"a\"")], &[("ETag", b"\"b\"")], false),
            (&[], &[("ETag", b"\"a\"")], false),
            (&[("ETag", b"W/\"a\"")], &[("ETag", b"\"a\"")], false),
            (&[("ETag", b"W/\"a\"")], &[("ETag", b"W/\"a\"")], true),
            (&[("ETag", b"\"a\"")], &[("ETag", b"W/\"a\"")], true),
            (&[("Last-Modified", lm)], &[("Last-Modified", lm)], true),
            (
                &[("Last-Modified", lm)],
                &[("Last-Modified", b"Mon, 07 Nov 1994 08:49:37 GMT")],
                false,
            ),
            (&[("ETag", b"\"a\"")], &[], true),
        ];
        for (stored, fresh, want) in cases {
            assert_eq!(
                not_modified_applies(*stored, *fresh),
                *want,
                "{stored:?} {fresh:?}"
            );
        }
    }

    #[test]
    fn merging() {
        let stored: &F = &[
            ("Content-Type", b"text/plain"),
            ("Content-Encoding", b"gzip"),
            ("Cache-Control", b"max-age=1"),
            ("X-A", b"1"),
            ("X-A", b"2"),
            ("ETag", b"\"v1\""),
            ("Content-MD5", b"rL0Y20zC+Fzt72VPzMSk2A=="),
        ];
        let fresh: &F = &[
            ("Cache-Control", b"max-age=60"),
            ("X-A", b"3"),
            ("Content-Length", b"0"),
            ("Content-Encoding", b"br"),
            ("Content-MD5", b"N7UdGUp1E+RbVvZSTy1R8g=="),
            ("Content-Digest", b"sha-256=:x:"),
            ("Connection", b"close"),
            ("X-New", b"n"),
        ];
        let merged = merge(stored, fresh, |n| !n.eq_ignore_ascii_case("connection"));
        let merged: Vec<(&str, &[u8])> = merged.iter().map(|(n, v)| (&**n, &**v)).collect();
        let want: &F = &[
            ("Content-Type", b"text/plain"),
            ("Content-Encoding", b"gzip"),
            ("ETag", b"\"v1\""),
            ("Content-MD5", b"rL0Y20zC+Fzt72VPzMSk2A=="),
            ("Cache-Control", b"max-age=60"),
            ("X-A", b"3"),
            ("X-New", b"n"),
        ];
        assert_eq!(merged, want);
    }
}
