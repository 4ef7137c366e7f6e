//! A request held back before it is answered: what a handler says when a request is to wait
//! (a rate limit's `delay`: nginx's `limit_req` without `nodelay`), and the worker's timers that
//! bring it back.
//!
//! The handler writes nothing and gives a [`Hold`] ([`crate::handler::Response::hold`]); the
//! protocol keeps the request as it arrived — HTTP/1.1 leaves it unconsumed in the read buffer
//! and reads no further, HTTP/2 keeps the decoded head and body on the stream — and registers
//! the time with [`Timers`]. When it comes, the worker drives the connection again and the
//! request goes through the router once more, marked as released (the guard does not count it
//! twice). A held request holds no thread and no place in a connection-limit zone; its
//! [`Hold`] counts it in its zone while it waits, and dropping it (the client left, the stream
//! was reset, the connection closed) gives that back.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::Token;

/// A held request's deadline passing unreleased means its timer was lost: the connection is
/// closed this long after it, rather than left waiting for ever.
pub(crate) const RELEASE_SLACK: Duration = Duration::from_secs(5);

/// A request held until `until`, counted in a gauge (its zone's requests held now) while it is.
#[derive(Debug)]
pub(crate) struct Hold {
    pub(crate) until: Instant,
    waiting: Arc<AtomicU64>,
}

impl Hold {
    /// Holds until `until`, counted in `waiting` until dropped.
    pub(crate) fn new(until: Instant, waiting: &Arc<AtomicU64>) -> Hold {
        waiting.fetch_add(1, Ordering::Relaxed);
        Hold {
            until,
            waiting: Arc::clone(waiting),
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One worker's timers for held requests: when, and which connection to drive. A connection
/// that closed in the meantime (or whose slot a new one took) is driven for nothing, which is
/// harmless: only a hold that is due is released.
#[derive(Default)]
pub(crate) struct Timers {
    due: BinaryHeap<Reverse<(Instant, usize)>>,
}

impl Timers {
    /// Drives `token` again at `until`.
    pub(crate) fn at(&mut self, until: Instant, token: Token) {
        self.due.push(Reverse((until, token.0)));
    }

    /// The earliest timer, for the loop's wait.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.due.peek().map(|Reverse((t, _))| *t)
    }

    /// Takes the connections whose time has come by `now`.
    pub(crate) fn take_due(&mut self, now: Instant, into: &mut Vec<Token>) {
        while let Some(Reverse((t, token))) = self.due.peek().copied() {
            if t > now {
                break;
            }
            self.due.pop();
            into.push(Token(token));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_come_due_in_order_and_holds_count_while_they_live() {
        let t0 = Instant::now();
        let mut timers = Timers::default();
        timers.at(t0 + Duration::from_millis(200), Token(7));
        timers.at(t0 + Duration::from_millis(100), Token(9));
        assert_eq!(timers.next(), Some(t0 + Duration::from_millis(100)));
        let mut due = Vec::new();
        timers.take_due(t0 + Duration::from_millis(150), &mut due);
        assert_eq!(due, [Token(9)]);
        timers.take_due(t0 + Duration::from_millis(250), &mut due);
        assert_eq!(due, [Token(9), Token(7)]);
        assert_eq!(timers.next(), None);

        let gauge = Arc::new(AtomicU64::new(0));
        let a = Hold::new(t0, &gauge);
        let b = Hold::new(t0, &gauge);
        assert_eq!(gauge.load(Ordering::Relaxed), 2);
        drop(a);
        drop(b);
        assert_eq!(gauge.load(Ordering::Relaxed), 0);
    }
}
