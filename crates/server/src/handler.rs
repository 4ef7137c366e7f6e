//! What a handler sees and how it answers: [`Req`] (the parsed head, the body, route parameters,
//! the worker's identity) and [`Response`] (which encodes straight into the connection's output
//! buffer, so pipelined responses pile up in one buffer and leave in one write).
//!
//! Handlers are built per worker (see [`crate::Service`]) and called with `&mut self`: per-worker
//! state such as a file cache needs no lock. Anything shared across workers is the handler's own
//! business (atomics, `Arc`).

use std::cell::RefCell;
use std::rc::Rc;

use lowlat_http::request::{Header, Method, Request};
use lowlat_http::response::{ConnectionHeader, ResponseHead};
use lowlat_http::Version;

use crate::compress::CompressConfig;
use crate::files::encoding::Coding;
use crate::proxy::job::ProxyJob;

// What is known of a request beyond its head; defined in a leaf module so that the proxy's
// modules, which this one imports, can name them without a circle.
pub use crate::incoming::{ClientInfo, StreamedBody};
// Likewise the file a response sends after its head, which a forward-auth gate holds.
pub use crate::file_body::FileBody;
pub(crate) use crate::file_body::Slots;

/// A request as handed to a handler.
pub struct Req<'a, 'h, 'b> {
    /// The parsed head.
    pub head: &'a Request<'h, 'b>,
    /// The whole body (decoded if it was chunked); empty when there was none.
    pub body: &'a [u8],
    /// Route parameters: the router's match (none when no route matched), read only when a
    /// handler asks — the file, proxy and PHP handlers never do, and copying every match out
    /// (each name and value checked as UTF-8 again by the router's iterator) cost a PHP request
    /// ~340 instructions (callgrind, docs/PERFORMANCE.md).
    pub params: Option<&'a matchit::Params<'a, 'a>>,
    /// The path is known to be its own normal form (no `%`, `//` or `/.`), as the router
    /// found when it matched it: a handler that decodes paths may take it as it is. `false`
    /// says only that nobody looked (early hooks run before the router does).
    pub path_plain: bool,
    /// Index of the worker thread serving it.
    pub worker: usize,
}

impl<'b> Req<'_, '_, 'b> {
    /// The request method.
    #[must_use]
    pub fn method(&self) -> Method {
        self.head.method
    }

    /// The path of the request-target, still percent-encoded.
    #[must_use]
    pub fn path(&self) -> &'b str {
        self.head.path
    }

    /// The first header field with this name (ASCII case-insensitive).
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&'b [u8]> {
        self.head.header(name)
    }

    /// A route parameter by name.
    #[must_use]
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params.and_then(|p| p.get(name))
    }
}

/// The answer being written for one request.
pub struct Response<'a> {
    out: &'a mut Vec<u8>,
    scratch: &'a mut Vec<u8>,
    date: &'a [u8],
    head_only: bool,
    connection: ConnectionHeader,
    /// What was written, lent by the protocol that reads it once the handler is done: filled
    /// in place, so that no copy of it is made per request.
    // As a value of its own, moved out at the end, its copy (and re-tagging its options) cost
    // most of the 60 instructions a request `/plaintext` lost with this (callgrind: 2746 ->
    // 2686, with `Conn::drive` testing `eof` once a turn).
    done: &'a mut Finished,
    /// Who asked (for handlers that pass it on: the proxy).
    // Both lent by the connection (the client is known once per connection, the slot is its
    // own): a `Response`, made and moved for every request, carries two words for them.
    client: Option<&'a ClientInfo>,
    /// What the site's client-certificate rule found (`crate::client_auth`): nothing when the
    /// site has none.
    cert_check: Option<bool>,
    /// Where a request to forward is put (the connection's slot); nothing is written then.
    forward: Option<&'a mut Option<ProxyJob>>,
    /// The request's body is still arriving and will stream (framed so) to whoever forwards
    /// it; only a handler that takes a streamed body is given such a request.
    streamed: Option<StreamedBody>,
    /// The site's compression settings when it compresses on the fly, and the request's fields
    /// (read for `Accept-Encoding` only when a body turns out compressible, so a request that
    /// is not pays nothing for the lookup).
    compress: Option<Rc<CompressConfig>>,
    fields: &'a [Header<'a>],
}

/// What a finished response left for the connection: whether one was written, whether to
/// close after it, a file region still to send, and what the access log records.
#[derive(Default)]
pub(crate) struct Finished {
    /// What the cache did, on a cached route.
    pub(crate) cache: Option<crate::cache::CacheOutcome>,
    /// What the rate limits did, where a zone applies.
    pub(crate) limit: Option<crate::guard::ratelimit::LimitOutcome>,
    /// Places taken in connection-limit zones, when no file carries them: the protocol keeps
    /// them with a forwarded request until its relayed answer ends.
    pub(crate) slots: Slots,
    /// The request is held back, nothing written: the protocol keeps it and routes it again
    /// when its time comes (`crate::hold`).
    pub(crate) hold: Option<Box<crate::hold::Hold>>,
    pub(crate) sent: bool,
    pub(crate) close: bool,
    pub(crate) file: Option<FileBody>,
    pub(crate) status: u16,
    pub(crate) body_bytes: u64,
    pub(crate) head_bytes: u64,
    /// The client's certificate counted for the request's site (the access log's
    /// `$ssl_client_verify`).
    pub(crate) client_verified: bool,
}

impl<'a> Response<'a> {
    pub(crate) fn new(
        out: &'a mut Vec<u8>,
        scratch: &'a mut Vec<u8>,
        date: &'a [u8],
        head_only: bool,
        keep_alive: bool,
        version: Version,
        done: &'a mut Finished,
    ) -> Self {
        let connection = match (keep_alive, version) {
            (false, _) => ConnectionHeader::Close,
            // HTTP/2 and HTTP/3 have no Connection field; their layers keep the head as is.
            (true, Version::Http11 | Version::Http2 | Version::Http3) => ConnectionHeader::None,
            (true, Version::Http10) => ConnectionHeader::KeepAlive,
        };
        Self {
            out,
            scratch,
            date,
            head_only,
            connection,
            done,
            client: None,
            cert_check: None,
            forward: None,
            streamed: None,
            compress: None,
            fields: &[],
        }
    }

    /// Compresses bodies given with their type ([`Response::send_with`]) by these settings and
    /// the request's `Accept-Encoding`, found among `fields`.
    pub(crate) fn set_compression(&mut self, cfg: &Rc<CompressConfig>, fields: &'a [Header<'a>]) {
        self.compress = Some(Rc::clone(cfg));
        self.fields = fields;
    }

    /// Says who asked (the client's address, whether over TLS) and where a request to forward
    /// goes: a connection that can relay an upstream's answer lends its slot.
    pub(crate) fn set_client(&mut self, client: &'a ClientInfo, forward: &'a mut Option<ProxyJob>) {
        self.client = Some(client);
        self.forward = Some(forward);
    }

    /// Says that the request's body is still arriving and will stream after the head.
    pub(crate) fn set_streamed(&mut self, framing: StreamedBody) {
        self.streamed = Some(framing);
    }

    /// How the request's body streams, when it does (see [`Handler::takes_streamed_body`]).
    pub(crate) fn streamed(&self) -> Option<StreamedBody> {
        self.streamed
    }

    /// The client that asked, when the connection said.
    #[must_use]
    pub fn client(&self) -> Option<&'a ClientInfo> {
        self.client
    }

    /// Says what the site's client-certificate rule found: whether the client's certificate
    /// was verified by the site's CA file. Handlers pass it on ([`Response::client_cert`]).
    pub(crate) fn set_cert_checked(&mut self, verified: bool) {
        self.cert_check = Some(verified);
    }

    /// What an upstream is told of the client's certificate: nothing on a site that asks for
    /// none; else the certificate when the site's CA file verified it, or that there is none.
    #[must_use]
    pub fn client_cert(&self) -> crate::client_cert::CertReport<'a> {
        use crate::client_cert::CertReport;
        match self.cert_check {
            None => CertReport::NotAsked,
            Some(true) => self
                .client
                .and_then(|c| c.cert.as_deref())
                .map_or(CertReport::Absent, CertReport::Verified),
            Some(false) => CertReport::Absent,
        }
    }

    /// Answers by forwarding: the response will come from an upstream.
    pub(crate) fn forward(&mut self, job: ProxyJob) {
        match &mut self.forward {
            // A forward-auth subrequest stands in the slot (`crate::guard::forward`): this is
            // the request it guards, forwarded when the auth service lets it through.
            Some(Some(auth)) if auth.gate.is_some() => {
                if let Some(gate) = &auth.gate {
                    gate.borrow_mut().main = Some(job);
                }
            }
            Some(slot) => **slot = Some(job),
            // Nowhere to relay an answer from: a gateway error rather than no answer.
            None => {
                job.group.give_buffer(job.request);
                self.send_status(502);
            }
        }
    }

    /// A request this response forwards gets the router's lines for every response
    /// (`add_header`, `Alt-Svc`) on its relayed response.
    pub(crate) fn add_to_forwarded(&mut self, added: &std::rc::Rc<[u8]>) {
        if let Some(Some(job)) = self.forward.as_deref_mut() {
            job.added = Some(std::rc::Rc::clone(added));
        }
    }

    /// Stands a forward-auth subrequest in the forward slot: the request is answered by
    /// whatever the auth service says, and forwarded (when its route forwards) if it says yes.
    /// `false` where nothing can be relayed (no slot).
    pub(crate) fn forward_auth(&mut self, subrequest: ProxyJob) -> bool {
        match &mut self.forward {
            Some(slot) => {
                **slot = Some(subrequest);
                true
            }
            None => {
                subrequest.group.give_buffer(subrequest.request);
                false
            }
        }
    }

    /// A forward-auth subrequest stands in the slot with no request forwarded behind it: the
    /// route answered in the worker. That answer (from `start` in the output, and its file) is
    /// taken back and kept on the subrequest's gate, relayed only if the auth service lets the
    /// request through (`crate::proxy::auth_held`); the protocol meanwhile sees a forwarded
    /// request. A file answer keeps its file open, unread, whatever its size.
    pub(crate) fn settle_forward_auth(&mut self, start: usize) {
        let Some(Some(auth)) = self.forward.as_deref() else {
            return;
        };
        let Some(gate) = auth.gate.as_ref() else {
            return;
        };
        if gate.borrow().main.is_some() {
            return;
        }
        let file = self.done.file.take();
        let written = self.out.split_off(start);
        let held = crate::proxy::job::HeldAnswer { written, file };
        gate.borrow_mut().held = Some(Box::new(held));
        self.out.truncate(start);
        self.done.sent = false;
        self.done.close = false;
        self.done.body_bytes = 0;
        self.done.head_bytes = 0;
    }

    /// Whether only the head will be sent (the request was `HEAD`).
    #[must_use]
    pub fn head_only(&self) -> bool {
        self.head_only
    }

    /// Closes the connection after this response (adds `Connection: close`).
    pub fn close_connection(&mut self) {
        self.done.close = true;
        self.connection = ConnectionHeader::Close;
    }

    /// Sends a complete response with a body from memory. The body is omitted for `HEAD`.
    #[inline]
    pub fn send(&mut self, status: u16, content_type: &[u8], body: &[u8]) {
        self.send_with(status, Some(content_type), b"", body);
    }

    /// Like [`Response::send`], with extra header lines (each ending in CRLF) and an optional type.
    ///
    /// When the site compresses on the fly, a body given with its `content_type` is compressed
    /// if [`CompressConfig::applies`] (status 200, 403 or 404, as nginx; see [`crate::compress`]);
    /// a body whose type is among `extra` instead is the caller's own business (the file
    /// handler negotiates and caches its own).
    // Inlined into the handlers, with the compression in a call of its own: as a call, this
    // cost `/plaintext` about 50 instructions a request (callgrind, against b782d19's inlined
    // send).
    #[inline]
    pub fn send_with(
        &mut self,
        status: u16,
        content_type: Option<&[u8]>,
        extra: &[u8],
        body: &[u8],
    ) {
        if self.done.sent {
            return;
        }
        if let (Some(_), Some(ct)) = (&self.compress, content_type) {
            if self.compressed_instead(status, ct, extra, body) {
                return;
            }
        }
        self.done.sent = true;
        let head = ResponseHead {
            connection: self.connection,
            extra,
            ..ResponseHead::new(status, content_type, body.len() as u64)
        };
        let at = self.out.len();
        head.encode(self.date, self.out);
        self.done.head_bytes = (self.out.len() - at) as u64;
        self.done.status = status;
        if !self.head_only {
            self.out.extend_from_slice(body);
            self.done.body_bytes = body.len() as u64;
        }
    }

    /// Sends `body` compressed when the site compresses it ([`CompressConfig::applies`]);
    /// false when it does not, and nothing was sent.
    #[inline(never)]
    fn compressed_instead(
        &mut self,
        status: u16,
        content_type: &[u8],
        extra: &[u8],
        body: &[u8],
    ) -> bool {
        let Some(cfg) = &self.compress else {
            return false;
        };
        if !(matches!(status, 200 | 403 | 404)
            && cfg.applies(content_type, body.len() as u64)
            && !crate::compress::lines_forbid(extra))
        {
            return false;
        }
        let cfg = Rc::clone(cfg);
        self.send_compressed(&cfg, status, content_type, extra, body);
        true
    }

    /// [`Response::send_with`] for a compressible body: `Vary: Accept-Encoding` always, the
    /// body compressed with the coding the client prefers (if it accepts one).
    fn send_compressed(
        &mut self,
        cfg: &CompressConfig,
        status: u16,
        content_type: &[u8],
        extra: &[u8],
        body: &[u8],
    ) {
        let accept = self
            .fields
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("accept-encoding"))
            .map(|h| h.value);
        let coding = cfg.choose(accept);
        DYNAMIC.with_borrow_mut(|(lines, encoded)| {
            lines.clear();
            lines.extend_from_slice(extra);
            lines.extend_from_slice(crate::compress::VARY_LINE);
            encoded.clear();
            let compressed = coding != Coding::Identity
                && crate::compress::encode(coding, &cfg.levels, body, encoded).is_ok();
            let body = if compressed {
                lines.extend_from_slice(b"Content-Encoding: ");
                lines.extend_from_slice(coding.token().as_bytes());
                lines.extend_from_slice(b"\r\n");
                if !self.head_only {
                    crate::compress::count(coding, body.len() as u64, encoded.len() as u64);
                }
                &encoded[..]
            } else {
                body
            };
            self.done.sent = true;
            let head = ResponseHead {
                connection: self.connection,
                extra: lines,
                ..ResponseHead::new(status, Some(content_type), body.len() as u64)
            };
            head.encode(self.date, self.out);
            self.done.status = status;
            if !self.head_only {
                self.out.extend_from_slice(body);
                self.done.body_bytes = body.len() as u64;
            }
            // A large body once does not pin its buffer for the worker's life.
            if encoded.capacity() > DYNAMIC_KEEP_BYTES {
                *encoded = Vec::new();
            }
        });
    }

    /// Sends a head only, with the given `Content-Length` (or none for 304), whatever the method.
    pub fn send_head(
        &mut self,
        status: u16,
        content_type: Option<&[u8]>,
        extra: &[u8],
        length: Option<u64>,
    ) {
        if self.done.sent {
            return;
        }
        self.done.sent = true;
        let head = ResponseHead {
            connection: self.connection,
            extra,
            send_length: length.is_some(),
            ..ResponseHead::new(status, content_type, length.unwrap_or(0))
        };
        let at = self.out.len();
        head.encode(self.date, self.out);
        self.done.head_bytes = (self.out.len() - at) as u64;
        self.done.status = status;
    }

    /// Sends a stored response (the proxy's cache): status line with the stored `reason`, the
    /// stored header `lines`, then `extra` lines (`Age`, `Cache-Status`), the length and the
    /// body (omitted for `HEAD`). Each line ends in CRLF.
    pub(crate) fn send_stored(
        &mut self,
        status: u16,
        reason: &str,
        lines: &[u8],
        extra: &[u8],
        body: &[u8],
    ) {
        if self.done.sent {
            return;
        }
        self.done.sent = true;
        let at = self.out.len();
        let out = &mut *self.out;
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
        out.push(b' ');
        out.extend_from_slice(reason.as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(lines);
        out.extend_from_slice(extra);
        let bodiless = status == 204 || status == 304 || (100..200).contains(&status);
        if !bodiless {
            out.extend_from_slice(b"Content-Length: ");
            out.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        match self.connection {
            ConnectionHeader::None => {}
            ConnectionHeader::KeepAlive => out.extend_from_slice(b"Connection: keep-alive\r\n"),
            ConnectionHeader::Close => out.extend_from_slice(b"Connection: close\r\n"),
        }
        out.extend_from_slice(b"\r\n");
        self.done.head_bytes = (self.out.len() - at) as u64;
        self.done.status = status;
        if !self.head_only && !bodiless {
            self.out.extend_from_slice(body);
            self.done.body_bytes = body.len() as u64;
        }
    }

    /// Renders a body with `render` into a reused scratch buffer, then sends it: for bodies built
    /// per request (JSON, templates) without an allocation per request.
    pub fn render<E>(
        &mut self,
        status: u16,
        content_type: &[u8],
        extra: &[u8],
        render: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut scratch = std::mem::take(self.scratch);
        scratch.clear();
        let rendered = render(&mut scratch);
        if rendered.is_ok() {
            self.send_with(status, Some(content_type), extra, &scratch);
        }
        *self.scratch = scratch;
        rendered
    }

    /// Sends a head, then `file.len` bytes of the file from `file.offset` with `sendfile(2)`. The
    /// connection sends nothing after it until the region is sent; if the file turns out shorter
    /// than announced, the connection is closed rather than send a body of the wrong length.
    pub fn send_file(
        &mut self,
        status: u16,
        content_type: Option<&[u8]>,
        extra: &[u8],
        file: FileBody,
    ) {
        if self.done.sent {
            return;
        }
        self.send_head(status, content_type, extra, Some(file.len));
        if !self.head_only && file.len > 0 {
            self.done.body_bytes = file.len;
            self.done.file = Some(file);
        }
    }

    /// A plain-text error or status page: `<status> <reason>\n`.
    pub fn send_status(&mut self, status: u16) {
        self.send_status_with(status, b"");
    }

    /// [`Response::send_status`] with extra header lines (e.g. `Allow`, `Location`).
    pub fn send_status_with(&mut self, status: u16, extra: &[u8]) {
        let mut body = [0u8; 64];
        let len = status_body(status, &mut body);
        self.send_with(
            status,
            Some(b"text/plain; charset=utf-8"),
            extra,
            &body[..len],
        );
    }

    /// Whether a response was written.
    #[must_use]
    pub fn is_sent(&self) -> bool {
        self.done.sent
    }

    /// Where the next response's bytes begin in the output buffer.
    pub(crate) fn out_len(&self) -> usize {
        self.out.len()
    }

    /// Adds header lines (each ending in CRLF) to the head written from `start`: a site's
    /// `--add-header` lines, after the handler's own.
    pub(crate) fn insert_head_lines(&mut self, start: usize, lines: &[u8]) {
        if !self.done.sent {
            return;
        }
        if let Some(end) = self.out[start..].windows(4).position(|w| w == b"\r\n\r\n") {
            let at = start + end + 2;
            self.out.splice(at..at, lines.iter().copied());
            self.done.head_bytes += lines.len() as u64;
        }
    }

    /// Says what the cache did for this request (the access log's `$upstream_cache_status`).
    pub(crate) fn set_cache_outcome(&mut self, outcome: crate::cache::CacheOutcome) {
        self.done.cache = Some(outcome);
    }

    /// Says what the rate limits did (the access log's `$limit_req_status`).
    pub(crate) fn set_limit_outcome(&mut self, outcome: crate::guard::ratelimit::LimitOutcome) {
        self.done.limit = Some(outcome);
    }

    /// What the rate limits said so far: [`LimitOutcome::Delayed`] for a request released after
    /// its delay, whose zones counted it already.
    ///
    /// [`LimitOutcome::Delayed`]: crate::guard::ratelimit::LimitOutcome::Delayed
    pub(crate) fn limit_outcome(&self) -> Option<crate::guard::ratelimit::LimitOutcome> {
        self.done.limit
    }

    /// Answers nothing yet: the request waits as `hold` says, then goes through the router
    /// again (`crate::hold`). Where nothing can keep it, it is answered at once.
    pub(crate) fn hold(&mut self, hold: crate::hold::Hold) {
        self.done.hold = Some(Box::new(hold));
    }

    /// Whether the request is held back (an early hook's answer as much as a response is).
    pub(crate) fn is_held(&self) -> bool {
        self.done.hold.is_some()
    }

    /// Holds places taken in connection-limit zones until the answer is done.
    pub(crate) fn hold_slots(&mut self, slots: Box<[crate::guard::connlimit::Slot]>) {
        self.done.slots = Some(slots);
    }

    /// Leaves the lent [`Finished`] complete: connection-limit places go with a file still to
    /// send (given back when it is sent), and the certificate check is noted for the log.
    // Inlined: as a call it cost 24 instructions a request (callgrind, `/plaintext`).
    #[allow(clippy::inline_always)]
    #[inline(always)]
    pub(crate) fn finish(self) {
        let done = self.done;
        if let Some(file) = &mut done.file {
            file.slots = done.slots.take();
        }
        done.client_verified = self.cert_check == Some(true);
    }
}

thread_local! {
    /// This worker's header lines and compressed body of a dynamic response (reused).
    static DYNAMIC: RefCell<(Vec<u8>, Vec<u8>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// The compressed-body buffer kept between responses, at most; a larger one is freed after use.
const DYNAMIC_KEEP_BYTES: usize = 256 * 1024;

/// Writes `"404 Not Found\n"` into `buf`, returns its length.
fn status_body(status: u16, buf: &mut [u8; 64]) -> usize {
    let reason = lowlat_http::response::reason(status).as_bytes();
    let mut code = itoa::Buffer::new();
    let code = code.format(status).as_bytes();
    let mut len = 0;
    for part in [code, b" ", reason, b"\n"] {
        let n = part.len().min(buf.len() - len);
        buf[len..len + n].copy_from_slice(&part[..n]);
        len += n;
    }
    len
}

/// Something that answers requests. Built per worker, so `&mut self` needs no lock.
pub trait Handler {
    /// Answers `req` through `res`. A handler that returns without answering gets a 500.
    fn handle(&mut self, req: &Req<'_, '_, '_>, res: &mut Response<'_>);

    /// Whether this handler takes a request whose body is still arriving (the proxy, which
    /// streams it on); every other handler is given the body whole, up to `--max-body`.
    /// `unknown_length`: the body's length is not known in advance (chunked, or an HTTP/2 or
    /// HTTP/3 request without `content-length`), which a CGI application must be told.
    fn takes_streamed_body(&self, unknown_length: bool) -> bool {
        let _ = unknown_length;
        false
    }
}

impl<F> Handler for F
where
    F: FnMut(&Req<'_, '_, '_>, &mut Response<'_>),
{
    fn handle(&mut self, req: &Req<'_, '_, '_>, res: &mut Response<'_>) {
        self(req, res);
    }
}
