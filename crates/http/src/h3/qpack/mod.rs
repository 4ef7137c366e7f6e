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

pub use super::error::QpackError;
pub use decoder::{Decoded, Decoder, Field};
pub use encoder::Encoder;
pub use wire::{DecoderInstruction, EncoderInstruction, FieldLine, SectionPrefix, Str};

#[cfg(test)]
mod tests;
