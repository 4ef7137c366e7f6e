//! One HTTP/3 request stream's state (frames decoded so far, the head, the body, what is left
//! to send, a relayed response's progress), and one client unidirectional stream's.

use std::time::Instant;

use lowlat_http::h3::frame::FrameDecoder;
use lowlat_http::h3::stream::{ControlStream, RequestStream};
use lowlat_http::head::RequestHead;
use mio::Token;

use crate::access_log::HeldRequest;
use crate::handler::FileBody;
use crate::proxy::upload::UploadFeed;

/// Written bytes a stream's `out` keeps before they are dropped from its front.
const OUT_COMPACT: usize = 64 * 1024;

/// One client's unidirectional stream.
pub(super) enum UniIn {
    /// Its type is not read yet: the bytes so far.
    Typing(Vec<u8>),
    Control(FrameDecoder, ControlStream),
    QpackEncoder,
    QpackDecoder,
    /// Unknown type: read and dropped.
    Discard,
}

/// One request stream.
pub(super) struct ReqStream {
    pub(super) frames: FrameDecoder,
    pub(super) order: RequestStream,
    /// Boxed: a request stream's state moves in and out of `requests`, and a head inline more
    /// than doubled it.
    pub(super) head: Option<Box<RequestHead>>,
    pub(super) body: Vec<u8>,
    /// The body passed `--max-body`: it is dropped, and the answer is 413.
    pub(super) too_large: bool,
    /// Answered: what is left to send (HEADERS and DATA bytes from `out_at`, then the file).
    pub(super) answered: bool,
    pub(super) out: Vec<u8>,
    pub(super) out_at: usize,
    /// A piece of the file read and not yet all taken by the stream: handed to quinn-proto as
    /// it is (no copy into its send buffer).
    pub(super) chunk: bytes::Bytes,
    pub(super) file: Option<FileBody>,
    pub(super) started: Instant,
    /// When bytes last moved on the stream, either way (its time limits count from here).
    pub(super) progress: Instant,
    /// Forwarded: the upstream's response on its way (`relay`).
    pub(super) relay: Option<Relay>,
    /// A forwarded request's log fields, kept until it is answered.
    pub(super) held: Option<Box<HeldRequest>>,
    /// The request's places in connection-limit zones, given back with the stream.
    pub(super) slots: crate::handler::Slots,
    /// A relayed response's trailer section (a HEADERS frame), written after its body.
    pub(super) trailers: Option<Vec<u8>>,
    /// The body streams to an upstream as it arrives (`proxy::upload`): DATA goes there.
    pub(super) upload: Option<Box<UploadFeed>>,
    /// The request (`head` and `body`, kept) is held back until its timer (`crate::hold`).
    pub(super) hold: Option<Box<crate::hold::Hold>>,
}

impl ReqStream {
    /// Before more is appended to `out`: what the stream took is dropped from its front.
    pub(super) fn take_room(&mut self) {
        if self.out_at == self.out.len() {
            self.out.clear();
            self.out_at = 0;
        } else if self.out_at >= OUT_COMPACT {
            self.out.drain(..self.out_at);
            self.out_at = 0;
        }
    }
}

impl ReqStream {
    /// The line of a request whose client reset its stream, stopped its answer, or left,
    /// before the answer was complete, as HTTP/1.1's and HTTP/2's: 499 when no head had gone
    /// out (a relayed answer not begun, a request held back by a rate limit's delay), else the
    /// status and the body bytes sent. A relay that ended was logged then (and taken); a
    /// request answered here was logged when it was.
    pub(super) fn log_left(&self, ctx: &mut crate::ctx::WorkerCtx<'_>, peer: std::net::SocketAddr) {
        let (status, bytes) = match (self.relay, &self.hold) {
            (Some(r), _) if r.status != 0 => (r.status, r.body_bytes),
            (Some(_), _) | (None, Some(_)) => (499, 0),
            (None, None) => return,
        };
        crate::proxy::downstream::log_relayed(
            ctx,
            self.held.as_deref(),
            peer,
            status,
            bytes,
            self.started,
            None,
        );
    }
}

/// A forwarded request's response on its way.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Relay {
    /// The upstream connection (or HTTP/2 exchange) serving it, once one is.
    pub(super) upstream: Option<Token>,
    pub(super) status: u16,
    pub(super) body_bytes: u64,
    /// The request was `HEAD`: the head is all the client gets.
    pub(super) head_request: bool,
    /// The head ended the response (no body follows).
    pub(super) head_only: bool,
}
