//! When to renew, and when to try again after a failure.
//!
//! - Renewal: when a third of the certificate's lifetime is left (30 days of Let's Encrypt's 90,
//!   as certbot and Caddy do), made earlier by a random part of up to a twentieth of the lifetime
//!   so that many certificates (or many servers) issued together do not all renew together.
//! - RFC 9773 renewal information, when the CA offers it: a random time in its suggested window.
//!   A window that opens before the certificate was issued is no schedule for it (Pebble
//!   suggests ±24 h around its ideal time even for a certificate of minutes) unless it has wholly
//!   passed — the CA's way of asking for a renewal now (a revocation ahead).
//! - Failures: 1 minute, doubled on each failure, at most 6 hours; at least an hour after the CA
//!   said `rateLimited`, and never sooner than its `Retry-After` (followed up to a week; the
//!   client reads it, `super::http`).

use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, SystemTime};

/// The first wait after a failure.
pub const FIRST_RETRY: Duration = Duration::from_secs(60);
/// The longest wait after failures.
pub const MAX_RETRY: Duration = Duration::from_secs(6 * 3600);
/// The least wait after a rate limit.
pub const RATE_LIMIT_WAIT: Duration = Duration::from_secs(3600);

/// A random number, from the standard library's per-process hashing keys (no cryptographic
/// need: this only spreads renewals).
#[must_use]
pub fn random() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// `random` scaled into `0..=span`.
fn part_of(span: Duration, random: u64) -> Duration {
    let nanos = span.as_nanos();
    if nanos == 0 {
        return Duration::ZERO;
    }
    let picked = u128::from(random) % (nanos + 1);
    Duration::from_nanos(u64::try_from(picked).unwrap_or(u64::MAX))
}

/// When to renew a certificate valid from `not_before` to `not_after`.
#[must_use]
pub fn renew_at(not_before: SystemTime, not_after: SystemTime, random: u64) -> SystemTime {
    let lifetime = not_after
        .duration_since(not_before)
        .unwrap_or(Duration::ZERO);
    let jitter = part_of(lifetime / 20, random);
    not_after - lifetime / 3 - jitter
}

/// When to renew by the CA's suggested window `[start, end]`, or `None` when the window is no
/// schedule for a certificate issued at `not_before` (see the module's notes).
#[must_use]
pub fn ari_renew_at(
    start: SystemTime,
    end: SystemTime,
    not_before: SystemTime,
    now: SystemTime,
    random: u64,
) -> Option<SystemTime> {
    if end < start {
        return None;
    }
    if end <= now {
        return Some(now);
    }
    if start < not_before {
        return None;
    }
    let span = end.duration_since(start).unwrap_or(Duration::ZERO);
    Some(start + part_of(span, random))
}

/// The wait after `failures` failures in a row (1 or more).
#[must_use]
pub fn backoff(failures: u32, rate_limited: bool) -> Duration {
    let doublings = failures.saturating_sub(1).min(20);
    let wait = FIRST_RETRY.saturating_mul(1 << doublings).min(MAX_RETRY);
    if rate_limited {
        wait.max(RATE_LIMIT_WAIT)
    } else {
        wait
    }
}

/// A duration as people read it: `45s`, `2m`, `1h30m`, `3d`.
#[must_use]
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 if s % 3600 >= 60 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        3600..86_400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    /// A 90-day certificate renews 30 days before it ends, up to 4.5 days earlier with jitter.
    #[test]
    fn renewal_at_a_third() {
        let nb = SystemTime::UNIX_EPOCH + 1000 * DAY;
        let na = nb + 90 * DAY;
        assert_eq!(renew_at(nb, na, 0), na - 30 * DAY);
        for r in [1, 12345, u64::MAX, random()] {
            let at = renew_at(nb, na, r);
            assert!(
                at <= na - 30 * DAY && at >= na - 30 * DAY - 90 * DAY / 20,
                "{r}"
            );
        }
        // A certificate of 30 seconds renews after 18.5 to 20 of them.
        let na = nb + Duration::from_secs(30);
        let at = renew_at(nb, na, u64::MAX).duration_since(nb).unwrap();
        assert!(at >= Duration::from_millis(18_500) && at <= Duration::from_secs(20));
    }

    /// The CA's window is followed when it fits the certificate, or has passed.
    #[test]
    fn renewal_information() {
        let nb = SystemTime::UNIX_EPOCH + 1000 * DAY;
        let now = nb + DAY;
        let (s, e) = (nb + 59 * DAY, nb + 61 * DAY);
        let at = ari_renew_at(s, e, nb, now, random()).unwrap();
        assert!(at >= s && at <= e);
        // Passed: now.
        assert_eq!(ari_renew_at(nb, nb + DAY / 2, nb, now, 7), Some(now));
        // Opening before issuance and not passed: no schedule (Pebble's ±24 h).
        assert_eq!(ari_renew_at(nb - DAY, nb + DAY * 2, nb, now, 7), None);
        // Backwards: ignored.
        assert_eq!(ari_renew_at(e, s, nb, now, 7), None);
    }

    #[test]
    fn backing_off() {
        assert_eq!(backoff(1, false), Duration::from_secs(60));
        assert_eq!(backoff(2, false), Duration::from_secs(120));
        assert_eq!(backoff(5, false), Duration::from_secs(960));
        assert_eq!(backoff(40, false), MAX_RETRY);
        assert_eq!(backoff(1, true), RATE_LIMIT_WAIT);
        assert_eq!(backoff(40, true), MAX_RETRY);
        assert_eq!(human(Duration::from_secs(120)), "2m");
        assert_eq!(human(Duration::from_secs(5400)), "1h30m");
    }
}
