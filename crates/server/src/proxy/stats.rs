//! Per upstream server counts for `/metrics`: responses by class, failures by kind, a response
//! time histogram, connections opened, and the connections in flight and idle. Each worker writes only its own slot
//! (a cache line of its own: plain relaxed loads and stores, no locked instruction on the request
//! path); a scrape sums the slots.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the upstream response-time histogram, in microseconds: an application's
/// answers take longer than the server's own, so the buckets reach further than the request
/// histogram's.
pub const UPSTREAM_BUCKETS_US: [u64; 14] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000, 10_000_000, 60_000_000,
];

/// Failure kinds, as the `kind` label names them.
pub(crate) const FAILURE_KINDS: [&str; 4] = ["connect", "closed", "invalid", "timeout"];

/// One worker's counts for one server.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Slot {
    responses: [AtomicU64; 5],
    failures: [AtomicU64; 4],
    buckets: [AtomicU64; UPSTREAM_BUCKETS_US.len() + 1],
    sum_us: AtomicU64,
    connects: AtomicU64,
    active: AtomicU64,
    idle: AtomicU64,
}

/// Adds to a counter only this worker writes.
fn bump(a: &AtomicU64, by: u64) {
    a.store(
        a.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

/// The counts of every server of a group, one slot per worker.
#[derive(Debug)]
pub(crate) struct ServerStats {
    /// `[server][worker]`
    slots: Vec<Vec<Slot>>,
}

/// What a scrape reads of one server.
#[derive(Debug, Default, Clone)]
pub struct ServerTotals {
    pub responses: [u64; 5],
    pub failures: [u64; 4],
    pub buckets: [u64; UPSTREAM_BUCKETS_US.len() + 1],
    pub sum_us: u64,
    pub connects: u64,
    pub active: u64,
    pub idle: u64,
}

impl ServerStats {
    pub(crate) fn new(servers: usize, workers: usize) -> Self {
        Self {
            slots: (0..servers)
                .map(|_| (0..workers.max(1)).map(|_| Slot::default()).collect())
                .collect(),
        }
    }

    fn slot(&self, server: usize, worker: usize) -> Option<&Slot> {
        let per = self.slots.get(server)?;
        per.get(worker % per.len())
    }

    /// A response from `server` ended, `took` after the request was handed to it.
    pub(crate) fn response(&self, server: usize, worker: usize, status: u16, took: Duration) {
        let Some(s) = self.slot(server, worker) else {
            return;
        };
        bump(&s.responses[usize::from(status / 100).clamp(1, 5) - 1], 1);
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let bucket = UPSTREAM_BUCKETS_US
            .iter()
            .position(|&b| us <= b)
            .unwrap_or(UPSTREAM_BUCKETS_US.len());
        bump(&s.buckets[bucket], 1);
        bump(&s.sum_us, us);
    }

    /// An exchange with `server` failed (`kind` indexes [`FAILURE_KINDS`]).
    pub(crate) fn failure(&self, server: usize, worker: usize, kind: usize) {
        if let Some(s) = self.slot(server, worker) {
            bump(&s.failures[kind.min(3)], 1);
        }
    }

    /// A connection to `server` is being opened.
    pub(crate) fn connect(&self, server: usize, worker: usize) {
        if let Some(s) = self.slot(server, worker) {
            bump(&s.connects, 1);
        }
    }

    /// This worker's connections to `server`: in an exchange, and idle in its pool.
    pub(crate) fn connections(&self, server: usize, worker: usize, active: u64, idle: u64) {
        if let Some(s) = self.slot(server, worker) {
            s.active.store(active, Ordering::Relaxed);
            s.idle.store(idle, Ordering::Relaxed);
        }
    }

    /// The sums over the workers, per server.
    pub(crate) fn totals(&self) -> Vec<ServerTotals> {
        self.slots
            .iter()
            .map(|per| {
                let mut t = ServerTotals::default();
                for s in per {
                    let add = |o: &mut [u64], a: &[AtomicU64]| {
                        for (o, a) in o.iter_mut().zip(a) {
                            *o += a.load(Ordering::Relaxed);
                        }
                    };
                    add(&mut t.responses, &s.responses);
                    add(&mut t.failures, &s.failures);
                    add(&mut t.buckets, &s.buckets);
                    t.sum_us += s.sum_us.load(Ordering::Relaxed);
                    t.connects += s.connects.load(Ordering::Relaxed);
                    t.active += s.active.load(Ordering::Relaxed);
                    t.idle += s.idle.load(Ordering::Relaxed);
                }
                t
            })
            .collect()
    }
}
