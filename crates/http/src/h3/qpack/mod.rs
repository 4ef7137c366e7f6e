//! QPACK (RFC 9204): field compression for HTTP/3. Like HPACK it has a static table and a
//! dynamic one, but the dynamic table is filled through a stream of its own (the encoder
//! stream) instead of inside the field sections, so sections on different streams can be
//! decoded in any order; a section that references entries not yet received waits ("blocked").
//!
//! - [`wire`]: integers, strings, field line representations and both streams' instructions.
//! - [`table`]: the static table (99 entries).
//! - [`decoder`]: [`Decoder`] — the dynamic table, encoder-stream input, blocked streams,
//!   decoder-stream output.
//! - [`encoder`]: [`Encoder`] — static table and literals only: never blocks the peer.
//!
//! The Huffman code is HPACK's, shared with [`crate::h2::hpack`].

pub mod decoder;
pub mod encoder;
pub mod table;
pub mod wire;

pub use decoder::{Decoded, Decoder};
pub use encoder::Encoder;
pub use wire::{DecoderInstruction, EncoderInstruction, FieldLine, SectionPrefix, Str};

use super::error::ErrorCode;

/// One decoded field line. `never_indexed` is the N bit: an intermediary re-encoding the
/// field must keep it a literal (RFC 9204 §7.1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field<'a> {
    pub name: &'a [u8],
    pub value: &'a [u8],
    pub never_indexed: bool,
}

/// Why QPACK failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QpackError {
    /// A field section that cannot be decoded: QPACK_DECOMPRESSION_FAILED, a connection error.
    #[error("decompression failed: {0}")]
    Decompression(&'static str),
    /// A bad encoder-stream instruction: QPACK_ENCODER_STREAM_ERROR.
    #[error("encoder stream: {0}")]
    EncoderStream(&'static str),
    /// A bad decoder-stream instruction: QPACK_DECODER_STREAM_ERROR.
    #[error("decoder stream: {0}")]
    DecoderStream(&'static str),
    /// The decoded section (or one string in it) is larger than this side accepts: a stream
    /// error (RFC 9204 §7.4); a server answers 431 if it can.
    #[error("field section too large")]
    SectionTooLarge,
}

impl QpackError {
    /// The code that answers this error.
    #[must_use]
    pub const fn code(&self) -> ErrorCode {
        match self {
            Self::Decompression(_) | Self::SectionTooLarge => ErrorCode::QpackDecompressionFailed,
            Self::EncoderStream(_) => ErrorCode::QpackEncoderStreamError,
            Self::DecoderStream(_) => ErrorCode::QpackDecoderStreamError,
        }
    }

    /// Whether the connection must close: all but [`QpackError::SectionTooLarge`].
    #[must_use]
    pub const fn is_connection_error(&self) -> bool {
        !matches!(self, Self::SectionTooLarge)
    }
}

#[cfg(test)]
mod tests;
