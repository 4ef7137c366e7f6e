//! Body framing (RFC 9112 §6): how long a message body is, and decoding it when it is chunked.
//!
//! A `Content-Length` body needs no decoder: its length is known from the head and the bytes are
//! used as they are. A chunked body goes through [`ChunkedDecoder`], which keeps its state between
//! calls so that a body arriving over many reads is scanned once.

mod chunked;

pub use chunked::{trailer_fields, ChunkedDecoder, Decoded};

/// How the body of a message is delimited, as decided from its head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body (no `Content-Length`, no `Transfer-Encoding`, or `Content-Length: 0`).
    None,
    /// Exactly this many bytes follow the head.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}
