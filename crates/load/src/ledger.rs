//! One loader thread's measuring: its [`ThreadStats`], when measuring starts (the warm-up's end)
//! and stops (the deadline), the timeout sweep's schedule, the live counters the progress line
//! reads, and the thread's CPU time. `worker` (TCP) and `quic` (`--h3`) each own one
//! [`Ledger`] and call the same steps, so both count a run the same way:
//!
//! - at the start, [`Ledger::start_run`];
//! - for every timestamp, [`Ledger::clock`] (the warm-up ends before anything is sent at or after
//!   its end);
//! - at the end of each turn of the loop, [`Ledger::roll_intervals`], [`Ledger::sweep_due`]
//!   (then the thread's own sweep for timeouts), [`Ledger::publish`];
//! - at the end, [`Ledger::finish`].
//!
//! It does not know about connections: when a request counts as sent ([`Ledger::count_sent`]),
//! answered or failed is the loops' business; they add to [`Ledger::stats`] while
//! [`Ledger::measuring`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::plan::Plan;
use crate::report::ThreadStats;
use crate::sys;

/// Counters one thread publishes for the progress line, on their own cache line.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct LiveCounters {
    pub responses: AtomicU64,
    pub errors: AtomicU64,
    /// Set once the warm-up is over and the counters restarted from zero.
    pub measuring: AtomicBool,
}

/// What one thread has measured, and when it measures.
pub(crate) struct Ledger<'a> {
    pub stats: ThreadStats,
    /// The warm-up is over: what happens now counts.
    pub measuring: bool,
    /// The warm-up's end: requests sent (or scheduled) before it do not count.
    pub measure_start: Instant,
    /// With `-d`: when the run stops.
    pub deadline: Option<Instant>,
    live: &'a LiveCounters,
    /// How often connections are checked for a timeout: a twentieth of it, within 1–100 ms.
    sweep_every: Duration,
    next_sweep: Instant,
    /// The thread's (user, system) CPU time when measuring started.
    cpu_at_start: (Duration, Duration),
}

impl<'a> Ledger<'a> {
    /// The ledger of a thread starting at `start`, with `plan`'s warm-up, duration, timeout,
    /// `--latency-intervals` and `-U`.
    pub fn new(plan: &Plan, start: Instant, live: &'a LiveCounters) -> Self {
        let measure_start = start + plan.warmup;
        let mut stats = ThreadStats::new();
        stats.intervals = plan
            .latency_intervals
            .map(crate::report::IntervalStats::new);
        stats.u_latency = plan.uncorrected.then(crate::report::new_latency_histogram);
        let sweep_every =
            (plan.timeout / 20).clamp(Duration::from_millis(1), Duration::from_millis(100));
        Self {
            stats,
            measuring: plan.warmup.is_zero(),
            measure_start,
            deadline: plan.duration.map(|d| measure_start + d),
            live,
            sweep_every,
            next_sweep: start + sweep_every,
            cpu_at_start: (Duration::ZERO, Duration::ZERO),
        }
    }

    /// The thread's loop starts: CPU time is counted from here (or from the warm-up's end).
    pub fn start_run(&mut self) {
        self.cpu_at_start = sys::thread_cpu_time();
        if self.measuring {
            self.live.measuring.store(true, Ordering::Relaxed);
        }
    }

    /// The time, for everything done next. Every timestamp a loop takes comes from here, so the
    /// warm-up ends before anything is sent at or after its end: a request counts (and is taken
    /// from the `-n` budget) exactly when it is sent after the warm-up.
    #[inline]
    pub fn clock(&mut self) -> Instant {
        let now = Instant::now();
        self.begin_measuring_at(now);
        now
    }

    /// Ends the warm-up if `now` is past it: the counters restart from zero, and so does the CPU
    /// time. The test is inlined into every timestamp and the rest kept out of line: a call per
    /// timestamp was ~10 instructions per response (callgrind, `-c16`).
    #[inline]
    pub fn begin_measuring_at(&mut self, now: Instant) {
        if !self.measuring && now >= self.measure_start {
            self.begin_measuring();
        }
    }

    #[cold]
    #[inline(never)]
    fn begin_measuring(&mut self) {
        self.stats.reset();
        self.measuring = true;
        self.cpu_at_start = sys::thread_cpu_time();
        self.live.measuring.store(true, Ordering::Relaxed);
    }

    /// `k` requests went out: counted while measuring.
    #[inline]
    pub fn count_sent(&mut self, k: usize) {
        if self.measuring {
            self.stats.requests += k as u64;
        }
    }

    /// A handshake failed with no request in flight: it takes one request from a counted run's
    /// `budget` and is a TLS error. Once the budget is spent, the handshakes still under way on
    /// other connections end uncounted, so `-n` stays exact.
    pub fn failed_handshake(&mut self, budget: &mut Option<u64>) {
        let counts = match budget {
            Some(0) => false,
            Some(b) => {
                *b -= u64::from(self.measuring);
                true
            }
            None => true,
        };
        if self.measuring && counts {
            self.stats.errors.tls += 1;
        }
    }

    /// With `-d`: the run's time is up.
    #[inline]
    pub fn past_deadline(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|d| now >= d)
    }

    /// The latest the loop may sleep until: the next sweep, the deadline, the warm-up's end.
    #[inline]
    pub fn wake_by(&self) -> Instant {
        let mut until = self.next_sweep;
        if let Some(d) = self.deadline {
            until = until.min(d);
        }
        if !self.measuring {
            until = until.min(self.measure_start);
        }
        until
    }

    /// End of a turn: with `--latency-intervals`, closes the intervals `now` has passed.
    #[inline]
    pub fn roll_intervals(&mut self, now: Instant) {
        if self.measuring {
            if let Some(iv) = &mut self.stats.intervals {
                iv.roll(now.saturating_duration_since(self.measure_start));
            }
        }
    }

    /// End of a turn: whether connections are due to be checked for a timeout now; if so, the
    /// next check is scheduled.
    #[inline]
    pub fn sweep_due(&mut self, now: Instant) -> bool {
        if now < self.next_sweep {
            return false;
        }
        self.next_sweep = now + self.sweep_every;
        true
    }

    /// End of a turn: the counters the progress line reads.
    #[inline]
    pub fn publish(&self) {
        self.live
            .responses
            .store(self.stats.responses, Ordering::Relaxed);
        self.live
            .errors
            .store(self.stats.errors.total(), Ordering::Relaxed);
    }

    /// The loop is over at `end`: the CPU time and elapsed time of what was measured.
    pub fn finish(&mut self, end: Instant) {
        let (u, s) = sys::thread_cpu_time();
        self.stats.cpu_user = u.saturating_sub(self.cpu_at_start.0);
        self.stats.cpu_system = s.saturating_sub(self.cpu_at_start.1);
        self.stats.elapsed = if self.measuring {
            end.saturating_duration_since(self.measure_start)
        } else {
            Duration::ZERO
        };
    }
}
