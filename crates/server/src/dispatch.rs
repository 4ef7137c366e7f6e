//! One request path: a request head, decoded by whichever protocol carried it, goes from here to
//! its site, route and handler, and comes back as a response written in HTTP/1.1 form or as a
//! request to forward (a [`ProxyJob`] whose answer is relayed later). The protocol layers
//! (`conn`, `h2`, `h3`) only frame: they decode a head, call [`route`], and put what came back
//! on the wire their way; the counting and logging of an answer ([`answered`]), the log fields
//! a forwarded request keeps for its line ([`hold`]), the body that streams to an upstream
//! ([`upload_for`]) and, for HTTP/2 and HTTP/3, the [`Request`] made from their decoded head
//! ([`with_request`]) and the fields read back from the HTTP/1.1-form response
//! ([`translate_head`]) are written here once.
//!
//! It does not read sockets, choose a status for a refused head (each protocol says "malformed"
//! its own way: a stream reset, a 400), or write frames.

use std::time::Instant;

use lowlat_http::body::BodyFraming;
use lowlat_http::head::RequestHead;
use lowlat_http::request::{Header, Method, Request};
use lowlat_http::Version;

use crate::access_log::{Entry, HeldRequest};
use crate::ctx::WorkerCtx;
use crate::handler::{ClientInfo, Finished, Response, StreamedBody};
use crate::proxy::job::ProxyJob;
use crate::proxy::upload::{Upload, UploadRef};

/// Hands `req` (with its whole `body`, or with `streamed` its framing while it still arrives)
/// to the router: the response is written into `out` in HTTP/1.1 form and what it left to do
/// into `done` (a fresh [`Finished`], the caller's), or the request to forward is left in
/// `forward` (also the caller's: moved back in a return value, the job's bytes were copied on
/// every request, forwarded or not — 14 instructions a request on `/plaintext`). Returns the
/// site that answered.
/// `released`: the request was held back (`crate::hold`) and its time came; the rate limits
/// counted it then, and it is logged as `DELAYED`.
// Inlined into each protocol's loop, as the steps were before they were written once here: left
// to itself, LTO kept `route` and `answered` as calls, which cost `/plaintext` 57 instructions a
// request more than before; inlined, 2923 → 2878 and `/100.html` 3681 → 3639 (callgrind,
// scripts/instructions.py).
#[allow(clippy::inline_always)] // measured, above
#[allow(clippy::too_many_arguments)] // each protocol's own parts of one request, inlined
#[inline(always)]
pub(crate) fn route(
    ctx: &mut WorkerCtx<'_>,
    req: &Request<'_, '_>,
    body: &[u8],
    out: &mut Vec<u8>,
    client: &ClientInfo,
    keep_alive: bool,
    streamed: Option<StreamedBody>,
    forward: &mut Option<ProxyJob>,
    done: &mut Finished,
    released: bool,
) -> usize {
    let mut res = Response::new(
        out,
        ctx.scratch,
        ctx.date.get(),
        req.is_head(),
        keep_alive,
        req.version,
        done,
    );
    res.set_client(client, forward);
    if let Some(framing) = streamed {
        res.set_streamed(framing);
    }
    if released {
        res.set_limit_outcome(crate::guard::ratelimit::LimitOutcome::Delayed);
    }
    // Which site answered: 0 for the default one (see [`crate::router::Router::dispatch`]).
    let site = ctx.router.dispatch(req, body, ctx.worker, &mut res);
    res.finish();
    site
}

/// Counts an answered request (`--metrics`) and writes its access log line. `status` is what
/// went out, which the protocol may have changed from the handler's (a 500 when it wrote
/// nothing).
#[allow(clippy::too_many_arguments)]
#[allow(clippy::inline_always)] // as `route`
#[inline(always)]
pub(crate) fn answered(
    ctx: &mut WorkerCtx<'_>,
    req: &Request<'_, '_>,
    client: &ClientInfo,
    site: usize,
    status: u16,
    done: &Finished,
    started: Instant,
) {
    // With metrics or a log, the clock when answered: the loop's time is the same for a
    // request read and answered in one turn, which would time it at zero. Without either no
    // one reads a duration, and the subtraction is spared (~40 instructions a request).
    let took = if ctx.timed {
        Instant::now().saturating_duration_since(started)
    } else {
        std::time::Duration::ZERO
    };
    ctx.counters.response(site, status, done.body_bytes, took);
    if let Some(log) = ctx.access_log.as_deref_mut() {
        let mut entry = Entry::answered(
            req,
            client.peer,
            status,
            done.body_bytes,
            done.head_bytes,
            took,
            ctx.worker,
            site,
            client.tls,
            done.cache,
            done.limit,
        );
        entry.cert = verified_cert(client, done);
        log.record(&entry);
    }
}

/// Keeps a forwarded request's log fields in `held` (reused) for the line written when its
/// relayed answer ends; nothing without an access log.
pub(crate) fn hold(
    ctx: &WorkerCtx<'_>,
    held: &mut Option<Box<HeldRequest>>,
    req: &Request<'_, '_>,
    site: usize,
    client: &ClientInfo,
    done: &Finished,
) {
    if let Some(log) = ctx.access_log.as_deref() {
        let held = held.get_or_insert_with(Box::default);
        held.hold(req, site, client.tls, done.cache, done.limit, log.config());
        held.cert = if done.client_verified {
            client.cert.clone()
        } else {
            None
        };
    }
}

/// The client's certificate when it was verified for the request's site, for the log.
fn verified_cert<'c>(
    client: &'c ClientInfo,
    done: &Finished,
) -> Option<&'c crate::client_cert::ClientCert> {
    if done.client_verified {
        client.cert.as_deref()
    } else {
        None
    }
}

/// The upload a body still arriving goes through to the upstream `job` is forwarded to: the
/// client's side puts bytes in, the upstream side takes them (`proxy::upload`).
pub(crate) fn upload_for(job: &mut ProxyJob, framing: StreamedBody) -> UploadRef {
    let pipe = Upload::new(framing);
    // A forward-auth subrequest carries no body: the request it guards does.
    match job.gate.as_ref().map(|g| g.borrow_mut()) {
        Some(mut gate) => {
            if let Some(main) = gate.main.as_mut() {
                main.upload = Some(std::rc::Rc::clone(&pipe));
            }
        }
        None => job.upload = Some(std::rc::Rc::clone(&pipe)),
    }
    pipe
}

/// Why a decoded head (HTTP/2, HTTP/3) makes no request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeadRefusal {
    /// No method or path, or a path neither origin-form nor `*` for `OPTIONS` (RFC 9113
    /// §8.3.1, RFC 9114 §4.3.1): a malformed request.
    Malformed,
    /// More fields than the handlers' limit (431, as over HTTP/1.1).
    TooManyFields,
}

/// Most requests have a few fields: a small array to fill, the full one only for many. Filling
/// the 100-slot array costs every request its zeroing; 24 covers browsers' heads.
const FEW_FIELDS: usize = 24;

const EMPTY_HEADER: Header<'static> = Header {
    name: "",
    value: b"",
};

/// Makes the [`Request`] handlers see from a decoded `head` (HTTP/2's or HTTP/3's, `version`
/// says which) whose body is framed as `framing`, and gives it to `then`.
pub(crate) fn with_request<R>(
    head: &RequestHead,
    max_fields: usize,
    version: Version,
    framing: BodyFraming,
    then: impl FnOnce(&Request<'_, '_>) -> R,
) -> Result<R, HeadRefusal> {
    let (Some(method_token), Some(target)) = (head.method(), head.path()) else {
        return Err(HeadRefusal::Malformed);
    };
    if !(target.starts_with('/') || target == "*" && method_token == "OPTIONS") {
        return Err(HeadRefusal::Malformed);
    }
    let mut small = [EMPTY_HEADER; FEW_FIELDS];
    let mut big;
    let slots: &mut [Header<'_>] = if head.field_count() < small.len() {
        &mut small
    } else {
        big = [EMPTY_HEADER; lowlat_http::limits::MAX_HEADERS];
        &mut big
    };
    let Some(n) = head.request_fields(slots, max_fields) else {
        return Err(HeadRefusal::TooManyFields);
    };
    let (path, query) = lowlat_http::request::split_path(target);
    let req = Request {
        method: Method::from_token(method_token),
        method_token,
        target,
        path,
        query,
        version,
        headers: &slots[..n],
        framing,
        keep_alive: true,
        expect_continue: false,
        head_len: 0,
        // Set only where extended CONNECT is announced (HTTP/2); the codec refuses it elsewhere.
        protocol: head.protocol(),
    };
    Ok(then(&req))
}

/// Counts a request refused before it was routed (HTTP/2, HTTP/3: a head too large, malformed,
/// sent too early) and logs it with what its decoded `head`, as far as it got, tells — as
/// HTTP/1.1 refusals are logged from their request line.
pub(crate) fn refused(
    ctx: &mut WorkerCtx<'_>,
    head: Option<&RequestHead>,
    peer: std::net::SocketAddr,
    version: Version,
    tls: bool,
    status: u16,
    took: std::time::Duration,
) {
    ctx.counters.response(0, status, 0, took);
    if let Some(log) = ctx.access_log.as_deref_mut() {
        let field =
            |name: &str| head.and_then(|h| h.fields().find(|(n, _)| *n == name).map(|(_, v)| v));
        log.record(&Entry {
            remote: peer,
            method: head.and_then(RequestHead::method).unwrap_or("-"),
            target: head.and_then(RequestHead::path).unwrap_or("-"),
            version,
            status,
            bytes: 0,
            duration: took,
            user_agent: field("user-agent"),
            referer: field("referer"),
            worker: ctx.worker,
            upstream: None,
            received: None,
            site: None,
            tls,
            head_bytes: 0,
            fields: crate::access_log::Fields::None,
            cache: None,
            limit: None,
            cert: None,
        });
    }
}

/// Reads the head a handler wrote in HTTP/1.1 form at the start of `buf` (`HTTP/1.1 200 OK`,
/// fields, blank line) for a protocol that sends fields (HTTP/2, HTTP/3), lower-casing the
/// names in place. Returns the status, the fields to
/// send (connection-specific ones dropped) as ranges of `buf`, and where the body starts.
pub(crate) fn translate_head(
    buf: &mut [u8],
    fields: &mut Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>,
) -> Option<(u16, usize)> {
    fields.clear();
    let status = std::str::from_utf8(buf.get(9..12)?).ok()?.parse().ok()?;
    let mut at = memchr::memchr(b'\n', buf)? + 1;
    loop {
        let end = at + memchr::memchr(b'\n', &buf[at..])?;
        let line_end = if end > at && buf[end - 1] == b'\r' {
            end - 1
        } else {
            end
        };
        if line_end == at {
            return Some((status, end + 1));
        }
        let colon = at + buf[at..line_end].iter().position(|&b| b == b':')?;
        buf[at..colon].make_ascii_lowercase();
        let mut v = colon + 1;
        while v < line_end && (buf[v] == b' ' || buf[v] == b'\t') {
            v += 1;
        }
        if !lowlat_http::fields::is_connection_specific(&buf[at..colon]) {
            fields.push((at..colon, v..line_end));
        }
        at = end + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_translate() {
        let mut buf =
            b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nConnection: close\r\nX-A:  b\r\n\r\nbody"
                .to_vec();
        let mut fields = Vec::new();
        let (status, body) = translate_head(&mut buf, &mut fields).unwrap();
        assert_eq!(status, 404);
        assert_eq!(&buf[body..], b"body");
        let got: Vec<(&[u8], &[u8])> = fields
            .iter()
            .map(|(n, v)| (&buf[n.clone()], &buf[v.clone()]))
            .collect();
        assert_eq!(
            got,
            vec![(&b"content-type"[..], &b"text/plain"[..]), (b"x-a", b"b")]
        );
        assert_eq!(
            translate_head(&mut b"HTTP/1.1 2".to_vec(), &mut fields),
            None
        );
    }
}
