//! HTTP/3's codec (RFC 9114, RFC 9204), without I/O: the QUIC transport hands over the bytes
//! of each stream and takes bytes back.
//!
//! - [`varint`]: QUIC variable-length integers.
//! - [`frame`]: frames, SETTINGS, stream types, and [`frame::FrameDecoder`], which reads a
//!   stream's frames from input split anywhere (DATA streamed, never buffered whole).
//! - [`stream`]: the order of frames on request and control streams, and which
//!   unidirectional streams a peer may open.
//! - [`qpack`]: field compression — the decoder with its dynamic table and blocked streams,
//!   an encoder that uses the static table and literals only.
//! - [`head`]: field sections to request heads (the type HTTP/2 fills, [`crate::head`]),
//!   response heads to field sections, and the client's side of both.
//! - [`error`]: [`Error`], every protocol error with its RFC 9114/9204 code and whether it
//!   ends the connection or only a stream.
//!
//! A server's connection, in order: open its control stream (type, then SETTINGS from
//! [`frame::Settings::write`]), its QPACK decoder stream and, optionally, an encoder stream
//! with nothing on it; read the peer's unidirectional streams' types ([`frame::StreamType`],
//! [`stream::UniStreams`]); feed the peer's control stream to a [`frame::FrameDecoder`] and
//! [`stream::ControlStream`], its encoder stream to [`qpack::Decoder::feed_encoder_stream`],
//! its decoder stream to [`qpack::Encoder::feed_decoder_stream`]; on each request stream, a
//! `FrameDecoder` and a [`stream::RequestStream`], HEADERS to [`head`]; after each batch,
//! write [`qpack::Decoder::write_decoder_stream`]'s bytes.

pub mod error;
pub mod frame;
pub mod head;
pub mod qpack;
pub mod stream;
pub mod varint;

pub use error::{Error, ErrorCode};
pub use frame::{Frame, FrameDecoder, Settings, StreamType};
pub use stream::{ControlEvent, ControlStream, RequestStream, Role, Section, UniStreams};
