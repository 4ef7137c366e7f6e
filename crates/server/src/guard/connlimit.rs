//! Connection limits (nginx's `limit_conn`): at most `max` requests of one key in progress at
//! once; one more is refused (503, or the status configured) — or only counted, in a dry run.
//!
//! As nginx counts, a request is in progress from its head until its answer is done: a file
//! until its last byte is handed to the kernel, a forwarded request until the relayed answer
//! (or the WebSocket tunnel) ends; a keep-alive connection waiting for its next request holds
//! nothing, and each stream of an HTTP/2 or HTTP/3 connection counts. A request that passes
//! takes a [`Slot`] that gives its place back when dropped, wherever the protocol keeps the
//! request's state, so no path can forget to release it.
//!
//! The counts live in a table sharded by key, each shard behind its own lock held for one
//! increment or decrement: a key is in the table only while it has requests in progress, so
//! the table holds at most as many keys as there are requests being answered, whatever a flood
//! of distinct keys sends, and needs no eviction (which would forget a count and let a key
//! past its limit).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use lowlat_http::request::Request;

use super::key::KeyPart;

/// A zone's settings, as the settings layer checked them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnZoneSpec {
    /// The paths it applies to (`""`: every path).
    pub prefix: String,
    /// Requests of one key in progress at once.
    pub max: u32,
    /// The key: every part, together.
    pub key: Vec<KeyPart>,
    /// The status of a refusal (503 by default, as nginx's; 429 if configured).
    pub status: u16,
    /// Count what would be refused, refuse nothing.
    pub dry_run: bool,
    /// As written (for messages and `/metrics`).
    pub text: String,
}

/// Shards of the count table: enough that workers rarely meet on one lock.
const SHARDS: usize = 64;

/// One zone: its settings and every key's count of requests in progress.
pub struct ConnZone {
    pub spec: ConnZoneSpec,
    shards: Box<[Mutex<HashMap<u64, u32, foldhash::fast::FixedState>>]>,
    seed: super::key::Seed,
    /// Requests refused (or, in a dry run, that would have been).
    pub refused: AtomicU64,
}

impl std::fmt::Debug for ConnZone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnZone")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

/// A request's place in a zone, given back when dropped.
pub struct Slot {
    zone: Arc<ConnZone>,
    key: u64,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("zone", &self.zone.spec.text)
            .finish_non_exhaustive()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.zone.release(self.key);
    }
}

/// What a zone says of one request.
#[derive(Debug)]
pub enum Taken {
    /// Within the limit (or over it in a dry run): the place held until the answer is done.
    Pass(Slot),
    /// Over the limit: refuse.
    Refuse,
}

impl ConnZone {
    #[must_use]
    pub fn new(spec: ConnZoneSpec) -> ConnZone {
        ConnZone {
            spec,
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            seed: super::key::Seed::default(),
            refused: AtomicU64::new(0),
        }
    }

    fn shard(
        &self,
        key: u64,
    ) -> std::sync::MutexGuard<'_, HashMap<u64, u32, foldhash::fast::FixedState>> {
        // The key is a seeded hash already: its top bits choose the shard, the map hashes it
        // again with a fixed seed.
        self.shards[(key >> 58) as usize % SHARDS]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes a place for `req` (whose path in its normal form is `path`) from a client at
    /// `client`, or says it is over the limit.
    pub fn take(
        self: &Arc<Self>,
        req: &Request<'_, '_>,
        path: &str,
        client: std::net::IpAddr,
    ) -> Taken {
        let key = super::key::hash(&self.spec.key, &self.seed, req, path, client);
        let over = {
            let mut shard = self.shard(key);
            let count = shard.entry(key).or_insert(0);
            let over = *count >= self.spec.max;
            if !over || self.spec.dry_run {
                *count += 1;
            }
            over
        };
        if over {
            self.refused.fetch_add(1, Ordering::Relaxed);
            if !self.spec.dry_run {
                return Taken::Refuse;
            }
        }
        Taken::Pass(Slot {
            zone: Arc::clone(self),
            key,
        })
    }

    fn release(&self, key: u64) {
        let mut shard = self.shard(key);
        if let Some(count) = shard.get_mut(&key) {
            *count -= 1;
            if *count == 0 {
                shard.remove(&key);
            }
        }
    }

    /// Keys with requests in progress now.
    #[must_use]
    pub fn keys(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().map_or(0, |m| m.len()))
            .sum()
    }

    /// Requests in progress now, every key together.
    #[must_use]
    pub fn in_progress(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .map_or(0, |m| m.values().map(|&n| u64::from(n)).sum())
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::super::with_request;
    use super::*;

    fn zone(max: u32, dry_run: bool) -> Arc<ConnZone> {
        Arc::new(ConnZone::new(ConnZoneSpec {
            prefix: String::new(),
            max,
            key: vec![KeyPart::Addr],
            status: 503,
            dry_run,
            text: "t".into(),
        }))
    }

    fn take(z: &Arc<ConnZone>, ip: &str) -> Taken {
        with_request(|req| z.take(req, req.path, ip.parse().unwrap()))
    }

    #[test]
    fn a_key_holds_at_most_max_and_gives_places_back() {
        let z = zone(2, false);
        let a = take(&z, "10.0.0.1");
        let b = take(&z, "10.0.0.1");
        assert!(matches!(take(&z, "10.0.0.1"), Taken::Refuse));
        // Another key has its own count.
        let c = take(&z, "10.0.0.2");
        assert!(matches!(c, Taken::Pass(_)));
        assert_eq!((z.keys(), z.in_progress()), (2, 3));
        drop(a);
        let d = take(&z, "10.0.0.1");
        assert!(matches!(d, Taken::Pass(_)));
        drop((b, c, d));
        // Keys leave the table with their last request.
        assert_eq!((z.keys(), z.in_progress()), (0, 0));
        assert_eq!(z.refused.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_dry_run_lets_through_and_counts() {
        let z = zone(1, true);
        let held: Vec<Taken> = (0..3).map(|_| take(&z, "::1")).collect();
        assert!(held.iter().all(|t| matches!(t, Taken::Pass(_))));
        assert_eq!(z.refused.load(Ordering::Relaxed), 2);
        drop(held);
        assert_eq!(z.in_progress(), 0);
    }
}
