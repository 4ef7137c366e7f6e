//! Background refreshes (`stale-while-revalidate`, RFC 5861 §3): a stale response within its
//! window is sent to the client at once (`lookup`), and one request for it goes upstream with
//! no client behind it — conditional when the stale response has validators — whose answer is
//! stored (a 304 refreshes the stored response, a 200 replaces it) and relayed nowhere.
//!
//! The proxy handler makes the refresh's job as it makes any forwarded request's (for a FastCGI
//! rule, the validators are among the request's variables) and hands it
//! here ([`queue`]); the handler has no hold on the worker's upstream side, so the job waits in
//! a per-thread queue and the worker is woken (its own waker, rung once per refresh: nothing on
//! any other path) to start it on its next turn ([`take_queued`]). Its exchange delivers to
//! [`Sink`], under the client token [`CLIENT`], which no connection has: the response goes
//! through the cache's tee (which stores it) into nothing.
//!
//! The refresh's fill leads the flight of its key (`inflight`), so one refresh is made however
//! many requests find the response stale, and a request that may not be answered stale waits
//! for it rather than fetching the same response beside it.

use std::cell::RefCell;

use lowlat_http::client::Header;
use lowlat_http::request::Header as RequestHeader;
use mio::Token;

use crate::ctx::WorkerCtx;
use crate::proxy::downstream::Downstream;
use crate::proxy::job::{ProxyJob, RelayBody};

/// The client token of a background refresh's exchange: no connection's (connections are
/// numbered from the bottom of the token space, the worker's waker is the one above this).
pub(crate) const CLIENT: Token = Token(usize::MAX - 2);

thread_local! {
    /// Refreshes made by this worker's handlers, to start at its next turn.
    static QUEUED: RefCell<Vec<ProxyJob>> = const { RefCell::new(Vec::new()) };
}

/// The request fields a refresh carries: the client's, without those that make its answer the
/// client's own (its conditionals, `Range`): the refresh's answer is for the store.
pub(crate) fn request_fields<'b>(headers: &[RequestHeader<'b>]) -> Vec<RequestHeader<'b>> {
    headers
        .iter()
        .filter(|h| !own_field(h.name))
        .copied()
        .collect()
}

/// Whether field `name` makes a request's answer the client's own: its conditionals, `Range`.
pub(crate) fn own_field(name: &str) -> bool {
    const OWN: [&str; 6] = [
        "if-none-match",
        "if-modified-since",
        "if-match",
        "if-unmodified-since",
        "if-range",
        "range",
    ];
    OWN.iter().any(|n| name.eq_ignore_ascii_case(n))
}

/// Adds the validators of `stale` to `fields` as conditionals (`If-None-Match`,
/// `If-Modified-Since`), for a request written as fields rather than text (FastCGI's).
/// Whether it has any.
pub(crate) fn add_validators<'a>(
    fields: &mut Vec<RequestHeader<'a>>,
    stale: &'a super::object::Object,
) -> bool {
    let cond = lowlat_http::cache::revalidate::Conditional::of(stale);
    if let Some(tag) = cond.if_none_match {
        fields.push(RequestHeader {
            name: "If-None-Match",
            value: tag,
        });
    }
    if let Some(date) = cond.if_modified_since {
        fields.push(RequestHeader {
            name: "If-Modified-Since",
            value: date,
        });
    }
    cond.any()
}

/// Queues a refresh's job for this worker's next turn, and wakes the worker for it. A thread
/// without a worker loop has no one to start it: the job is dropped (and its fill with it,
/// ending its flight).
pub(crate) fn queue(job: ProxyJob) {
    let Some(fill) = &job.cache else {
        job.group.give_buffer(job.request);
        return;
    };
    fill.borrow().cache.count(|c| &c.refreshes);
    QUEUED.with_borrow_mut(|q| q.push(job));
    if !crate::own_waker::wake() {
        for job in take_queued() {
            job.group.give_buffer(job.request);
        }
    }
}

/// The refreshes queued since the last call (none: no allocation).
pub(crate) fn take_queued() -> Vec<ProxyJob> {
    QUEUED.with_borrow_mut(std::mem::take)
}

/// Where a refresh's response goes: nowhere. The cache's tee in front of it stores it; the
/// sink takes everything at once (no backlog, so the upstream is read at its own pace) and
/// cannot tunnel.
pub(crate) struct Sink;

impl Downstream for Sink {
    fn relay_head(
        &mut self,
        _ctx: &mut WorkerCtx<'_>,
        _status: u16,
        _reason: &str,
        _fields: &[Header<'_>],
        _pass: &dyn Fn(&str) -> bool,
        _added: &[u8],
        _body: RelayBody,
    ) {
    }

    fn relay_body(&mut self, _ctx: &mut WorkerCtx<'_>, _data: &[u8]) {}

    fn relay_end(
        &mut self,
        _ctx: &mut WorkerCtx<'_>,
        upstream: &str,
        status: u16,
        took: std::time::Duration,
    ) {
        tracing::debug!(upstream, status, ?took, "cache refreshed in the background");
    }

    fn relay_abort(&mut self, _ctx: &mut WorkerCtx<'_>) {
        tracing::debug!("background cache refresh cut short");
    }

    fn relay_error(&mut self, _ctx: &mut WorkerCtx<'_>, status: u16) {
        tracing::debug!(status, "background cache refresh failed");
    }

    fn backlog(&self) -> usize {
        0
    }

    fn relay_link(&mut self, _upstream: Token) {}

    fn flush_relayed(&mut self, _ctx: &mut WorkerCtx<'_>) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refresh_carries_the_clients_fields_but_not_its_own_conditionals() {
        let h = |name, value: &'static [u8]| RequestHeader { name, value };
        let fields = [
            h("Host", b"a.test"),
            h("If-None-Match", b"\"mine\""),
            h("Accept-Language", b"fr"),
            h("if-modified-since", b"Sun, 06 Nov 1994 08:49:37 GMT"),
            h("Range", b"bytes=0-9"),
            h("If-Range", b"\"mine\""),
            h("Cookie", b"a=1"),
        ];
        let kept: Vec<&str> = request_fields(&fields).iter().map(|h| h.name).collect();
        assert_eq!(kept, ["Host", "Accept-Language", "Cookie"]);
    }

    #[test]
    fn the_refresh_client_is_no_connections() {
        assert!(!crate::quic::owns_client(CLIENT));
        assert_ne!(CLIENT, crate::worker::WAKER);
    }
}
