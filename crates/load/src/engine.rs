//! Running a [`Plan`]: one [`Worker`] thread (a [`QuicWorker`] for `--h3`) per entry of
//! `plan.threads` (pinned when asked),
//! progress reported while they run, and their figures merged.
//!
//! The calling thread only watches: every [`PROGRESS_EVERY`] it reads the workers' published
//! counters (one relaxed load each; the workers store them once per loop turn on their own cache
//! line), calls the progress callback, and passes the caller's stop flag on to the workers.
//!
//! The plan arrives checked (`prepare`); nothing here reads the configuration it came from.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::LoadError;
use crate::ledger::LiveCounters;
use crate::plan::Plan;
use crate::quic::QuicWorker;
use crate::report::{RateSummary, Report, ThreadStats};
use crate::sys;
use crate::worker::Worker;

/// How often the progress callback runs and the stop flag is looked at.
pub const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// A snapshot of a run in progress, for a live display.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Time since the load started (warm-up included).
    pub elapsed: Duration,
    /// Still in the warm-up: the counters are not the measured ones yet.
    pub warming_up: bool,
    /// Responses so far (since the warm-up ended, once it has).
    pub responses: u64,
    /// Failed requests so far (likewise).
    pub errors: u64,
    /// Planned length of the whole run (warm-up included), when it has one.
    pub planned: Option<Duration>,
    /// Planned request count, when counted.
    pub requests: Option<u64>,
}

/// Runs `plan` until its duration or request count is reached, or until `stop` becomes true
/// (the figures measured so far are then returned, with [`Report::interrupted`] set), calling
/// `on_progress` about every [`PROGRESS_EVERY`] from the calling thread. Returns the report and
/// the threads' rate samples (requests per second, for a script's `done()`).
pub(crate) fn run(
    plan: &Plan,
    stop: &AtomicBool,
    mut on_progress: impl FnMut(&Progress),
) -> Result<(Report, Vec<f64>), LoadError> {
    let live: Vec<LiveCounters> = (0..plan.threads.len())
        .map(|_| LiveCounters::default())
        .collect();
    // The workers' own stop flag: the caller's, or a failure to start one of them.
    let halt = AtomicBool::new(false);
    let planned = plan.duration.map(|d| d + plan.warmup);
    let start = Instant::now();
    // Per-thread rate samples for wrk's `Req/Sec` row: (responses, measuring) at the last tick.
    // Room for a minute of samples up front, so that a run's allocations do not depend on its
    // length (tests/alloc.rs counts them).
    let mut rate_samples: Vec<f64> = Vec::with_capacity(plan.threads.len() * 600);
    let results: Vec<Result<ThreadStats, LoadError>> = thread::scope(|scope| {
        let mut handles = Vec::with_capacity(plan.threads.len());
        let mut spawn_error = None;
        for i in 0..plan.threads.len() {
            let (halt, live) = (&halt, &live[i]);
            let cpu = (!plan.pin_cpus.is_empty()).then(|| plan.pin_cpus[i % plan.pin_cpus.len()]);
            let spawned = thread::Builder::new()
                .name(format!("lowlat-load-{i}"))
                .spawn_scoped(scope, move || {
                    if let Some(cpu) = cpu {
                        sys::pin_current_thread(cpu).map_err(|source| LoadError::System {
                            what: format!("cannot pin a loader thread to CPU {cpu}"),
                            source,
                        })?;
                    }
                    let setup = |source| LoadError::System {
                        what: "cannot set up an event loop".into(),
                        source,
                    };
                    let failed = |source| LoadError::System {
                        what: "event loop failed".into(),
                        source,
                    };
                    if let Some(h3) = &plan.h3 {
                        let worker =
                            QuicWorker::new(plan, h3, i, start, halt, live).map_err(setup)?;
                        return worker.run().map_err(failed);
                    }
                    let worker = Worker::new(plan, i, start, halt, live).map_err(setup)?;
                    worker.run().map_err(failed)
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(source) => {
                    spawn_error = Some(LoadError::System {
                        what: "cannot start a loader thread".into(),
                        source,
                    });
                    halt.store(true, Ordering::Relaxed);
                    break;
                }
            }
        }
        let mut last: Vec<(u64, bool)> = vec![(0, false); live.len()];
        let mut last_tick = Instant::now();
        while !handles.iter().all(thread::ScopedJoinHandle::is_finished) {
            thread::sleep(PROGRESS_EVERY);
            let tick = Instant::now();
            let dt = tick.duration_since(last_tick).as_secs_f64();
            last_tick = tick;
            for (l, prev) in live.iter().zip(&mut last) {
                let now = (
                    l.responses.load(Ordering::Relaxed),
                    l.measuring.load(Ordering::Relaxed),
                );
                if prev.1 && now.1 && now.0 >= prev.0 && dt > 0.0 {
                    rate_samples.push((now.0 - prev.0) as f64 / dt);
                }
                *prev = now;
            }
            if stop.load(Ordering::Relaxed) {
                halt.store(true, Ordering::Relaxed);
            }
            let warming_up = !live.iter().all(|l| l.measuring.load(Ordering::Relaxed));
            on_progress(&Progress {
                elapsed: start.elapsed(),
                warming_up,
                responses: live
                    .iter()
                    .map(|l| l.responses.load(Ordering::Relaxed))
                    .sum(),
                errors: live.iter().map(|l| l.errors.load(Ordering::Relaxed)).sum(),
                planned,
                requests: plan.requests,
            });
        }
        let mut results: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or(Err(LoadError::ThreadPanicked)))
            .collect();
        if let Some(e) = spawn_error {
            results.push(Err(e));
        }
        results
    });
    // A script's error ended the run: it is the run's error.
    if let Some(message) = plan.script.as_ref().and_then(|s| s.script.error()) {
        return Err(LoadError::Script(message));
    }
    let mut threads = Vec::with_capacity(results.len());
    for r in results {
        threads.push(r?);
    }
    let mut report = Report::merge(threads, stop.load(Ordering::Relaxed));
    report.thread_rates = RateSummary::from_samples(&rate_samples);
    Ok((report, rate_samples))
}
