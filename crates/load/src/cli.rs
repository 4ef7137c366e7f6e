//! `lowlat load` on the command line: wrk's flags (`-t -c -d -H --latency --timeout`) plus the
//! ones wrk lacks, parsed with clap into a [`LoadConfig`]; then the run, the report (text or
//! `--json`), the optional HdrHistogram log, and the exit code: 0 on success, 1 when the run
//! could not start (an unknown host, a refused connection) or no response came back, 2 for
//! usage errors — clap's own, and the values it cannot check alone (an `ftp://` URL, more
//! threads than connections) — each one line `lowlat load: ...` on stderr, 3 when a threshold
//! (`--max-error-rate`, `--max-p99`, `--min-rps`) failed.

use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::config::{
    parse_count, parse_duration, LoadConfig, Target, MAX_CONNECTIONS, MAX_PIPELINE, MAX_THREADS,
};
use crate::error::LoadError;
use crate::progress::ProgressLine;

/// Arguments of `lowlat load`.
#[derive(Debug, clap::Args)]
#[command(
    version,
    disable_version_flag = true,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    about = "Generate HTTP/1.1, HTTP/2, HTTP/3 or WebSocket load (http://, https://, ws://, wss://): wrk's flags and Lua scripts, wrk2's constant rate, pipelining",
    after_help = "Examples:\n  lowlat load -t2 -c100 -d30s --latency http://127.0.0.1:8080/\n  \
                  lowlat load -t1 -c256 --pipeline 16 -d10s http://127.0.0.1:8080/plaintext\n  \
                  lowlat load -R 5000 -c50 -d60s --hdr-log run.hlog http://127.0.0.1:8080/\n  \
                  lowlat load -n 100k -c64 http://127.0.0.1:8080/a@3 http://127.0.0.1:8080/b@1\n  \
                  lowlat load -t2 -c64 -d30s -s pipeline.lua http://127.0.0.1:8080/ -- 16\n\n\
                  Scripts (-s) use wrk's Lua API: the wrk table (format, lookup, connect), setup(thread),\n\
                  init(args), delay(), request(), response(status, headers, body), done(summary, latency,\n\
                  requests); arguments after -- go to init(args). A script error ends the run (exit 1)."
)]
pub struct LoadArgs {
    #[command(subcommand)]
    pub command: Option<LoadCommand>,
    /// URLs to load; `URL@W` gives a weight (default 1).
    #[arg(required = true, value_name = "URL")]
    pub urls: Vec<String>,
    /// Start at this wall-clock time (RFC 3339, e.g. 2026-11-24T10:00:00Z, or +30s from now),
    /// so that agents started by any scheduler begin together; a time past starts at once.
    #[arg(long, value_name = "TIME", value_parser = parse_start_at)]
    pub start_at: Option<SystemTime>,
    /// Name this agent in the report, the JSON and the --hdr-log (for `lowlat load merge`).
    #[arg(long, value_name = "NAME", value_parser = parse_tag)]
    pub tag: Option<String>,
    /// Threads, each with its own event loop [default: 2, or fewer when -c is smaller].
    #[arg(short, long, value_name = "N", value_parser = parse_threads)]
    pub threads: Option<usize>,
    /// Connections to keep open, in total.
    #[arg(short, long, value_name = "N", default_value = "10", value_parser = parse_connections)]
    pub connections: usize,
    /// Duration of the measurement (10s, 2m, 1h) [default: 10s unless -n].
    #[arg(short, long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Stop after exactly N requests (1000, 10k, 2M).
    #[arg(short = 'n', long, value_parser = parse_count)]
    pub requests: Option<u64>,
    /// Add a request header ("Name: value"); repeatable.
    #[arg(short = 'H', long = "header", value_name = "HEADER", value_parser = parse_header)]
    pub headers: Vec<(String, String)>,
    /// Print wrk2's latency percentiles and the full spectrum.
    #[arg(short = 'L', long)]
    pub latency: bool,
    /// With -R, also print the latency measured from each request's actual send (wrk2's -U),
    /// after the corrected latency (printed in full, as with -L).
    #[arg(short = 'U', long = "u-latency", requires = "rate")]
    pub u_latency: bool,
    /// Count a request as failed after this long without its response.
    #[arg(short = 'T', long, value_parser = parse_duration, default_value = "2s")]
    pub timeout: Duration,
    /// Run a Lua script with wrk's API (setup, init, delay, request, response, done).
    #[arg(short = 's', long, value_name = "FILE", conflicts_with = "http10")]
    pub script: Option<std::path::PathBuf>,
    /// Arguments for the script's init(args), after `--`.
    #[arg(last = true, value_name = "SCRIPT ARGS", requires = "script")]
    pub script_args: Vec<String>,
    /// Print the version.
    #[arg(short = 'v', long, action = clap::ArgAction::Version)]
    pub version: Option<bool>,
    /// Requests in flight per connection.
    #[arg(long, default_value = "1", value_name = "N", value_parser = parse_pipeline)]
    pub pipeline: u32,
    /// Speak HTTP/2: ALPN h2 for https:// (the run fails if the server does not offer it),
    /// prior knowledge (h2c) for http:// (--h2c is the same flag).
    #[arg(long, alias = "h2c", conflicts_with_all = ["pipeline", "http10", "no_keepalive"])]
    pub h2: bool,
    /// Speak HTTP/3 over QUIC (https:// only, ALPN h3; the run fails if the server does not
    /// offer it); -m streams per connection. Reconnections resume TLS sessions, and send GET
    /// and HEAD requests as 0-RTT when the server allows it.
    #[arg(long, conflicts_with_all = ["h2", "pipeline", "http10", "no_keepalive", "script", "ws"])]
    pub h3: bool,
    /// WebSocket: each connection opens with the handshake (ws:// or http://, wss:// or
    /// https://), then sends messages and times their echoes; -R is messages per second,
    /// --pipeline messages in flight per connection.
    #[arg(long, conflicts_with_all = ["h2", "script", "http10", "no_keepalive", "body", "body_file"])]
    pub ws: bool,
    /// With --ws: payload bytes of each message (one binary frame).
    #[arg(long, value_name = "SIZE", default_value = "128", requires = "ws", value_parser = parse_ws_message_size)]
    pub ws_message_size: usize,
    /// With --h2 or --h3: streams in flight per connection (h2load's -m).
    #[arg(short = 'm', long, value_name = "N", value_parser = parse_streams)]
    pub streams: Option<u32>,
    /// Constant throughput in requests/s over all connections (wrk2's -R); latency is measured
    /// from each request's scheduled send time.
    #[arg(short = 'R', long, value_parser = parse_rate)]
    pub rate: Option<f64>,
    /// Request method (curl's -X; -m is h2load's streams).
    #[arg(short = 'X', long, default_value = "GET")]
    pub method: String,
    /// Request body.
    #[arg(long, conflicts_with = "body_file")]
    pub body: Option<String>,
    /// Request body, read from a file.
    #[arg(long, value_name = "FILE")]
    pub body_file: Option<std::path::PathBuf>,
    /// Send HTTP/1.0 requests.
    #[arg(long = "http1.0")]
    pub http10: bool,
    /// A new connection for every request (like ab without -k).
    #[arg(long, conflicts_with = "pipeline")]
    pub no_keepalive: bool,
    /// Apply the load this long before measuring (10s, 500ms).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub warmup: Option<Duration>,
    /// Print the report as JSON (schema: crates/load/schema/report.schema.json).
    #[arg(long)]
    pub json: bool,
    /// Also write the latency histogram as an HdrHistogram interval log.
    #[arg(long, value_name = "FILE")]
    pub hdr_log: Option<std::path::PathBuf>,
    /// Pin the loader threads to these CPUs (thread i to the i-th, cycling).
    #[arg(long, value_name = "CPU[,CPU..]", value_delimiter = ',')]
    pub pin: Vec<usize>,
    /// No live progress line (it is drawn only on a terminal anyway).
    #[arg(short, long)]
    pub quiet: bool,
    /// https: accept any certificate for any name (like curl -k); still encrypted.
    #[arg(short = 'k', long, conflicts_with = "cacert")]
    pub insecure: bool,
    /// https: trust the certificates in this PEM file instead of the system's roots.
    #[arg(long, value_name = "FILE")]
    pub cacert: Option<std::path::PathBuf>,
    /// Exit 3 when more than this share of requests failed or got a non-2xx/3xx answer (1%).
    #[arg(long, value_name = "RATE", value_parser = crate::thresholds::parse_rate)]
    pub max_error_rate: Option<f64>,
    /// Exit 3 when the 99th-percentile latency is above this (50ms).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub max_p99: Option<Duration>,
    /// Exit 3 when fewer responses per second than this came back.
    #[arg(long, value_name = "N", value_parser = parse_rate)]
    pub min_rps: Option<f64>,
    /// https: resume TLS sessions on reconnects (abbreviated handshakes); without it every new
    /// connection is a full handshake.
    #[arg(long)]
    pub tls_resume: bool,
}

/// `lowlat load` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum LoadCommand {
    /// Merge the --hdr-log files of agents that ran together into one report.
    Merge(MergeArgs),
}

/// Arguments of `lowlat load merge`.
#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// Interval logs written with --hdr-log, one per agent.
    #[arg(required = true, value_name = "LOG")]
    pub logs: Vec<std::path::PathBuf>,
    /// Print the merged report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Threads when `-t` is not given (wrk's default), lowered to the connection count.
pub const DEFAULT_THREADS: usize = 2;

/// Most streams in flight per HTTP/2 connection (`-m`).
pub const MAX_STREAMS: u32 = 10_000;

/// A count (`64`, `1k`, as wrk reads them) within `low..=high`, else a message saying the range
/// in words; clap puts the flag's name in front of it.
fn count_within(s: &str, low: u64, high: u64) -> Result<u64, String> {
    let n = parse_count(s)?;
    if n < low || n > high {
        return Err(format!("must be a number from {low} to {high}"));
    }
    Ok(n)
}

fn parse_threads(s: &str) -> Result<usize, String> {
    count_within(s, 1, MAX_THREADS as u64).map(|n| n as usize)
}

fn parse_connections(s: &str) -> Result<usize, String> {
    count_within(s, 1, MAX_CONNECTIONS as u64).map(|n| n as usize)
}

fn parse_pipeline(s: &str) -> Result<u32, String> {
    count_within(s, 1, u64::from(MAX_PIPELINE)).map(|n| n as u32)
}

fn parse_streams(s: &str) -> Result<u32, String> {
    count_within(s, 1, u64::from(MAX_STREAMS)).map(|n| n as u32)
}

fn parse_ws_message_size(s: &str) -> Result<usize, String> {
    let n = lowlat_http::units::parse_size(s)?;
    match usize::try_from(n) {
        Ok(n) if n <= crate::config::MAX_WS_MESSAGE => Ok(n),
        _ => Err(format!(
            "must be at most {} bytes (16m)",
            crate::config::MAX_WS_MESSAGE
        )),
    }
}

fn parse_start_at(s: &str) -> Result<SystemTime, String> {
    if let Some(rel) = s.strip_prefix('+') {
        return Ok(SystemTime::now() + parse_duration(rel)?);
    }
    humantime::parse_rfc3339_weak(s)
        .map_err(|e| format!("{s:?} is not a time ({e}; e.g. 2026-11-24T10:00:00Z or +30s)"))
}

fn parse_tag(s: &str) -> Result<String, String> {
    // The interval log's tag field ends at a comma; spaces would split the text report's line.
    if s.is_empty() || s.len() > 64 || !s.bytes().all(|b| b.is_ascii_graphic() && b != b',') {
        return Err(format!(
            "{s:?} is not a tag (1 to 64 printable characters, no comma or space)"
        ));
    }
    Ok(s.to_owned())
}

fn parse_header(s: &str) -> Result<(String, String), String> {
    let (name, value) = s
        .split_once(':')
        .ok_or_else(|| format!("header {s:?} is not \"Name: value\""))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("header {s:?} has no name"));
    }
    Ok((name.to_owned(), value.trim().to_owned()))
}

fn parse_rate(s: &str) -> Result<f64, String> {
    let n = parse_count(s)?;
    if n == 0 {
        return Err("rate must be at least 1 request/s".into());
    }
    Ok(n as f64)
}

/// Why `lowlat load` ended before its report: what was typed (exit 2), or the run (exit 1).
enum Failure {
    Usage(String),
    Run(String),
}

impl From<String> for Failure {
    fn from(msg: String) -> Self {
        Self::Run(msg)
    }
}

impl From<LoadError> for Failure {
    /// A bad URL or option value is a usage error, as clap's are; the rest is the run's.
    fn from(e: LoadError) -> Self {
        match e {
            LoadError::BadUrl { .. } | LoadError::Config(_) => Self::Usage(e.to_string()),
            _ => Self::Run(e.to_string()),
        }
    }
}

/// Runs `lowlat load`; returns the process exit code.
#[must_use]
pub fn run(args: LoadArgs) -> ExitCode {
    match run_inner(args) {
        Ok(code) => code,
        Err(Failure::Usage(msg)) => {
            eprintln!("lowlat load: {msg} (see `lowlat load --help`)");
            ExitCode::from(2)
        }
        Err(Failure::Run(msg)) => {
            eprintln!("lowlat load: {msg}");
            ExitCode::from(1)
        }
    }
}

fn merge(m: &MergeArgs) -> Result<ExitCode, String> {
    let logs = m
        .logs
        .iter()
        .map(|p| crate::merge::read_log(p))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let merged = crate::merge::merge(logs);
    if let Some(w) = merged.warning() {
        eprintln!("lowlat load merge: warning: {w}");
    }
    if m.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&crate::merge::to_json(&merged))
                .map_err(|e| e.to_string())?
        );
    } else {
        print!("{}", crate::merge::render_text(&merged));
    }
    Ok(ExitCode::SUCCESS)
}

/// Sleeps until `at` (a wall-clock time), if it is still to come.
fn wait_until(at: SystemTime, quiet: bool, stop: &AtomicBool) {
    if let Ok(wait) = at.duration_since(SystemTime::now()) {
        if !quiet {
            eprintln!(
                "lowlat load: starting at {} (in {:.1}s)",
                humantime::format_rfc3339_millis(at),
                wait.as_secs_f64()
            );
        }
        let until = std::time::Instant::now() + wait;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let now = std::time::Instant::now();
            if now >= until {
                break;
            }
            std::thread::sleep((until - now).min(Duration::from_millis(100)));
        }
    }
}

fn run_inner(args: LoadArgs) -> Result<ExitCode, Failure> {
    if let Some(LoadCommand::Merge(m)) = &args.command {
        return Ok(merge(m)?);
    }
    let cfg = to_config(&args)?;
    let stop = Arc::new(AtomicBool::new(false));
    // A second Ctrl-C exits at once; the first stops the run and prints what it measured.
    let _ = signal_hook::flag::register_conditional_shutdown(
        signal_hook::consts::SIGINT,
        130,
        Arc::clone(&stop),
    );
    let _ = signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&stop));
    // Bad input is one line on stderr, before any banner; a script's setup() and init() run
    // here, before the banner, as in wrk.
    let prepared = crate::prepare(&cfg)?;
    if let Some(at) = args.start_at {
        wait_until(at, args.quiet || args.json, &stop);
    }
    if !args.json {
        print!("{}", crate::text::banner(&cfg));
    }
    let mut line = ProgressLine::new(!args.quiet);
    let started = SystemTime::now();
    let result = prepared.run(&stop, |p| line.update(p));
    line.finish();
    let finished = result?;
    let report = &finished.report;
    let thresholds = crate::thresholds::Thresholds {
        max_error_rate: args.max_error_rate,
        max_p99: args.max_p99,
        min_rps: args.min_rps,
    };
    let outcomes = thresholds.check(report);
    if args.json {
        let mut v = crate::json::to_json(report, &cfg);
        if thresholds.any() {
            v["thresholds"] = serde_json::to_value(&outcomes).unwrap_or_default();
        }
        if let Some(tag) = &args.tag {
            v["tag"] = serde_json::Value::from(tag.as_str());
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
        );
    } else {
        print!("{}", crate::text::render(report, args.latency));
        for o in &outcomes {
            println!("{}", crate::thresholds::describe(o));
        }
        if let Some(tag) = &args.tag {
            println!("Tag: {tag}");
        }
    }
    if let Some(path) = &args.hdr_log {
        let mut f = std::fs::File::create(path)
            .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        crate::hdrlog::write_log(&mut f, report, started, args.tag.as_deref())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    // The script's done() speaks after the report, as in wrk.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    finished.done().map_err(|e| e.to_string())?;
    if report.errors.protocol > 0 {
        if let Some(why) = &report.ws_error {
            eprintln!("lowlat load: {why}");
        }
    }
    if report.errors.tls > 0 {
        if let Some(why) = &report.tls_error {
            // Counted in the report; said here once, so a verification failure is not silent.
            eprintln!("lowlat load: {why}");
        }
    }
    if report.all_failed() && !thresholds.any() {
        return Err(Failure::Run(format!(
            "no response received ({} requests failed)",
            report.errors.total()
        )));
    }
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| !o.passed)
        .map(|o| format!("--{}", o.name))
        .collect();
    if !failed.is_empty() {
        eprintln!("lowlat load: threshold failed: {}", failed.join(", "));
        return Ok(ExitCode::from(crate::thresholds::EXIT_THRESHOLD));
    }
    Ok(ExitCode::SUCCESS)
}

/// The thread count: `-t` when given (never more than the connections: a thread without one
/// would idle), else [`DEFAULT_THREADS`] lowered to the connection count, as oha and h2load
/// do, and said on stderr.
fn threads(args: &LoadArgs) -> Result<usize, Failure> {
    let connections = args.connections;
    match args.threads {
        Some(t) if t > connections => Err(Failure::Usage(format!(
            "--threads {t} is more than --connections {connections}: each thread needs a \
             connection, so -t must be a number from 1 to {connections}"
        ))),
        Some(t) => Ok(t),
        None if connections < DEFAULT_THREADS => {
            eprintln!(
                "lowlat load: {connections} thread{s}, as there {are} only {connections} \
                 connection{s}",
                s = if connections == 1 { "" } else { "s" },
                are = if connections == 1 { "is" } else { "are" },
            );
            Ok(connections)
        }
        None => Ok(DEFAULT_THREADS),
    }
}

fn to_config(args: &LoadArgs) -> Result<LoadConfig, Failure> {
    let targets = args
        .urls
        .iter()
        .map(|u| Target::parse(u))
        .collect::<Result<Vec<_>, _>>()?;
    let body = match (&args.body, &args.body_file) {
        (Some(b), _) => Some(b.clone().into_bytes()),
        (None, Some(p)) => {
            Some(std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?)
        }
        (None, None) => None,
    };
    if args.streams.is_some() && !args.h2 && !args.h3 {
        return Err(Failure::Usage(
            "-m (streams per connection) needs --h2 or --h3; use --pipeline for HTTP/1.1".into(),
        ));
    }
    Ok(LoadConfig {
        targets,
        threads: threads(args)?,
        connections: args.connections,
        duration: args.duration,
        requests: args.requests,
        pipeline: if args.h2 || args.h3 {
            args.streams.unwrap_or(1)
        } else {
            args.pipeline
        },
        rate: args.rate,
        method: args.method.clone(),
        headers: args.headers.clone(),
        body,
        timeout: args.timeout,
        keep_alive: !args.no_keepalive,
        http10: args.http10,
        warmup: args.warmup.unwrap_or(Duration::ZERO),
        pin_cpus: args.pin.clone(),
        // One histogram per second in the log, as HdrHistogram's own tools write them.
        latency_intervals: args.hdr_log.as_ref().map(|_| Duration::from_secs(1)),
        tls: crate::TlsOptions {
            insecure: args.insecure,
            cacert: args.cacert.clone(),
            resume: args.tls_resume,
        },
        uncorrected_latency: args.u_latency,
        h2: args.h2,
        h3: args.h3,
        script: args.script.as_ref().map(|path| crate::ScriptOptions {
            path: path.clone(),
            args: args.script_args.clone(),
        }),
        ws: args.ws.then_some(crate::WsOptions {
            message_size: args.ws_message_size,
        }),
    })
}
