//! The secondary key of a stored response (RFC 9111 §4.1): the values, in the request that
//! stored it, of the fields its `Vary` names. A later request may use it only if its own
//! values of those fields normalise to the same bytes.
//!
//! Normalisation is what §4.1 allows and no more: field lines combined, whitespace around
//! list elements dropped, and for `Accept-Encoding` (the `Vary` that compression adds to
//! nearly every response) the set of codings accepted, lower-cased and sorted, with `q=0`
//! ones removed — `gzip, br` and `br,gzip;q=1` ask the same.

use super::fields::{list_elements, trim, values, Fields};

/// Writes the secondary key of a request for a response whose `Vary` fields are in
/// `resp_fields` into `key` (cleared first): one `name:value\n` line per field named, in
/// `Vary`'s order. Returns false for `Vary: *`, which nothing matches.
pub fn secondary_key<R: Fields + ?Sized, S: Fields + ?Sized>(
    resp_fields: &S,
    request: &R,
    key: &mut Vec<u8>,
) -> bool {
    key.clear();
    for vary in values(resp_fields, "vary") {
        for name in list_elements(vary) {
            if name == b"*" {
                return false;
            }
            let Ok(name) = std::str::from_utf8(name) else {
                continue;
            };
            let at = key.len();
            key.extend_from_slice(name.as_bytes());
            key[at..].make_ascii_lowercase();
            key.push(b':');
            if name.eq_ignore_ascii_case("accept-encoding") {
                accept_encoding(request, key);
            } else {
                let mut first = true;
                for value in values(request, name) {
                    for element in list_elements(value) {
                        if !first {
                            key.push(b',');
                        }
                        first = false;
                        key.extend_from_slice(trim(element));
                    }
                }
            }
            key.push(b'\n');
        }
    }
    true
}

/// The accepted codings of a request's `Accept-Encoding`, lower-cased, sorted, `q=0` dropped.
fn accept_encoding<R: Fields + ?Sized>(request: &R, key: &mut Vec<u8>) {
    // At most a handful of codings are ever named; a fixed array keeps this allocation-free.
    let mut codings: [&[u8]; 16] = [b""; 16];
    let mut n = 0;
    for value in values(request, "accept-encoding") {
        for element in list_elements(value) {
            let mut parts = element.split(|&b| b == b';');
            let coding = trim(parts.next().unwrap_or_default());
            let refused = parts.any(|p| {
                let p = trim(p);
                p.len() >= 2 && p[..2].eq_ignore_ascii_case(b"q=") && zero_q(&p[2..])
            });
            if !refused && !coding.is_empty() && n < codings.len() {
                codings[n] = coding;
                n += 1;
            }
        }
    }
    let codings = &mut codings[..n];
    codings.sort_by(|a, b| {
        a.iter()
            .map(u8::to_ascii_lowercase)
            .cmp(b.iter().map(u8::to_ascii_lowercase))
    });
    let mut last: &[u8] = b"";
    let mut first = true;
    for c in codings.iter() {
        if c.eq_ignore_ascii_case(last) {
            continue;
        }
        if !first {
            key.push(b',');
        }
        first = false;
        let at = key.len();
        key.extend_from_slice(c);
        key[at..].make_ascii_lowercase();
        last = c;
    }
}

/// Whether a qvalue is zero (`0`, `0.0`, `0.000`).
fn zero_q(q: &[u8]) -> bool {
    match q {
        [b'0'] => true,
        [b'0', b'.', rest @ ..] => rest.iter().all(|&b| b == b'0'),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(vary: &[&str], request: &[(&str, &str)]) -> Option<String> {
        let resp: Vec<(&str, &[u8])> = vary.iter().map(|v| ("Vary", v.as_bytes())).collect();
        let req: Vec<(&str, &[u8])> = request.iter().map(|(n, v)| (*n, v.as_bytes())).collect();
        let mut out = Vec::new();
        secondary_key(&resp[..], &req[..], &mut out).then(|| String::from_utf8(out).unwrap())
    }

    #[test]
    fn key_table() {
        type Pairs = &'static [(&'static str, &'static str)];
        let cases: &[(&[&str], Pairs, Option<&str>)] = &[
            (&[], &[("Accept", "x")], Some("")),
            (
                &["Accept"],
                &[("Accept", "text/html")],
                Some("accept:text/html\n"),
            ),
            (&["Accept"], &[], Some("accept:\n")),
            (
                &["accept, X-Lang"],
                &[("x-lang", "fr"), ("Accept", "a")],
                Some("accept:a\nx-lang:fr\n"),
            ),
            (
                &["Accept", "X-Lang"],
                &[("x-lang", "fr")],
                Some("accept:\nx-lang:fr\n"),
            ),
            // Lines combined, spaces around elements dropped.
            (
                &["X-A"],
                &[("X-A", "1 ,2"), ("x-a", " 3")],
                Some("x-a:1,2,3\n"),
            ),
            (&["*"], &[], None),
            (&["Accept, *"], &[], None),
            // Accept-Encoding: a sorted set without refused codings.
            (
                &["Accept-Encoding"],
                &[("Accept-Encoding", "gzip, br")],
                Some("accept-encoding:br,gzip\n"),
            ),
            (
                &["Accept-Encoding"],
                &[("Accept-Encoding", "BR,gzip;q=1")],
                Some("accept-encoding:br,gzip\n"),
            ),
            (
                &["Accept-Encoding"],
                &[("Accept-Encoding", "br, gzip;q=0, zstd;q=0.000")],
                Some("accept-encoding:br\n"),
            ),
            (
                &["Accept-Encoding"],
                &[("Accept-Encoding", "gzip"), ("Accept-Encoding", "gzip")],
                Some("accept-encoding:gzip\n"),
            ),
            (&["Accept-Encoding"], &[], Some("accept-encoding:\n")),
        ];
        for (vary, request, want) in cases {
            assert_eq!(key(vary, request).as_deref(), *want, "{vary:?} {request:?}");
        }
    }

    #[test]
    fn equivalent_requests_match() {
        let a = key(
            &["Accept-Encoding"],
            &[("Accept-Encoding", "gzip, deflate, br")],
        );
        let b = key(
            &["Accept-Encoding"],
            &[("Accept-Encoding", "br;q=1.0, deflate, GZIP")],
        );
        let c = key(&["Accept-Encoding"], &[("Accept-Encoding", "gzip")]);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}
