//! One HTTP/3 connection's state: its request streams, the client's control and QPACK streams
//! (read as they come), our control stream, GOAWAY and the connection's end. A request stream
//! is read and answered in `super::request`, its response written in `super::send`, a relayed
//! response in `super::relay`.

use std::collections::HashMap;
use std::ops::Range;

use lowlat_http::h3::frame::{self, Frame, FrameDecoder, StreamType};
use lowlat_http::h3::qpack;
use lowlat_http::h3::stream::{ControlStream, Role, UniStreams};
use lowlat_http::h3::{Error, ErrorCode};
use lowlat_http::head::RequestHead;
use lowlat_http::Status;
use mio::Token;
use rustc_hash::{FxHashMap, FxHashSet};

use super::stream::{ReqStream, UniIn};
use crate::ctx::WorkerCtx;
use crate::proxy::downstream::Wake;
use crate::quic::{Read, StreamError, StreamIo};

/// Bytes read from a stream at once.
pub(super) const READ_CHUNK: usize = 64 * 1024;
/// Bytes a client's control or QPACK stream may hold undecoded (a frame header, a SETTINGS).
const MAX_UNI_BUFFER: usize = 16 * 1024;
/// The longest response head (HTTP/1.1 form) kept with its encoding for the next response.
pub(super) const MAX_CACHED_HEAD: usize = 2048;

/// One HTTP/3 connection.
pub(crate) struct H3Conn {
    pub(super) decoder: qpack::Decoder,
    pub(super) encoder: qpack::Encoder,
    pub(super) uni: UniStreams,
    pub(super) peer_uni: HashMap<u64, UniIn>,
    /// FxHash: a lookup or two per request event, and the ids are the protocol's (opened in
    /// order, at most --h3-max-streams at once), so SipHash's cost buys nothing.
    pub(super) requests: FxHashMap<u64, ReqStream>,
    /// Our control stream, and what it could not take yet.
    pub(super) control_out: Option<(u64, Vec<u8>)>,
    pub(super) read_buf: Vec<u8>,
    pub(super) res_buf: Vec<u8>,
    pub(super) res_fields: Vec<(Range<usize>, Range<usize>)>,
    /// The last response head in HTTP/1.1 form (as the handler wrote it) and its HEADERS frame:
    /// the same file asked for again within the second has the same head, and copying its frame
    /// saves reading and QPACK-encoding it (~7 000 instructions, 30 % of a small request's
    /// cost then). Only heads up to [`MAX_CACHED_HEAD`] bytes.
    pub(super) last_head: (Vec<u8>, Vec<u8>),
    /// A request head whose buffers are reused by the next request (decoding into a new one
    /// allocated three times).
    pub(super) spare_head: Option<Box<RequestHead>>,
    /// The last request's field section (up to [`MAX_CACHED_HEAD`] bytes), the field-list limit
    /// it was checked against, and what it decoded to: a client asking again with the same
    /// section (with no dynamic table, the same bytes) gets a copy, not a second QPACK and
    /// Huffman decoding (~2 000 instructions, an eighth of a small request's cost).
    pub(super) last_section: (Vec<u8>, usize, RequestHead),
    /// The buffer of the last response written whole, for the next one (up to
    /// [`MAX_CACHED_HEAD`] * 4 bytes of room kept).
    pub(super) spare_out: Vec<u8>,
    pub(super) closed: bool,
    /// Shutting down: GOAWAY sent with this stream id; requests from it on are refused, and
    /// the connection closes once those before it are answered (and the final GOAWAY is sent).
    pub(super) goaway: Option<u64>,
    /// When the final GOAWAY (the real last stream id) is due: the first one named every
    /// stream, so that requests crossing it are not refused (RFC 9114 §5.2), and a round trip
    /// after it the client has stopped sending new ones. `None` once sent.
    pub(super) final_goaway_at: Option<std::time::Instant>,
    /// Responses written whole and finished whose last bytes the client has not acknowledged:
    /// a shutdown waits for them (closing the connection would drop what is unsent).
    pub(super) unacked: FxHashSet<u64>,
    /// The client sent GOAWAY: it is shutting the connection down.
    pub(super) client_leaving: bool,
    /// The highest request stream seen, for GOAWAY.
    pub(super) last_request: Option<u64>,
    /// What relays ask of the upstream side: (upstream, proxy stream number, what).
    pub(super) wakes: Vec<(Token, u32, Wake)>,
    /// Upstream exchanges of requests the client gave up on.
    pub(super) abandoned: Vec<Token>,
    /// The client's address once connected: the log line of a request whose client left is
    /// written where no stream is at hand to ask (the connection gone).
    pub(super) peer: Option<std::net::SocketAddr>,
}

impl Default for H3Conn {
    fn default() -> Self {
        Self {
            // A dynamic table of 0 bytes: see the module's documentation.
            decoder: qpack::Decoder::new(0, 0, lowlat_http::limits::MAX_HEAD_BYTES * 4),
            encoder: qpack::Encoder::new(true),
            uni: UniStreams::new(Role::Server),
            peer_uni: HashMap::new(),
            requests: FxHashMap::default(),
            control_out: None,
            read_buf: Vec::new(),
            res_buf: Vec::new(),
            res_fields: Vec::new(),
            last_head: (Vec::new(), Vec::new()),
            spare_head: None,
            last_section: (Vec::new(), 0, RequestHead::default()),
            spare_out: Vec::new(),
            closed: false,
            goaway: None,
            final_goaway_at: None,
            unacked: FxHashSet::default(),
            last_request: None,
            client_leaving: false,
            wakes: Vec::new(),
            abandoned: Vec::new(),
            peer: None,
        }
    }
}

impl H3Conn {
    /// Request `id` is over (answered, refused, reset): a relay it still had is cancelled.
    /// The client gave up on request `id` (reset it, or stopped its answer): its line is
    /// logged as HTTP/1.1's and HTTP/2's are (`ReqStream::log_left`), and it goes.
    pub(super) fn client_left(&mut self, id: u64, ctx: &mut WorkerCtx<'_>) {
        if let (Some(s), Some(peer)) = (self.requests.get(&id), self.peer) {
            s.log_left(ctx, peer);
        }
        self.forget(id);
    }

    pub(super) fn forget(&mut self, id: u64) {
        if let Some(up) = self
            .requests
            .remove(&id)
            .and_then(|s| s.relay)
            .and_then(|r| r.upstream)
        {
            self.abandoned.push(up);
        }
    }

    pub(super) fn fail(&mut self, io: &mut StreamIo<'_>, e: &Error) {
        tracing::debug!("h3: {} from {}: {e}", e.code().value(), io.peer());
        self.closed = true;
        io.close(e.code().value(), b"");
    }

    /// Shutting down (or the client is: it sent GOAWAY) with every request answered: the
    /// connection closes.
    pub(super) fn close_if_done(&mut self, io: &mut StreamIo<'_>) {
        if ((self.goaway.is_some() && self.final_goaway_at.is_none()) || self.client_leaving)
            && self.requests.is_empty()
            && self.unacked.is_empty()
            && !self.closed
        {
            self.closed = true;
            io.close(ErrorCode::NoError.value(), b"");
        }
    }

    /// Queues the final GOAWAY: requests from the stream after the last one seen are refused.
    pub(super) fn final_goaway(&mut self) {
        self.final_goaway_at = None;
        let next = self.last_request.map_or(0, |id| id + 4);
        self.goaway = Some(next);
        if let Some((_, pending)) = &mut self.control_out {
            frame::put_goaway(pending, next);
        }
    }

    pub(super) fn flush_control(&mut self, io: &mut StreamIo<'_>) {
        if let Some((id, pending)) = &mut self.control_out {
            if let Ok(n) = io.write(*id, pending) {
                pending.drain(..n);
            }
        }
    }

    /// A client's unidirectional stream has bytes.
    pub(super) fn read_uni(&mut self, io: &mut StreamIo<'_>, id: u64) {
        loop {
            self.read_buf.clear();
            let (got, fin) = match io.read(id, &mut self.read_buf, READ_CHUNK) {
                Ok(Read::Data(_)) => (true, false),
                Ok(Read::Fin(_)) => (true, true),
                Ok(Read::Blocked) | Err(StreamError::Closed) => return,
                Err(_) => (false, true),
            };
            let input = std::mem::take(&mut self.read_buf);
            let result = if got {
                self.feed_uni(io, id, &input)
            } else {
                Ok(())
            };
            self.read_buf = input;
            if let Err(e) = result {
                return self.fail(io, &e);
            }
            if fin {
                let critical = !matches!(
                    self.peer_uni.remove(&id),
                    Some(UniIn::Discard | UniIn::Typing(_)) | None
                );
                if critical {
                    self.fail(io, &Error::ClosedCriticalStream);
                }
                return;
            }
        }
    }

    pub(super) fn feed_uni(
        &mut self,
        io: &mut StreamIo<'_>,
        id: u64,
        raw: &[u8],
    ) -> Result<(), Error> {
        let state = self
            .peer_uni
            .entry(id)
            .or_insert_with(|| UniIn::Typing(Vec::new()));
        let typed_input: Vec<u8>;
        let input: &[u8] = if let UniIn::Typing(so_far) = state {
            so_far.extend_from_slice(raw);
            if so_far.len() > MAX_UNI_BUFFER {
                return Err(Error::StreamCreation("a stream type longer than a varint"));
            }
            let Status::Complete((t, n)) = StreamType::decode(so_far) else {
                return Ok(());
            };
            typed_input = so_far[n..].to_vec();
            *state = if self.uni.open(t)? {
                match t {
                    StreamType::Control => UniIn::Control(
                        FrameDecoder::new(frame::MAX_SETTINGS_LEN),
                        ControlStream::new(Role::Server),
                    ),
                    StreamType::QpackEncoder => UniIn::QpackEncoder,
                    _ => UniIn::QpackDecoder,
                }
            } else {
                io.stop_sending(id, ErrorCode::StreamCreationError.value());
                UniIn::Discard
            };
            &typed_input
        } else {
            raw
        };
        match state {
            UniIn::Control(frames, control) => {
                let mut at = 0;
                while at < input.len() {
                    let d = frames.decode(&input[at..])?;
                    at += d.consumed;
                    if let Some(f) = d.frame {
                        // SETTINGS (nothing in them changes what this side sends: a static
                        // encoder, no push, no datagrams) and GOAWAY: the client is leaving
                        // and opens no new request; the connection closes once those under way
                        // are answered (`close_if_done`) rather than at the idle timeout, which
                        // a client waiting for the close would sit out.
                        control.on_frame(&f)?;
                        if matches!(f, Frame::GoAway(_)) {
                            self.client_leaving = true;
                        }
                    }
                }
            }
            UniIn::QpackEncoder => self.decoder.feed_encoder_stream(input)?,
            UniIn::QpackDecoder => self.encoder.feed_decoder_stream(input)?,
            UniIn::Typing(_) | UniIn::Discard => {}
        }
        Ok(())
    }
}
