//! From a request path to a safe path under the document root: percent-decoding, validation and
//! normalisation, done once, before anything touches the file system.
//!
//! The output is `/` followed by segments joined with `/`, plus a trailing `/` when the request
//! had one. Every segment is valid UTF-8 (so overlong encodings such as `%c0%ae` are refused),
//! contains no NUL, control byte, `/` or `\`, and is neither `.` nor `..`: dot-segments, plain or
//! percent-encoded, are resolved after decoding (RFC 3986 §5.2.4), as nginx does, and one that
//! would climb above the root is refused (400) — nothing here can leave the root. Segments
//! starting with a dot (dotfiles, dot-directories) that remain are 404 unless allowed. Empty
//! segments (`//`) are merged, as nginx's `merge_slashes` does, so aliases share one cache entry.
//!
//! This module does not look at the file system: symlinks are the resolver's business.

/// Longest request path accepted (bytes, still encoded): far above any real file tree's depth,
/// far below `PATH_MAX` (4096) once joined to a root.
pub const MAX_PATH_BYTES: usize = 2048;

/// Longest path segment, decoded: `NAME_MAX` on Linux file systems.
pub const MAX_SEGMENT_BYTES: usize = 255;

/// Why a request path is refused; mapped to a status in [`PathError::status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// Malformed or hostile: bad escape, NUL, backslash, encoded slash, dot-segment, bad UTF-8,
    /// not starting with `/` (asterisk-form), too long.
    BadRequest,
    /// Well-formed but names something never served (a dotfile, an over-long segment).
    NotFound,
}

impl PathError {
    /// The response status for this refusal.
    #[must_use]
    pub const fn status(self) -> u16 {
        match self {
            Self::BadRequest => 400,
            Self::NotFound => 404,
        }
    }
}

/// Decodes and normalises `raw` (a request path, still percent-encoded) into `out`.
///
/// Hand-written rather than `percent-encoding`'s decoder: this runs on every static request
/// (the 100-byte-file figures in docs/PERFORMANCE.md), decoding, resolving dot-segments and
/// refusing `%2F`, NUL and malformed escapes in one pass into a reused buffer, where the crate
/// decodes through an iterator and passes malformed escapes through unchanged.
///
/// # Errors
/// [`PathError`] when the path must not be served.
// Inlined into its callers (the file handler's is the one on the request path): as a call it
// cost `/100.html` 16 instructions a request (callgrind), and LTO does not inline it by itself.
#[allow(clippy::inline_always)]
#[inline(always)]
pub fn normalize(raw: &str, allow_dotfiles: bool, out: &mut Vec<u8>) -> Result<(), PathError> {
    out.clear();
    let raw = raw.as_bytes();
    if raw.first() != Some(&b'/') || raw.len() > MAX_PATH_BYTES {
        return Err(PathError::BadRequest);
    }
    // Whether the path names a directory: a trailing `/`, or a last segment `.` or `..`.
    let mut dir = raw.last() == Some(&b'/');
    for segment in raw.split(|&b| b == b'/') {
        if segment.is_empty() {
            continue;
        }
        dir = raw.last() == Some(&b'/');
        let start = out.len();
        out.push(b'/');
        let mut i = 0;
        while i < segment.len() {
            let byte = match segment[i] {
                b'%' => {
                    let hi = segment.get(i + 1).and_then(|&b| hex(b));
                    let lo = segment.get(i + 2).and_then(|&b| hex(b));
                    let (Some(hi), Some(lo)) = (hi, lo) else {
                        return Err(PathError::BadRequest);
                    };
                    i += 3;
                    (hi << 4) | lo
                }
                b => {
                    i += 1;
                    b
                }
            };
            // An encoded `/` would join two segments behind the normaliser's back; `\` is a
            // separator to some file systems and tools; control bytes have no place in a name.
            if byte == b'/' || byte == b'\\' || byte < 0x20 || byte == 0x7f {
                return Err(PathError::BadRequest);
            }
            out.push(byte);
        }
        let name = &out[start + 1..];
        if name == b"." || name == b".." {
            let up = name == b"..";
            out.truncate(start);
            if up {
                // Above the root there is nothing to serve.
                let Some(parent) = out.iter().rposition(|&b| b == b'/') else {
                    return Err(PathError::BadRequest);
                };
                out.truncate(parent);
            }
            dir = true;
        }
    }
    if out.is_empty() || dir {
        out.push(b'/');
    }
    // Rejects overlong forms (`%c0%ae`), surrogates and stray continuation bytes.
    if std::str::from_utf8(out).is_err() {
        return Err(PathError::BadRequest);
    }
    let not_found = out.split(|&b| b == b'/').any(|name| {
        name.len() > MAX_SEGMENT_BYTES || (name.first() == Some(&b'.') && !allow_dotfiles)
    });
    if not_found {
        return Err(PathError::NotFound);
    }
    Ok(())
}

/// [`normalize`] for a path known to be its own normal form ([`crate::handler::Req::path_plain`]:
/// no `%`, `//` or `/.`), which has nothing to decode, no dot or empty segment to resolve and no
/// dotfile: copied as it is, with its bytes and the length of its segments checked. The same
/// answer as `normalize` for such a path (tested below) for fewer instructions: `/100.html`'s
/// request, where it runs, is the figure the file handler is measured by.
///
/// # Errors
/// [`PathError`] when the path must not be served.
#[allow(clippy::inline_always)]
#[inline(always)]
pub fn copy_plain(raw: &str, out: &mut Vec<u8>) -> Result<(), PathError> {
    out.clear();
    let raw = raw.as_bytes();
    if raw.first() != Some(&b'/') || raw.len() > MAX_PATH_BYTES {
        return Err(PathError::BadRequest);
    }
    let mut segment = 0;
    let mut too_long = false;
    for &b in raw {
        if b < 0x30 || b == b'\\' || b == 0x7f {
            if b == b'/' {
                segment = 0;
                continue;
            }
            if b < 0x20 || b == b'\\' || b == 0x7f {
                return Err(PathError::BadRequest);
            }
        }
        segment += 1;
        too_long |= segment > MAX_SEGMENT_BYTES;
    }
    if too_long {
        return Err(PathError::NotFound);
    }
    out.extend_from_slice(raw);
    Ok(())
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// What stays literal in one path segment (RFC 3986 `pchar`, minus `&` and `'`, which HTML
/// attributes and shells trip over): letters, digits, `-._~!$()*+,;=:@`. Everything else,
/// including `%`, `?`, `#`, spaces and non-ASCII, becomes `%XX`.
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'!')
    .remove(b'$')
    .remove(b'(')
    .remove(b')')
    .remove(b'*')
    .remove(b'+')
    .remove(b',')
    .remove(b';')
    .remove(b'=')
    .remove(b':')
    .remove(b'@');

/// The same for a whole path: `/` stays too.
const PATH: &percent_encoding::AsciiSet = &SEGMENT.remove(b'/');

/// Appends `bytes` percent-encoded for use in a URL path (directory listings, redirects: off the
/// request hot path, so the `percent-encoding` crate does it). With `keep_slash`, `/` stays
/// (whole paths); without, it is encoded (one name).
pub fn encode_path(bytes: &[u8], keep_slash: bool, out: &mut Vec<u8>) {
    let set = if keep_slash { PATH } else { SEGMENT };
    for chunk in percent_encoding::percent_encode(bytes, set) {
        out.extend_from_slice(chunk.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(raw: &str) -> Result<String, PathError> {
        let mut out = Vec::new();
        normalize(raw, false, &mut out).map(|()| String::from_utf8(out).unwrap())
    }

    #[test]
    fn accepted_paths() {
        for (raw, want) in [
            ("/", "/"),
            ("/100.html", "/100.html"),
            ("/a/b/", "/a/b/"),
            ("//a///b", "/a/b"),
            ("/a%20b", "/a b"),
            ("/caf%C3%A9", "/café"),
            ("/%25", "/%"),
            ("/a..b", "/a..b"),
            ("/a.", "/a."),
            // Dot-segments resolved after decoding, never above the root.
            ("/.", "/"),
            ("/a/./b", "/a/b"),
            ("/a/../b", "/b"),
            ("/a/b/..", "/a/"),
            ("/a/b/../", "/a/"),
            ("/a/%2e%2e/b", "/b"),
            ("/a/%2E/b", "/a/b"),
            ("/.git/../x", "/x"),
            ("/a/..", "/"),
        ] {
            assert_eq!(norm(raw).as_deref(), Ok(want), "{raw}");
        }
    }

    #[test]
    fn refused_paths() {
        use PathError::{BadRequest as B, NotFound as N};
        for (raw, want) in [
            ("*", B),
            ("", B),
            ("http://x/", B),
            ("/..", B),
            ("/../etc/passwd", B),
            ("/a/../../b", B),
            ("/%2e%2e/x", B),
            ("/a/%2e%2e/%2e%2e/x", B),
            ("/%2E%2e/x", B),
            ("/.%2e/x", B),
            ("/a%2fb", B),
            ("/a%2Fb", B),
            ("/a%5cb", B),
            ("/a\\b", B),
            ("/a%00b", B),
            ("/a%0ab", B),
            ("/a%7fb", B),
            ("/%c0%ae%c0%ae/x", B),
            ("/%e0%80%ae", B),
            ("/%ed%a0%80", B),
            ("/%ff", B),
            ("/%", B),
            ("/%4", B),
            ("/%zz", B),
            ("/.git/config", N),
            ("/a/.env", N),
            ("/.hidden/", N),
            ("/...x", N),
            ("/x/../.env", N),
            ("/.x/../..", B),
        ] {
            assert_eq!(norm(raw), Err(want), "{raw}");
        }
        let long = format!("/{}", "a".repeat(MAX_PATH_BYTES));
        assert_eq!(norm(&long), Err(B));
        let long_segment = format!("/{}", "a".repeat(MAX_SEGMENT_BYTES + 1));
        assert_eq!(norm(&long_segment), Err(N));
    }

    #[test]
    fn dotfiles_when_allowed() {
        let mut out = Vec::new();
        assert_eq!(normalize("/.well-known/x", true, &mut out), Ok(()));
        assert_eq!(out, b"/.well-known/x");
        assert_eq!(
            normalize("/../x", true, &mut out),
            Err(PathError::BadRequest)
        );
    }

    #[test]
    fn encoding_round_trips() {
        let mut out = Vec::new();
        encode_path("/a b/<x>&\"é%?#".as_bytes(), true, &mut out);
        assert_eq!(out, b"/a%20b/%3Cx%3E%26%22%C3%A9%25%3F%23");
        let mut back = Vec::new();
        normalize(std::str::from_utf8(&out).unwrap(), false, &mut back).unwrap();
        assert_eq!(back, "/a b/<x>&\"é%?#".as_bytes());
        out.clear();
        encode_path(b"a/b", false, &mut out);
        assert_eq!(out, b"a%2Fb");
    }

    /// `copy_plain` answers as `normalize` does, on every plain path of up to six bytes over
    /// the characters that matter, and on segments about their limit.
    #[test]
    fn plain_paths_copy_as_they_normalise() {
        let bytes = [b'/', b'.', b'a', b'\\', 0x01, 0x7f, b'-'];
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let mut check = |raw: &str| {
            let plain = crate::scope::is_plain(raw);
            if plain {
                let copied = copy_plain(raw, &mut a);
                assert_eq!(copied, normalize(raw, false, &mut b), "{raw:?}");
                if copied.is_ok() {
                    assert_eq!(a, b, "{raw:?}");
                }
            }
        };
        crate::scope::every_path(&bytes, &mut check);
        for len in [254, 255, 256] {
            check(&format!("/d/{}", "x".repeat(len)));
            check(&format!("/{}/", "x".repeat(len)));
        }
        check(&format!("/{}", "x".repeat(MAX_PATH_BYTES)));
        check("");
        check("x/y");
    }
}
