//! One key's leaky bucket (nginx's `limit_req`), packed in one `AtomicU64` that every worker
//! updates by compare-and-swap: the excess in thousandths of a request (high 32 bits) and the
//! time of its last change in milliseconds (low 32 bits). A request adds one and the excess
//! drains at the rate; beyond `burst` the request is refused and the state kept.
//!
//! A zone kept in Redis adds the requests the rest of the fleet admitted to the same bucket
//! ([`Bucket::inject`], from the zone's exchange thread): the worker's decision stays one
//! compare-and-swap on memory it owns, whatever Redis is doing.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// One key's state.
pub(super) struct Bucket {
    /// Excess and time, packed (see the module's docs); [`EMPTY`] before the first request.
    state: AtomicU64,
    /// Zones kept in Redis: requests admitted here since the last exchange (low 31 bits), and
    /// [`TRACKED`] while the exchange thread holds this bucket — so that a worker hands a
    /// bucket over only when it goes from nothing to something (0 → 1), not on every request.
    pub(super) pending: AtomicU32,
    /// Zones kept in Redis: the key as every instance names it (zero in a local zone).
    pub(super) id: [u8; 16],
    /// Set when the zone's table drops this bucket: a worker's own index of the zone's buckets
    /// (`super::local`) looks the key up again rather than go on counting here.
    evicted: AtomicBool,
}

/// A bucket never used: no excess, no time.
const EMPTY: u64 = u64::MAX;

/// [`Bucket::pending`]'s flag: the exchange thread holds the bucket.
pub(super) const TRACKED: u32 = 1 << 31;

/// How far behind a bucket's time a worker's clock may be and still count as "no time has
/// passed". Each worker reads the clock once per wake-up, so a worker may hold a time a little
/// older than the one another worker (or the exchange thread) just wrote; without this, the
/// difference would wrap to 49 days and drain the bucket entirely.
const BEHIND_MS: u32 = 60_000;

impl Bucket {
    pub(super) fn new(id: [u8; 16]) -> Bucket {
        Bucket {
            state: AtomicU64::new(EMPTY),
            pending: AtomicU32::new(0),
            id,
            evicted: AtomicBool::new(false),
        }
    }

    /// Says the zone's table dropped this bucket.
    pub(super) fn mark_evicted(&self) {
        self.evicted.store(true, Ordering::Relaxed);
    }

    /// Whether the zone's table dropped this bucket. Relaxed: a worker that sees it a moment
    /// late counts one request more here, as one that found the bucket just before it went.
    #[inline]
    pub(super) fn evicted(&self) -> bool {
        self.evicted.load(Ordering::Relaxed)
    }

    /// Counts one request at `now_ms`: `Ok(the excess it leaves, in thousandths)` if it
    /// passes (what decides a delay), else `Err(seconds until one would pass)`. `per_ks` is
    /// the rate in thousandths a second.
    pub(super) fn admit(&self, now_ms: u64, per_ks: u64, burst: u64) -> Result<u64, u64> {
        admit(&self.state, now_ms, per_ks, burst)
    }

    /// Adds `n` requests admitted elsewhere (by the rest of the fleet) at `now_ms`, refusing
    /// nothing: they happened. The excess may go past the burst, and then this instance
    /// refuses until it drains — the fleet pays back what it admitted over the limit
    /// between two exchanges.
    pub(super) fn inject(&self, n: u64, now_ms: u64, per_ks: u64) {
        let now = now_ms as u32;
        let mut old = self.state.load(Ordering::Relaxed);
        loop {
            let (excess, stamp) = if old == EMPTY {
                (n.saturating_sub(1).saturating_mul(1000), now)
            } else {
                let (excess, last) = (old >> 32, old as u32);
                let (elapsed, stamp) = since(last, now);
                let drained = u64::from(elapsed).saturating_mul(per_ks) / 1000;
                (
                    excess
                        .saturating_add(n.saturating_mul(1000))
                        .saturating_sub(drained),
                    stamp,
                )
            };
            let new = (excess.min(u64::from(u32::MAX)) << 32) | u64::from(stamp);
            match self
                .state
                .compare_exchange_weak(old, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(seen) => old = seen,
            }
        }
    }
}

/// Milliseconds from `last` to `now` (wrapping every 49 days: a gap that long drains any
/// bucket anyway), and the time to record. A `now` a little behind `last` (another worker's
/// clock, read a moment earlier) is no time at all, and the later time is kept.
fn since(last: u32, now: u32) -> (u32, u32) {
    let elapsed = now.wrapping_sub(last);
    if elapsed > u32::MAX - BEHIND_MS {
        (0, last)
    } else {
        (elapsed, now)
    }
}

/// nginx's leaky bucket on one packed state: the excess drains at the rate since the last
/// request, and a request adds one; a key's first request leaves no excess. Over `burst`, the
/// request is refused and the state kept: `Err(seconds until one would pass)`; else the new
/// excess.
fn admit(bucket: &AtomicU64, now_ms: u64, per_ks: u64, burst: u64) -> Result<u64, u64> {
    let now = now_ms as u32;
    let limit = burst.saturating_mul(1000).min(u64::from(u32::MAX));
    let mut old = bucket.load(Ordering::Relaxed);
    loop {
        let (excess, stamp) = if old == EMPTY {
            (0, now)
        } else {
            let (excess, last) = (old >> 32, old as u32);
            let (elapsed, stamp) = since(last, now);
            let drained = u64::from(elapsed).saturating_mul(per_ks) / 1000;
            ((excess + 1000).saturating_sub(drained), stamp)
        };
        if excess > limit {
            let wait_ms = ((excess - limit) * 1000).div_ceil(per_ks.max(1));
            return Err(wait_ms.div_ceil(1000).max(1));
        }
        let new = (excess << 32) | u64::from(stamp);
        match bucket.compare_exchange_weak(old, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return Ok(excess),
            Err(seen) => old = seen,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket() -> Bucket {
        Bucket::new([0; 16])
    }

    #[test]
    fn the_bucket_admits_the_rate_and_the_burst() {
        let b = bucket();
        // 10 r/s, burst 5: at one instant, 1 + 5 pass and the 7th is refused.
        let passed = (0..7).filter(|_| b.admit(1000, 10_000, 5).is_ok()).count();
        assert_eq!(passed, 6);
        // A tenth of a second later one more drains: one passes, the next does not.
        assert!(b.admit(1100, 10_000, 5).is_ok());
        assert!(b.admit(1100, 10_000, 5).is_err());
        // Long after, the bucket is empty again.
        let passed = (0..7)
            .filter(|_| b.admit(60_000, 10_000, 5).is_ok())
            .count();
        assert_eq!(passed, 6);
    }

    #[test]
    fn a_steady_client_at_the_rate_is_never_refused() {
        let b = bucket();
        // 2 r/s, no burst: one request every 500 ms passes for ever; one every 400 ms comes
        // too soon after each one passed, as with nginx: every other one is refused.
        assert!((0..100).all(|i| b.admit(10_000 + i * 500, 2000, 0).is_ok()));
        let b = bucket();
        let refused = (0..100)
            .filter(|i| b.admit(10_000 + i * 400, 2000, 0).is_err())
            .count();
        assert_eq!(refused, 50);
    }

    #[test]
    fn the_excess_left_says_how_far_into_the_burst() {
        // 10 r/s, burst 5, at one instant: the first leaves nothing, each next one more.
        let b = bucket();
        let left: Vec<u64> = (0..6).map(|_| b.admit(1000, 10_000, 5).unwrap()).collect();
        assert_eq!(left, [0, 1000, 2000, 3000, 4000, 5000]);
        // 100 ms later one has drained.
        assert_eq!(b.admit(1100, 10_000, 5), Ok(5000));
    }

    #[test]
    fn retry_after_says_when_one_would_pass() {
        let b = bucket();
        // 1 r/m (16 thousandths a second, as nginx rounds it), no burst: the second request
        // waits a minute and a little.
        assert!(b.admit(5000, 1000 / 60, 0).is_ok());
        let wait = b.admit(5000, 1000 / 60, 0).unwrap_err();
        assert!((60..=63).contains(&wait), "{wait}");
    }

    #[test]
    fn a_clock_a_little_behind_drains_nothing() {
        // 10 r/s, no burst: a request at 10 000 ms, then one from a worker whose clock still
        // says 9 999: no time has passed for it, so it is refused (it used to wrap to 49
        // days and pass).
        let b = bucket();
        assert!(b.admit(10_000, 10_000, 0).is_ok());
        assert!(b.admit(9_999, 10_000, 0).is_err());
        // The later time is kept: at 10 100 one has drained, and one passes.
        assert!(b.admit(10_100, 10_000, 0).is_ok());
    }

    #[test]
    fn requests_from_the_fleet_fill_the_bucket() {
        // 10 r/s, burst 5; this instance saw one request, the fleet 10 more at once: the
        // bucket is over its burst and refuses until it drains below it.
        let b = bucket();
        assert!(b.admit(1000, 10_000, 5).is_ok());
        b.inject(10, 1000, 10_000);
        assert!(b.admit(1000, 10_000, 5).is_err());
        // 10 excess drain to 5 in half a second; the one after passes.
        assert!(b.admit(1400, 10_000, 5).is_err());
        assert!(b.admit(1600, 10_000, 5).is_ok());
        // Into a bucket never used: n requests at once leave n − 1 of excess.
        let b = bucket();
        b.inject(6, 1000, 10_000);
        assert!(b.admit(1000, 10_000, 5).is_err());
        let b = bucket();
        b.inject(5, 1000, 10_000);
        assert!(b.admit(1000, 10_000, 5).is_ok());
        // A huge count saturates instead of wrapping the packed state.
        b.inject(u64::MAX / 2, 1000, 10_000);
        assert!(b.admit(1000, 10_000, 1_000_000).is_err());
    }
}
