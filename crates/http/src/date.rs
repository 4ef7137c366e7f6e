//! The `Date` header value (RFC 9110 §6.6.1), formatted at most once per second.
//!
//! Each worker thread owns one [`DateCache`] and calls [`DateCache::refresh`] once per event-loop
//! turn; the formatting (and its one allocation) happens only when the second changes. There is
//! no shared cache: a cross-thread one needs synchronisation on every read.

use std::time::{SystemTime, UNIX_EPOCH};

/// Length of an IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`.
pub const DATE_LEN: usize = 29;

/// The current date as an IMF-fixdate, refreshed by its owner.
#[derive(Debug, Clone)]
pub struct DateCache {
    bytes: [u8; DATE_LEN],
    second: u64,
}

impl Default for DateCache {
    fn default() -> Self {
        Self::new()
    }
}

impl DateCache {
    /// A cache holding the current time.
    #[must_use]
    pub fn new() -> Self {
        let mut cache = Self {
            bytes: [b' '; DATE_LEN],
            second: u64::MAX,
        };
        cache.refresh_at(SystemTime::now());
        cache
    }

    /// Re-formats the date if the wall clock has moved to another second. Cheap otherwise: one
    /// `clock_gettime` through the vDSO and a compare.
    pub fn refresh(&mut self) {
        self.refresh_at(SystemTime::now());
    }

    /// [`DateCache::refresh`] at a given time (for tests).
    pub fn refresh_at(&mut self, now: SystemTime) {
        let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if second != self.second {
            self.second = second;
            let text = httpdate::fmt_http_date(now);
            if text.len() == DATE_LEN {
                self.bytes.copy_from_slice(text.as_bytes());
            }
        }
    }

    /// The formatted date, exactly [`DATE_LEN`] bytes.
    #[must_use]
    pub fn get(&self) -> &[u8; DATE_LEN] {
        &self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn formats_imf_fixdate() {
        let mut cache = DateCache::new();
        cache.refresh_at(UNIX_EPOCH + Duration::from_secs(784_111_777));
        assert_eq!(cache.get(), b"Sun, 06 Nov 1994 08:49:37 GMT");
    }

    #[test]
    fn changes_only_with_the_second() {
        let mut cache = DateCache::new();
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        cache.refresh_at(t);
        let first = *cache.get();
        cache.refresh_at(t + Duration::from_millis(999));
        assert_eq!(*cache.get(), first);
        cache.refresh_at(t + Duration::from_secs(1));
        assert_ne!(*cache.get(), first);
        assert!(httpdate::parse_http_date(std::str::from_utf8(cache.get()).unwrap()).is_ok());
    }
}
