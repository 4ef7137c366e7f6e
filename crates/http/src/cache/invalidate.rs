//! What a response to an unsafe method invalidates (RFC 9111 §4.4): the target URI, and the
//! URIs of its `Location` and `Content-Location` fields when they are on the same host (§4.4:
//! "MUST NOT invalidate a URI ... if the host part of that URI differs from the host part in
//! the target URI", which keeps one site from purging another's objects).

use super::fields::{first, trim, Fields};

/// Whether a method is safe (RFC 9110 §9.2.1): its responses invalidate nothing.
#[must_use]
pub fn is_safe(method: &[u8]) -> bool {
    matches!(method, b"GET" | b"HEAD" | b"OPTIONS" | b"TRACE")
}

/// Whether a request with `method` answered `status` invalidates (§4.4: a non-error status
/// code, 2xx or 3xx, to an unsafe method or one whose safety is unknown).
#[must_use]
pub fn invalidates(method: &[u8], status: u16) -> bool {
    !is_safe(method) && (200..400).contains(&status)
}

/// The path-and-query of the URIs a response invalidates besides the target, on `host`
/// (the target's authority): `Location` then `Content-Location`, when each is an absolute path
/// or an absolute URI naming the same host (ASCII case-insensitive, port included).
pub fn other_targets<'a, F: Fields + ?Sized>(
    fields: &'a F,
    host: &'a [u8],
) -> impl Iterator<Item = &'a [u8]> + 'a {
    ["location", "content-location"]
        .into_iter()
        .filter_map(move |name| same_host_path(trim(first(fields, name)?), host))
}

/// The path of a URI reference if it stays on `host`.
fn same_host_path<'a>(uri: &'a [u8], host: &[u8]) -> Option<&'a [u8]> {
    if uri.starts_with(b"/") && !uri.starts_with(b"//") {
        return Some(uri);
    }
    let rest = uri
        .strip_prefix(b"http://")
        .or_else(|| uri.strip_prefix(b"https://"))
        .or_else(|| {
            // Scheme names are case-insensitive.
            let colon = uri.iter().position(|&b| b == b':')?;
            let scheme = &uri[..colon];
            (scheme.eq_ignore_ascii_case(b"http") || scheme.eq_ignore_ascii_case(b"https"))
                .then(|| uri[colon + 1..].strip_prefix(b"//"))
                .flatten()
        })?;
    let end = rest
        .iter()
        .position(|&b| b == b'/' || b == b'?' || b == b'#')
        .unwrap_or(rest.len());
    if !rest[..end].eq_ignore_ascii_case(host) {
        return None;
    }
    match rest.get(end) {
        Some(b'/') => Some(&rest[end..]),
        // `http://host` or `http://host?q`: the root (the query cannot be kept without a copy).
        _ => Some(b"/"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_methods() {
        for (method, status, want) in [
            (&b"POST"[..], 200, true),
            (b"PUT", 201, true),
            (b"DELETE", 204, true),
            (b"PATCH", 303, true),
            (b"FOO", 200, true),
            (b"POST", 404, false),
            (b"POST", 500, false),
            (b"GET", 200, false),
            (b"HEAD", 200, false),
            (b"OPTIONS", 200, false),
        ] {
            assert_eq!(invalidates(method, status), want, "{method:?} {status}");
        }
    }

    #[test]
    fn targets_table() {
        type Fields = &'static [(&'static str, &'static [u8])];
        let cases: &[(Fields, &[&[u8]])] = &[
            (&[("Location", b"/a")], &[b"/a"]),
            (
                &[("Location", b"/a"), ("Content-Location", b"/b?x=1")],
                &[b"/a", b"/b?x=1"],
            ),
            (&[("Location", b"http://example.com/a")], &[b"/a"]),
            (&[("Location", b"HTTPS://EXAMPLE.com/a")], &[b"/a"]),
            (&[("Location", b"http://example.com")], &[b"/"]),
            (&[("Location", b"http://other.com/a")], &[]),
            (&[("Location", b"http://example.com:81/a")], &[]),
            (&[("Location", b"//example.com/a")], &[]),
            (&[("Location", b"relative")], &[]),
            (&[], &[]),
        ];
        for (fields, want) in cases {
            let got: Vec<&[u8]> = other_targets(*fields, b"example.com").collect();
            assert_eq!(&got, want, "{fields:?}");
        }
    }
}
