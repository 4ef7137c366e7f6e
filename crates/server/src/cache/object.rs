//! A stored response ([`Object`]): immutable once made, shared as an `Arc` by every worker
//! that serves it, so no lock is held while its bytes are written to a socket.

use std::borrow::Cow;

use bytes::Bytes;
use lowlat_http::cache::freshness::{AgeBase, Stored};
use lowlat_http::cache::Fields;

use super::lines::Lines;

/// One stored response: status, the fields kept (RFC 9111 §3.1), the body, and what its
/// freshness was decided from.
#[derive(Debug)]
pub(crate) struct Object {
    pub(crate) status: u16,
    /// The reason phrase: the standard one (not allocated) unless the upstream sent another.
    pub(crate) reason: Cow<'static, str>,
    /// The kept fields, as lines ready to be copied into a head: no `Content-Length` (written
    /// from the body), no `Age` (computed when sent), nothing hop-by-hop.
    pub(crate) lines: Lines,
    /// Where the body is ([`Object::body`]).
    body: Body,
    /// When it was received and how old it was then.
    pub(crate) age: AgeBase,
    /// Its freshness lifetime and the directives that say how it may be used stale.
    pub(crate) fresh: Stored,
    /// The cache-tags it was stored with (`Cache-Tag`, `Surrogate-Key`), for purging by tag.
    pub(crate) tags: Box<[Box<[u8]>]>,
}

/// Where a stored response's body is.
#[derive(Debug)]
pub(crate) enum Body {
    /// In the lines' buffer, after them (their tail): what a miss stores, the object's bytes
    /// in one allocation.
    AfterLines,
    /// Bytes of its own: read from the disk tier, or shared with the response a 304 refreshed.
    Own(Bytes),
}

/// `reason` as an object keeps it: the standard phrase for `status` borrowed, another owned.
/// HTTP/2 and HTTP/3 have no phrase: the standard one is kept for HTTP/1.1 clients.
pub(crate) fn reason_of(status: u16, reason: &str) -> Cow<'static, str> {
    let standard = lowlat_http::response::reason(status);
    if reason.is_empty() && standard != "Unknown" || reason == standard {
        Cow::Borrowed(standard)
    } else {
        Cow::Owned(reason.to_owned())
    }
}

/// Whether a field named `name` holds cache-tags.
pub(crate) fn is_tag_field(name: &str) -> bool {
    // By length first: asked of every field of every response stored.
    match name.len() {
        9 => name.eq_ignore_ascii_case("cache-tag"),
        13 => name.eq_ignore_ascii_case("surrogate-key"),
        _ => false,
    }
}

/// The cache-tags of a response's kept fields (`Cache-Tag`, `Surrogate-Key`), for purging by
/// tag.
pub(crate) fn tags_of(lines: &Lines) -> Box<[Box<[u8]>]> {
    let mut tags = Vec::new();
    for i in 0..lines.count() {
        if is_tag_field(lines.field(i).0) {
            // Cache-Tag is comma-separated (as CDNs read it), Surrogate-Key space-separated.
            tags.extend(
                lines
                    .value(i)
                    .split(|&b| b == b',' || b == b' ')
                    .filter(|t| !t.is_empty())
                    .map(Box::<[u8]>::from),
            );
        }
    }
    tags.into_boxed_slice()
}

impl Object {
    /// An object of the kept fields' `lines`.
    pub(crate) fn new(
        status: u16,
        reason: Cow<'static, str>,
        lines: Lines,
        body: Bytes,
        age: AgeBase,
        fresh: Stored,
    ) -> Self {
        Object::with_tags(status, reason, lines, Body::Own(body), age, fresh, true)
    }

    /// [`Object::new`], told whether `lines` may hold cache-tags (`tagged`: false when the
    /// caller saw none as it copied them, so they are not looked for again).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn with_tags(
        status: u16,
        reason: Cow<'static, str>,
        lines: Lines,
        body: Body,
        age: AgeBase,
        fresh: Stored,
        tagged: bool,
    ) -> Self {
        let tags = if tagged {
            tags_of(&lines)
        } else {
            Box::default()
        };
        Object {
            status,
            reason,
            lines,
            body,
            age,
            fresh,
            tags,
        }
    }

    /// What the object costs the memory budget: its bytes plus a fixed overhead for the
    /// allocations and the map's entry. Measured: a store of 32 MiB full of 100-byte responses
    /// (61 760 objects) grew the process by 590 bytes an object where these bytes came to
    /// 287, so about 300 more; 320 is kept, so that RSS stays under the budget with small
    /// objects too (with 256 it went 9% over).
    pub(crate) fn weight(&self, key_len: usize) -> u64 {
        let own = match &self.body {
            Body::AfterLines => 0,
            Body::Own(b) => b.len(),
        };
        (key_len + self.lines.heap_len() + own + 320) as u64
    }

    /// The body.
    pub(crate) fn body(&self) -> &[u8] {
        match &self.body {
            Body::AfterLines => self.lines.tail(),
            Body::Own(b) => b,
        }
    }

    /// The body as `Bytes`, for another object to hold (a 304's refreshed copy): shared when
    /// it has bytes of its own, copied out of the lines' buffer when it follows them.
    pub(crate) fn shared_body(&self) -> Bytes {
        match &self.body {
            Body::AfterLines => Bytes::copy_from_slice(self.lines.tail()),
            Body::Own(b) => b.clone(),
        }
    }
}

impl Fields for Object {
    fn count(&self) -> usize {
        self.lines.count()
    }

    fn field(&self, i: usize) -> (&str, &[u8]) {
        self.lines.field(i)
    }

    fn is_named(&self, i: usize, name: &str) -> bool {
        self.lines.is_named(i, name)
    }

    fn value(&self, i: usize) -> &[u8] {
        self.lines.value(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lowlat_http::cache::Directives;

    #[test]
    fn fields_and_tags() {
        let fields: [(&str, &[u8]); 3] = [
            ("Content-Type", b"text/plain"),
            ("Cache-Tag", b"a,b"),
            ("Surrogate-Key", b"c d"),
        ];
        let o = Object::new(
            200,
            reason_of(200, "OK"),
            Lines::of(fields.iter().copied(), |_| true),
            Bytes::from_static(b"hello"),
            AgeBase {
                initial: 0,
                response_time: 0,
            },
            Stored::new(60, &Directives::default()),
        );
        assert_eq!(
            o.lines.bytes(),
            b"Content-Type: text/plain\r\nCache-Tag: a,b\r\nSurrogate-Key: c d\r\n"
        );
        assert_eq!(
            lowlat_http::cache::first(&o, "cache-tag"),
            Some(&b"a,b"[..])
        );
        let tags: Vec<&[u8]> = o.tags.iter().map(|t| &t[..]).collect();
        assert_eq!(tags, [b"a", b"b", b"c", b"d"]);
        assert_eq!(o.count(), 3);
        assert!(matches!(o.reason, Cow::Borrowed("OK")));
    }

    #[test]
    fn reasons() {
        assert!(matches!(reason_of(404, ""), Cow::Borrowed("Not Found")));
        assert!(matches!(reason_of(404, "Not Found"), Cow::Borrowed(_)));
        assert_eq!(reason_of(404, "Gone Away"), "Gone Away");
        assert_eq!(reason_of(299, ""), "");
    }
}
