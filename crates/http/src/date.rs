//! HTTP-dates (RFC 9110 §5.6.7): the `Date` header value, formatted at most once per second,
//! and dates parsed ([`parse`]).
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

/// Seconds since the Unix epoch of an HTTP-date (RFC 9110 §5.6.7), if it is one; leading and
/// trailing whitespace ignored. Exactly what `httpdate` accepts, and the same value.
///
/// Hand-written for the form every sender uses (IMF-fixdate, RFC 9110 §5.6.7: "MUST generate"):
/// a cache parses the `Date` of every response it stores and conditional requests carry one,
/// and `httpdate` spent about 600 instructions a date (it checks a date by converting it to a
/// `SystemTime` and back), this about 240 (callgrind, a cache miss: docs/PERFORMANCE.md). The
/// two obsolete forms go to `httpdate`.
///
/// The last IMF-fixdate parsed on a thread is remembered: an origin's `Date` changes once a
/// second, so a cache storing its responses meets the same 29 bytes again and again, and a
/// compare is a tenth of a parse.
#[must_use]
pub fn parse(value: &[u8]) -> Option<u64> {
    if let Ok(fixed) = <&[u8; DATE_LEN]>::try_from(value) {
        let known = LAST.with(|last| {
            let (bytes, secs) = last.get();
            (bytes == *fixed).then_some(secs)
        });
        if known.is_some() {
            return known;
        }
        if let Some(secs) = parse_imf_fixdate(fixed) {
            LAST.with(|last| last.set((*fixed, secs)));
            return Some(secs);
        }
    }
    let text = std::str::from_utf8(value).ok()?.trim();
    if let Ok(fixed) = <&[u8; DATE_LEN]>::try_from(text.as_bytes()) {
        return parse_imf_fixdate(fixed);
    }
    let time = httpdate::parse_http_date(text).ok()?;
    time.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs())
}

thread_local! {
    /// The last IMF-fixdate [`parse`] read on this thread, and its value (at first the epoch).
    static LAST: std::cell::Cell<([u8; DATE_LEN], u64)> =
        const { std::cell::Cell::new((*b"Thu, 01 Jan 1970 00:00:00 GMT", 0)) };
}

/// `Sun, 06 Nov 1994 08:49:37 GMT`, checked as `httpdate` checks it: the fields in range, the
/// day within its month, the year from 1970 to 9999, the weekday the date's own.
fn parse_imf_fixdate(s: &[u8; DATE_LEN]) -> Option<u64> {
    if &s[25..] != b" GMT" || s[16] != b' ' || s[19] != b':' || s[22] != b':' {
        return None;
    }
    let digits = |at: usize, n: usize| {
        s[at..at + n].iter().try_fold(0u64, |v, &b| {
            b.is_ascii_digit().then(|| v * 10 + u64::from(b - b'0'))
        })
    };
    let (day, year) = (digits(5, 2)?, digits(12, 4)?);
    let (hour, min, sec) = (digits(17, 2)?, digits(20, 2)?, digits(23, 2)?);
    const MONTHS: [&[u8; 5]; 12] = [
        b" Jan ", b" Feb ", b" Mar ", b" Apr ", b" May ", b" Jun ", b" Jul ", b" Aug ", b" Sep ",
        b" Oct ", b" Nov ", b" Dec ",
    ];
    const WEEKDAYS: [&[u8; 5]; 7] = [
        b"Mon, ", b"Tue, ", b"Wed, ", b"Thu, ", b"Fri, ", b"Sat, ", b"Sun, ",
    ];
    let month = MONTHS.iter().position(|m| &s[7..12] == *m)? as u64 + 1;
    let weekday = WEEKDAYS.iter().position(|w| &s[..5] == *w)? as u64;
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if sec >= 60
        || min >= 60
        || hour >= 24
        || day == 0
        || day > month_days
        || !(1970..=9999).contains(&year)
    {
        return None;
    }
    // Days since the epoch from the civil date (H. Hinnant's `days_from_civil`, years >= 0).
    let y = if month <= 2 { year - 1 } else { year };
    let (era, yoe) = (y / 400, y % 400);
    let doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).checked_sub(719_468)?;
    // 1970-01-01 was a Thursday (index 3 from Monday).
    if (days + 3) % 7 != weekday {
        return None;
    }
    Some(days * 86_400 + hour * 3_600 + min * 60 + sec)
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

    /// What `httpdate` makes of `value`, the reference `parse` is held to.
    fn reference(value: &[u8]) -> Option<u64> {
        let text = std::str::from_utf8(value).ok()?;
        let time = httpdate::parse_http_date(text.trim()).ok()?;
        time.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs())
    }

    #[test]
    fn every_day_to_2200_as_httpdate_reads_it() {
        // Each day at a time that moves through the hours, minutes and seconds.
        let mut secs = 0u64;
        while secs < 7_258_118_400 {
            let text = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs));
            assert_eq!(parse(text.as_bytes()), Some(secs), "{text}");
            secs += 86_400 + 3_671;
        }
        assert_eq!(parse(b"Sun, 06 Nov 1994 08:49:37 GMT"), Some(784_111_777));
        assert_eq!(
            parse(b"  Sun, 06 Nov 1994 08:49:37 GMT\t"),
            Some(784_111_777)
        );
        assert_eq!(
            parse(b"Fri, 31 Dec 9999 23:59:59 GMT"),
            Some(253_402_300_799)
        );
        // The obsolete forms, through httpdate.
        assert_eq!(parse(b"Sunday, 06-Nov-94 08:49:37 GMT"), Some(784_111_777));
        assert_eq!(parse(b"Sun Nov  6 08:49:37 1994"), Some(784_111_777));
    }

    #[test]
    fn refuses_what_httpdate_refuses() {
        let bad: &[&[u8]] = &[
            b"Mon, 06 Nov 1994 08:49:37 GMT", // the wrong weekday
            b"Thu, 29 Feb 2001 00:00:00 GMT", // not a leap year
            b"Tue, 31 Apr 2001 00:00:00 GMT", // April has 30 days
            b"Sun, 06 Nov 1994 08:49:60 GMT", // no leap second
            b"Sun, 06 Nov 1994 24:00:00 GMT",
            b"Wed, 31 Dec 1969 23:59:59 GMT", // before the epoch
            b"Sun, 06 nov 1994 08:49:37 GMT", // names are case-sensitive
            b"sun, 06 Nov 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1994 08:49:37 UTC",
            b"Sun, 00 Nov 1994 08:49:37 GMT",
            b"Sun, 6  Nov 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1994 08.49.37 GMT",
            b"Sun, 06 Nov +994 08:49:37 GMT",
            b"",
            b"0",
            b"\xff\xfe",
        ];
        for value in bad {
            assert_eq!(parse(value), None, "{}", String::from_utf8_lossy(value));
            assert_eq!(reference(value), None, "{}", String::from_utf8_lossy(value));
        }
        assert_eq!(
            parse(b"Thu, 29 Feb 2024 00:00:00 GMT"),
            reference(b"Thu, 29 Feb 2024 00:00:00 GMT")
        );
        assert!(parse(b"Thu, 29 Feb 2024 00:00:00 GMT").is_some());
    }

    #[test]
    fn the_remembered_date_answers_for_itself_only() {
        let a = b"Sun, 06 Nov 1994 08:49:37 GMT";
        let b = b"Sun, 06 Nov 1994 08:49:38 GMT";
        assert_eq!(parse(b"Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(parse(&[0; DATE_LEN]), None);
        for _ in 0..2 {
            assert_eq!(parse(a), Some(784_111_777));
            assert_eq!(parse(a), Some(784_111_777));
            assert_eq!(parse(b), Some(784_111_778));
            assert_eq!(parse(b"Sun, 06 Nov 1994 08:49:38 GMX"), None);
        }
    }

    #[test]
    fn agrees_with_httpdate_on_every_one_byte_change() {
        // Each byte of a few dates replaced by each of the bytes a date is made of and a few
        // others: wherever the fast path decides, it decides as httpdate does.
        let alphabet = b"0123456789 :,-+ADFGJMNOSTWaceghilnoprtuvyz\t\x00\x80";
        for date in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Tue, 29 Feb 2000 23:59:59 GMT",
            "Thu, 01 Jan 1970 00:00:00 GMT",
        ] {
            let mut bytes = date.as_bytes().to_vec();
            for at in 0..bytes.len() {
                let was = bytes[at];
                for &b in alphabet {
                    bytes[at] = b;
                    assert_eq!(
                        parse(&bytes),
                        reference(&bytes),
                        "{}",
                        String::from_utf8_lossy(&bytes)
                    );
                }
                bytes[at] = was;
            }
        }
    }
}
