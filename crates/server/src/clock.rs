//! The worker loop's clock: the time its loop last woke up, read by handlers on the request path
//! instead of the system clock.

use std::time::Instant;

thread_local! {
    /// The time the worker's loop last woke up: handlers on the request path read it instead of
    /// the clock (a `clock_gettime` per static-file request was 4% of the worker's time at a
    /// million HTTP/2 requests a second).
    static LOOP_NOW: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
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
}
