//! `lowlat load`: an HTTP/1.1 load generator that costs less per response than the servers it
//! tests, with wrk's flags, wrk2's constant-rate latency (coordinated omission corrected),
//! pipelining without scripts, and HdrHistogram output.
//!
//! It is a library first: the CLI ([`cli`]) and the benchmark harness both call [`run`].
//!
//! ```no_run
//! use std::sync::atomic::AtomicBool;
//! use std::time::Duration;
//! use lowlat_load::{LoadConfig, Target};
//!
//! let cfg = LoadConfig {
//!     targets: vec![Target::new("http://127.0.0.1:8080/plaintext")],
//!     threads: 1,
//!     connections: 256,
//!     pipeline: 16,
//!     duration: Some(Duration::from_secs(10)),
//!     pin_cpus: vec![1],
//!     ..LoadConfig::default()
//! };
//! let report = lowlat_load::run(&cfg, &AtomicBool::new(false))?;
//! println!("{:.0} req/s, {:?} µs CPU/response, p99 {} µs",
//!     report.requests_per_sec(), report.cpu_us_per_response(),
//!     report.latency.value_at_quantile(0.99));
//! # Ok::<(), lowlat_load::LoadError>(())
//! ```
//!
//! # API
//! - [`LoadConfig`] (pub fields, `Default`) and [`Target`] (`URL`, weight) say what to do.
//! - [`run`]`(&LoadConfig, &AtomicBool) -> Result<Report, LoadError>` runs it; setting the flag
//!   stops the run early and still returns what was measured. [`run_with_progress`] also calls
//!   a closure with a [`Progress`] snapshot about every 100 ms.
//! - [`Report`]: requests and responses, elapsed (measured) time, req/s, bytes read, the merged
//!   latency histogram (`hdrhistogram::Histogram<u64>` in **microseconds**), [`StatusCounts`]
//!   by class and [`StatusCodes`] by code, [`ErrorCounts`] by kind, and the loader threads' CPU
//!   time (`getrusage(RUSAGE_THREAD)`, summed) with [`Report::cpu_us_per_response`]; also
//!   per-interval histograms ([`LatencyInterval`], when [`LoadConfig::latency_intervals`] asks)
//!   and per-thread rate samples ([`RateSummary`], wrk's `Req/Sec`).
//! - [`LoadError`]: why a run could not start or finish. Failed requests are not errors of the
//!   run; they are counted in [`ErrorCounts`].
//! - [`prepare`]`(&LoadConfig) -> Result<Prepared, LoadError>`, then [`Prepared::run`] and
//!   [`Finished::done`]: the same run in three steps, for a caller that prints between them — a
//!   Lua script's (`LoadConfig::script`) `setup()` and `init()` run in `prepare`, its `done()`
//!   after the report.
//!
//! # Semantics
//! - Every request ends as one response or one error. A failure that ends a connection (reset,
//!   timeout, protocol error) ends every request in flight on it; a failed connect counts one.
//!   Requests still in flight when the server closes after a `Connection: close` response were
//!   never processed: they are sent again on a new connection, not counted as errors.
//! - `requests: Some(n)` stops after exactly `n` requests have ended (n responses from a healthy
//!   server); `duration` stops at the deadline, abandoning requests in flight.
//! - Latency runs from a request's send to the end of its own response; with pipelining each
//!   request of a batch has its own response time; with `rate`, from its *scheduled* send time.
//! - The warm-up runs the same load unmeasured: requests sent (scheduled) before it ends are not
//!   counted, and CPU time is taken from its end.
//!
//! # Layout
//! Layers, each importing only from the ones below it. The configuration and the engine never
//! import each other: the engine is handed a checked plan and never reads a [`LoadConfig`].
//!
//! The command line and what a run shows:
//! - [`cli`]: `lowlat load` flags and exit codes.
//! - [`text`], [`json`], [`hdrlog`]: wrk-like text, JSON (schema in `schema/report.schema.json`),
//!   HdrHistogram interval log.
//! - `progress`: the live line on a terminal.
//! - [`merge`]: `lowlat load merge` — the interval logs of several agents as one report.
//! - [`thresholds`]: pass/fail limits for CI (`--max-error-rate`, `--max-p99`, `--min-rps`).
//!
//! [`run`] and [`run_with_progress`], in this file: the configuration checked into a plan, and
//! the plan handed to the engine.
//!
//! The configuration — what is asked, and checking it:
//! - [`config`]: [`LoadConfig`], [`Target`], [`TlsOptions`], defaults and limits; humane
//!   durations and counts.
//! - `prepare`: a [`LoadConfig`] into a plan — URLs grouped by host, names resolved, connections
//!   and request budgets shared among hosts and threads — and the checks before a run
//!   (descriptor limit, one connection to each host); [`LoadConfig::check`].
//! - `validate`: option values against the limits and each other.
//! - `url`: a target URL taken apart.
//! - `request`: the request bytes (or HTTP/2 fields) built once, and the weighted order of a
//!   host's URLs.
//! - [`tls`]: the TLS client configuration (trust, `--insecure`, resumption).
//!
//! The engine — what runs:
//! - `engine`: the threads, started, watched for progress and the stop flag, merged.
//! - `worker`: one thread's mio event loop and connection state machine (the hot path).
//! - `transport`: a connection's bytes in clear or through a rustls client session.
//! - `h2`: one connection's HTTP/2 session (`--h2`).
//! - `quic`: with `--h3`, the thread's event loop instead of `worker`'s: QUIC connections
//!   (quinn-proto, sans-I/O) on UDP sockets, their timers, and the same counting.
//! - `h3`: one QUIC connection's HTTP/3 session (`--h3`): control and QPACK streams, requests
//!   on streams, responses through the codec.
//! - `ws`: one connection's WebSocket session (`--ws`): the handshake, messages, echoes.
//! - `ledger`: one thread's measuring, the same for `worker` and `quic` — its counters, the
//!   warm-up's end and the deadline, the timeout sweep's schedule, the live counters, CPU time.
//!
//! Below both:
//! - `plan`: what the threads run — hosts, laid-out request bytes, each thread's connections;
//!   built by `prepare`, read by the engine.
//! - `script`: `-s`, wrk's Lua API on LuaJIT — the main state and one state per thread, set up
//!   (`setup()`, `init()`, the first `request()` checked) for `prepare`, called by `worker`
//!   (`request()`, `response()`, `delay()`, only those the script defines), `done()` at the end.
//! - [`report`]: per-thread counters, [`Report`], [`LatencySummary`], [`TlsSummary`].
//! - `tls_failure`: why a TLS handshake failed, in words, with what to do next.
//! - `sys`: the few system calls std lacks (thread CPU time, affinity, timerfd, descriptor
//!   limit); all `unsafe`.
//! - [`error`]: the [`LoadError`] type.
//!
//! `scripts/check-imports.py` fails CI on a circle of imports between these modules.

use std::sync::atomic::AtomicBool;

pub mod cli;
pub mod config;
mod engine;
pub mod error;
mod h2;
mod h3;
pub mod hdrlog;
pub mod json;
mod ledger;
pub mod merge;
mod plan;
mod prepare;
mod progress;
mod quic;
pub mod report;
mod request;
mod script;
mod sys;
pub mod text;
pub mod thresholds;
pub mod tls;
mod tls_failure;
mod transport;
mod url;
mod validate;
mod worker;
mod ws;

pub use config::{LoadConfig, ScriptOptions, Target, TlsOptions, WsOptions};
pub use engine::{Progress, PROGRESS_EVERY};
pub use error::LoadError;
pub use report::{
    ErrorCounts, H3Summary, LatencyInterval, LatencySummary, RateSummary, Report, StatusCodes,
    StatusCounts, TlsSummary,
};

/// Runs the load described by `cfg` until its duration or request count is reached, or until
/// `stop` becomes true (the figures measured so far are then returned, with
/// [`Report::interrupted`] set).
///
/// # Errors
/// [`LoadError`] when the configuration is invalid, a host does not resolve or refuses the
/// connection made before the run, or a thread cannot be set up.
pub fn run(cfg: &LoadConfig, stop: &AtomicBool) -> Result<Report, LoadError> {
    run_with_progress(cfg, stop, |_| {})
}

/// [`run`], calling `on_progress` about every [`PROGRESS_EVERY`] from the calling thread.
///
/// # Errors
/// As [`run`].
pub fn run_with_progress(
    cfg: &LoadConfig,
    stop: &AtomicBool,
    on_progress: impl FnMut(&Progress),
) -> Result<Report, LoadError> {
    let finished = prepare(cfg)?.run(stop, on_progress)?;
    finished.done()?;
    Ok(finished.report)
}

/// Checks `cfg` and gets everything ready to run, in wrk's order: what [`LoadConfig::check`]
/// checks, then a script's `setup()` and `init()`. For a caller that prints between that and
/// the run (the CLI's banner), or after the report and before the script's `done()`.
///
/// # Errors
/// As [`run`], before any load is sent.
pub fn prepare(cfg: &LoadConfig) -> Result<Prepared, LoadError> {
    Ok(Prepared {
        plan: prepare::checked(cfg)?,
    })
}

/// A run ready to start (see [`prepare`]).
#[derive(Debug)]
pub struct Prepared {
    plan: plan::Plan,
}

impl Prepared {
    /// Runs the load, calling `on_progress` about every [`PROGRESS_EVERY`].
    ///
    /// # Errors
    /// As [`run`]; and [`LoadError::Script`] when the script fails during the run.
    pub fn run(
        self,
        stop: &AtomicBool,
        on_progress: impl FnMut(&Progress),
    ) -> Result<Finished, LoadError> {
        let (report, rate_samples) = engine::run(&self.plan, stop, on_progress)?;
        Ok(Finished {
            report,
            script: self.plan.script.map(|s| (s.script, rate_samples)),
        })
    }
}

/// A finished run: its [`Report`], and a script's `done()` still to call.
#[derive(Debug)]
pub struct Finished {
    pub report: Report,
    script: Option<(std::sync::Arc<script::Script>, Vec<f64>)>,
}

impl Finished {
    /// Calls the script's `done(summary, latency, requests)`, when it has one (wrk calls it
    /// after printing its report).
    ///
    /// # Errors
    /// [`LoadError::Script`] when `done()` fails.
    pub fn done(&self) -> Result<(), LoadError> {
        match &self.script {
            Some((script, samples)) => script.done(&self.report, samples),
            None => Ok(()),
        }
    }
}
