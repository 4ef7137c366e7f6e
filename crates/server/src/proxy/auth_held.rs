//! A local answer relayed after forward authentication's verdict. A route answered in the worker
//! itself (a file, a cache hit, a redirect, `/plaintext`) under a forward-auth rule's prefix has
//! its answer taken back from the response while the auth service is asked
//! (`Response::settle_forward_auth`) and kept on the subrequest's gate ([`super::job::Gate`], as
//! a [`HeldAnswer`]); this relays it to the client through its [`Downstream`] when the auth
//! service lets the request through, as a forwarded request is then forwarded. A refusal drops
//! it unseen.
//!
//! A file body is kept open, not read: a client the auth service refuses makes the worker read
//! nothing. Let through, it goes to the client's protocol as a file
//! ([`Downstream::relay_file`]), sent as the client takes it like any file the worker answers
//! with: a file of any size, never held in memory.

use std::mem::MaybeUninit;

use lowlat_http::client::{parse_response, Header, ResponseHeaderSlots};
use lowlat_http::limits::MAX_HEADERS;
use lowlat_http::Status;

use super::downstream::Downstream;
use super::job::{HeldAnswer, RelayBody};
use crate::ctx::WorkerCtx;

/// Relays `held` to `down` as a finished exchange: its head (the framing fields written again by
/// the client's protocol), body and end.
pub(crate) fn relay(held: HeldAnswer, ctx: &mut WorkerCtx<'_>, down: &mut dyn Downstream) {
    let HeldAnswer { written, file } = held;
    let mut slots: ResponseHeaderSlots<'_> = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    // Parsed as a GET's answer: a HEAD's has no body after its head either way.
    let Ok(Status::Complete(head)) = parse_response(&written, false, &mut slots) else {
        // Nothing written, or not a head: the protocol answers a route that wrote nothing
        // with 500 too.
        tracing::error!("forward auth: the local answer held for the verdict is not a head");
        return down.relay_error(ctx, 500);
    };
    let (status, reason, body_at) = (head.head.status, head.reason, head.head.head_len);
    let announced = head.head.content_length;
    // The framing is the client's protocol's to write again.
    let fields: Vec<Header<'_>> = head
        .fields
        .iter()
        .filter(|h| {
            !h.name.eq_ignore_ascii_case("content-length")
                && !lowlat_http::fields::is_hop_by_hop(h.name)
        })
        .copied()
        .collect();
    let body = &written[body_at..];
    let file_len = file.as_ref().map_or(0, |f| f.len);
    let length = body.len() as u64 + file_len;
    let bodiless = (100..200).contains(&status) || status == 204 || status == 304;
    let framing = if bodiless || length == 0 {
        // A HEAD's answer keeps the length its head announced.
        RelayBody::None { length: announced }
    } else {
        RelayBody::Length(length)
    };
    down.relay_head(ctx, status, reason, &fields, &|_| true, b"", framing);
    if length > 0 && !bodiless {
        down.relay_body(ctx, body);
        if let Some(file) = file {
            // Its connection-limit places go with it, given back once it is sent.
            down.relay_file(ctx, file);
        }
    }
    down.relay_end(ctx, "-", status, std::time::Duration::ZERO);
}
