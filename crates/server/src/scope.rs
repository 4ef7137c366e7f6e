//! The path routes and protection rules are matched against: the request's path as the file
//! handler and the applications behind the proxy read it — percent-decoded, dot-segments
//! resolved, empty segments merged — as nginx matches its locations against the normalised URI.
//! Matched on the raw path instead, `/%61dmin/x`, `//admin/x`, `/./admin/x` and `/x/../admin/x`
//! each passed a guard rule or a `return` rule for `/admin` and were served (the file handler
//! normalises them to `/admin/x`), and an application that decodes its path would have been
//! reached the same way. The request itself keeps the path the client sent (the proxy forwards
//! it as it came).

use std::borrow::Cow;

/// Whether `path` holds no `%`, no `//` and no `/.`: it is then its own normal form.
///
/// Hand-written for the request path (the router asks it of every request that no exact route
/// answers), eight bytes at a time: a byte loop cost `/100.html` about 90 instructions a
/// request (callgrind), this about half. Words overlap by a byte, so that every pair of
/// neighbours is seen within one; the last word is the path's last eight bytes (a byte seen
/// twice changes no answer), and a path shorter than a word is zero-padded (a zero byte is
/// none of the three).
#[inline]
pub(crate) fn is_plain(path: &str) -> bool {
    let bytes = path.as_bytes();
    let Some(last) = bytes.len().checked_sub(8) else {
        let word = bytes.iter().rev().fold(0u64, |w, &b| w << 8 | u64::from(b));
        return !odd_word(word);
    };
    let mut at = 0;
    loop {
        let start = at.min(last);
        let word = u64::from_le_bytes(bytes[start..start + 8].try_into().unwrap_or_default());
        if odd_word(word) {
            return false;
        }
        if start == last {
            return true;
        }
        at = start + 7;
    }
}

/// Whether eight bytes (little-endian) hold a `%`, or a `/` followed by `/` or `.`.
#[inline(always)]
fn odd_word(word: u64) -> bool {
    const LOW: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Bit 7 of each byte equal to `byte`, exactly (no borrow runs between bytes).
    let eq = |word: u64, byte: u8| {
        let x = word ^ (LOW * u64::from(byte));
        !(((x & !HIGH) + !HIGH) | x) & HIGH
    };
    // `/` (0x2f) and `.` (0x2e) differ in their lowest bit only.
    let slash_or_dot = eq(word | LOW, b'/');
    let slash = slash_or_dot & (word << 7);
    // A slash's mark moved up a byte lands on its neighbour's.
    eq(word, b'%') | (slash << 8) & slash_or_dot != 0
}

/// The path to match rules against, or the status refusing a path that has none: 400 for a
/// malformed escape, a dot-segment climbing above the root, or bytes that decode to no text
/// (nginx answers such a URI 400 too). A path that [`is_plain`] is returned as it is.
#[inline]
pub(crate) fn normal_form(raw: &str) -> Result<Cow<'_, str>, u16> {
    if is_plain(raw) {
        Ok(Cow::Borrowed(raw))
    } else {
        normalise(raw).map(Cow::Owned)
    }
}

/// [`normal_form`] of a path that is not its own: decoded and resolved into a new string. Out
/// of line, so that the plain path's test is all its callers pay.
#[cold]
#[inline(never)]
fn normalise(raw: &str) -> Result<String, u16> {
    let bytes = raw.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = |b: Option<&u8>| b.and_then(|&b| (b as char).to_digit(16));
            let (Some(hi), Some(lo)) = (hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) else {
                return Err(400);
            };
            // Two hex digits: below 256.
            decoded.push(u8::try_from(hi * 16 + lo).unwrap_or(0));
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    // Segments after decoding: an encoded `/` separates as a plain one does (nginx decodes it
    // before it matches a location).
    let mut out: Vec<u8> = Vec::with_capacity(decoded.len() + 1);
    let mut dir = decoded.last() == Some(&b'/');
    for segment in decoded.split(|&b| b == b'/') {
        match segment {
            b"" => continue,
            b"." => dir = true,
            b".." => {
                let Some(parent) = out.iter().rposition(|&b| b == b'/') else {
                    return Err(400);
                };
                out.truncate(parent);
                dir = true;
            }
            name => {
                out.push(b'/');
                out.extend_from_slice(name);
                dir = decoded.last() == Some(&b'/');
            }
        }
    }
    if out.is_empty() || dir {
        out.push(b'/');
    }
    String::from_utf8(out).map_err(|_| 400)
}

/// Calls `check` with every path of `/` and up to five of `bytes` (which must make text),
/// for the tests that hold a path's readers to one another exhaustively.
#[cfg(test)]
pub(crate) fn every_path(bytes: &[u8], mut check: impl FnMut(&str)) {
    let mut path = Vec::new();
    for n in 0..bytes.len().pow(5) {
        path.clear();
        path.push(b'/');
        let mut k = n;
        while k > 0 {
            path.push(bytes[k % bytes.len()]);
            k /= bytes.len();
        }
        check(std::str::from_utf8(&path).unwrap());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_paths_are_their_own_form() {
        for p in ["/", "/admin", "/admin/x.txt", "/a.b/c", "/x?"] {
            assert!(
                matches!(normal_form(p), Ok(Cow::Borrowed(b)) if b == p),
                "{p}"
            );
        }
    }

    #[test]
    fn aliases_of_a_path_match_as_it() {
        for (raw, want) in [
            ("/%61dmin/secret.txt", "/admin/secret.txt"),
            ("//admin/secret.txt", "/admin/secret.txt"),
            ("/./admin/secret.txt", "/admin/secret.txt"),
            ("/x/../admin/secret.txt", "/admin/secret.txt"),
            ("/x/%2e%2e/admin/", "/admin/"),
            ("/admin%2fsecret.txt", "/admin/secret.txt"),
            ("/admin/.", "/admin/"),
            ("/admin/x/..", "/admin/"),
            ("/%C3%A9t%C3%A9", "/été"),
        ] {
            assert_eq!(normal_form(raw).as_deref(), Ok(want), "{raw}");
        }
    }

    #[test]
    fn paths_that_name_nothing_are_refused() {
        for raw in [
            "/..",
            "/a/../../admin",
            "/%zz",
            "/%4",
            "/%c0%ae%c0%ae",
            "/%ff",
        ] {
            assert_eq!(normal_form(raw), Err(400), "{raw}");
        }
    }

    /// `is_plain` agrees with a byte-by-byte reading of its job, on every path of up to six
    /// bytes over the characters that matter (one of them below 0x30 and none of the four).
    #[test]
    fn plain_is_no_percent_double_slash_or_slash_dot() {
        let bytes = [b'/', b'.', b'%', b'a', b'-', b'2'];
        every_path(&bytes, |raw| {
            let want = !raw.contains('%') && !raw.contains("//") && !raw.contains("/.");
            assert_eq!(is_plain(raw), want, "{raw}");
            let borrowed = matches!(normal_form(raw), Ok(Cow::Borrowed(_)));
            assert_eq!(borrowed, want, "{raw}");
        });
    }

    /// `is_plain` on longer paths, across its words and their overlaps: each of the three
    /// shapes, and a near miss, at every place in paths of up to 40 bytes.
    #[test]
    fn plain_paths_of_every_length() {
        for len in 1..40 {
            for at in 0..len {
                for (shape, plain) in [("%", false), ("//", false), ("/.", false), ("./", true)] {
                    let mut path = vec![b'a'; len + shape.len()];
                    path[0] = b'/';
                    path[at + 1..at + 1 + shape.len()].copy_from_slice(shape.as_bytes());
                    let raw = std::str::from_utf8(&path).unwrap();
                    let want = !raw.contains('%') && !raw.contains("//") && !raw.contains("/.");
                    assert_eq!(is_plain(raw), want, "{raw}");
                    if at > 0 {
                        assert_eq!(want, plain, "{raw}");
                    }
                }
            }
        }
    }
}
