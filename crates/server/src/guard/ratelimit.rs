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
//! once before keys seen often, and memory stays within the bound whatever is sent.
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
use super::key::KeyPart;

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

/// One zone: its settings and every key's bucket.
pub struct Zone {
    pub spec: ZoneSpec,
    buckets: quick_cache::sync::Cache<u64, Arc<Bucket>>,
    hasher: foldhash::quality::RandomState,
    epoch: Instant,
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
        let epoch = Instant::now();
        let fleet = spec.redis.clone().map(|target| {
            // Drained a burst and one more in this long, within 1 s to 60 s.
            let linger_ms = (spec.burst + 1).saturating_mul(1_000_000) / spec.per_ks.max(1);
            let clock = ZoneClock {
                epoch,
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
        Zone {
            buckets: quick_cache::sync::Cache::new(spec.keys.max(1)),
            spec,
            hasher: foldhash::quality::RandomState::default(),
            epoch,
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
        let key = super::key::hash(&self.spec.key, &self.hasher, req, path, client);
        let made = || {
            let id = if self.fleet.is_some() {
                super::key::fleet_id(&self.spec.key, req, path, client)
            } else {
                [0; 16]
            };
            Arc::new(Bucket::new(id))
        };
        let bucket = self
            .buckets
            .get_or_insert_with(&key, || Ok::<_, ()>(made()))
            .unwrap_or_else(|()| made());
        let ms = now.saturating_duration_since(self.epoch).as_millis() as u64;
        match bucket.admit(ms, self.spec.per_ks, self.spec.burst) {
            Ok(excess) => {
                if let Some(fleet) = &self.fleet {
                    fleet.admitted(&bucket);
                }
                // nginx's delay: the excess over `delay` drained at the rate, in whole
                // milliseconds (less is no delay, as nginx rounds it: a zone of millions a
                // second holds nothing back for one request more in the same millisecond).
                let free = self.spec.delay.saturating_mul(1000);
                let ms = excess.saturating_sub(free) * 1000 / self.spec.per_ks.max(1);
                if ms == 0 {
                    return Verdict::Pass;
                }
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
