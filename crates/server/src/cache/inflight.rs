//! Fills in progress ([`Flights`]), one per key across the process: concurrent misses of one
//! key make one upstream request (request collapsing), and a stale response is refreshed once
//! (stale-while-revalidate).
//!
//! A miss enters the table ([`enter`]). The first for a key leads: its fill is the flight, and
//! its [`Leader`] ends the flight when dropped — when the response is stored, found not
//! storable, cut, failed, or its exchange abandoned, whichever comes first, so a flight can
//! never outlive its fill. Later misses of the key get a [`Ticket`] and wait, parked by their
//! own worker (`collapse`); the table keeps, per flight, the waker of each worker with a
//! waiter. The leader's end removes the flight, marks its tickets done and wakes each of those
//! workers once; a woken worker looks its waiters up again.
//!
//! The lock is held for one look-up and insert or one removal, never while a socket is
//! written or a worker is woken, and only on a miss: a hit never touches the table.
//!
//! The key is the primary key, or the variant's key when the store already holds a `Vary`
//! marker for the URL (`lookup`), so that requests for different variants do not wait for each
//! other once the response is known to vary.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// The fills in progress, by key.
///
/// A flight is filed under its key's 64-bit hash, not the key: entering and leaving the table
/// then allocates nothing (the key was one allocation a miss, the flight's `done` flag another,
/// which now only a waiter makes). Two keys of one hash share a flight: the later request
/// waits for the other's fill, finds nothing of its own in the store, and goes upstream alone
/// (`collapse`), a detour of one exchange once in 2^64.
/// The hash is the store's (`CacheStore::hashed`: foldhash, random-seeded per process),
/// made once for the request's look-ups, its flight and its insert.
#[derive(Debug)]
pub(crate) struct Flights {
    map: Mutex<Table>,
    /// Flights ended so far ([`Flights::ended`]).
    ended: AtomicU64,
}

/// The table and the id of the next flight.
#[derive(Debug)]
struct Table {
    flights: HashMap<u64, Flight, foldhash::fast::FixedState>,
    next: u64,
}

impl Default for Flights {
    fn default() -> Self {
        Flights {
            ended: AtomicU64::new(0),
            map: Mutex::new(Table {
                // Room from the start: a table this size keeps free slots beside each entry,
                // so a removal leaves no tombstone and a miss never rehashes it.
                flights: HashMap::with_capacity_and_hasher(
                    64,
                    foldhash::fast::FixedState::default(),
                ),
                next: 0,
            }),
        }
    }
}

/// One fill in progress.
#[derive(Debug)]
struct Flight {
    /// Which flight (a later one of the same key is another).
    id: u64,
    /// Set when the flight ends; each waiter holds it (made by the first).
    done: Option<Arc<AtomicBool>>,
    /// The workers with a waiter, each once.
    wakers: Vec<Arc<mio::Waker>>,
}

/// A miss's part in the flight of its key.
#[derive(Debug)]
pub(crate) enum Role {
    /// It makes the upstream request; others may wait for it. (Held for its `Drop`.)
    #[allow(dead_code)]
    Lead(Leader),
    /// Another request is fetching the key: wait for it.
    Wait(Ticket),
    /// Neither: it goes upstream on its own (it may not wait, or cannot).
    Alone,
}

/// The leading fill's hold on its flight: dropping it ends the flight.
#[derive(Debug)]
pub(crate) struct Leader {
    flights: Arc<Flights>,
    hash: u64,
    id: u64,
}

/// A waiter's hold on the flight it waits for.
#[derive(Debug)]
pub(crate) struct Ticket {
    done: Arc<AtomicBool>,
}

impl Ticket {
    /// Whether the flight has ended (what it stored, if anything, is in the store).
    pub(crate) fn done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }
}

/// Enters the flight of the key whose hash is `hash` among `flights` (the store's): leads a new
/// one when there is none, waits for the one there when `may_wait` allows (and this thread has
/// a loop to wait in), else goes alone.
pub(crate) fn enter(flights: &Arc<Flights>, hash: u64, may_wait: bool) -> Role {
    if !crate::own_waker::present() {
        return Role::Alone;
    }
    let mut table = flights.map.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(flight) = table.flights.get_mut(&hash) {
        if !may_wait {
            return Role::Alone;
        }
        // The waker is taken (a reference counted) only by a miss that waits.
        let Some(waker) = crate::own_waker::get() else {
            return Role::Alone;
        };
        if !flight.wakers.iter().any(|w| Arc::ptr_eq(w, &waker)) {
            flight.wakers.push(waker);
        }
        let done = flight
            .done
            .get_or_insert_with(|| Arc::new(AtomicBool::new(false)));
        return Role::Wait(Ticket {
            done: Arc::clone(done),
        });
    }
    let id = table.next;
    table.next += 1;
    table.flights.insert(
        hash,
        Flight {
            id,
            done: None,
            wakers: Vec::new(),
        },
    );
    drop(table);
    Role::Lead(Leader {
        flights: Arc::clone(flights),
        hash,
        id,
    })
}

impl Drop for Leader {
    fn drop(&mut self) {
        let flight = {
            let mut table = self
                .flights
                .map
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match table.flights.get(&self.hash) {
                Some(f) if f.id == self.id => {
                    // Under the lock: a miss that enters after this removal sees the count.
                    self.flights.ended.fetch_add(1, Ordering::Release);
                    table.flights.remove(&self.hash)
                }
                _ => None,
            }
        };
        let Some(flight) = flight else {
            return;
        };
        // Done before the wake: a woken worker must find its tickets done.
        if let Some(done) = &flight.done {
            done.store(true, Ordering::Release);
        }
        for waker in flight.wakers {
            let _ = waker.wake();
        }
    }
}

impl Flights {
    /// How many flights have ended. A miss reads it before its look-up and again after it
    /// entered the flight of its key as its leader: unchanged, no flight ended in between, so
    /// nothing a flight stored can have come since the look-up found nothing usable, and the
    /// store need not be asked again (about 240 instructions a miss).
    pub(crate) fn ended(&self) -> u64 {
        self.ended.load(Ordering::Acquire)
    }

    /// Flights in progress (for the tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .flights
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> Arc<Flights> {
        Arc::new(Flights::default())
    }

    fn hash(key: &[u8]) -> u64 {
        use std::hash::BuildHasher;
        foldhash::fast::FixedState::default().hash_one(key)
    }

    #[test]
    fn without_a_loop_every_miss_goes_alone() {
        let s = store();
        assert!(matches!(enter(&s, hash(b"k"), true), Role::Alone));
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn one_leads_the_others_wait_and_are_woken_when_it_ends() {
        let s = store();
        let mut poll = mio::Poll::new().unwrap();
        let waker = Arc::new(mio::Waker::new(poll.registry(), mio::Token(7)).unwrap());
        crate::own_waker::set(Arc::clone(&waker));
        let Role::Lead(leader) = enter(&s, hash(b"k"), true) else {
            panic!("the first miss leads");
        };
        let Role::Wait(ticket) = enter(&s, hash(b"k"), true) else {
            panic!("the second waits");
        };
        assert!(matches!(enter(&s, hash(b"k"), false), Role::Alone));
        let Role::Lead(other) = enter(&s, hash(b"other"), true) else {
            panic!("another key leads its own flight");
        };
        assert_eq!(s.len(), 2);
        assert!(!ticket.done());
        assert_eq!(s.ended(), 0);
        drop(leader);
        assert!(ticket.done());
        assert_eq!(s.ended(), 1);
        assert_eq!(s.len(), 1);
        let mut events = mio::Events::with_capacity(4);
        poll.poll(&mut events, Some(std::time::Duration::from_secs(5)))
            .unwrap();
        assert!(events.iter().any(|e| e.token() == mio::Token(7)));
        // The key is free: the next miss leads again.
        assert!(matches!(enter(&s, hash(b"k"), true), Role::Lead(_)));
        drop(other);
    }
}
