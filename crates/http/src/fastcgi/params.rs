//! The CGI/1.1 variables of a request as `FCGI_PARAMS` content: name-value pairs, each length
//! in one byte below 128 and in four (top bit set) from 128 (FastCGI §3.4); and request fields
//! as their `HTTP_*` variables (RFC 3875 §4.1.18).

/// The longest name or value a pair can carry (31 bits).
pub const MAX_LEN: usize = 0x7FFF_FFFF;

/// Appends one name-value pair to `out`. A name or value longer than [`MAX_LEN`] is cut to it
/// (no request field comes near: the server's head limit is far below).
pub fn push(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    let name = &name[..name.len().min(MAX_LEN)];
    let value = &value[..value.len().min(MAX_LEN)];
    push_len(out, name.len());
    push_len(out, value.len());
    out.extend_from_slice(name);
    out.extend_from_slice(value);
}

/// Appends one pair whose value is `parts` one after the other (a path and its query), without
/// joining them first.
pub fn push_parts(out: &mut Vec<u8>, name: &[u8], parts: &[&[u8]]) {
    let name = &name[..name.len().min(MAX_LEN)];
    let total = parts.iter().map(|p| p.len()).sum::<usize>().min(MAX_LEN);
    push_len(out, name.len());
    push_len(out, total);
    out.extend_from_slice(name);
    let mut left = total;
    for part in parts {
        let part = &part[..part.len().min(left)];
        out.extend_from_slice(part);
        left -= part.len();
    }
}

fn push_len(out: &mut Vec<u8>, len: usize) {
    if len < 0x80 {
        out.push(len as u8);
    } else {
        out.extend_from_slice(&((len as u32) | 0x8000_0000).to_be_bytes());
    }
}

/// Appends the `HTTP_*` variable of the request field `name` with `value`: upper case, `-` as
/// `_`. Returns `false` (and appends nothing) for the fields that must not become variables:
/// `Proxy` (httpoxy: `HTTP_PROXY` is read as a proxy setting by many HTTP libraries), the
/// body's framing fields (the server sets `CONTENT_LENGTH` and `CONTENT_TYPE` itself), and
/// names holding anything but letters, digits and `-` (`X_Foo` and `X-Foo` would become the
/// same variable, and the one with `_` could stand in for one a proxy in front checked).
pub fn push_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) -> bool {
    if name.eq_ignore_ascii_case(b"proxy")
        || name.eq_ignore_ascii_case(b"content-length")
        || name.eq_ignore_ascii_case(b"content-type")
        || name.eq_ignore_ascii_case(b"transfer-encoding")
        || name.is_empty()
        || !name.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return false;
    }
    let len = 5 + name.len();
    push_len(out, len);
    push_len(out, value.len().min(MAX_LEN));
    out.extend_from_slice(b"HTTP_");
    out.extend(name.iter().map(|&b| {
        if b == b'-' {
            b'_'
        } else {
            b.to_ascii_uppercase()
        }
    }));
    out.extend_from_slice(&value[..value.len().min(MAX_LEN)]);
    true
}

/// Reads the pairs of `content` back (for tests and for checking what is sent): `None` when a
/// length runs past the end.
#[must_use]
pub fn decode(content: &[u8]) -> Option<Vec<(&[u8], &[u8])>> {
    let mut out = Vec::new();
    let mut rest = content;
    while !rest.is_empty() {
        let (name_len, r) = read_len(rest)?;
        let (value_len, r) = read_len(r)?;
        let name = r.get(..name_len)?;
        let value = r.get(name_len..name_len.checked_add(value_len)?)?;
        out.push((name, value));
        rest = &r[name_len + value_len..];
    }
    Some(out)
}

fn read_len(b: &[u8]) -> Option<(usize, &[u8])> {
    let first = *b.first()?;
    if first < 0x80 {
        Some((usize::from(first), &b[1..]))
    } else {
        let four = b.get(..4)?;
        let len = u32::from_be_bytes([four[0] & 0x7F, four[1], four[2], four[3]]);
        Some((len as usize, &b[4..]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_read_back_as_one_value() {
        let mut out = Vec::new();
        push_parts(&mut out, b"REQUEST_URI", &[b"/a.php", b"?", b"x=1"]);
        let long = vec![b'q'; 200];
        push_parts(&mut out, b"DOCUMENT_URI", &[b"/b", &long]);
        push_parts(&mut out, b"EMPTY", &[]);
        let pairs = decode(&out).unwrap();
        assert_eq!(pairs[0], (&b"REQUEST_URI"[..], &b"/a.php?x=1"[..]));
        assert_eq!(pairs[1].1, [&b"/b"[..], &long].concat());
        assert_eq!(pairs[2], (&b"EMPTY"[..], &b""[..]));
    }

    #[test]
    fn short_and_long_lengths() {
        let mut out = Vec::new();
        push(&mut out, b"SCRIPT_NAME", b"/index.php");
        assert_eq!(out[0], 11);
        assert_eq!(out[1], 10);
        assert_eq!(&out[2..13], b"SCRIPT_NAME");
        let long = vec![b'v'; 300];
        push(&mut out, b"QUERY_STRING", &long);
        let at = 2 + 11 + 10;
        assert_eq!(out[at], 12);
        assert_eq!(&out[at + 1..at + 5], &[0x80, 0, 1, 44]);
        let pairs = decode(&out).unwrap();
        assert_eq!(pairs[0], (&b"SCRIPT_NAME"[..], &b"/index.php"[..]));
        assert_eq!(pairs[1], (&b"QUERY_STRING"[..], &long[..]));
        assert!(decode(&out[..out.len() - 1]).is_none());
    }

    #[test]
    fn fields_become_http_variables_but_proxy_and_framing_do_not() {
        let mut out = Vec::new();
        assert!(push_field(&mut out, b"Accept-Encoding", b"gzip"));
        assert!(push_field(&mut out, b"x-forwarded-for", b"10.0.0.1"));
        assert!(!push_field(&mut out, b"Proxy", b"http://evil:8080"));
        assert!(!push_field(&mut out, b"Content-Length", b"5"));
        assert!(!push_field(&mut out, b"Content-Type", b"text/plain"));
        assert!(!push_field(&mut out, b"X_Forwarded_For", b"spoof"));
        assert_eq!(
            decode(&out).unwrap(),
            [
                (&b"HTTP_ACCEPT_ENCODING"[..], &b"gzip"[..]),
                (&b"HTTP_X_FORWARDED_FOR"[..], &b"10.0.0.1"[..]),
            ]
        );
    }
}
