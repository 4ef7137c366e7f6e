//! One HTTP/2 stream while it needs state: a request whose body is still arriving, or a
//! response whose body waits for flow-control window. A request that arrives whole and is
//! answered whole within the window never gets one.
//!
//! Also here: turning the HTTP/1.1-form head a handler wrote into HTTP/2 fields, so every
//! handler, the router and the static files serve both protocols unchanged.

use std::time::Instant;

use lowlat_http::h2::RequestHead;

use crate::handler::FileBody;

/// Where a stream is in its life (RFC 9113 §5.1), for the states that need an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// The request's body is arriving.
    Open,
    /// The request is complete; the response is being sent.
    HalfClosedRemote,
    /// Both sides are done: the entry is removed at the end of the round.
    Done,
}

/// A stream with state.
pub(crate) struct Stream {
    pub(crate) id: u32,
    pub(crate) state: State,
    /// What we may still send on it.
    pub(crate) send_window: i64,
    /// What the client may still send on it.
    pub(crate) recv_window: i64,
    /// When its head arrived (the access log's duration).
    pub(crate) started: Instant,
    /// The request head, kept while the body arrives.
    pub(crate) head: Option<Box<RequestHead>>,
    /// The request body received so far.
    pub(crate) body: Vec<u8>,
    /// Response body bytes from memory still to send (`out[out_pos..]`).
    pub(crate) out: Vec<u8>,
    pub(crate) out_pos: usize,
    /// A file region to send after `out`.
    pub(crate) file: Option<FileBody>,
    /// The response comes from an upstream, relayed as it arrives.
    pub(crate) relay: Option<Relay>,
    /// The relayed request's log fields (only with an access log).
    pub(crate) held: Option<Box<crate::access_log::HeldRequest>>,
    /// The request's places in connection-limit zones, given back with the stream.
    pub(crate) slots: crate::handler::Slots,
    /// The request's body streaming to an upstream as its DATA frames arrive.
    pub(crate) upload: Option<Box<crate::proxy::upload::UploadFeed>>,
    /// Trailer fields (names in lower case) relayed from the upstream: sent as a last HEADERS
    /// frame, which ends the stream, once the body is out.
    pub(crate) trailers: Option<Box<TrailerFields>>,
    /// An extended CONNECT (RFC 8441): the stream carries a WebSocket's bytes both ways.
    pub(crate) tunnel: Option<Box<StreamTunnel>>,
    /// The request (`head` and `body`, kept) is held back until its timer (`crate::hold`).
    pub(crate) hold: Option<Box<crate::hold::Hold>>,
}

/// A stream opened by an extended CONNECT for a WebSocket (RFC 8441 §5), tunnelled to an
/// upstream's HTTP/1.1 WebSocket by the proxy (`crate::proxy::tunnel`). Its DATA frames are
/// the WebSocket's bytes in each direction; END_STREAM is a half-close.
#[derive(Debug, Default)]
pub(crate) struct StreamTunnel {
    /// The client's bytes not yet taken by the upstream side (`inbound[taken..]`). Bounded by
    /// the stream's receive window, which is given back only as they are taken.
    pub(crate) inbound: Vec<u8>,
    pub(crate) taken: usize,
    /// The client ended its side (END_STREAM).
    pub(crate) client_eof: bool,
    /// The upstream's side is over: END_STREAM goes (or went) on the last DATA frame.
    pub(crate) shut: bool,
    /// The upstream switched protocols and the client was answered `200`.
    pub(crate) open: bool,
    /// The upstream server's label, and how long its `101` took (the access log's fields).
    pub(crate) upstream: String,
    pub(crate) upstream_time: std::time::Duration,
}

/// Trailer fields as (name, value).
pub(crate) type TrailerFields = Vec<(Vec<u8>, Vec<u8>)>;

/// A stream's response being relayed from an upstream.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Relay {
    /// The upstream connection serving it.
    pub(crate) upstream: Option<mio::Token>,
    /// More of the body is to come: the last DATA frame sent so far does not end the stream.
    pub(crate) open: bool,
    pub(crate) head_only: bool,
    pub(crate) status: u16,
    pub(crate) body_bytes: u64,
}

impl Stream {
    /// A stream whose request body is arriving.
    pub(crate) fn receiving(
        id: u32,
        head: Box<RequestHead>,
        send_window: i64,
        recv_window: i64,
        now: Instant,
    ) -> Self {
        Self {
            state: State::Open,
            head: Some(head),
            recv_window,
            ..Self::sending(id, send_window, now)
        }
    }

    /// A stream whose request is complete and whose response waits to be sent.
    pub(crate) fn sending(id: u32, send_window: i64, now: Instant) -> Self {
        Self {
            id,
            state: State::HalfClosedRemote,
            send_window,
            recv_window: 0,
            started: now,
            head: None,
            body: Vec::new(),
            out: Vec::new(),
            out_pos: 0,
            file: None,
            relay: None,
            held: None,
            slots: None,
            upload: None,
            trailers: None,
            tunnel: None,
            hold: None,
        }
    }

    /// Bytes of response body still to send.
    pub(crate) fn pending(&self) -> u64 {
        (self.out.len() - self.out_pos) as u64 + self.file.as_ref().map_or(0, |f| f.len)
    }

    /// More of the response is still to come from an upstream: the last DATA frame written so
    /// far does not end the stream.
    pub(crate) fn more_to_come(&self) -> bool {
        self.relay.is_some_and(|r| r.open) && !self.tunnel.as_ref().is_some_and(|t| t.shut)
    }
}
