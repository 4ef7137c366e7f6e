//! The processes of a php-fpm pool, shared by the workers ([`FcgiShare`]): a worker whose
//! request waits in php-fpm's backlog while other workers' idle connections hold every process
//! asks them for one back.
//!
//! php-fpm gives each connection a process for as long as it stays open (`FCGI_KEEP_CONN`), and
//! each worker pools its own connections. A worker that sees one of its requests queued in
//! php-fpm's backlog closes an idle connection of its own to free a process for it
//! (`Upstreams::release_for_queued`); when it has none, the processes are held by other
//! workers' pools, which it cannot touch: it raises the server's ask and rings the workers that
//! pool connections to it. The first worker to find the ask takes it and gives a process back —
//! an idle connection closed at once, or the next exchange to end closed instead of pooled — so
//! that a quiet worker's pool never starves a busy one until its keep-alive timeout.
//!
//! Nothing here is touched per request: an ask is looked at when an exchange with a FastCGI
//! server ends (one atomic load), the wakers are registered once per worker and group.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// One group's FastCGI servers as the workers share them.
#[derive(Debug)]
pub(crate) struct FcgiShare {
    /// Per server: a worker has a request queued in php-fpm's backlog and no idle connection of
    /// its own to close for it.
    asked: Vec<AtomicBool>,
    /// The workers that pool connections to the group's servers, each once: rung on an ask.
    wakers: Mutex<Vec<Arc<mio::Waker>>>,
}

impl FcgiShare {
    pub(crate) fn new(servers: usize) -> Self {
        Self {
            asked: (0..servers).map(|_| AtomicBool::new(false)).collect(),
            wakers: Mutex::new(Vec::new()),
        }
    }

    /// Rings `waker`'s worker when a process of the group's servers is asked for (a worker
    /// pooling a connection to one registers, once).
    pub(crate) fn register(&self, waker: Arc<mio::Waker>) {
        let mut wakers = self.wakers.lock().unwrap_or_else(PoisonError::into_inner);
        if !wakers.iter().any(|w| Arc::ptr_eq(w, &waker)) {
            wakers.push(waker);
        }
    }

    /// A worker (whose waker is `own`) needs a process of `server` that only other workers can
    /// give back: the ask is raised and they are rung. Not when no other worker pools
    /// connections to the group: then what holds the processes is the asking worker's own
    /// exchanges, which free them as they end, and an ask left standing would only close a
    /// connection it keeps later.
    pub(crate) fn ask(&self, server: usize, own: Option<&Arc<mio::Waker>>) {
        let wakers = self.wakers.lock().unwrap_or_else(PoisonError::into_inner);
        let mut others = wakers
            .iter()
            .filter(|w| own.is_none_or(|o| !Arc::ptr_eq(w, o)))
            .peekable();
        if others.peek().is_none() {
            return;
        }
        if let Some(flag) = self.asked.get(server) {
            flag.store(true, Ordering::Release);
        }
        for w in others {
            let _ = w.wake();
        }
    }

    /// Whether a process of `server` was asked for; the caller that gets true gives one back
    /// (one per ask).
    pub(crate) fn take_ask(&self, server: usize) -> bool {
        self.asked.get(server).is_some_and(|flag| {
            // Read first: the flag's cache line is written only when there is an ask.
            flag.load(Ordering::Relaxed) && flag.swap(false, Ordering::AcqRel)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ask_is_taken_once_and_rings_the_others() {
        let poll = mio::Poll::new().unwrap();
        let mine = Arc::new(mio::Waker::new(poll.registry(), mio::Token(1)).unwrap());
        let other_poll = mio::Poll::new().unwrap();
        let other = Arc::new(mio::Waker::new(other_poll.registry(), mio::Token(2)).unwrap());
        let share = FcgiShare::new(2);
        share.register(Arc::clone(&mine));
        // No other worker pools connections: no one to ask.
        share.ask(1, Some(&mine));
        assert!(!share.take_ask(1));
        share.register(Arc::clone(&other));
        share.register(Arc::clone(&other));
        assert_eq!(share.wakers.lock().unwrap().len(), 2);
        assert!(!share.take_ask(0));
        share.ask(1, Some(&mine));
        assert!(!share.take_ask(0));
        assert!(share.take_ask(1));
        assert!(!share.take_ask(1), "one give-back per ask");
        // Only the other worker was rung.
        let mut events = mio::Events::with_capacity(4);
        let mut poll = poll;
        poll.poll(&mut events, Some(std::time::Duration::ZERO))
            .unwrap();
        assert!(events.is_empty());
        let mut other_poll = other_poll;
        other_poll
            .poll(&mut events, Some(std::time::Duration::from_secs(1)))
            .unwrap();
        assert_eq!(events.iter().count(), 1);
        assert!(!share.take_ask(7), "no such server");
    }
}
