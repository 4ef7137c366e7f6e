//! The worker loop's clock: the time its loop last woke up, read by handlers on the request path
//! instead of the system clock; and that time in milliseconds from the process's start, as the
//! rate limits count it.

use std::time::Instant;

thread_local! {
    /// The time the worker's loop last woke up: handlers on the request path read it instead of
    /// the clock (a `clock_gettime` per static-file request was 4% of the worker's time at a
    /// million HTTP/2 requests a second).
    static LOOP_NOW: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
    /// [`loop_millis`] of the loop's last wake-up, once worked out (`None` again at each
    /// wake-up): once per wake-up rather than per request (a `Duration`'s `as_millis` in
    /// 128-bit arithmetic was 37 instructions of a rate-limited request, by callgrind).
    static LOOP_MILLIS: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// The worker loop's current time; the clock itself outside a worker (tests, tools).
pub(crate) fn loop_now() -> Instant {
    LOOP_NOW
        .with(std::cell::Cell::get)
        .unwrap_or_else(Instant::now)
}

/// Sets the loop's time; called by the worker once per wake-up.
pub(crate) fn set_loop_now(now: Instant) {
    LOOP_NOW.with(|c| c.set(Some(now)));
    LOOP_MILLIS.with(|c| c.set(None));
}

/// The process's origin for millisecond counts: fixed the first time it is asked (a rate-limit
/// zone asks when it is made, before any request). One for every zone and worker, so that a
/// time counted by one is the same count for all.
fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Fixes the origin of [`millis`] now if it is not yet.
pub(crate) fn start_millis() {
    epoch();
}

/// `at` in milliseconds from the process's origin (0 before it).
pub(crate) fn millis(at: Instant) -> u64 {
    at.saturating_duration_since(epoch()).as_millis() as u64
}

/// [`millis`] of [`loop_now`], worked out once per wake-up of the worker's loop (each time
/// outside a worker, whose clock moves).
#[inline]
pub(crate) fn loop_millis() -> u64 {
    if let Some(ms) = LOOP_MILLIS.with(std::cell::Cell::get) {
        return ms;
    }
    match LOOP_NOW.with(std::cell::Cell::get) {
        Some(now) => {
            let ms = millis(now);
            LOOP_MILLIS.with(|c| c.set(Some(ms)));
            ms
        }
        None => millis(Instant::now()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loop_millis_follows_the_loop() {
        start_millis();
        let t0 = Instant::now();
        set_loop_now(t0);
        let ms = loop_millis();
        assert_eq!(ms, millis(t0));
        // The same wake-up: the same count, however late it is asked.
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(loop_millis(), ms);
        // The next wake-up moves it by the time between.
        set_loop_now(t0 + std::time::Duration::from_millis(250));
        assert_eq!(loop_millis(), ms + 250);
    }
}
