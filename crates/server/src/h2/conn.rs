//! One HTTP/2 connection (RFC 9113) on the worker's event loop: its state, its cycle and its
//! deadlines. The parts of the protocol live beside it, each an `impl H2Conn` of its own: frame
//! I/O (`io`), the frames a client sends (`frames`), answering requests (`respond`), flow
//! control (`flow`), errors and flood defences (`defence`).
//!
//! The cycle mirrors HTTP/1.1's (`crate::conn`): flush what is pending, handle every complete
//! frame in the read buffer — a request that is complete is answered at once, through the same
//! router and handlers — then send response bodies in DATA frames as the windows allow, one
//! frame per stream per round so streams share the connection fairly, and read again. All the
//! frames one readiness event produces leave in one write. Reading stops while a lot of output
//! waits, so a client that does not read what it asked for gets back-pressure, not memory.
//!
//! Defences: every size is bounded (frames, header lists, a header block across CONTINUATION
//! frames, bodies, streams at once); control frames (PING, SETTINGS, PRIORITY, resets, empty
//! frames) and stream resets are counted per second and a client past either limit gets GOAWAY
//! `ENHANCE_YOUR_CALM` (the rapid-reset, ping-flood and settings-flood shapes); a response
//! stalled on a window the client never opens is bounded by the write timeout, a body that
//! stops arriving by the body timeout, an idle connection by the keep-alive timeout.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Instant;

use lowlat_http::h2::frame::{self, ErrorCode};
use lowlat_http::h2::{Decoder, Encoder, RequestHead, Settings};

use super::stream::{State, Stream};
use crate::conn::Handover;
use crate::ctx::WorkerCtx;
use crate::transport::Transport;
use crate::wait::Wait;

/// Stop reading while this much output waits to be written.
pub(super) const OUTPUT_HIGH_WATER: usize = 256 * 1024;
/// Most response body bytes written per drive turn before other connections get theirs.
const DATA_TURN_BYTES: usize = 512 * 1024;

/// The largest stream id (RFC 9113 §5.1.1): shutdown's first GOAWAY names it.
const MAX_STREAM_ID: u32 = (1 << 31) - 1;

/// The payload of the PING sent with shutdown's first GOAWAY: its acknowledgement says the
/// client has read that GOAWAY, and the final one follows.
pub(super) const DRAIN_PING: [u8; 8] = *b"lowlat\0d";

/// The final GOAWAY's latest moment after the first, for a client that never acknowledges the
/// PING (shutdown's sweeps, at least one a second, send it).
const DRAIN_ROUND_TRIP: std::time::Duration = std::time::Duration::from_secs(2);
/// Recently closed stream ids remembered, to tell a frame on a closed stream (STREAM_CLOSED)
/// from one on a stream that never existed (PROTOCOL_ERROR).
pub(super) const CLOSED_MEMORY: usize = 128;
/// A stream waiting for an upstream's response is bounded by the upstream side's timeouts; this
/// only keeps the connection's own deadline from firing first.
const UPSTREAM_WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(24 * 3600);
/// The connection's receive window: room for many streams' bodies at once.
pub(super) const CONNECTION_WINDOW: u32 = 16 << 20;

/// A header block being received across CONTINUATION frames.
pub(super) struct Pending {
    pub(super) stream: u32,
    pub(super) end_stream: bool,
    pub(super) self_dependent: bool,
    pub(super) frames: u32,
}

/// One HTTP/2 connection.
pub(crate) struct H2Conn {
    pub(crate) io: Transport,
    pub(super) peer: SocketAddr,
    /// What a balancer's PROXY header named, passed on to upstreams (see `crate::proxied`).
    pub(super) named: Option<Box<lowlat_http::proxy_protocol::Addresses>>,
    /// The client as handlers see it: the same for every stream.
    pub(super) client: crate::proxy::headers::ClientInfo,
    pub(super) rbuf: Vec<u8>,
    pub(super) rlen: usize,
    pub(super) wbuf: Vec<u8>,
    pub(super) wpos: usize,
    /// A handler's response in HTTP/1.1 form, before translation.
    pub(super) res_buf: Vec<u8>,
    pub(super) res_fields: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>,
    pub(super) decoder: Decoder,
    pub(super) encoder: Encoder,
    /// The head being decoded (moved into its stream when a body follows).
    pub(super) head: Box<RequestHead>,
    /// A header block split over CONTINUATION frames, and what it belongs to.
    pub(super) block: Vec<u8>,
    pub(super) pending: Option<Pending>,
    pub(super) streams: Vec<Stream>,
    /// Stream to serve first in the next round of DATA frames.
    pub(super) rr: usize,
    /// Streams closed normally or reset by the client.
    pub(super) closed_ids: VecDeque<u32>,
    /// Streams we reset: frames the client had already sent on them are ignored.
    pub(super) reset_ids: VecDeque<u32>,
    /// Highest stream id the client opened.
    pub(super) last_stream: u32,
    pub(super) peer_settings: Settings,
    pub(super) send_window: i64,
    pub(super) recv_window: i64,
    /// The preface arrived, then a SETTINGS frame.
    pub(super) preface_seen: bool,
    pub(super) settings_seen: bool,
    /// Our SETTINGS wait to be acknowledged by then.
    pub(super) settings_deadline: Option<Instant>,
    /// GOAWAY sent: no new streams; the connection closes when the last one is done.
    pub(super) goaway: bool,
    /// Shutdown's first GOAWAY (last stream 2^31-1) went out then; the final one follows a
    /// round trip later (see [`H2Conn::drive`]).
    pub(super) drain_started: Option<Instant>,
    /// The client sent GOAWAY.
    pub(super) peer_goaway: bool,
    /// A connection error: close once the output is written.
    pub(super) closing: bool,
    pub(super) lingering: bool,
    pub(super) read_ready: bool,
    pub(super) write_blocked: bool,
    pub(super) wrote: bool,
    pub(super) eof: bool,
    pub(super) fin_seen: bool,
    pub(crate) closed: bool,
    /// Counting window for floods.
    pub(super) flood_window: Instant,
    pub(super) control_frames: u32,
    pub(super) resets: u32,
    /// Upstream exchanges of streams reset for a client's error, to cancel once the frame is
    /// handled (where the worker's context is at hand).
    pub(super) abandoned: Vec<mio::Token>,
    /// Upstream connections (and their streams) given request-body bytes since the worker
    /// last woke them.
    pub(super) upload_wakes: Vec<(mio::Token, u32)>,
    /// Last time a stream waiting for window got some, or a body byte arrived.
    pub(super) last_progress: Instant,
    pub(super) started: Instant,
    pub(crate) wait: Wait,
    pub(crate) deadline: Instant,
}

impl H2Conn {
    /// An upstream connection (and its stream) to drive for request-body bytes just received.
    pub(crate) fn take_upload_wake(&mut self) -> Option<(mio::Token, u32)> {
        self.upload_wakes.pop()
    }
}

impl H2Conn {
    /// Takes over a connection whose first bytes (`rbuf[..rlen]`) start HTTP/2: ALPN chose
    /// `h2`, or `--h2c` and the preface. Queues our SETTINGS.
    pub(crate) fn new(from: Handover, ctx: &mut WorkerCtx<'_>) -> Self {
        let Handover {
            io,
            peer,
            named,
            client,
            mut rbuf,
            rlen,
            fin_seen,
        } = from;
        let cfg = &ctx.cfg.h2;
        if rbuf.len() < crate::pool::BUF_CAPACITY {
            rbuf.resize(crate::pool::BUF_CAPACITY, 0);
        }
        let decoder = Decoder::new(cfg.header_table_size as usize);
        let mut wbuf = ctx.pool.take_write();
        frame::write_settings(
            &mut wbuf,
            &[
                (frame::setting::MAX_CONCURRENT_STREAMS, cfg.max_streams),
                (frame::setting::INITIAL_WINDOW_SIZE, cfg.initial_window),
                (frame::setting::MAX_FRAME_SIZE, cfg.max_frame_size),
                (frame::setting::MAX_HEADER_LIST_SIZE, cfg.max_header_list),
                (frame::setting::HEADER_TABLE_SIZE, cfg.header_table_size),
                // WebSocket over HTTP/2 (RFC 8441): an extended CONNECT is answered by the
                // proxy's WebSocket tunnel, and by anything else as CONNECT is (405, 501).
                (frame::setting::ENABLE_CONNECT_PROTOCOL, 1),
            ],
        );
        frame::write_window_update(&mut wbuf, 0, CONNECTION_WINDOW - frame::DEFAULT_WINDOW);
        let now = ctx.now;
        Self {
            io,
            peer,
            named,
            client,
            rbuf,
            rlen,
            wbuf,
            wpos: 0,
            res_buf: Vec::new(),
            res_fields: Vec::new(),
            decoder,
            encoder: Encoder::default(),
            head: Box::default(),
            block: Vec::new(),
            pending: None,
            streams: Vec::new(),
            rr: 0,
            closed_ids: VecDeque::new(),
            reset_ids: VecDeque::new(),
            last_stream: 0,
            peer_settings: Settings::default(),
            send_window: i64::from(frame::DEFAULT_WINDOW),
            recv_window: i64::from(CONNECTION_WINDOW),
            preface_seen: false,
            settings_seen: false,
            settings_deadline: Some(now + cfg.settings_timeout),
            goaway: false,
            drain_started: None,
            peer_goaway: false,
            closing: false,
            lingering: false,
            read_ready: true,
            write_blocked: false,
            wrote: false,
            eof: false,
            fin_seen,
            closed: false,
            flood_window: now,
            control_frames: 0,
            resets: 0,
            abandoned: Vec::new(),
            upload_wakes: Vec::new(),
            last_progress: now,
            started: now,
            wait: Wait::Head,
            deadline: now + ctx.cfg.header_timeout,
        }
    }

    /// Whether the connection has no stream and nothing to write.
    pub(crate) fn is_idle(&self) -> bool {
        self.streams.is_empty() && self.wpos == self.wbuf.len() && !self.closing
    }

    /// Handles a readiness event.
    pub(crate) fn on_event(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        readable: bool,
        read_closed: bool,
        writable: bool,
    ) {
        if readable || read_closed {
            self.read_ready = true;
        }
        if read_closed {
            self.fin_seen = true;
        }
        if writable {
            self.write_blocked = false;
        }
        self.drive(ctx);
    }

    /// Makes all the progress possible without blocking, then arms the deadline.
    pub(crate) fn drive(&mut self, ctx: &mut WorkerCtx<'_>) {
        if self.wbuf.capacity() == 0 {
            self.wbuf = ctx.pool.take_write();
        }
        if ctx.shutting_down && !self.goaway {
            // Handing over to a new process, RFC 9113 §6.8's graceful shutdown: a first GOAWAY
            // with the largest stream id tells the client to open no more streams here while
            // those it already sent (still on the wire) are served; the final one, once the
            // PING sent behind the first comes back (a round trip, however slow the client),
            // names the last stream processed. A single GOAWAY would refuse the streams that
            // crossed it, which the client then has to retry elsewhere. A plain shutdown sends
            // the final one at once.
            match self.drain_started {
                None if !ctx.handing_over => self.go_away(ErrorCode::NoError),
                None => {
                    frame::write_goaway(&mut self.wbuf, MAX_STREAM_ID, ErrorCode::NoError, b"");
                    frame::write_ping(&mut self.wbuf, false, &DRAIN_PING);
                    self.drain_started = Some(ctx.now);
                }
                Some(at) if ctx.now >= at + DRAIN_ROUND_TRIP => self.go_away(ErrorCode::NoError),
                Some(_) => {}
            }
        }
        let mut budget = DATA_TURN_BYTES;
        let mut unprocessed = true;
        loop {
            if self.closed {
                return;
            }
            if unprocessed && self.rlen > 0 && !self.closing {
                self.process(ctx);
            }
            unprocessed = false;
            budget = self.pump(budget);
            if !self.flush(ctx) {
                break;
            }
            if self.peer_gone_and_stuck() {
                // Released at once, not after the write timeout: a closed peer opens no window.
                self.close_now(ctx);
                return;
            }
            if !self.lingering
                && (self.closing
                    || (self.goaway || self.peer_goaway || self.eof)
                        && self.streams.is_empty()
                        && self.pending.is_none())
            {
                self.begin_linger(ctx);
            }
            if !self.lingering {
                if self.can_send() {
                    if budget == 0 {
                        // Other connections get their turn; this one continues after them.
                        ctx.deferred.push(ctx.token);
                        break;
                    }
                    if self.eof || !self.read_ready {
                        // The output filled up before the budget ran out, and all of it was
                        // written: no event will come to ask for more, so send more now.
                        continue;
                    }
                    // Else read first: new requests, window updates and resets are not held
                    // behind the bodies already flowing.
                } else if self.eof || self.wbuf.len() - self.wpos >= OUTPUT_HIGH_WATER {
                    break;
                }
            }
            if !self.read_ready {
                break;
            }
            match self.read(ctx) {
                Some(true) => unprocessed = true,
                Some(false) => {}
                None => return,
            }
        }
        if self.closed {
            return;
        }
        self.release_idle_buffers(ctx);
        self.arm_deadline(ctx);
    }

    /// Sets the deadline for what the connection now waits for.
    fn arm_deadline(&mut self, ctx: &WorkerCtx<'_>) {
        let cfg = ctx.cfg;
        if self.lingering {
            return;
        }
        if !self.write_blocked {
            self.wrote = false;
        }
        let (wait, mut deadline) = if !self.preface_seen || !self.settings_seen {
            (Wait::Head, self.started + cfg.header_timeout)
        } else if self.write_blocked {
            let progressed = std::mem::take(&mut self.wrote);
            if self.wait == Wait::Write && !progressed {
                return;
            }
            (Wait::Write, ctx.now + cfg.write_timeout)
        } else if self.streams.iter().any(|s| s.pending() > 0) {
            // Waiting for the client to open a window.
            (Wait::Write, self.last_progress + cfg.write_timeout)
        } else if self
            .streams
            .iter()
            .any(|s| s.relay.is_some_and(|r| r.open) && s.pending() == 0)
        {
            // An upstream's response is awaited: the upstream side's timeouts bound it.
            (Wait::Upstream, ctx.now + UPSTREAM_WAIT_LIMIT)
        } else if let Some(until) = self
            .streams
            .iter()
            .filter_map(|s| s.hold.as_ref().map(|h| h.until))
            .min()
        {
            // Their timer releases them; the deadline only stops a lost timer holding them.
            (Wait::Held, until + crate::hold::RELEASE_SLACK)
        } else if self.streams.iter().any(|s| s.state == State::Open) {
            (Wait::Body, self.last_progress + cfg.body_timeout)
        } else if self.pending.is_some() {
            (Wait::Head, self.last_progress + cfg.header_timeout)
        } else {
            (Wait::Idle, ctx.now + cfg.keepalive_timeout)
        };
        if let Some(s) = self.settings_deadline {
            deadline = deadline.min(s);
        }
        self.wait = wait;
        self.deadline = deadline;
    }

    /// The deadline passed.
    pub(crate) fn expire(&mut self, ctx: &mut WorkerCtx<'_>) {
        if self.lingering {
            return self.close_now(ctx);
        }
        let code = if self.settings_deadline.is_some_and(|d| ctx.now >= d) {
            ErrorCode::SettingsTimeout
        } else {
            ErrorCode::NoError
        };
        if !self.goaway || code != ErrorCode::NoError {
            self.goaway = false;
            self.conn_error(code, "timeout");
        }
        self.closing = true;
        let _ = self.flush(ctx);
        self.io.close_notify();
        self.close_now(ctx);
    }
}

/// Stream `s`, whose response is complete, leaves: remembered as closed — or, when its client is
/// still sending a body that no one reads now (an upstream answered first, or a tunnel ended
/// before the client's side did), reset with NO_ERROR
/// so that it stops (RFC 9113 §8.1), what it already sent then being ignored.
pub(super) fn forget(
    s: &super::stream::Stream,
    wbuf: &mut Vec<u8>,
    closed_ids: &mut VecDeque<u32>,
    reset_ids: &mut VecDeque<u32>,
) {
    if s.upload.is_some() || s.tunnel.as_ref().is_some_and(|t| !t.client_eof) {
        lowlat_http::h2::frame::write_rst_stream(
            wbuf,
            s.id,
            lowlat_http::h2::frame::ErrorCode::NoError,
        );
        remember(reset_ids, s.id);
    } else {
        remember(closed_ids, s.id);
    }
}

/// Adds `id` to a bounded list of recent stream ids.
pub(super) fn remember(list: &mut VecDeque<u32>, id: u32) {
    if list.len() == CLOSED_MEMORY {
        list.pop_front();
    }
    list.push_back(id);
}
