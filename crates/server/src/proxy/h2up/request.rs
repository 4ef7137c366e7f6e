//! The forwarded request as an HTTP/2 stream: the HTTP/1.1 head the proxy handler wrote, parsed
//! back into pseudo-fields and lower-cased fields, without the connection-specific ones HTTP/2
//! forbids, with `te: trailers` said, and opened on the session with its body (or without it,
//! when the body streams).

use std::ops::Range;

use lowlat_http::h2::client::{ClientConn, OpenError};
use lowlat_http::request::{header_slots, parse_request, HeadLimits};
use lowlat_http::Status;

/// Fields HTTP/2 forbids in a request (RFC 9113 §8.2.2), besides `Host` (the `:authority`).
fn connection_specific(name: &str) -> bool {
    name.eq_ignore_ascii_case("host")
        || lowlat_http::fields::CONNECTION_SPECIFIC
            .iter()
            .any(|f| name.as_bytes().eq_ignore_ascii_case(f))
}

/// Opens a stream for `request` (the HTTP/1.1 bytes the proxy handler wrote: head, then a body
/// of its `Content-Length`; with `streaming`, the head only, its body to follow). `None` when
/// it does not parse (it always should).
pub(super) fn open_stream(
    session: &mut ClientConn,
    request: &[u8],
    tls: bool,
    streaming: bool,
    scratch: &mut Vec<u8>,
) -> Option<Result<u32, OpenError>> {
    let mut slots = header_slots();
    // The proxy wrote this head itself (the client's, checked, with forwarding fields added):
    // only its own size bounds it.
    let limits = HeadLimits {
        max_uri_bytes: request.len(),
        max_head_bytes: request.len(),
        max_headers: slots.len(),
    };
    let Ok(Status::Complete(req)) = parse_request(request, &mut slots, &limits) else {
        return None;
    };
    let body = &request[req.head_len..];
    let authority = req.header("host").unwrap_or_default();
    // Names lower-cased into one buffer (HTTP/2 requires lower case).
    scratch.clear();
    let mut ranges: Vec<(Range<usize>, &[u8])> = Vec::with_capacity(req.headers.len());
    for h in req.headers {
        if connection_specific(h.name) {
            continue;
        }
        if h.name.eq_ignore_ascii_case("te") {
            continue;
        }
        let at = scratch.len();
        scratch.extend(h.name.bytes().map(|b| b.to_ascii_lowercase()));
        ranges.push((at..scratch.len(), h.value));
    }
    let scheme: &[u8] = if tls { b"https" } else { b"http" };
    let pseudo = [
        (&b":method"[..], req.method_token.as_bytes()),
        (b":scheme", scheme),
        (b":authority", authority),
        (b":path", req.target.as_bytes()),
    ];
    let scratch = &*scratch;
    // This side relays trailers, so it says so (RFC 9110 §10.1.4): gRPC servers refuse a call
    // without it.
    let te = [(&b"te"[..], &b"trailers"[..])];
    let fields = pseudo
        .into_iter()
        .chain(ranges.iter().map(|(n, v)| (&scratch[n.clone()], *v)))
        .chain(te);
    // With `streaming`, the body follows from the upload (`H2Upstreams::pump_uploads`).
    Some(session.open_with(fields, body, &[], streaming))
}
