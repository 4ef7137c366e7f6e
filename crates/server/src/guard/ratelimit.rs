//! Rate limits (nginx's `limit_req`, its leaky bucket): a zone admits `rate` requests a second
//! per key, with up to `burst` more at once; a request beyond is refused (429 with
//! `Retry-After`, or the status configured) — or only counted, in a dry run.
//!
//! Within the burst, nginx's two stages: the first `delay` requests over the rate pass at once
//! (all of them with `nodelay`), the rest are held back ([`Verdict::Delay`]) until the bucket
//! has drained to them, so that they go through at the rate. The zone decides how long; the
//! worker holds the request (`crate::hold`), never a thread.
//!
//! Each key's state is one [`Bucket`], updated by compare-and-swap, so every worker counts
//! against the same bucket without a lock held across the update. The keys live in a
//! `quick_cache` table bounded in entries: a flood of distinct (spoofed) keys evicts keys seen
//! once before keys seen often, and memory stays within the bound whatever is sent. A worker
//! finds the buckets of keys it met lately through its own index first
//! ([`super::local`]), which the table tells of what it evicts.
//!
//! A zone with `redis=` decides the same way, on the same buckets, and also counts with the
//! other instances through Redis, off the workers' threads ([`super::fleet`]).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lowlat_http::request::Request;

use super::bucket::Bucket;
use super::fleet::{Fleet, FleetCounts, RedisTarget, ZoneClock};
use super::key::{KeyPart, Seed};
use super::local::LocalBuckets;
use crate::prehashed::Prehashed;

/// A zone's settings, as the settings layer checked them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneSpec {
    /// The paths it applies to (`""`: every path).
    pub prefix: String,
    /// Requests admitted per 1000 seconds (`100r/s` is 100 000; `30r/m` is 500).
    pub per_ks: u64,
    /// Requests admitted beyond the rate (held back past `delay`).
    pub burst: u64,
    /// Requests beyond the rate that pass at once ([`NODELAY`]: all of the burst).
    pub delay: u64,
    /// The key: every part, together.
    pub key: Vec<KeyPart>,
    /// The status of a refusal (429 by default; 503 as nginx's).
    pub status: u16,
    /// Count what would be refused, refuse nothing.
    pub dry_run: bool,
    /// Most keys kept.
    pub keys: usize,
    /// Where the fleet's counts are kept, for a zone shared by several instances.
    pub redis: Option<RedisTarget>,
    /// As written, a password masked (for messages and `/metrics`).
    pub text: String,
}

/// [`ZoneSpec::delay`] of a zone with `nodelay`: the whole burst passes at once.
pub const NODELAY: u64 = u64::MAX;

/// Every key's bucket: keyed by the key's seeded hash as it is ([`Prehashed`]), each bucket
/// marked when it is evicted ([`MarkEvicted`]).
type Buckets =
    quick_cache::sync::Cache<u64, Arc<Bucket>, quick_cache::UnitWeighter, Prehashed, MarkEvicted>;

/// The table's eviction hook: marks the bucket it drops, so that a worker's index holding it
/// looks its key up again ([`super::local`]).
#[derive(Clone, Copy, Default)]
struct MarkEvicted;

impl quick_cache::Lifecycle<u64, Arc<Bucket>> for MarkEvicted {
    type RequestState = ();

    fn on_evict(&self, (): &mut (), _key: u64, bucket: Arc<Bucket>) {
        bucket.mark_evicted();
    }
}

/// One zone: its settings and every key's bucket.
pub struct Zone {
    pub spec: ZoneSpec,
    buckets: Buckets,
    seed: Seed,
    /// Requests refused (or, in a dry run, that would have been).
    pub refused: AtomicU64,
    /// Requests held back (or, in a dry run, that would have been).
    pub delayed: AtomicU64,
    /// Requests held back now, by every worker (`crate::hold::Hold` counts itself here).
    pub(crate) waiting: Arc<AtomicU64>,
    /// A zone kept in Redis: the hand-over to its exchange with the fleet.
    fleet: Option<Fleet>,
}

impl std::fmt::Debug for Zone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Zone")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

/// What the rate limits did with a request, as nginx's `$limit_req_status` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitOutcome {
    /// Within every zone that applies.
    Passed,
    /// Refused by a zone (429, or the zone's status).
    Rejected,
    /// Over a dry-run zone's limit: let through.
    RejectedDryRun,
    /// Held back within the burst, then let through.
    Delayed,
    /// Within a dry-run zone's burst, past its `delay`: let through at once.
    DelayedDryRun,
}

impl LimitOutcome {
    /// nginx's word for it.
    #[must_use]
    pub fn token(self) -> &'static str {
        match self {
            Self::Passed => "PASSED",
            Self::Rejected => "REJECTED",
            Self::RejectedDryRun => "REJECTED_DRY_RUN",
            Self::Delayed => "DELAYED",
            Self::DelayedDryRun => "DELAYED_DRY_RUN",
        }
    }
}

/// What a zone says of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    /// Over the limit: refuse, and the client may try again after this many seconds.
    Refuse {
        retry_after: u64,
    },
    /// Over the limit in a dry run: let through, counted.
    DryRunRefuse,
    /// Within the burst, past `delay`: held back this long, then let through.
    Delay(Duration),
    /// Would be held back, in a dry run: let through at once, counted.
    DryRunDelay,
}

impl Zone {
    #[must_use]
    pub fn new(spec: ZoneSpec) -> Zone {
        // Buckets count milliseconds from the process's origin: fixed before any request.
        crate::clock::start_millis();
        let fleet = spec.redis.clone().map(|target| {
            // Drained a burst and one more in this long, within 1 s to 60 s.
            let linger_ms = (spec.burst + 1).saturating_mul(1_000_000) / spec.per_ks.max(1);
            let clock = ZoneClock {
                per_ks: spec.per_ks,
                linger: Duration::from_millis(linger_ms.clamp(1000, 60_000)),
            };
            Fleet::new(
                target,
                super::fleet::zone_prefix(&spec.definition()),
                clock,
                &spec.text,
            )
        });
        let keys = spec.keys.max(1);
        Zone {
            buckets: Buckets::with(
                keys,
                keys as u64,
                quick_cache::UnitWeighter,
                Prehashed,
                MarkEvicted,
            ),
            spec,
            seed: Seed::default(),
            refused: AtomicU64::new(0),
            delayed: AtomicU64::new(0),
            waiting: Arc::new(AtomicU64::new(0)),
            fleet,
        }
    }

    /// Counts `req` (whose path in its normal form is `path`) against its key's bucket at `now`.
    pub fn check(
        &self,
        req: &Request<'_, '_>,
        path: &str,
        client: std::net::IpAddr,
        now: Instant,
    ) -> Verdict {
        let key = super::key::hash(&self.spec.key, &self.seed, req, path, client);
        let bucket = self.bucket(key, req, path, client);
        self.decide(&bucket, crate::clock::millis(now))
    }

    /// [`Zone::check`] at `now_ms` (`crate::clock::millis`), the bucket found through this
    /// worker's index of the zone (`local`, its own for this zone) before the shared table.
    pub(crate) fn check_local(
        &self,
        local: &mut LocalBuckets,
        req: &Request<'_, '_>,
        path: &str,
        client: std::net::IpAddr,
        now_ms: u64,
    ) -> Verdict {
        let key = super::key::hash(&self.spec.key, &self.seed, req, path, client);
        let bucket = local.find(key, now_ms, || self.bucket(key, req, path, client));
        self.decide(bucket, now_ms)
    }

    /// The bucket of `key` (the key of `req`) in the shared table, made if the key is new.
    fn bucket(
        &self,
        key: u64,
        req: &Request<'_, '_>,
        path: &str,
        client: std::net::IpAddr,
    ) -> Arc<Bucket> {
        let made = || {
            let id = if self.fleet.is_some() {
                super::key::fleet_id(&self.spec.key, req, path, client)
            } else {
                [0; 16]
            };
            Arc::new(Bucket::new(id))
        };
        self.buckets
            .get_or_insert_with(&key, || Ok::<_, ()>(made()))
            .unwrap_or_else(|()| made())
    }

    /// Counts one request in `bucket` at `ms`. Inlined into [`Zone::check_local`]: a call of
    /// its own was 18 instructions of saved registers a request (callgrind).
    #[allow(clippy::inline_always)]
    #[inline(always)]
    fn decide(&self, bucket: &Arc<Bucket>, ms: u64) -> Verdict {
        match bucket.admit(ms, self.spec.per_ks, self.spec.burst) {
            Ok(excess) => {
                if let Some(fleet) = &self.fleet {
                    fleet.admitted(bucket);
                }
                // nginx's delay: the excess over `delay` drained at the rate, in whole
                // milliseconds (less is no delay, as nginx rounds it: a zone of millions a
                // second holds nothing back for one request more in the same millisecond).
                // Less than a millisecond's worth is told by a product, not a division.
                let over = excess.saturating_sub(self.spec.delay.saturating_mul(1000));
                let per_ks = self.spec.per_ks.max(1);
                if over.saturating_mul(1000) < per_ks {
                    return Verdict::Pass;
                }
                let ms = over * 1000 / per_ks;
                self.delayed.fetch_add(1, Ordering::Relaxed);
                if self.spec.dry_run {
                    return Verdict::DryRunDelay;
                }
                Verdict::Delay(Duration::from_millis(ms))
            }
            Err(retry_after) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                if self.spec.dry_run {
                    Verdict::DryRunRefuse
                } else {
                    Verdict::Refuse { retry_after }
                }
            }
        }
    }

    /// Keys held now.
    #[must_use]
    pub fn keys(&self) -> usize {
        self.buckets.len()
    }

    /// Starts counting with the fleet, for a zone kept in Redis (once; nothing otherwise).
    /// Not done by [`Zone::new`], so that checking the settings reaches out to nothing.
    pub fn start_exchange(&self) {
        if let Some(fleet) = &self.fleet {
            fleet.start();
        }
    }

    /// A zone kept in Redis: where, and its exchange's counts.
    #[must_use]
    pub fn fleet(&self) -> Option<(&RedisTarget, &FleetCounts)> {
        self.fleet.as_ref().map(|f| (&f.target, &*f.counts))
    }
}

impl ZoneSpec {
    /// What decides the zone's count — its paths, rate, burst and key — as one line: zones kept
    /// in Redis are named by it, so that instances share a zone exactly when they count alike.
    fn definition(&self) -> String {
        let mut text = format!("{}\n{}\n{}\n", self.prefix, self.per_ks, self.burst);
        for (i, part) in self.key.iter().enumerate() {
            let _ = write!(text, "{}{part}", if i == 0 { "" } else { "+" });
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::super::with_request;
    use super::*;

    /// A zone of `per_s` requests a second, no burst, keyed by address, keeping `keys` keys.
    fn zone(per_s: u64, keys: usize) -> Zone {
        Zone::new(ZoneSpec {
            prefix: String::new(),
            per_ks: per_s * 1000,
            burst: 0,
            delay: NODELAY,
            key: vec![KeyPart::Addr],
            status: 429,
            dry_run: false,
            keys,
            redis: None,
            text: "t".into(),
        })
    }

    /// Whether `zone` lets a request from `ip` at `ms` pass, found through the worker's index
    /// `local`.
    fn passes(zone: &Zone, local: &mut LocalBuckets, ip: &str, ms: u64) -> bool {
        let verdict =
            with_request(|req| zone.check_local(local, req, req.path, ip.parse().unwrap(), ms));
        match verdict {
            Verdict::Pass => true,
            Verdict::Refuse { .. } => false,
            other => panic!("{other:?}"),
        }
    }

    /// The bucket the zone's shared table holds for `ip`.
    fn shared(zone: &Zone, ip: &str) -> Option<Arc<Bucket>> {
        let key = with_request(|req| {
            super::super::key::hash(
                &zone.spec.key,
                &zone.seed,
                req,
                req.path,
                ip.parse().unwrap(),
            )
        });
        zone.buckets.peek(&key)
    }

    #[test]
    fn workers_count_a_key_in_one_bucket() {
        // 1 r/s, no burst: of two workers' requests for one key at once, one passes, whether
        // the bucket comes from the shared table or from a worker's index.
        let z = zone(1, 100);
        let (mut w1, mut w2) = (LocalBuckets::new(), LocalBuckets::new());
        assert!(passes(&z, &mut w1, "192.0.2.1", 10_000));
        assert!(!passes(&z, &mut w2, "192.0.2.1", 10_000));
        assert!(!passes(&z, &mut w1, "192.0.2.1", 10_010));
        assert!(passes(&z, &mut w2, "192.0.2.2", 10_010), "another key");
        // A second later, one more passes, on either worker.
        assert!(passes(&z, &mut w2, "192.0.2.1", 11_010));
        assert!(!passes(&z, &mut w1, "192.0.2.1", 11_010));
    }

    #[test]
    fn a_worker_index_follows_an_eviction() {
        // 1000 r/s, no burst (a request drains in a millisecond), a zone of 4 keys. Worker 1
        // counts 192.0.2.1; a flood of other keys evicts its bucket; worker 2 counts the key
        // again in a new bucket. Worker 1, its entry still fresh, must count in the new bucket
        // (refused: worker 2's request is there), not the evicted one (drained: it would pass).
        let z = zone(1000, 4);
        let (mut w1, mut w2) = (LocalBuckets::new(), LocalBuckets::new());
        assert!(passes(&z, &mut w1, "192.0.2.1", 10_000));
        let first = shared(&z, "192.0.2.1").expect("in the table");
        // Keys the table sees more often than it (asked there each time): it keeps them first.
        let now = Instant::now();
        for i in 0..1000 {
            let ip = format!("10.0.{}.{}", i / 256, i % 256).parse().unwrap();
            for _ in 0..3 {
                with_request(|req| z.check(req, req.path, ip, now));
            }
        }
        assert!(z.keys() < 100, "the zone keeps its bound: {}", z.keys());
        assert!(shared(&z, "192.0.2.1").is_none(), "the flood evicted it");
        assert!(first.evicted(), "and the table said so");
        assert!(passes(&z, &mut w2, "192.0.2.1", 10_020));
        assert!(!passes(&z, &mut w1, "192.0.2.1", 10_020));
    }
}
