//! The order of frames on each kind of stream (RFC 9114 §4.1, §6.2), as small state machines
//! the connection feeds every frame [`super::frame::FrameDecoder`] reads:
//!
//! - [`RequestStream`]: a request or response: HEADERS, DATA*, optional trailing HEADERS, and
//!   nothing after; DATA before HEADERS is H3_FRAME_UNEXPECTED. It also counts DATA against a
//!   declared `content-length` (H3_MESSAGE_ERROR, §4.1.2).
//! - [`ControlStream`]: SETTINGS first (else H3_MISSING_SETTINGS) and once; GOAWAY ids never
//!   growing; the frames each side may send.
//! - [`UniStreams`]: at most one control, QPACK encoder and decoder stream from the peer
//!   (H3_STREAM_CREATION_ERROR), and no push streams: this side never allows a push (it sends
//!   no MAX_PUSH_ID), so one is an error.
//!
//! Unknown frame types never reach these: the frame decoder skips them wherever they are.

use super::error::Error;
use super::frame::{Frame, Settings, StreamType};

/// Which side of the connection this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

/// Which field section a HEADERS frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// The request's head (server), or a response head (client; a 1xx one is followed by
    /// another: see [`RequestStream::interim_response`]).
    Head,
    /// The trailer section: the message ends with it.
    Trailers,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Head,
    Body,
    Done,
}

/// The frames received on one request stream: a request (on a server) or its response (on a
/// client).
#[derive(Debug, Clone)]
pub struct RequestStream {
    role: Role,
    phase: Phase,
    content_length: Option<u64>,
    received: u64,
}

impl RequestStream {
    /// A new stream, as received by `role` (this side).
    #[must_use]
    pub fn new(role: Role) -> Self {
        Self {
            role,
            phase: Phase::Head,
            content_length: None,
            received: 0,
        }
    }

    /// Checks that `frame` may come now, and says what a HEADERS frame carries.
    ///
    /// # Errors
    /// [`Error::FrameUnexpected`] for DATA before HEADERS, anything after trailers, or a control
    /// frame; [`Error::Id`] for a PUSH_PROMISE (never allowed); [`Error::Message`] for DATA
    /// beyond the declared length.
    pub fn on_frame(&mut self, frame: &Frame<'_>) -> Result<Option<Section>, Error> {
        match (frame, self.phase) {
            (Frame::Headers(_), Phase::Head) => {
                self.phase = Phase::Body;
                Ok(Some(Section::Head))
            }
            (Frame::Headers(_), Phase::Body) => {
                self.phase = Phase::Done;
                Ok(Some(Section::Trailers))
            }
            (Frame::DataHeader { .. } | Frame::Data(_), Phase::Head) => {
                Err(Error::FrameUnexpected("DATA before HEADERS"))
            }
            (_, Phase::Done) => Err(Error::FrameUnexpected("a frame after the trailers")),
            (Frame::DataHeader { len }, Phase::Body) => {
                self.received = self.received.saturating_add(*len);
                if self.content_length.is_some_and(|c| self.received > c) {
                    return Err(Error::Message("body longer than content-length"));
                }
                Ok(None)
            }
            (Frame::Data(_), Phase::Body) => Ok(None),
            (Frame::PushPromise { .. }, _) if self.role == Role::Client => {
                Err(Error::Id("PUSH_PROMISE without MAX_PUSH_ID"))
            }
            _ => Err(Error::FrameUnexpected(
                "a control frame on a request stream",
            )),
        }
    }

    /// The head just decoded was an interim (1xx) response: another head follows.
    pub fn interim_response(&mut self) {
        if self.phase == Phase::Body && self.received == 0 {
            self.phase = Phase::Head;
        }
    }

    /// The length the head declared (`content-length`), to check DATA against. Leave it unset
    /// where the body is empty whatever the header says (responses to HEAD, 204, 304).
    pub fn set_content_length(&mut self, len: Option<u64>) {
        self.content_length = len;
    }

    /// DATA payload bytes announced so far.
    #[must_use]
    pub fn body_received(&self) -> u64 {
        self.received
    }

    /// The stream ended (FIN), after the frame decoder's own `finish`.
    ///
    /// # Errors
    /// [`Error::RequestIncomplete`] without a head; [`Error::Message`] when the body is shorter
    /// than declared.
    pub fn finish(&self) -> Result<(), Error> {
        if self.phase == Phase::Head {
            return Err(Error::RequestIncomplete);
        }
        if self.content_length.is_some_and(|c| c != self.received) {
            return Err(Error::Message("body shorter than content-length"));
        }
        Ok(())
    }
}

/// What a control frame asks of the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlEvent {
    /// The peer's settings: apply them (QPACK table, field-section limit, extended CONNECT).
    Settings(Settings),
    /// The peer is going away: no stream (a server's GOAWAY) or push (a client's) at or above
    /// this id will be processed.
    GoAway(u64),
    /// Nothing for the connection to do (MAX_PUSH_ID, CANCEL_PUSH: this side never pushes).
    None,
}

/// The peer's control stream.
#[derive(Debug, Clone)]
pub struct ControlStream {
    role: Role,
    settings_seen: bool,
    goaway: Option<u64>,
    max_push_id: Option<u64>,
}

impl ControlStream {
    /// The peer's control stream, as received by `role` (this side).
    #[must_use]
    pub fn new(role: Role) -> Self {
        Self {
            role,
            settings_seen: false,
            goaway: None,
            max_push_id: None,
        }
    }

    /// Whether the peer's SETTINGS arrived.
    #[must_use]
    pub fn settings_seen(&self) -> bool {
        self.settings_seen
    }

    /// Checks `frame` and says what it means.
    ///
    /// # Errors
    /// [`Error::MissingSettings`] when the first frame is not SETTINGS;
    /// [`Error::FrameUnexpected`] for a second SETTINGS, a request-stream frame, or MAX_PUSH_ID
    /// sent by a server; [`Error::Id`] for a GOAWAY id that grows or is not a client
    /// bidirectional stream id, a MAX_PUSH_ID that shrinks, or a CANCEL_PUSH beyond it.
    pub fn on_frame(&mut self, frame: &Frame<'_>) -> Result<ControlEvent, Error> {
        if !self.settings_seen {
            let Frame::Settings(s) = frame else {
                return Err(Error::MissingSettings);
            };
            self.settings_seen = true;
            return Ok(ControlEvent::Settings(*s));
        }
        match *frame {
            Frame::Settings(_) => Err(Error::FrameUnexpected("a second SETTINGS")),
            Frame::GoAway(id) => {
                if self.role == Role::Client && id % 4 != 0 {
                    return Err(Error::Id("GOAWAY names no client bidirectional stream"));
                }
                if self.goaway.is_some_and(|g| id > g) {
                    return Err(Error::Id("GOAWAY id grew"));
                }
                self.goaway = Some(id);
                Ok(ControlEvent::GoAway(id))
            }
            Frame::MaxPushId(id) => {
                if self.role == Role::Client {
                    return Err(Error::FrameUnexpected("MAX_PUSH_ID from a server"));
                }
                if self.max_push_id.is_some_and(|m| id < m) {
                    return Err(Error::Id("MAX_PUSH_ID shrank"));
                }
                self.max_push_id = Some(id);
                Ok(ControlEvent::None)
            }
            Frame::CancelPush(id) => {
                // A client never allowed a push; a server only pushes below the peer's limit.
                let allowed = match self.role {
                    Role::Client => None,
                    Role::Server => self.max_push_id,
                };
                if allowed.is_none_or(|m| id > m) {
                    return Err(Error::Id("CANCEL_PUSH for a push never allowed"));
                }
                Ok(ControlEvent::None)
            }
            _ => Err(Error::FrameUnexpected(
                "a request frame on the control stream",
            )),
        }
    }

    /// The control stream ended: always a connection error.
    ///
    /// # Errors
    /// [`Error::ClosedCriticalStream`].
    pub fn finish(&self) -> Result<(), Error> {
        Err(Error::ClosedCriticalStream)
    }
}

/// The unidirectional streams the peer opened.
#[derive(Debug, Clone)]
pub struct UniStreams {
    role: Role,
    control: bool,
    encoder: bool,
    decoder: bool,
}

impl UniStreams {
    /// The peer's unidirectional streams, as received by `role` (this side).
    #[must_use]
    pub fn new(role: Role) -> Self {
        Self {
            role,
            control: false,
            encoder: false,
            decoder: false,
        }
    }

    /// A stream of type `t` opened: whether to read it (`false`: an unknown or reserved type,
    /// to discard, or refuse with STOP_SENDING and H3_STREAM_CREATION_ERROR).
    ///
    /// # Errors
    /// [`Error::StreamCreation`] for a second control, encoder or decoder stream, or a push
    /// stream opened by a client; [`Error::Id`] for a push stream on a client (no push is ever
    /// allowed).
    pub fn open(&mut self, t: StreamType) -> Result<bool, Error> {
        let seen = match t {
            StreamType::Control => &mut self.control,
            StreamType::QpackEncoder => &mut self.encoder,
            StreamType::QpackDecoder => &mut self.decoder,
            StreamType::Push => {
                return Err(match self.role {
                    Role::Server => Error::StreamCreation("a push stream from a client"),
                    Role::Client => Error::Id("a push stream without MAX_PUSH_ID"),
                });
            }
            StreamType::Other(_) => return Ok(false),
        };
        if *seen {
            return Err(Error::StreamCreation("a second control or QPACK stream"));
        }
        *seen = true;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: Frame<'static> = Frame::Headers(b"");

    #[test]
    fn request_order() {
        let mut s = RequestStream::new(Role::Server);
        assert_eq!(
            s.on_frame(&Frame::DataHeader { len: 1 }),
            Err(Error::FrameUnexpected("DATA before HEADERS"))
        );
        assert_eq!(s.finish(), Err(Error::RequestIncomplete));
        assert_eq!(s.on_frame(&H), Ok(Some(Section::Head)));
        s.set_content_length(Some(5));
        assert_eq!(s.on_frame(&Frame::DataHeader { len: 2 }), Ok(None));
        assert_eq!(s.on_frame(&Frame::Data(b"ab")), Ok(None));
        assert_eq!(
            s.finish(),
            Err(Error::Message("body shorter than content-length"))
        );
        assert_eq!(s.on_frame(&Frame::DataHeader { len: 3 }), Ok(None));
        assert_eq!(s.finish(), Ok(()));
        assert_eq!(s.on_frame(&H), Ok(Some(Section::Trailers)));
        for f in [H, Frame::DataHeader { len: 0 }] {
            assert_eq!(
                s.clone().on_frame(&f),
                Err(Error::FrameUnexpected("a frame after the trailers"))
            );
        }
        let mut s = RequestStream::new(Role::Server);
        s.on_frame(&H).unwrap();
        s.set_content_length(Some(1));
        assert_eq!(
            s.on_frame(&Frame::DataHeader { len: 2 }),
            Err(Error::Message("body longer than content-length"))
        );
        for f in [
            Frame::Settings(Settings::default()),
            Frame::GoAway(0),
            Frame::MaxPushId(0),
            Frame::CancelPush(0),
            Frame::PushPromise {
                push_id: 0,
                field_section: b"",
            },
        ] {
            assert_eq!(
                RequestStream::new(Role::Server).on_frame(&f),
                Err(Error::FrameUnexpected(
                    "a control frame on a request stream"
                )),
                "{f:?}"
            );
        }
        assert_eq!(
            RequestStream::new(Role::Client).on_frame(&Frame::PushPromise {
                push_id: 0,
                field_section: b""
            }),
            Err(Error::Id("PUSH_PROMISE without MAX_PUSH_ID"))
        );
    }

    #[test]
    fn interim_responses() {
        let mut s = RequestStream::new(Role::Client);
        assert_eq!(s.on_frame(&H), Ok(Some(Section::Head)));
        s.interim_response();
        assert_eq!(s.on_frame(&H), Ok(Some(Section::Head)));
        assert_eq!(s.on_frame(&Frame::DataHeader { len: 1 }), Ok(None));
        assert_eq!(s.on_frame(&H), Ok(Some(Section::Trailers)));
    }

    #[test]
    fn control_order() {
        let mut c = ControlStream::new(Role::Server);
        assert_eq!(c.on_frame(&Frame::GoAway(0)), Err(Error::MissingSettings));
        let s = Frame::Settings(Settings::default());
        assert_eq!(
            c.on_frame(&s),
            Ok(ControlEvent::Settings(Settings::default()))
        );
        assert!(c.settings_seen());
        assert_eq!(
            c.on_frame(&s),
            Err(Error::FrameUnexpected("a second SETTINGS"))
        );
        assert_eq!(
            c.on_frame(&Frame::CancelPush(0)),
            Err(Error::Id("CANCEL_PUSH for a push never allowed"))
        );
        assert_eq!(c.on_frame(&Frame::MaxPushId(4)), Ok(ControlEvent::None));
        assert_eq!(c.on_frame(&Frame::CancelPush(4)), Ok(ControlEvent::None));
        assert_eq!(
            c.on_frame(&Frame::MaxPushId(3)),
            Err(Error::Id("MAX_PUSH_ID shrank"))
        );
        // A client's GOAWAY carries a push id: any value, never growing.
        assert_eq!(c.on_frame(&Frame::GoAway(7)), Ok(ControlEvent::GoAway(7)));
        assert_eq!(
            c.on_frame(&Frame::GoAway(8)),
            Err(Error::Id("GOAWAY id grew"))
        );
        for f in [H, Frame::DataHeader { len: 0 }, Frame::Data(b"")] {
            assert_eq!(
                c.on_frame(&f),
                Err(Error::FrameUnexpected(
                    "a request frame on the control stream"
                ))
            );
        }
        assert_eq!(c.finish(), Err(Error::ClosedCriticalStream));

        let mut c = ControlStream::new(Role::Client);
        c.on_frame(&s).unwrap();
        assert_eq!(
            c.on_frame(&Frame::GoAway(5)),
            Err(Error::Id("GOAWAY names no client bidirectional stream"))
        );
        assert_eq!(c.on_frame(&Frame::GoAway(8)), Ok(ControlEvent::GoAway(8)));
        assert_eq!(c.on_frame(&Frame::GoAway(4)), Ok(ControlEvent::GoAway(4)));
        assert_eq!(
            c.on_frame(&Frame::GoAway(8)),
            Err(Error::Id("GOAWAY id grew"))
        );
        assert_eq!(
            c.on_frame(&Frame::MaxPushId(1)),
            Err(Error::FrameUnexpected("MAX_PUSH_ID from a server"))
        );
        assert_eq!(
            c.on_frame(&Frame::CancelPush(0)),
            Err(Error::Id("CANCEL_PUSH for a push never allowed"))
        );
    }

    #[test]
    fn uni_streams() {
        let mut u = UniStreams::new(Role::Server);
        for t in [
            StreamType::Control,
            StreamType::QpackEncoder,
            StreamType::QpackDecoder,
        ] {
            assert_eq!(u.open(t), Ok(true));
            assert_eq!(
                u.open(t),
                Err(Error::StreamCreation("a second control or QPACK stream"))
            );
        }
        assert_eq!(u.open(StreamType::Other(0x21)), Ok(false));
        assert_eq!(
            u.open(StreamType::Push),
            Err(Error::StreamCreation("a push stream from a client"))
        );
        assert_eq!(
            UniStreams::new(Role::Client).open(StreamType::Push),
            Err(Error::Id("a push stream without MAX_PUSH_ID"))
        );
    }
}
