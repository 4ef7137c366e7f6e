//! The request fields a cached route's look-up asks about ([`Asked`]), found in one walk of the
//! request's fields.
//!
//! The look-up asks a dozen questions of every request — its `Host` and `X-Forwarded-Host` for
//! the key, fields that keep it away from the cache (`Upgrade`, `If-Match`, unkeyed ones),
//! `Cache-Control`, `Authorization`, and on a hit its conditionals and `Range`. Asked one name
//! at a time, each was a walk of every field (about 300 instructions a request, hit or miss);
//! here each field's name is compared once, with the names of its length only.

use lowlat_http::request::Header;

/// What the look-up needs of a request's fields. Values are the first field of the name, as
/// `Request::header` answers.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Asked<'b> {
    pub(crate) host: Option<&'b [u8]>,
    pub(crate) forwarded_host: Option<&'b [u8]>,
    /// A field that changes what an application answers without being in the key
    /// (`X-Original-URL`, `X-Rewrite-URL`, `X-Host`): the request is forwarded without the
    /// cache, so it can neither poison an entry nor be answered with one made for another
    /// request. (`X-Forwarded-Host` reaches the upstream only from a trusted proxy, and is
    /// then in the key.)
    pub(crate) unkeyed: bool,
    pub(crate) upgrade: bool,
    /// `If-Match` or `If-Unmodified-Since`: a change the origin decides (RFC 9110 §13.1.1).
    pub(crate) guarded_change: bool,
    pub(crate) cache_control: bool,
    pub(crate) authorization: bool,
    pub(crate) if_none_match: Option<&'b [u8]>,
    pub(crate) if_modified_since: Option<&'b [u8]>,
    pub(crate) range: Option<&'b [u8]>,
}

impl<'b> Asked<'b> {
    /// The answers for `headers`.
    pub(crate) fn of(headers: &[Header<'b>]) -> Self {
        let mut a = Asked::default();
        for h in headers {
            let is = |name: &str| h.name.eq_ignore_ascii_case(name);
            let first = |slot: &mut Option<&'b [u8]>| {
                if slot.is_none() {
                    *slot = Some(h.value);
                }
            };
            match h.name.len() {
                4 if is("host") => first(&mut a.host),
                5 if is("range") => first(&mut a.range),
                6 if is("x-host") => a.unkeyed = true,
                7 if is("upgrade") => a.upgrade = true,
                8 if is("if-match") => a.guarded_change = true,
                13 => {
                    if is("cache-control") {
                        a.cache_control = true;
                    } else if is("authorization") {
                        a.authorization = true;
                    } else if is("if-none-match") {
                        first(&mut a.if_none_match);
                    } else if is("x-rewrite-url") {
                        a.unkeyed = true;
                    }
                }
                14 if is("x-original-url") => a.unkeyed = true,
                16 if is("x-forwarded-host") => first(&mut a.forwarded_host),
                17 if is("if-modified-since") => first(&mut a.if_modified_since),
                19 if is("if-unmodified-since") => a.guarded_change = true,
                _ => {}
            }
        }
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers<'a>(fields: &[(&'a str, &'a [u8])]) -> Vec<Header<'a>> {
        fields
            .iter()
            .map(|&(name, value)| Header { name, value })
            .collect()
    }

    #[test]
    fn each_answer_is_what_a_search_by_name_finds() {
        let all = headers(&[
            ("HOST", b"a.example"),
            ("host", b"b.example"),
            ("X-Forwarded-Host", b"f.example"),
            ("Cache-Control", b"no-cache"),
            ("authorization", b"Basic x"),
            ("If-None-Match", b"\"1\""),
            ("If-None-Match", b"\"2\""),
            ("if-modified-since", b"Sun, 06 Nov 1994 08:49:37 GMT"),
            ("Range", b"bytes=0-1"),
            ("X-Other", b"1"),
        ]);
        let a = Asked::of(&all);
        assert_eq!(a.host, Some(&b"a.example"[..]));
        assert_eq!(a.forwarded_host, Some(&b"f.example"[..]));
        assert!(a.cache_control && a.authorization);
        assert_eq!(a.if_none_match, Some(&b"\"1\""[..]));
        assert_eq!(a.if_modified_since.map(<[u8]>::len), Some(29));
        assert_eq!(a.range, Some(&b"bytes=0-1"[..]));
        assert!(!a.unkeyed && !a.upgrade && !a.guarded_change);

        for (name, unkeyed, upgrade, guarded) in [
            ("X-Original-URL", true, false, false),
            ("x-rewrite-url", true, false, false),
            ("X-Host", true, false, false),
            ("Upgrade", false, true, false),
            ("If-Match", false, false, true),
            ("If-Unmodified-Since", false, false, true),
            ("X-Hosts", false, false, false),
        ] {
            let a = Asked::of(&headers(&[(name, b"v")]));
            assert_eq!(
                (a.unkeyed, a.upgrade, a.guarded_change),
                (unkeyed, upgrade, guarded),
                "{name}"
            );
        }
        let none = Asked::of(&[]);
        assert!(none.host.is_none() && !none.cache_control && !none.authorization);
    }
}
