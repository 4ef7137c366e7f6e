//! The HTTP/3 side of a load connection (`--h3`): one quinn-proto [`Connection`]'s streams as
//! HTTP/3 — the client's control stream (SETTINGS) and QPACK streams, requests on bidirectional
//! streams (their bytes built once per run, `plan::Group::h3_requests`), and responses read
//! back through the codec (`lowlat_http::h3`): frames, QPACK with a dynamic table the server
//! may use, GOAWAY.
//!
//! What this module does not do: sockets, timers and packets (`quic` drives the connection and
//! hands each stream event here), or counting (the worker records the [`Event`]s).
//!
//! Streams complete in any order, so each keeps its own send times: latency is never charged
//! to the wrong request.

use std::collections::HashMap;
use std::time::Instant;

use lowlat_http::h3::frame::{Frame, FrameDecoder, Settings, StreamType};
use lowlat_http::h3::head::ResponseHead;
use lowlat_http::h3::qpack::{self, Decoded};
use lowlat_http::h3::stream::{ControlEvent, ControlStream, RequestStream, Role, Section};
use lowlat_http::h3::{Error, ErrorCode, UniStreams};
use lowlat_http::Status;
use quinn_proto::{Connection, Dir, ReadError, StreamEvent, StreamId, VarInt};

/// The dynamic table the server's QPACK encoder may fill for us (SETTINGS_QPACK_MAX_TABLE_
/// CAPACITY): 4 KiB, as nghttp3 and aioquic announce, so that repeated response fields cost a
/// byte or two.
const QPACK_TABLE: usize = 4096;

/// Request streams whose response head may wait for the encoder stream.
const QPACK_BLOCKED: usize = 16;

/// Largest response head accepted (SETTINGS_MAX_FIELD_SECTION_SIZE), decoded.
const MAX_FIELD_SECTION: usize = 64 * 1024;

/// Bytes of a server's unidirectional stream type kept before it is known (a varint).
const MAX_TYPE_LEN: usize = 8;

/// What reading the streams found, for the worker to count.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Event {
    /// A response ended: its request's scheduled and actual send times, its status.
    Response {
        sent: Instant,
        actual: Instant,
        status: u16,
    },
    /// The server reset the stream, or its response was malformed: the request failed.
    Failed { sent: Instant, actual: Instant },
}

/// Why the connection cannot go on: the HTTP/3 error to close it with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct H3Error {
    pub code: ErrorCode,
    pub why: &'static str,
}

impl From<Error> for H3Error {
    fn from(e: Error) -> Self {
        let why = match e {
            Error::Frame(w)
            | Error::FrameUnexpected(w)
            | Error::ExcessiveLoad(w)
            | Error::Id(w)
            | Error::Settings(w)
            | Error::StreamCreation(w)
            | Error::Message(w) => w,
            Error::MissingSettings => "control stream without SETTINGS",
            Error::ClosedCriticalStream => "a control or QPACK stream closed",
            Error::FieldSectionTooLarge => "field section too large",
            Error::RequestIncomplete => "response incomplete",
            Error::Qpack(_) => "QPACK decoding failed",
        };
        Self {
            code: e.code(),
            why,
        }
    }
}

/// A request in flight on one stream.
#[derive(Debug)]
struct Exchange {
    sent: Instant,
    actual: Instant,
    /// Which of the host's requests (to write the rest of, or send again).
    index: usize,
    /// Request bytes written so far.
    written: usize,
    frames: FrameDecoder,
    state: RequestStream,
    status: u16,
    /// A response head waiting for the QPACK encoder stream.
    blocked: Option<Vec<u8>>,
    /// FIN came while the head was blocked.
    fin: bool,
}

/// A server's unidirectional stream.
#[derive(Debug)]
enum Uni {
    /// Its type not read yet: the bytes so far.
    Typing(Vec<u8>),
    Control(FrameDecoder),
    /// The peer's QPACK encoder: instructions for our decoder.
    Encoder,
    /// The peer's QPACK decoder: acknowledgments of our sections, which never use the dynamic
    /// table, so there is nothing to do with them.
    Discard,
    /// A stream of an unknown or reserved type (grease): read and dropped; it may end.
    Ignored,
}

/// One connection's HTTP/3 state.
pub(crate) struct Session {
    head_method: bool,
    exchanges: HashMap<u64, Exchange>,
    unis: HashMap<u64, Uni>,
    peer_unis: UniStreams,
    control: ControlStream,
    decoder: qpack::Decoder,
    head: ResponseHead,
    /// Our QPACK decoder stream, and its instructions not yet taken by the stream.
    decoder_stream: Option<StreamId>,
    decoder_out: Vec<u8>,
    /// The server's GOAWAY: requests on streams from this id on will not be answered.
    pub goaway: Option<u64>,
    /// The server's SETTINGS, once read.
    pub settings: Option<Settings>,
}

impl Session {
    /// A session on `conn` (handshake done, or 0-RTT keys ready): opens the control stream
    /// (SETTINGS) and the QPACK encoder and decoder streams. `head_method`: the requests use
    /// `HEAD`, so responses have no body whatever their `content-length`.
    pub fn new(conn: &mut Connection, head_method: bool) -> Self {
        let settings = Settings {
            qpack_max_table_capacity: QPACK_TABLE as u64,
            max_field_section_size: Some(MAX_FIELD_SECTION as u64),
            qpack_blocked_streams: QPACK_BLOCKED as u64,
            ..Settings::default()
        };
        let mut control = Vec::with_capacity(32);
        StreamType::Control.write(&mut control);
        settings.write(&mut control);
        open_uni(conn, &control);
        let mut encoder = Vec::with_capacity(1);
        StreamType::QpackEncoder.write(&mut encoder);
        open_uni(conn, &encoder);
        let mut decoder = Vec::with_capacity(1);
        StreamType::QpackDecoder.write(&mut decoder);
        let decoder_stream = open_uni(conn, &decoder);
        Self {
            head_method,
            exchanges: HashMap::with_capacity(64),
            unis: HashMap::with_capacity(4),
            peer_unis: UniStreams::new(Role::Client),
            control: ControlStream::new(Role::Client),
            decoder: qpack::Decoder::new(QPACK_TABLE, QPACK_BLOCKED, MAX_FIELD_SECTION),
            head: ResponseHead::default(),
            decoder_stream,
            decoder_out: Vec::new(),
            goaway: None,
            settings: None,
        }
    }

    /// Accepts (and reads) the server's unidirectional streams already opened: for a session
    /// started after quinn-proto announced them.
    ///
    /// # Errors
    /// [`H3Error`] when the connection must close.
    pub fn accept_streams(&mut self, conn: &mut Connection) -> Result<(), H3Error> {
        let mut bytes = 0;
        self.on_stream_event(
            conn,
            StreamEvent::Opened { dir: Dir::Uni },
            &[],
            &mut |_| {},
            &mut bytes,
        )
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> usize {
        self.exchanges.len()
    }

    /// Sends request `index` (`bytes`) on a new stream; `false` when the server's stream limit
    /// is reached (a stream becomes available as one completes) or after GOAWAY.
    pub fn request(
        &mut self,
        conn: &mut Connection,
        index: usize,
        bytes: &[u8],
        sent: Instant,
        actual: Instant,
    ) -> bool {
        if self.goaway.is_some() {
            return false;
        }
        let Some(id) = conn.streams().open(Dir::Bi) else {
            return false;
        };
        let mut ex = Exchange {
            sent,
            actual,
            index,
            written: 0,
            frames: FrameDecoder::new(MAX_FIELD_SECTION as u64),
            state: RequestStream::new(Role::Client),
            status: 0,
            blocked: None,
            fin: false,
        };
        write_request(conn, id, &mut ex, bytes);
        self.exchanges.insert(id.index(), ex);
        true
    }

    /// The requests in flight, oldest first, as (scheduled send, actual send, index): after a
    /// refused 0-RTT, to send again on the session that replaces this one.
    pub fn take_in_flight(&mut self) -> Vec<(Instant, Instant, usize)> {
        let mut v: Vec<(u64, Instant, Instant, usize)> = self
            .exchanges
            .drain()
            .map(|(id, e)| (id, e.sent, e.actual, e.index))
            .collect();
        v.sort_unstable_by_key(|e| e.0);
        v.into_iter().map(|(_, s, a, i)| (s, a, i)).collect()
    }

    /// Requests on streams the server's GOAWAY said it will not answer: taken back, to be
    /// sent on a new connection.
    pub fn take_refused(&mut self) -> usize {
        let Some(limit) = self.goaway else { return 0 };
        let before = self.exchanges.len();
        // Client bidirectional stream ids are 4 × index.
        self.exchanges.retain(|&i, _| i * 4 < limit);
        before - self.exchanges.len()
    }

    /// Handles one stream event of the connection, reading what arrived; each response or
    /// failed request is passed to `on`.
    ///
    /// # Errors
    /// [`H3Error`] when the connection must close.
    pub fn on_stream_event(
        &mut self,
        conn: &mut Connection,
        ev: StreamEvent,
        requests: &[Vec<u8>],
        on: &mut impl FnMut(Event),
        bytes: &mut u64,
    ) -> Result<(), H3Error> {
        match ev {
            StreamEvent::Opened { dir: Dir::Uni } => {
                while let Some(id) = conn.streams().accept(Dir::Uni) {
                    self.unis.insert(id.index(), Uni::Typing(Vec::new()));
                    self.read_uni(conn, id, on, bytes)?;
                }
            }
            StreamEvent::Opened { dir: Dir::Bi } => {
                // Never allowed (max_concurrent_bidi_streams 0); refuse if it happens anyway.
                while let Some(id) = conn.streams().accept(Dir::Bi) {
                    let _ = conn
                        .recv_stream(id)
                        .stop(ErrorCode::StreamCreationError.into_var());
                }
            }
            StreamEvent::Readable { id } => {
                if id.dir() == Dir::Bi {
                    self.read_request(conn, id, on, bytes)?;
                } else {
                    self.read_uni(conn, id, on, bytes)?;
                }
            }
            StreamEvent::Writable { id } => {
                if let Some(ex) = self.exchanges.get_mut(&id.index()) {
                    if let Some(req) = requests.get(ex.index) {
                        write_request(conn, id, ex, req);
                    }
                }
            }
            // Stopped: the server will not read the rest of a request; its response (an early
            // one, or a reset) still comes on the receive side, where it is counted.
            StreamEvent::Stopped { .. }
            | StreamEvent::Finished { .. }
            | StreamEvent::Available { .. } => {}
        }
        self.flush_decoder(conn);
        Ok(())
    }

    /// Writes the QPACK decoder's instructions (acknowledgments, Insert Count Increments) on
    /// our decoder stream, so the server's encoder may evict and reuse entries.
    fn flush_decoder(&mut self, conn: &mut Connection) {
        if self.decoder.has_decoder_stream_output() {
            self.decoder.write_decoder_stream(&mut self.decoder_out);
        }
        if self.decoder_out.is_empty() {
            return;
        }
        if let Some(id) = self.decoder_stream {
            if let Ok(n) = conn.send_stream(id).write(&self.decoder_out) {
                self.decoder_out.drain(..n);
            }
        }
    }

    fn read_request(
        &mut self,
        conn: &mut Connection,
        id: StreamId,
        on: &mut impl FnMut(Event),
        bytes: &mut u64,
    ) -> Result<(), H3Error> {
        let key = id.index();
        let mut stream = conn.recv_stream(id);
        let Ok(mut chunks) = stream.read(true) else {
            return Ok(());
        };
        let mut outcome: Result<Option<bool>, H3Error> = Ok(None);
        loop {
            match chunks.next(usize::MAX) {
                Ok(Some(chunk)) => {
                    *bytes += chunk.bytes.len() as u64;
                    if let Err(e) = self.response_bytes(key, &chunk.bytes) {
                        outcome = if e.is_connection_error() {
                            Err(e.into())
                        } else {
                            Ok(Some(false))
                        };
                        break;
                    }
                }
                Ok(None) => {
                    outcome = Ok(Some(true));
                    break;
                }
                Err(ReadError::Blocked) => break,
                Err(ReadError::Reset(_)) => {
                    outcome = Ok(Some(false));
                    break;
                }
            }
        }
        let _ = chunks.finalize();
        match outcome? {
            None => {}
            Some(true) => self.response_end(key, on),
            Some(false) => {
                let _ = conn
                    .recv_stream(id)
                    .stop(ErrorCode::MessageError.into_var());
                self.decoder.cancel_stream(id.into());
                if let Some(ex) = self.exchanges.remove(&key) {
                    on(Event::Failed {
                        sent: ex.sent,
                        actual: ex.actual,
                    });
                }
            }
        }
        Ok(())
    }

    /// Frames of a response stream.
    fn response_bytes(&mut self, key: u64, mut data: &[u8]) -> Result<(), Error> {
        let Some(ex) = self.exchanges.get_mut(&key) else {
            return Ok(());
        };
        while !data.is_empty() {
            let d = ex.frames.decode(data)?;
            let consumed = d.consumed;
            if let Some(frame) = d.frame {
                let section = ex.state.on_frame(&frame)?;
                if let (Some(Section::Head), Frame::Headers(block)) = (section, &frame) {
                    if ex.blocked.is_some() {
                        return Err(Error::Message("a second head before the first decoded"));
                    }
                    let block = block.to_vec();
                    head_of(
                        &mut self.decoder,
                        &mut self.head,
                        key * 4,
                        ex,
                        block,
                        self.head_method,
                    )?;
                }
            }
            data = &data[consumed..];
        }
        Ok(())
    }

    /// FIN on a response stream: the response is complete (once its head is decoded).
    fn response_end(&mut self, key: u64, on: &mut impl FnMut(Event)) {
        let Some(ex) = self.exchanges.get_mut(&key) else {
            return;
        };
        if ex.blocked.is_some() {
            ex.fin = true;
            return;
        }
        let ex = self.exchanges.remove(&key).expect("looked up above");
        let ok = ex.frames.finish().is_ok() && ex.state.finish().is_ok() && ex.status >= 200;
        on(if ok {
            Event::Response {
                sent: ex.sent,
                actual: ex.actual,
                status: ex.status,
            }
        } else {
            Event::Failed {
                sent: ex.sent,
                actual: ex.actual,
            }
        });
    }

    fn read_uni(
        &mut self,
        conn: &mut Connection,
        id: StreamId,
        on: &mut impl FnMut(Event),
        bytes: &mut u64,
    ) -> Result<(), H3Error> {
        let key = id.index();
        let mut stream = conn.recv_stream(id);
        let Ok(mut chunks) = stream.read(true) else {
            return Ok(());
        };
        let mut result = Ok(());
        let mut fin = false;
        loop {
            match chunks.next(usize::MAX) {
                Ok(Some(chunk)) => {
                    *bytes += chunk.bytes.len() as u64;
                    if let Err(e) = self.uni_bytes(key, &chunk.bytes) {
                        result = Err(e);
                        break;
                    }
                }
                Ok(None) | Err(ReadError::Reset(_)) => {
                    fin = true;
                    break;
                }
                Err(ReadError::Blocked) => break,
            }
        }
        let _ = chunks.finalize();
        result?;
        if fin {
            // A critical stream must stay open for the connection's life (RFC 9114 §6.2.1).
            if let Some(Uni::Control(_) | Uni::Encoder | Uni::Discard) = self.unis.remove(&key) {
                return Err(Error::ClosedCriticalStream.into());
            }
        }
        self.retry_unblocked(on)?;
        Ok(())
    }

    fn uni_bytes(&mut self, key: u64, data: &[u8]) -> Result<(), H3Error> {
        let Some(uni) = self.unis.get_mut(&key) else {
            return Ok(());
        };
        let mut data = data;
        if let Uni::Typing(seen) = uni {
            // The type is one varint (at most 8 bytes), maybe split across chunks.
            let before = seen.len();
            seen.extend_from_slice(&data[..data.len().min(MAX_TYPE_LEN - before)]);
            let Status::Complete((t, n)) = StreamType::decode(seen) else {
                return Ok(());
            };
            data = &data[n - before..];
            *uni = if self.peer_unis.open(t)? {
                match t {
                    StreamType::Control => Uni::Control(FrameDecoder::new(64 * 1024)),
                    StreamType::QpackEncoder => Uni::Encoder,
                    _ => Uni::Discard,
                }
            } else {
                Uni::Ignored
            };
        }
        match uni {
            Uni::Typing(_) | Uni::Discard | Uni::Ignored => {}
            Uni::Encoder => self
                .decoder
                .feed_encoder_stream(data)
                .map_err(Error::from)?,
            Uni::Control(frames) => {
                while !data.is_empty() {
                    let d = frames.decode(data)?;
                    if let Some(frame) = &d.frame {
                        match self.control.on_frame(frame)? {
                            ControlEvent::Settings(s) => self.settings = Some(s),
                            ControlEvent::GoAway(id) => self.goaway = Some(id),
                            ControlEvent::None => {}
                        }
                    }
                    data = &data[d.consumed..];
                }
            }
        }
        Ok(())
    }

    /// Response heads the encoder stream has just unblocked.
    fn retry_unblocked(&mut self, on: &mut impl FnMut(Event)) -> Result<(), H3Error> {
        let ready: Vec<u64> = self.decoder.take_unblocked().collect();
        for stream in ready {
            let key = stream / 4;
            let Some(ex) = self.exchanges.get_mut(&key) else {
                continue;
            };
            let Some(block) = ex.blocked.take() else {
                continue;
            };
            match head_of(
                &mut self.decoder,
                &mut self.head,
                stream,
                ex,
                block,
                self.head_method,
            ) {
                Ok(()) => {}
                Err(e) if e.is_connection_error() => return Err(e.into()),
                Err(_) => {
                    let ex = self.exchanges.remove(&key).expect("looked up above");
                    on(Event::Failed {
                        sent: ex.sent,
                        actual: ex.actual,
                    });
                    continue;
                }
            }
            if ex.blocked.is_none() && ex.fin {
                self.response_end(key, on);
            }
        }
        Ok(())
    }
}

/// Decodes a response head into `ex` (its status and declared length), or keeps it aside
/// while it waits for the encoder stream.
fn head_of(
    decoder: &mut qpack::Decoder,
    head: &mut ResponseHead,
    stream: u64,
    ex: &mut Exchange,
    block: Vec<u8>,
    head_method: bool,
) -> Result<(), Error> {
    match head.decode(decoder, stream, &block, MAX_FIELD_SECTION, false)? {
        Decoded::Blocked => ex.blocked = Some(block),
        Decoded::Done => {
            if head.is_interim() {
                ex.state.interim_response();
                return Ok(());
            }
            ex.status = head.status();
            let bodiless = head_method || matches!(ex.status, 204 | 304);
            ex.state
                .set_content_length(if bodiless { None } else { head.content_length });
        }
    }
    Ok(())
}

/// Writes what the stream takes of a request, and FIN once all of it is out.
fn write_request(conn: &mut Connection, id: StreamId, ex: &mut Exchange, bytes: &[u8]) {
    let mut stream = conn.send_stream(id);
    if ex.written < bytes.len() {
        if let Ok(n) = stream.write(&bytes[ex.written..]) {
            ex.written += n;
        }
    }
    if ex.written == bytes.len() {
        // Once: a second finish on a finished stream is refused, harmlessly.
        let _ = stream.finish();
        ex.written = usize::MAX;
    }
}

/// Opens one of our unidirectional streams with its first bytes (a few, always taken).
fn open_uni(conn: &mut Connection, bytes: &[u8]) -> Option<StreamId> {
    let id = conn.streams().open(Dir::Uni)?;
    let _ = conn.send_stream(id).write(bytes);
    Some(id)
}

/// The HTTP/3 error code as QUIC's.
trait IntoVarInt {
    fn into_var(self) -> VarInt;
}

impl IntoVarInt for ErrorCode {
    fn into_var(self) -> VarInt {
        VarInt::from_u64(self.value()).unwrap_or(VarInt::from_u32(0x102))
    }
}

/// The code to close a connection with, as QUIC's.
pub(crate) fn close_code(code: ErrorCode) -> VarInt {
    code.into_var()
}
