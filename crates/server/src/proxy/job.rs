//! A request on its way to an upstream ([`ProxyJob`]), as the proxy handler hands it to the
//! client's connection, which passes it to the worker's upstream side; how the response body
//! will reach the client ([`RelayBody`]); and a forward-auth subrequest's state ([`Gate`]: the
//! request it guards, or the answer a local route gave ([`HeldAnswer`]), and what the auth
//! service said), which `super::auth` judges and acts on.

use std::rc::Rc;

use lowlat_http::request::Method;

use super::group::WorkerGroup;
use super::upload::UploadRef;

/// A request to forward.
#[derive(Debug)]
pub(crate) struct ProxyJob {
    pub(crate) group: Rc<WorkerGroup>,
    /// The request as the upstream gets it (head and body), in a buffer of the group's.
    pub(crate) request: Vec<u8>,
    /// `HEAD`: the response has no body whatever its head says.
    pub(crate) head_request: bool,
    /// Safe to send twice (RFC 9110 §9.2.2): retried once on another server when a connection
    /// fails before any byte of the response.
    pub(crate) idempotent: bool,
    /// The request's key under consistent hashing.
    pub(crate) hash: u64,
    /// Sent again once already (after a failure before any response byte).
    pub(crate) retried: bool,
    /// Sent again on a fresh connection after a pooled one was found closed.
    pub(crate) stale_retried: bool,
    /// Times an HTTP/2 server refused it unprocessed (a GOAWAY below its stream, or
    /// REFUSED_STREAM): each is safe to send again (RFC 9113 §8.7), up to
    /// [`MAX_REFUSALS`] times.
    pub(crate) refusals: u8,
    /// The body, when it streams after `request` (which then holds the head only).
    pub(crate) upload: Option<UploadRef>,
    /// A WebSocket opening handshake: a `101` answer turns the exchange into a tunnel.
    pub(crate) upgrade: bool,
    /// The `Sec-WebSocket-Accept` the `101` must carry, when the proxy made the handshake's
    /// key itself (an HTTP/2 client's extended CONNECT has none to pass on, RFC 8441 §5).
    pub(crate) ws_accept: Option<Box<str>>,
    /// The lines the site adds to every response (`add_header`, `Alt-Svc`), for the relayed
    /// one: see [`super::downstream::added_lines`].
    pub(crate) added: Option<Rc<[u8]>>,
    /// The cache's part when the rule caches: the response is stored as it is relayed, or
    /// what it invalidates is removed (see `crate::cache::fill`).
    pub(crate) cache: Option<crate::cache::fill::FillRef>,
    /// To a FastCGI application: where its `X-Accel-Redirect` and `X-Sendfile` may point
    /// (`super::fcgi`); `None` sends none.
    pub(crate) internal: Option<Rc<[super::config::InternalLocation]>>,
    /// A forward-auth subrequest: the request it guards waits in the gate, forwarded when the
    /// auth service says yes (`super::auth`).
    pub(crate) gate: Option<GateRef>,
}

impl ProxyJob {
    /// A job sending `request` (written for a `method` request, `hash` its key under
    /// consistent hashing) to `group`, and nothing more: not sent yet, no body attached (the
    /// connection that reads one attaches it), no tunnel, no cache, no lines added.
    pub(crate) fn new(
        group: &Rc<WorkerGroup>,
        request: Vec<u8>,
        method: Method,
        hash: u64,
    ) -> Self {
        ProxyJob {
            group: Rc::clone(group),
            request,
            head_request: method == Method::Head,
            idempotent: idempotent(method),
            hash,
            retried: false,
            stale_retried: false,
            refusals: 0,
            upload: None,
            upgrade: false,
            ws_accept: None,
            added: None,
            cache: None,
            internal: None,
            gate: None,
        }
    }

    /// The response's head went to the client, so the job is over: its request buffer goes
    /// back to the group, and a body not all sent yet is cut short — answered before the whole
    /// body went, the upstream (or FastCGI application) stops reading it, as nginx does.
    /// Returns whether it was cut: the connection then cannot carry another request.
    pub(crate) fn answered(self) -> bool {
        let mut cut = false;
        if let Some(up) = &self.upload {
            let mut pipe = up.borrow_mut();
            if !pipe.done() {
                pipe.close();
                cut = true;
            }
        }
        self.group.give_buffer(self.request);
        cut
    }
}

/// What the auth service said so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// No head yet.
    Waiting,
    /// A 2xx: the request goes on once the answer is read.
    Passed,
    /// A 401, a 403 or a redirect: relayed to the client.
    Relaying,
    /// Any other status: the client gets 500 once the answer is read.
    Refused,
}

/// A subrequest's state: the request it guards and what the auth service said.
#[derive(Debug)]
pub(crate) struct Gate {
    /// The request to forward when the auth service says yes; `None` until the route's handler
    /// gives it (and for a request a local handler answered: see `held`).
    pub(crate) main: Option<ProxyJob>,
    /// The answer a local handler gave, relayed when the auth service says yes
    /// (`super::auth_held`).
    pub(crate) held: Option<Box<HeldAnswer>>,
    pub(crate) rule: std::sync::Arc<crate::guard::auth_rule::AuthRule>,
    pub(crate) verdict: Verdict,
    /// `Name: value` CRLF lines copied from a 2xx answer.
    pub(crate) copied: Vec<u8>,
    /// A `super::auth::AuthGate` is relaying for it (the engine's drive can be entered again from
    /// inside one: a retry).
    pub(crate) wrapping: bool,
    /// The answer ended with a 2xx: the engine forwards `main` (see `Gate::take_passed`).
    pub(crate) ready: bool,
}

/// A route's own answer under forward auth, kept until the verdict: as written in HTTP/1.1
/// form (`written`), with the file that follows its head (kept open, not read).
#[derive(Debug)]
pub(crate) struct HeldAnswer {
    pub(crate) written: Vec<u8>,
    pub(crate) file: Option<crate::file_body::FileBody>,
}

pub(crate) type GateRef = Rc<std::cell::RefCell<Gate>>;

impl ProxyJob {
    /// The largest body the request may stream upstream: its group's, or for a forward-auth
    /// subrequest (which sends none) the group's of the request it guards.
    pub(crate) fn max_body(&self) -> u64 {
        let guarded = self.gate.as_ref().and_then(|g| {
            let g = g.borrow();
            g.main.as_ref().map(|main| main.group.cfg.max_body)
        });
        guarded.unwrap_or(self.group.cfg.max_body)
    }
}

/// Whether a request is safe to send twice (RFC 9110 §9.2.2): retried once on another server
/// when a connection fails before any byte of the response.
fn idempotent(method: Method) -> bool {
    matches!(
        method,
        Method::Get | Method::Head | Method::Put | Method::Delete | Method::Options | Method::Trace
    )
}

/// How the response body reaches the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RelayBody {
    /// No body (HEAD, 204, 304, or `Content-Length: 0`); `length` is what the head announces.
    None { length: Option<u64> },
    /// Exactly this many bytes.
    Length(u64),
    /// A length unknown in advance (chunked, or until the upstream closes).
    Unknown,
}

impl RelayBody {
    /// The `content-length` a multiplexed protocol's head announces (it frames the body
    /// itself, so the field is the length, not the framing): the body's, or for a `HEAD`
    /// (`head_only`) what the upstream's head said the body would be.
    #[must_use]
    pub(crate) fn announced(self, head_only: bool) -> Option<u64> {
        match self {
            RelayBody::Length(n) => Some(n),
            RelayBody::None { length } if head_only => length,
            _ => None,
        }
    }
}

/// How many times a request refused unprocessed by HTTP/2 servers is sent again before its
/// client gets a 502. A server that answers one stream per connection and sends GOAWAY refuses
/// every other stream it carried: with N requests in flight on it, the last is answered at the
/// Nth connection. Sixteen covers such a server under the proxy's usual concurrency per
/// connection, and still ends the loop with a server that refuses everything (GOAWAY with last
/// stream 0, at once, on every connection).
pub(crate) const MAX_REFUSALS: u8 = 16;
