//! A stored response ([`Object`]): immutable once made, shared as an `Arc` by every worker
//! that serves it, so no lock is held while its bytes are written to a socket.

use bytes::Bytes;
use lowlat_http::cache::freshness::{AgeBase, Stored};
use lowlat_http::cache::Fields;

/// One stored response: status, the fields kept (RFC 9111 §3.1), the body, and what its
/// freshness was decided from.
#[derive(Debug)]
pub(crate) struct Object {
    pub(crate) status: u16,
    pub(crate) reason: Box<str>,
    /// The kept fields as `Name: value\r\n` lines, ready to be copied into a head: no
    /// `Content-Length` (written from the body), no `Age` (computed when sent), nothing
    /// hop-by-hop.
    pub(crate) lines: Box<[u8]>,
    /// Each field's name and value as offsets into `lines` (name start, name end, value start,
    /// value end), so the policy reads the fields without parsing the lines again.
    ranges: Box<[[u32; 4]]>,
    /// The body; `Bytes` so that a 304's refreshed copy shares it.
    pub(crate) body: Bytes,
    /// When it was received and how old it was then.
    pub(crate) age: AgeBase,
    /// Its freshness lifetime and the directives that say how it may be used stale.
    pub(crate) fresh: Stored,
    /// The cache-tags it was stored with (`Cache-Tag`, `Surrogate-Key`), for purging by tag.
    pub(crate) tags: Box<[Box<[u8]>]>,
}

impl Object {
    /// An object from the fields to keep, in order.
    pub(crate) fn new<'a>(
        status: u16,
        reason: &str,
        fields: impl IntoIterator<Item = (&'a str, &'a [u8])>,
        body: Bytes,
        age: AgeBase,
        fresh: Stored,
    ) -> Self {
        let mut lines = Vec::new();
        let mut ranges = Vec::new();
        let mut tags = Vec::new();
        for (name, value) in fields {
            let at = lines.len();
            lines.extend_from_slice(name.as_bytes());
            let name_end = lines.len();
            lines.extend_from_slice(b": ");
            let value_at = lines.len();
            lines.extend_from_slice(value);
            let value_end = lines.len();
            lines.extend_from_slice(b"\r\n");
            // Heads are at most tens of KiB (the response head limit), far below u32.
            let r = [at, name_end, value_at, value_end].map(|v| u32::try_from(v).unwrap_or(0));
            ranges.push(r);
            if name.eq_ignore_ascii_case("cache-tag") || name.eq_ignore_ascii_case("surrogate-key")
            {
                // Cache-Tag is comma-separated (as CDNs read it), Surrogate-Key space-separated.
                tags.extend(
                    value
                        .split(|&b| b == b',' || b == b' ')
                        .filter(|t| !t.is_empty())
                        .map(Box::<[u8]>::from),
                );
            }
        }
        Object {
            status,
            reason: reason.into(),
            lines: lines.into_boxed_slice(),
            ranges: ranges.into_boxed_slice(),
            body,
            age,
            fresh,
            tags: tags.into_boxed_slice(),
        }
    }

    /// What the object costs the memory budget: its bytes plus a fixed overhead for the
    /// allocations and the map's entry (measured at about 200 bytes; 256 is kept).
    pub(crate) fn weight(&self, key_len: usize) -> u64 {
        (key_len + self.lines.len() + self.ranges.len() * 16 + self.body.len() + 256) as u64
    }
}

impl Fields for Object {
    fn count(&self) -> usize {
        self.ranges.len()
    }

    fn field(&self, i: usize) -> (&str, &[u8]) {
        let [n0, n1, v0, v1] = self.ranges[i].map(|v| v as usize);
        // Names were `&str` when stored, so the bytes are UTF-8.
        let name = std::str::from_utf8(&self.lines[n0..n1]).unwrap_or("");
        (name, &self.lines[v0..v1])
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
            "OK",
            fields,
            Bytes::from_static(b"hello"),
            AgeBase {
                initial: 0,
                response_time: 0,
            },
            Stored::new(60, &Directives::default()),
        );
        assert_eq!(
            &*o.lines,
            b"Content-Type: text/plain\r\nCache-Tag: a,b\r\nSurrogate-Key: c d\r\n"
        );
        assert_eq!(
            lowlat_http::cache::first(&o, "cache-tag"),
            Some(&b"a,b"[..])
        );
        let tags: Vec<&[u8]> = o.tags.iter().map(|t| &t[..]).collect();
        assert_eq!(tags, [b"a", b"b", b"c", b"d"]);
        assert_eq!(o.count(), 3);
    }
}
