//! A request's head as HTTP/2 and HTTP/3 deliver it: a compressed field section (HPACK in
//! [`crate::h2::head`], QPACK in [`crate::h3::head`]) decoded into one reused buffer per
//! connection, and checked as RFC 9113 §8.2–§8.3 and RFC 9114 §4.2–§4.3 both ask: field names
//! in lower case, pseudo-header fields first, once each, only the request ones, none of
//! HTTP/1.1's connection-specific fields, no control characters, `:protocol` only where
//! extended CONNECT was announced (RFC 8441 §4, RFC 9220 §3), and the decoded list within its
//! limit — counted while decoding, so a small block that expands to megabytes (a "bomb") is
//! refused without ever being stored.
//!
//! The checks live here once, in `HeadCheck`, fed one field at a time by either decoder.
//! A request allocates nothing here once the buffers are warm.

use std::ops::Range;

/// Why a header block was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// The block could not be decoded: the compression state is lost, so the connection ends
    /// (HTTP/2's COMPRESSION_ERROR; HTTP/3's QPACK errors say more and are reported as such).
    Compression,
    /// The request is malformed: the stream is reset (PROTOCOL_ERROR, H3_MESSAGE_ERROR).
    Malformed,
    /// The decoded list is larger than allowed: answered 431.
    TooLarge,
}

/// A decoded request head: pseudo-header fields and regular fields, as ranges of `buf`.
#[derive(Debug, Default)]
pub struct RequestHead {
    buf: Vec<u8>,
    fields: Vec<(Range<usize>, Range<usize>)>,
    method: Option<Range<usize>>,
    scheme: Option<Range<usize>>,
    authority: Option<Range<usize>>,
    path: Option<Range<usize>>,
    protocol: Option<Range<usize>>,
    /// The declared body length (`content-length`).
    pub content_length: Option<u64>,
}

/// `clone_from` copies into the buffers already there (the derived one allocates new ones).
impl Clone for RequestHead {
    fn clone(&self) -> Self {
        let mut head = Self::default();
        head.clone_from(self);
        head
    }

    fn clone_from(&mut self, source: &Self) {
        self.buf.clone_from(&source.buf);
        self.fields.clone_from(&source.fields);
        self.method.clone_from(&source.method);
        self.scheme.clone_from(&source.scheme);
        self.authority.clone_from(&source.authority);
        self.path.clone_from(&source.path);
        self.protocol.clone_from(&source.protocol);
        self.content_length = source.content_length;
    }
}

/// What a decoder checks a section against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    /// The largest decoded list (name + value + 32 per field).
    pub max_list_size: usize,
    /// A trailer section: pseudo-header fields are refused; the fields are kept (a proxy
    /// passes them on).
    pub trailers: bool,
    /// `:protocol` is accepted (this side announced SETTINGS_ENABLE_CONNECT_PROTOCOL).
    pub extended_connect: bool,
    /// An `http` or `https` request needs `:authority` or `host`, the same if both
    /// (RFC 9114 §4.3.1). HTTP/2's path leaves this to the application, as it always has.
    pub require_authority: bool,
}

/// A head being filled from a decoder, one field at a time: every check but the last (whole
/// head) ones, with the first problem kept and the rest of the fields only counted.
pub(crate) struct HeadCheck<'h> {
    head: &'h mut RequestHead,
    rules: Rules,
    size: usize,
    problem: Option<HeadError>,
    regular_seen: bool,
    host: Option<Range<usize>>,
}

impl<'h> HeadCheck<'h> {
    /// Starts filling `head` (emptied first).
    pub(crate) fn new(head: &'h mut RequestHead, rules: Rules) -> Self {
        head.buf.clear();
        head.fields.clear();
        head.method = None;
        head.scheme = None;
        head.authority = None;
        head.path = None;
        head.protocol = None;
        head.content_length = None;
        Self {
            head,
            rules,
            size: 0,
            problem: None,
            regular_seen: false,
            host: None,
        }
    }

    /// One decoded field.
    pub(crate) fn field(&mut self, name: &[u8], value: &[u8]) {
        self.size = self.size.saturating_add(name.len() + value.len() + 32);
        if self.problem.is_some() {
            return;
        }
        if self.size > self.rules.max_list_size {
            self.problem = Some(HeadError::TooLarge);
            return;
        }
        if let Err(e) = self.check(name, value) {
            self.problem = Some(e);
        }
    }

    fn check(&mut self, name: &[u8], value: &[u8]) -> Result<(), HeadError> {
        if !value_ok(value) {
            return Err(HeadError::Malformed);
        }
        let head = &mut *self.head;
        if let Some(pseudo) = name.strip_prefix(b":") {
            if self.rules.trailers || self.regular_seen {
                return Err(HeadError::Malformed);
            }
            let range = head.push(value);
            let slot = match pseudo {
                b"method" => &mut head.method,
                b"scheme" => &mut head.scheme,
                b"authority" => &mut head.authority,
                b"path" => &mut head.path,
                b"protocol" if self.rules.extended_connect => &mut head.protocol,
                _ => return Err(HeadError::Malformed),
            };
            if slot.is_some() {
                return Err(HeadError::Malformed);
            }
            *slot = Some(range);
            if pseudo == b"path" && value.iter().any(|&b| !(0x21..0x7f).contains(&b)) {
                return Err(HeadError::Malformed);
            }
            return Ok(());
        }
        self.regular_seen = true;
        if !regular_name_ok(name, value) {
            return Err(HeadError::Malformed);
        }
        if self.rules.trailers {
            // Kept for a proxy that passes them on (`RequestHead::fields`).
            let (n, v) = (head.push(name), head.push(value));
            head.fields.push((n, v));
            return Ok(());
        }
        if name == b"content-length" {
            let n = content_length(value).ok_or(HeadError::Malformed)?;
            if head.content_length.is_some_and(|c| c != n) {
                return Err(HeadError::Malformed);
            }
            head.content_length = Some(n);
        }
        let n = head.push(name);
        let v = head.push(value);
        if name == b"host" && self.rules.require_authority {
            if self.host.is_some() {
                return Err(HeadError::Malformed);
            }
            self.host = Some(v.clone());
        }
        head.fields.push((n, v));
        Ok(())
    }

    /// The section ended: the first problem, or the checks of the whole head.
    pub(crate) fn finish(self) -> Result<(), HeadError> {
        if let Some(p) = self.problem {
            return Err(p);
        }
        if self.rules.trailers {
            return Ok(());
        }
        let head = &*self.head;
        let is_connect = head.method() == Some("CONNECT");
        let complete = if head.protocol.is_some() {
            // Extended CONNECT (RFC 8441 §4): all four, and the method is CONNECT.
            is_connect && head.scheme.is_some() && head.authority.is_some() && head.path.is_some()
        } else if is_connect {
            head.authority.is_some() && head.scheme.is_none() && head.path.is_none()
        } else {
            head.method.is_some()
                && head.scheme.is_some()
                && head.path.as_ref().is_some_and(|p| !p.is_empty())
        };
        if !complete {
            return Err(HeadError::Malformed);
        }
        if self.rules.require_authority && matches!(head.scheme(), Some("http" | "https")) {
            let host = self.host.map(|r| &head.buf[r]);
            match (head.authority(), host) {
                (None, None) => return Err(HeadError::Malformed),
                (Some(a), Some(h)) if a != h => return Err(HeadError::Malformed),
                _ => {}
            }
        }
        Ok(())
    }
}

/// A field value without NUL, CR or LF, nor white space at either end (RFC 9110 §5.5,
/// RFC 9113 §8.2.1, RFC 9114 §4.2).
pub(crate) fn value_ok(value: &[u8]) -> bool {
    !(value.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n')
        || value.first().is_some_and(|&b| b == b' ' || b == b'\t')
        || value.last().is_some_and(|&b| b == b' ' || b == b'\t'))
}

/// A regular field's name: a token in lower case, not connection-specific; `te` only as
/// `trailers`.
pub(crate) fn regular_name_ok(name: &[u8], value: &[u8]) -> bool {
    !name.is_empty()
        && name.iter().all(|&b| is_lower_token(b))
        && !is_connection_specific(name)
        && (name != b"te" || value == b"trailers")
}

/// Whether `name` (lower case) is a connection-specific field, which HTTP/2 and HTTP/3 do not
/// carry (RFC 9113 §8.2.2, RFC 9114 §4.2): what a client leaves out when it sends a request's
/// fields in either, and a decoder refuses. `te` is the caller's to judge by its value.
#[must_use]
pub fn is_connection_specific(name: &[u8]) -> bool {
    crate::fields::CONNECTION_SPECIFIC.contains(&name)
}

/// A `content-length` value: decimal digits only.
pub(crate) fn content_length(value: &[u8]) -> Option<u64> {
    std::str::from_utf8(value)
        .ok()
        .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|v| v.parse::<u64>().ok())
}

impl RequestHead {
    fn push(&mut self, bytes: &[u8]) -> Range<usize> {
        let start = self.buf.len();
        self.buf.extend_from_slice(bytes);
        start..self.buf.len()
    }

    fn text(&self, r: Option<&Range<usize>>) -> Option<&str> {
        r.and_then(|r| std::str::from_utf8(&self.buf[r.clone()]).ok())
    }

    /// `:method`.
    #[must_use]
    pub fn method(&self) -> Option<&str> {
        self.text(self.method.as_ref())
    }

    /// `:path` (checked to be visible ASCII).
    #[must_use]
    pub fn path(&self) -> Option<&str> {
        self.text(self.path.as_ref())
    }

    /// `:authority`.
    #[must_use]
    pub fn authority(&self) -> Option<&[u8]> {
        self.authority.as_ref().map(|r| &self.buf[r.clone()])
    }

    /// `:scheme`.
    #[must_use]
    pub fn scheme(&self) -> Option<&str> {
        self.text(self.scheme.as_ref())
    }

    /// `:protocol`: the protocol an extended CONNECT asks for (`websocket`, RFC 8441 §4,
    /// RFC 9220), only ever set where it was announced.
    #[must_use]
    pub fn protocol(&self) -> Option<&str> {
        self.text(self.protocol.as_ref())
    }

    /// How many regular fields there are.
    #[must_use]
    pub fn field_count(&self) -> usize {
        self.fields.len()
    }

    /// The regular fields, in order, names in lower case.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.fields.iter().map(|(n, v)| {
            (
                std::str::from_utf8(&self.buf[n.clone()]).unwrap_or(""),
                &self.buf[v.clone()],
            )
        })
    }

    /// The regular fields as an HTTP/1.1 request's (`slots`, in order), with `:authority` as
    /// `host` when the client sent no `host` (RFC 9113 §8.3.1, RFC 9114 §4.3.1): what the
    /// server's handlers read, whatever the protocol. Returns how many; `None` when they do
    /// not fit `slots` or are more than `max` (431, as over HTTP/1.1).
    pub fn request_fields<'a>(
        &'a self,
        slots: &mut [crate::request::Header<'a>],
        max: usize,
    ) -> Option<usize> {
        let mut n = 0;
        let mut has_host = false;
        for (name, value) in self.fields() {
            has_host |= name == "host";
            *slots.get_mut(n)? = crate::request::Header { name, value };
            n += 1;
        }
        if let (false, Some(authority)) = (has_host, self.authority()) {
            *slots.get_mut(n)? = crate::request::Header {
                name: "host",
                value: authority,
            };
            n += 1;
        }
        (n <= max).then_some(n)
    }

    /// The bytes the head holds (its buffer), for a test that it stays small.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.buf.len()
    }
}

/// `tchar` of RFC 9110 §5.6.2, without upper-case letters.
pub(crate) fn is_lower_token(b: u8) -> bool {
    matches!(b,
        b'a'..=b'z' | b'0'..=b'9' | b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-'
        | b'.' | b'^' | b'_' | b'`' | b'|' | b'~')
}
