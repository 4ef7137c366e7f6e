//! HTTP/3's error codes (RFC 9114 §8.1, RFC 9204 §6, RFC 9297 §2.1.1), [`Error`], every way a
//! peer can break the protocol, and [`QpackError`], QPACK's part of it: each mapped in one
//! `match` to the code to send and to whether it ends the connection (CONNECTION_CLOSE) or only
//! the stream (RESET_STREAM/STOP_SENDING).

/// An HTTP/3 application error code, as sent in CONNECTION_CLOSE, RESET_STREAM or STOP_SENDING.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u64)]
pub enum ErrorCode {
    NoError = 0x100,
    GeneralProtocolError = 0x101,
    InternalError = 0x102,
    StreamCreationError = 0x103,
    ClosedCriticalStream = 0x104,
    FrameUnexpected = 0x105,
    FrameError = 0x106,
    ExcessiveLoad = 0x107,
    IdError = 0x108,
    SettingsError = 0x109,
    MissingSettings = 0x10a,
    RequestRejected = 0x10b,
    RequestCancelled = 0x10c,
    RequestIncomplete = 0x10d,
    MessageError = 0x10e,
    ConnectError = 0x10f,
    VersionFallback = 0x110,
    QpackDecompressionFailed = 0x200,
    QpackEncoderStreamError = 0x201,
    QpackDecoderStreamError = 0x202,
    DatagramError = 0x33,
}

impl ErrorCode {
    /// The code's value on the wire.
    #[must_use]
    pub const fn value(self) -> u64 {
        self as u64
    }
}

/// A peer broke HTTP/3 or QPACK. [`Error::code`] is what to send; [`Error::is_connection_error`]
/// says whether the whole connection ends or only the stream the error came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A frame whose payload has more or fewer bytes than its fields, or a stream that ended
    /// inside a frame (RFC 9114 §7.1).
    #[error("malformed frame: {0}")]
    Frame(&'static str),
    /// A frame not allowed on this stream or at this point of it (RFC 9114 §7.2): DATA before
    /// HEADERS, SETTINGS twice, DATA on the control stream, an HTTP/2 frame type.
    #[error("unexpected frame: {0}")]
    FrameUnexpected(&'static str),
    /// A control frame larger than any legitimate one.
    #[error("excessive load: {0}")]
    ExcessiveLoad(&'static str),
    /// A stream or push id that is not allowed (GOAWAY's id growing, a push never allowed).
    #[error("bad id: {0}")]
    Id(&'static str),
    /// A SETTINGS frame with a repeated identifier, an HTTP/2-only one or a bad value.
    #[error("bad settings: {0}")]
    Settings(&'static str),
    /// The control stream did not start with SETTINGS.
    #[error("control stream does not start with SETTINGS")]
    MissingSettings,
    /// A critical stream (control, QPACK encoder or decoder) was closed.
    #[error("critical stream closed")]
    ClosedCriticalStream,
    /// A second control, encoder or decoder stream, or a push stream sent by a client.
    #[error("stream creation: {0}")]
    StreamCreation(&'static str),
    /// A HEADERS or PUSH_PROMISE frame, or a decoded field section, larger than this side
    /// accepts: the stream is refused (a server answers 431 if it can, RFC 9114 §4.2.2).
    #[error("field section too large")]
    FieldSectionTooLarge,
    /// The stream ended before a whole request (no HEADERS) was received.
    #[error("request incomplete")]
    RequestIncomplete,
    /// A malformed request or response (RFC 9114 §4.1.2): pseudo-header fields wrong,
    /// connection-specific fields, a body whose length is not the declared one.
    #[error("malformed message: {0}")]
    Message(&'static str),
    /// QPACK failed on a field section, the encoder stream or the decoder stream.
    #[error("QPACK: {0}")]
    Qpack(#[from] QpackError),
}

impl Error {
    /// The code that answers this error. The only place that decides it.
    #[must_use]
    pub const fn code(&self) -> ErrorCode {
        match self {
            Self::Frame(_) => ErrorCode::FrameError,
            Self::FrameUnexpected(_) => ErrorCode::FrameUnexpected,
            Self::ExcessiveLoad(_) | Self::FieldSectionTooLarge => ErrorCode::ExcessiveLoad,
            Self::Id(_) => ErrorCode::IdError,
            Self::Settings(_) => ErrorCode::SettingsError,
            Self::MissingSettings => ErrorCode::MissingSettings,
            Self::ClosedCriticalStream => ErrorCode::ClosedCriticalStream,
            Self::StreamCreation(_) => ErrorCode::StreamCreationError,
            Self::RequestIncomplete => ErrorCode::RequestIncomplete,
            Self::Message(_) => ErrorCode::MessageError,
            Self::Qpack(q) => q.code(),
        }
    }

    /// Whether the connection must close (otherwise only the stream is reset). Stream errors:
    /// a field section too large, a malformed message, an incomplete request (RFC 9114 §4.1.2,
    /// §4.2.2); every other error breaks state the connection shares.
    #[must_use]
    pub const fn is_connection_error(&self) -> bool {
        match self {
            Self::FieldSectionTooLarge | Self::RequestIncomplete | Self::Message(_) => false,
            Self::Qpack(q) => q.is_connection_error(),
            _ => true,
        }
    }
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
mod tests {
    use super::*;

    #[test]
    fn codes_and_scopes() {
        let cases: &[(Error, u64, bool)] = &[
            (Error::Frame("x"), 0x106, true),
            (Error::FrameUnexpected("x"), 0x105, true),
            (Error::ExcessiveLoad("x"), 0x107, true),
            (Error::Id("x"), 0x108, true),
            (Error::Settings("x"), 0x109, true),
            (Error::MissingSettings, 0x10a, true),
            (Error::ClosedCriticalStream, 0x104, true),
            (Error::StreamCreation("x"), 0x103, true),
            (Error::FieldSectionTooLarge, 0x107, false),
            (Error::RequestIncomplete, 0x10d, false),
            (Error::Message("x"), 0x10e, false),
            (Error::Qpack(QpackError::Decompression("x")), 0x200, true),
            (Error::Qpack(QpackError::EncoderStream("x")), 0x201, true),
            (Error::Qpack(QpackError::DecoderStream("x")), 0x202, true),
            (Error::Qpack(QpackError::SectionTooLarge), 0x200, false),
        ];
        for (e, code, conn) in cases {
            assert_eq!(e.code().value(), *code, "{e:?}");
            assert_eq!(e.is_connection_error(), *conn, "{e:?}");
        }
    }
}
