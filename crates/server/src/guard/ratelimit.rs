//! Rate limits (nginx's `limit_req`, its leaky bucket): a zone admits `rate` requests a second
//! per key, with up to `burst` more at once; a request beyond is refused (429 with
//! `Retry-After`, or the status configured) — or only counted, in a dry run.
//!
//! Each key's state is one `AtomicU64` (the excess in thousandths of a request, and the time
//! of its last request in milliseconds) updated by compare-and-swap, so every worker counts
//! against the same bucket without a lock held across the update. The keys live in a
//! `quick_cache` table bounded in entries: a flood of distinct (spoofed) keys evicts keys seen
//! once before keys seen often, and memory stays within the bound whatever is sent.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use lowlat_http::request::Request;

use super::key::KeyPart;

/// A zone's settings, as the settings layer checked them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneSpec {
    /// The paths it applies to (`""`: every path).
    pub prefix: String,
    /// Requests admitted per 1000 seconds (`100r/s` is 100 000; `30r/m` is 500).
    pub per_ks: u64,
    /// Requests admitted at once beyond the rate.
    pub burst: u64,
    /// The key: every part, together.
    pub key: Vec<KeyPart>,
    /// The status of a refusal (429 by default; 503 as nginx's).
    pub status: u16,
    /// Count what would be refused, refuse nothing.
    pub dry_run: bool,
    /// Most keys kept.
    pub keys: usize,
    /// As written (for messages and `/metrics`).
    pub text: String,
}

/// One zone: its settings and every key's bucket.
pub struct Zone {
    pub spec: ZoneSpec,
    buckets: quick_cache::sync::Cache<u64, Arc<AtomicU64>>,
    hasher: foldhash::quality::RandomState,
    epoch: Instant,
    /// Requests refused (or, in a dry run, that would have been).
    pub refused: AtomicU64,
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
}

impl LimitOutcome {
    /// nginx's word for it.
    #[must_use]
    pub fn token(self) -> &'static str {
        match self {
            Self::Passed => "PASSED",
            Self::Rejected => "REJECTED",
            Self::RejectedDryRun => "REJECTED_DRY_RUN",
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
}

impl Zone {
    #[must_use]
    pub fn new(spec: ZoneSpec) -> Zone {
        Zone {
            buckets: quick_cache::sync::Cache::new(spec.keys.max(1)),
            spec,
            hasher: foldhash::quality::RandomState::default(),
            epoch: Instant::now(),
            refused: AtomicU64::new(0),
        }
    }

    /// Counts `req` against its key's bucket at `now`.
    pub fn check(&self, req: &Request<'_, '_>, client: std::net::IpAddr, now: Instant) -> Verdict {
        let key = super::key::hash(&self.spec.key, &self.hasher, req, client);
        let bucket = self
            .buckets
            .get_or_insert_with(&key, || Ok::<_, ()>(Arc::new(AtomicU64::new(EMPTY))))
            .unwrap_or_else(|()| Arc::new(AtomicU64::new(EMPTY)));
        let ms = now.saturating_duration_since(self.epoch).as_millis() as u64;
        match admit(&bucket, ms, self.spec.per_ks, self.spec.burst) {
            None => Verdict::Pass,
            Some(retry_after) => {
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
}

/// A bucket never used: no excess, no time.
const EMPTY: u64 = u64::MAX;

/// nginx's leaky bucket on one packed state: the excess (thousandths of a request, high 32
/// bits) drains at the rate since the last request (low 32 bits, milliseconds, wrapping every
/// 49 days — a gap that long drains any bucket anyway), and a request adds one; a key's first
/// request leaves no excess. Over `burst`, the request is refused and the state kept:
/// `Some(seconds until one would pass)`. `per_ks` is the rate in thousandths a second.
fn admit(bucket: &AtomicU64, now_ms: u64, per_ks: u64, burst: u64) -> Option<u64> {
    let now = now_ms as u32;
    let limit = burst.saturating_mul(1000).min(u64::from(u32::MAX));
    let mut old = bucket.load(Ordering::Relaxed);
    loop {
        let excess = if old == EMPTY {
            0
        } else {
            let (excess, last) = (old >> 32, old as u32);
            let drained = u64::from(now.wrapping_sub(last)).saturating_mul(per_ks) / 1000;
            (excess + 1000).saturating_sub(drained)
        };
        if excess > limit {
            let wait_ms = ((excess - limit) * 1000).div_ceil(per_ks.max(1));
            return Some(wait_ms.div_ceil(1000).max(1));
        }
        let new = (excess << 32) | u64::from(now);
        match bucket.compare_exchange_weak(old, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return None,
            Err(seen) => old = seen,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_admits_the_rate_and_the_burst() {
        let b = AtomicU64::new(EMPTY);
        // 10 r/s, burst 5: at one instant, 1 + 5 pass and the 7th is refused.
        let passed = (0..7)
            .filter(|_| admit(&b, 1000, 10_000, 5).is_none())
            .count();
        assert_eq!(passed, 6);
        // A tenth of a second later one more drains: one passes, the next does not.
        assert_eq!(admit(&b, 1100, 10_000, 5), None);
        assert!(admit(&b, 1100, 10_000, 5).is_some());
        // Long after, the bucket is empty again.
        let passed = (0..7)
            .filter(|_| admit(&b, 60_000, 10_000, 5).is_none())
            .count();
        assert_eq!(passed, 6);
    }

    #[test]
    fn a_steady_client_at_the_rate_is_never_refused() {
        let b = AtomicU64::new(EMPTY);
        // 2 r/s, no burst: one request every 500 ms passes for ever; one every 400 ms comes
        // too soon after each one passed, as with nginx: every other one is refused.
        assert!((0..100).all(|i| admit(&b, 10_000 + i * 500, 2000, 0).is_none()));
        let b = AtomicU64::new(EMPTY);
        let refused = (0..100)
            .filter(|i| admit(&b, 10_000 + i * 400, 2000, 0).is_some())
            .count();
        assert_eq!(refused, 50);
    }

    #[test]
    fn retry_after_says_when_one_would_pass() {
        let b = AtomicU64::new(EMPTY);
        // 1 r/m (16 thousandths a second, as nginx rounds it), no burst: the second request
        // waits a minute and a little.
        assert_eq!(admit(&b, 5000, 1000 / 60, 0), None);
        let wait = admit(&b, 5000, 1000 / 60, 0).unwrap();
        assert!((60..=63).contains(&wait), "{wait}");
    }
}
