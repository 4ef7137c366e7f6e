//! Request collapsing's waiting side: a worker's requests that wait for another request's fill
//! of the same key ([`Parked`]).
//!
//! A miss that found a flight in progress (`inflight`) is forwarded like any other — its
//! connection (or stream) waits for a relayed answer, registered in the worker's loop as ever —
//! but the upstream side parks its job here instead of sending it. It leaves when the flight
//! ends (the flight wakes the worker, which releases what is done) or when its own time is up
//! (the group's first-byte timeout, checked by the worker's sweep). It is then answered from
//! the store if what it finds there may be used ([`answer`]), else sent upstream on its own:
//! never parked twice, so a response that could not be stored costs its waiters one wait.
//!
//! A parked request has a token of its own, linked to its client as an upstream exchange's
//! would be, so a client that leaves (a closed connection, a reset stream) cancels it.

use std::time::Instant;

use lowlat_http::cache::status::CacheStatus;
use mio::Token;
use slab::Slab;

use super::inflight::Ticket;
use crate::ctx::WorkerCtx;
use crate::proxy::downstream::Downstream;
use crate::proxy::job::ProxyJob;
use crate::proxy::upstream::TOKEN_BASE;

/// Where parked requests' tokens start above the upstream side's base: past any plain
/// upstream connection's, below HTTP/2's (`h2up::CONN_OFFSET`).
const OFFSET: usize = 1 << 39;

/// Whether `token` is a parked request's.
pub(crate) fn owns(token: Token) -> bool {
    (TOKEN_BASE + OFFSET..TOKEN_BASE + crate::proxy::h2up::CONN_OFFSET).contains(&token.0)
}

/// One worker's parked requests.
#[derive(Debug, Default)]
pub(crate) struct Parked {
    waiting: Slab<Waiter>,
}

/// A request waiting for a flight.
#[derive(Debug)]
struct Waiter {
    /// The client (token, stream) it answers.
    client: (Token, u32),
    job: ProxyJob,
    ticket: Ticket,
    /// When it stops waiting and goes upstream itself.
    until: Instant,
}

/// A released request: its client and its job.
pub(crate) type Released = ((Token, u32), ProxyJob);

impl Parked {
    /// Parks `job` of `client` until the flight `ticket` names ends, or for at most the first-
    /// byte timeout of its group (what the request would have waited for an upstream anyway).
    pub(crate) fn park(
        &mut self,
        client: (Token, u32),
        job: ProxyJob,
        ticket: Ticket,
        ctx: &WorkerCtx<'_>,
        down: &mut dyn Downstream,
    ) {
        let until = ctx.now + job.group.cfg.timeouts.first_byte;
        let key = self.waiting.insert(Waiter {
            client,
            job,
            ticket,
            until,
        });
        down.relay_link(Token(TOKEN_BASE + OFFSET + key));
    }

    /// The client of parked request `token` went away.
    pub(crate) fn cancel(&mut self, token: Token) {
        let Some(key) = token.0.checked_sub(TOKEN_BASE + OFFSET) else {
            return;
        };
        if let Some(w) = self.waiting.try_remove(key) {
            w.job.group.give_buffer(w.job.request);
        }
    }

    /// Takes the requests whose flight has ended or whose time is up at `now` (none: no
    /// allocation, as in the sweep of a worker with nothing parked).
    pub(crate) fn released(&mut self, now: Instant) -> Vec<Released> {
        if self.waiting.is_empty() {
            return Vec::new();
        }
        let keys: Vec<usize> = self
            .waiting
            .iter()
            .filter(|(_, w)| w.ticket.done() || now >= w.until)
            .map(|(k, _)| k)
            .collect();
        keys.into_iter()
            .map(|k| {
                let w = self.waiting.remove(k);
                (w.client, w.job)
            })
            .collect()
    }
}

/// Answers a released request from the store, when what its fields select there may be used
/// now: relayed to `down` as a finished exchange, with `Cache-Status` saying it was collapsed
/// (RFC 9211 §2.6) — or a 304 when the client's own copy is current — and counted as
/// collapsed. False: nothing usable (not stored, a variant of its own, stale), and the request
/// goes upstream: counted as a miss then.
pub(crate) fn answer(job: &ProxyJob, ctx: &mut WorkerCtx<'_>, down: &mut dyn Downstream) -> bool {
    let Some(fill) = &job.cache else {
        return false;
    };
    let f = fill.borrow();
    let Some((object, age)) = super::lookup::after_wait(&f) else {
        f.cache.count(|c| &c.misses);
        return false;
    };
    let status = CacheStatus {
        fwd: Some(f.fwd),
        collapsed: true,
        ttl: Some(object.fresh.ttl(age)),
        ..CacheStatus::default()
    };
    let not_modified = object.status == 200
        && super::lookup::not_modified(
            lowlat_http::cache::first(&f.request, "if-none-match"),
            lowlat_http::cache::first(&f.request, "if-modified-since"),
            &object,
        );
    let policy = std::sync::Arc::clone(&f.cache.policy);
    f.cache.count(|c| &c.collapsed);
    drop(f);
    let sent = super::send::relay_object(
        down,
        ctx,
        &object,
        age,
        job.added.as_deref().unwrap_or_default(),
        &status,
        &policy.name,
        not_modified,
    );
    super::relaying_as(Some(super::CacheOutcome::Hit), || {
        down.relay_end(ctx, "-", sent, std::time::Duration::ZERO);
    });
    // As a finished exchange is: what was relayed is written now.
    down.flush_relayed(ctx);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parked_tokens_are_neither_upstream_connections_nor_http2() {
        let first = Token(TOKEN_BASE + OFFSET);
        assert!(owns(first));
        assert!(!owns(Token(TOKEN_BASE)));
        assert!(!owns(Token(TOKEN_BASE + OFFSET - 1)));
        assert!(!crate::proxy::h2up::owns(first));
        let last = Token(TOKEN_BASE + crate::proxy::h2up::CONN_OFFSET - 1);
        assert!(owns(last) && !crate::proxy::h2up::owns(last));
        assert!(!owns(Token(TOKEN_BASE + crate::proxy::h2up::CONN_OFFSET)));
    }
}
