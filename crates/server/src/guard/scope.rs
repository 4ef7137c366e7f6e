//! The path a guard's prefixes are matched against: the request's path as the file handler and
//! the applications behind the proxy read it — percent-decoded, dot-segments resolved, empty
//! segments merged — as nginx matches its locations against the normalised URI. Matched on the
//! raw path instead, `/%61dmin/x`, `//admin/x`, `/./admin/x` and `/x/../admin/x` each passed a
//! rule for `/admin` and were served (the file handler normalises them to `/admin/x`), and an
//! application that decodes its path would have been reached the same way.

use std::borrow::Cow;

/// The path to match rules against, or the status refusing a path that has none: 400 for a
/// malformed escape, a dot-segment climbing above the root, or bytes that decode to no text
/// (nginx answers such a URI 400 too).
///
/// A path holding no `%`, no `//` and no `/.` is already its own normal form and is returned
/// as it is: the usual request pays one scan of its path.
pub(crate) fn match_path(raw: &str) -> Result<Cow<'_, str>, u16> {
    let bytes = raw.as_bytes();
    let plain = !bytes
        .iter()
        .enumerate()
        .any(|(i, &b)| b == b'%' || (b == b'/' && matches!(bytes.get(i + 1), Some(b'/' | b'.'))));
    if plain {
        return Ok(Cow::Borrowed(raw));
    }
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
    String::from_utf8(out).map(Cow::Owned).map_err(|_| 400)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_paths_are_their_own_form() {
        for p in ["/", "/admin", "/admin/x.txt", "/a.b/c", "/x?"] {
            assert!(
                matches!(match_path(p), Ok(Cow::Borrowed(b)) if b == p),
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
            assert_eq!(match_path(raw).as_deref(), Ok(want), "{raw}");
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
            assert_eq!(match_path(raw), Err(400), "{raw}");
        }
    }
}
