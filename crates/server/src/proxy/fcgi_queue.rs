//! Requests waiting in this worker for a connection to a php-fpm server that is serving all it
//! can ([`Backlog`]).
//!
//! php-fpm gives each connection a process of its own for as long as the connection stays
//! open, and no process to a connection beyond its `pm.max_children`: that one waits in the
//! listening socket's backlog. Forwarding every request on a connection of its own then fills
//! that backlog under load — one connect, one close, a process handed over per request, and
//! every finished exchange asking the kernel about the connections still queued (`engine`'s
//! `fastcgi_queued`). So once a worker has seen a request of its queued there, it keeps at
//! most one connection more than php-fpm has been seen to serve at once (the one more finds
//! out whether a process has been added), and the requests beyond wait here, in order; each
//! takes the next connection whose exchange ends, kept open — no connect, no backlog. A
//! waiting request has a token of its own, linked to its client as an upstream exchange's
//! would be: a client that leaves cancels it; one that waits past its group's first-byte
//! timeout gets a 504, as one waiting for the application's answer would.

use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Instant;

use mio::Token;
use slab::Slab;

use super::group::WorkerGroup;
use super::job::ProxyJob;
use super::upstream::TOKEN_BASE;

/// Where waiting requests' tokens start above the upstream side's base: past any upstream
/// connection's, below the cache's parked requests' (`crate::cache::collapse`).
const OFFSET: usize = 1 << 38;
const END: usize = 1 << 39;

/// Whether `token` is a waiting request's.
pub(crate) fn owns(token: Token) -> bool {
    (TOKEN_BASE + OFFSET..TOKEN_BASE + END).contains(&token.0)
}

/// One worker's requests waiting for a php-fpm connection.
#[derive(Debug, Default)]
pub(crate) struct Backlog {
    waiting: Slab<Waiter>,
    /// Arrival order: (slab key, sequence), stale once its waiter left (the slab reuses keys).
    order: VecDeque<(usize, u64)>,
    next_seq: u64,
}

#[derive(Debug)]
struct Waiter {
    client: (Token, u32),
    job: ProxyJob,
    server: usize,
    seq: u64,
    until: Instant,
}

impl Backlog {
    /// Whether no request waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// `job` of `client` waits for a connection to `server` of its group; the token that
    /// stands for it until then.
    pub(crate) fn push(
        &mut self,
        client: (Token, u32),
        job: ProxyJob,
        server: usize,
        now: Instant,
    ) -> Token {
        let seq = self.next_seq;
        self.next_seq += 1;
        let until = now + job.group.cfg.timeouts.first_byte;
        let key = self.waiting.insert(Waiter {
            client,
            job,
            server,
            seq,
            until,
        });
        self.order.push_back((key, seq));
        Token(TOKEN_BASE + OFFSET + key)
    }

    fn key(token: Token) -> Option<usize> {
        token.0.checked_sub(TOKEN_BASE + OFFSET)
    }

    /// The client a waiting request answers.
    pub(crate) fn client_of(&self, token: Token) -> Option<(Token, u32)> {
        self.waiting.get(Self::key(token)?).map(|w| w.client)
    }

    /// Takes the waiting request `token` names (its client left, or its time is up).
    pub(crate) fn take(&mut self, token: Token) -> Option<ProxyJob> {
        self.waiting.try_remove(Self::key(token)?).map(|w| w.job)
    }

    /// The request that has waited longest for `server` of `group`, taken: a connection to it
    /// is free now.
    pub(crate) fn next_for(
        &mut self,
        group: &Rc<WorkerGroup>,
        server: usize,
    ) -> Option<((Token, u32), ProxyJob)> {
        let at = self.order.iter().position(|&(key, seq)| {
            self.waiting.get(key).is_some_and(|w| {
                w.seq == seq && w.server == server && Rc::ptr_eq(&w.job.group, group)
            })
        })?;
        let (key, _) = self.order.remove(at)?;
        // Entries of waiters long gone are dropped as the front passes them.
        while self
            .order
            .front()
            .is_some_and(|&(k, s)| self.waiting.get(k).is_none_or(|w| w.seq != s))
        {
            self.order.pop_front();
        }
        let w = self.waiting.remove(key);
        Some((w.client, w.job))
    }

    /// The tokens of requests that have waited past their time at `now`.
    pub(crate) fn expired(&self, now: Instant, out: &mut Vec<Token>) {
        out.extend(
            self.waiting
                .iter()
                .filter(|(_, w)| now >= w.until)
                .map(|(k, _)| Token(TOKEN_BASE + OFFSET + k)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_tokens_are_their_own() {
        let first = Token(TOKEN_BASE + OFFSET);
        assert!(owns(first));
        assert!(!owns(Token(TOKEN_BASE + OFFSET - 1)));
        assert!(!crate::cache::collapse::owns(first));
        let last = Token(TOKEN_BASE + END - 1);
        assert!(owns(last) && !crate::cache::collapse::owns(last));
        assert!(crate::cache::collapse::owns(Token(TOKEN_BASE + END)));
    }
}
