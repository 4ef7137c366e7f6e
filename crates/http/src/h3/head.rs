//! Field sections to heads and back, for both sides of HTTP/3:
//!
//! - a server decodes a request's section into the [`RequestHead`] HTTP/2 also fills
//!   ([`RequestHead::decode_h3`]), with the checks both share ([`crate::head`]) plus HTTP/3's
//!   own: `:authority` or `host` for `http`/`https` (RFC 9114 §4.3.1) and `:protocol` where
//!   extended CONNECT was announced (RFC 9220); and writes response heads
//!   ([`write_response`]);
//! - a client writes requests ([`write_request`]) and decodes response heads
//!   ([`ResponseHead`]): `:status` first and alone among pseudo-fields, 1xx heads told apart.
//!
//! A section QPACK cannot decode yet comes back as [`Decoded::Blocked`]; the caller keeps the
//! bytes and calls again when the decoder lists the stream as unblocked.

use std::ops::Range;

use super::error::Error;
use super::frame::put_headers_with;
use super::qpack::{Decoded, Decoder, Encoder, QpackError};
use crate::head::{
    content_length, regular_name_ok, value_ok, HeadCheck, HeadError, RequestHead, Rules,
};

fn qpack_error(e: QpackError) -> Error {
    match e {
        QpackError::SectionTooLarge => Error::FieldSectionTooLarge,
        e => Error::Qpack(e),
    }
}

impl RequestHead {
    /// Decodes a request's field section (a HEADERS frame's payload) received on `stream_id`.
    /// With `trailers`, the section is a trailer section: pseudo-header fields are refused and
    /// nothing is kept. `extended_connect`: this side announced SETTINGS_ENABLE_CONNECT_PROTOCOL,
    /// so `:protocol` is accepted (see [`RequestHead::protocol`]).
    ///
    /// # Errors
    /// [`Error::Message`] for a malformed request and [`Error::FieldSectionTooLarge`] for one
    /// larger than `max_list_size` (stream errors: reset, or answer 431); [`Error::Qpack`] when
    /// the section cannot be decoded (the connection ends).
    pub fn decode_h3(
        &mut self,
        decoder: &mut Decoder,
        stream_id: u64,
        section: &[u8],
        max_list_size: usize,
        trailers: bool,
        extended_connect: bool,
    ) -> Result<Decoded, Error> {
        let mut check = HeadCheck::new(
            self,
            Rules {
                max_list_size,
                trailers,
                extended_connect,
                require_authority: true,
            },
        );
        let decoded = decoder
            .decode_section(stream_id, section, |f| check.field(f.name, f.value))
            .map_err(qpack_error)?;
        if decoded == Decoded::Blocked {
            return Ok(Decoded::Blocked);
        }
        match check.finish() {
            Ok(()) => Ok(Decoded::Done),
            Err(HeadError::TooLarge) => Err(Error::FieldSectionTooLarge),
            Err(_) => Err(Error::Message("malformed request head")),
        }
    }
}

/// Appends a whole HEADERS frame with a response head: `:status`, then `fields` (names in
/// lower case).
pub fn write_response<'a>(
    encoder: &Encoder,
    status: u16,
    fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    out: &mut Vec<u8>,
) {
    put_headers_with(out, |o| encoder.encode_response(status, fields, o));
}

/// Appends a whole HEADERS frame with a trailer section (or any list of regular fields).
pub fn write_fields<'a>(
    encoder: &Encoder,
    fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    out: &mut Vec<u8>,
) {
    put_headers_with(out, |o| encoder.encode_section(fields, o));
}

/// A request's pseudo-header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLine<'a> {
    pub method: &'a [u8],
    pub scheme: &'a [u8],
    pub authority: &'a [u8],
    pub path: &'a [u8],
    /// `:protocol` of an extended CONNECT (the method is then CONNECT).
    pub protocol: Option<&'a [u8]>,
}

/// Appends a whole HEADERS frame with a request head. A plain CONNECT (no `protocol`) sends
/// only `:method` and `:authority` (RFC 9114 §4.4).
pub fn write_request<'a>(
    encoder: &Encoder,
    line: &RequestLine<'_>,
    fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    out: &mut Vec<u8>,
) {
    put_headers_with(out, |o| {
        encoder.begin_section(o);
        encoder.field(b":method", line.method, false, o);
        if line.method == b"CONNECT" && line.protocol.is_none() {
            encoder.field(b":authority", line.authority, false, o);
        } else {
            encoder.field(b":scheme", line.scheme, false, o);
            encoder.field(b":authority", line.authority, false, o);
            encoder.field(b":path", line.path, false, o);
            if let Some(p) = line.protocol {
                encoder.field(b":protocol", p, false, o);
            }
        }
        for (name, value) in fields {
            encoder.field(name, value, false, o);
        }
    });
}

/// A decoded response head (or trailer section), as a client receives it: fields as ranges of
/// one reused buffer.
#[derive(Debug, Default)]
pub struct ResponseHead {
    buf: Vec<u8>,
    fields: Vec<(Range<usize>, Range<usize>)>,
    status: u16,
    /// The declared body length (`content-length`).
    pub content_length: Option<u64>,
}

impl ResponseHead {
    /// Decodes a response's field section received on `stream_id`; with `trailers`, a trailer
    /// section (no pseudo-header fields; `status` is then 0).
    ///
    /// # Errors
    /// [`Error::Message`] for a malformed head (no `:status` or a bad one, another
    /// pseudo-field, a bad name or value, conflicting lengths, 101 which HTTP/3 forbids),
    /// [`Error::FieldSectionTooLarge`], or [`Error::Qpack`].
    pub fn decode(
        &mut self,
        decoder: &mut Decoder,
        stream_id: u64,
        section: &[u8],
        max_list_size: usize,
        trailers: bool,
    ) -> Result<Decoded, Error> {
        self.buf.clear();
        self.fields.clear();
        self.status = 0;
        self.content_length = None;
        let mut size = 0usize;
        let mut problem: Option<Error> = None;
        let mut first = true;
        let decoded = decoder
            .decode_section(stream_id, section, |f| {
                size = size.saturating_add(f.name.len() + f.value.len() + 32);
                if problem.is_none() {
                    problem = if size > max_list_size {
                        Some(Error::FieldSectionTooLarge)
                    } else {
                        self.field(f.name, f.value, first && !trailers).err()
                    };
                }
                first = false;
            })
            .map_err(qpack_error)?;
        if decoded == Decoded::Blocked {
            return Ok(Decoded::Blocked);
        }
        if let Some(p) = problem {
            return Err(p);
        }
        if !trailers && self.status == 0 {
            return Err(Error::Message("response without :status"));
        }
        Ok(Decoded::Done)
    }

    fn field(&mut self, name: &[u8], value: &[u8], status_here: bool) -> Result<(), Error> {
        let bad = Error::Message("malformed response head");
        if name == b":status" && status_here {
            let status = std::str::from_utf8(value)
                .ok()
                .filter(|v| v.len() == 3 && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<u16>().ok())
                .filter(|s| (100..600).contains(s) && *s != 101)
                .ok_or(bad)?;
            self.status = status;
            return Ok(());
        }
        if !value_ok(value) || !regular_name_ok(name, value) {
            return Err(bad);
        }
        if name == b"content-length" {
            let n = content_length(value).ok_or(bad)?;
            if self.content_length.is_some_and(|c| c != n) {
                return Err(bad);
            }
            self.content_length = Some(n);
        }
        let start = self.buf.len();
        self.buf.extend_from_slice(name);
        let mid = self.buf.len();
        self.buf.extend_from_slice(value);
        self.fields.push((start..mid, mid..self.buf.len()));
        Ok(())
    }

    /// `:status` (0 for a trailer section).
    #[must_use]
    pub fn status(&self) -> u16 {
        self.status
    }

    /// An interim (1xx) response: a final one follows on the stream.
    #[must_use]
    pub fn is_interim(&self) -> bool {
        (100..200).contains(&self.status)
    }

    /// The regular fields, in order.
    pub fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.fields
            .iter()
            .map(|(n, v)| (&self.buf[n.clone()], &self.buf[v.clone()]))
    }

    /// The value of the first field named `name` (lower case).
    #[must_use]
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.fields().find(|(n, _)| *n == name).map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests;
