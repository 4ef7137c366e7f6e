//! Conditional requests (RFC 9110 §13): `If-Match`, `If-Unmodified-Since`, `If-None-Match`,
//! `If-Modified-Since` and `If-Range`, evaluated against one representation's validators.
//!
//! Only GET and HEAD reach here (everything else was answered 405), so a matching
//! `If-None-Match` or an unchanged `If-Modified-Since` means 304, never 412. The order is
//! RFC 9110 §13.2.2's: If-Match, else If-Unmodified-Since (412 on failure); then If-None-Match,
//! else If-Modified-Since (304). A date that does not parse makes its field be ignored
//! (§13.1.3, §13.1.4). Nothing here allocates.

/// The validators of one representation.
#[derive(Debug, Clone, Copy)]
pub struct Validators<'a> {
    /// The strong entity-tag, quotes included (`"5f-1a2b-3c"`).
    pub etag: &'a [u8],
    /// `Last-Modified` as sent: an IMF-fixdate.
    pub last_modified: &'a [u8],
    /// The same instant, in seconds since the epoch.
    pub mtime_secs: u64,
}

/// The conditional request header fields, as received.
#[derive(Debug, Clone, Copy, Default)]
pub struct Preconditions<'a> {
    pub if_match: Option<&'a [u8]>,
    pub if_unmodified_since: Option<&'a [u8]>,
    pub if_none_match: Option<&'a [u8]>,
    pub if_modified_since: Option<&'a [u8]>,
}

/// What the preconditions decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Serve the representation (maybe partially).
    Proceed,
    /// 304 Not Modified.
    NotModified,
    /// 412 Precondition Failed.
    PreconditionFailed,
}

/// Evaluates the preconditions of a GET or HEAD (RFC 9110 §13.2.2).
#[must_use]
pub fn evaluate(pre: &Preconditions<'_>, v: &Validators<'_>) -> Outcome {
    if let Some(field) = pre.if_match {
        // §13.1.1: strong comparison; `*` matches any current representation.
        if !list_matches(field, v.etag, true) {
            return Outcome::PreconditionFailed;
        }
    } else if let Some(date) = pre.if_unmodified_since.and_then(|d| parse_date(d, v)) {
        // §13.1.4: false when the representation was modified after the date.
        if v.mtime_secs > date {
            return Outcome::PreconditionFailed;
        }
    }
    if let Some(field) = pre.if_none_match {
        // §13.1.2: weak comparison; a match means "not modified" for GET and HEAD.
        if list_matches(field, v.etag, false) {
            return Outcome::NotModified;
        }
    } else if let Some(date) = pre.if_modified_since.and_then(|d| parse_date(d, v)) {
        // §13.1.3: not modified unless changed after the date.
        if v.mtime_secs <= date {
            return Outcome::NotModified;
        }
    }
    Outcome::Proceed
}

/// Whether an `If-Range` value lets the Range apply (RFC 9110 §13.1.5): an entity-tag must match
/// strongly (a weak one never does); a date must equal `Last-Modified` exactly.
#[must_use]
pub fn if_range_holds(field: &[u8], v: &Validators<'_>) -> bool {
    let field = field.trim_ascii();
    if field.starts_with(b"\"") || field.starts_with(b"W/") {
        return field == v.etag;
    }
    field == v.last_modified || parse_date(field, v) == Some(v.mtime_secs)
}

/// Whether an entity-tag list (`*`, or `"a", W/"b"`) holds `etag`. With `strong`, weak tags in
/// the list never match (§8.8.3.2). A malformed list matches nothing.
fn list_matches(field: &[u8], etag: &[u8], strong: bool) -> bool {
    let field = field.trim_ascii();
    if field == b"*" {
        return true;
    }
    let mut rest = field;
    loop {
        rest = rest.trim_ascii_start();
        while let Some(r) = rest.strip_prefix(b",") {
            rest = r.trim_ascii_start();
        }
        if rest.is_empty() {
            return false;
        }
        let weak = rest.starts_with(b"W/");
        if weak {
            rest = &rest[2..];
        }
        if rest.first() != Some(&b'"') {
            return false;
        }
        let Some(close) = rest[1..].iter().position(|&b| b == b'"') else {
            return false;
        };
        let tag = &rest[..close + 2];
        if tag == etag && !(strong && weak) {
            return true;
        }
        rest = &rest[close + 2..];
    }
}

/// An HTTP-date in seconds since the epoch; `None` when it does not parse. The common case, a
/// client echoing our own `Last-Modified`, is recognised without parsing.
fn parse_date(field: &[u8], v: &Validators<'_>) -> Option<u64> {
    let field = field.trim_ascii();
    if field == v.last_modified {
        return Some(v.mtime_secs);
    }
    lowlat_http::date::parse(field)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LM: &[u8] = b"Sun, 06 Nov 1994 08:49:37 GMT";
    const V: Validators<'static> = Validators {
        etag: b"\"abc\"",
        last_modified: LM,
        mtime_secs: 784_111_777,
    };
    /// If-Match, If-Unmodified-Since, If-None-Match, If-Modified-Since, expected outcome.
    type Case = (
        Option<&'static str>,
        Option<&'static [u8]>,
        Option<&'static str>,
        Option<&'static [u8]>,
        Outcome,
    );
    const EARLIER: &[u8] = b"Sun, 06 Nov 1994 08:49:36 GMT";
    const LATER: &[u8] = b"Sunday, 06-Nov-94 08:49:38 GMT";

    fn eval(
        im: Option<&str>,
        ius: Option<&[u8]>,
        inm: Option<&str>,
        ims: Option<&[u8]>,
    ) -> Outcome {
        let pre = Preconditions {
            if_match: im.map(str::as_bytes),
            if_unmodified_since: ius,
            if_none_match: inm.map(str::as_bytes),
            if_modified_since: ims,
        };
        evaluate(&pre, &V)
    }

    #[test]
    fn combinations() {
        use Outcome::{NotModified as N, PreconditionFailed as F, Proceed as P};
        let cases: &[Case] = &[
            (None, None, None, None, P),
            (Some("\"abc\""), None, None, None, P),
            (Some("\"x\", \"abc\""), None, None, None, P),
            (Some("*"), None, None, None, P),
            (Some("W/\"abc\""), None, None, None, F),
            (Some("\"x\""), None, None, None, F),
            (Some("garbage"), None, None, None, F),
            (None, Some(LM), None, None, P),
            (None, Some(LATER), None, None, P),
            (None, Some(EARLIER), None, None, F),
            (None, Some(b"not a date"), None, None, P),
            // If-Match present: If-Unmodified-Since is not evaluated.
            (Some("\"abc\""), Some(EARLIER), None, None, P),
            (None, None, Some("\"abc\""), None, N),
            (None, None, Some("W/\"abc\""), None, N),
            (None, None, Some("\"x\" ,W/\"abc\""), None, N),
            (None, None, Some("*"), None, N),
            (None, None, Some("\"x\""), None, P),
            (None, None, None, Some(LM), N),
            (None, None, None, Some(LATER), N),
            (None, None, None, Some(EARLIER), P),
            (None, None, None, Some(b"yesterday"), P),
            // If-None-Match wins over If-Modified-Since, both ways.
            (None, None, Some("\"x\""), Some(LM), P),
            (None, None, Some("\"abc\""), Some(EARLIER), N),
            // A failed If-Match beats a matching If-None-Match.
            (Some("\"x\""), None, Some("\"abc\""), None, F),
            (Some("\"abc\""), None, Some("\"abc\""), None, N),
            (None, Some(EARLIER), None, Some(LM), F),
            (None, Some(LM), None, Some(LM), N),
        ];
        for (i, &(im, ius, inm, ims, want)) in cases.iter().enumerate() {
            assert_eq!(eval(im, ius, inm, ims), want, "case {i}");
        }
    }

    #[test]
    fn if_range() {
        assert!(if_range_holds(b"\"abc\"", &V));
        assert!(!if_range_holds(b"W/\"abc\"", &V));
        assert!(!if_range_holds(b"\"abd\"", &V));
        assert!(if_range_holds(LM, &V));
        assert!(if_range_holds(b"Sunday, 06-Nov-94 08:49:37 GMT", &V));
        assert!(!if_range_holds(EARLIER, &V));
        assert!(!if_range_holds(b"junk", &V));
    }
}
