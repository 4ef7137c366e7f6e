//! `--json`: every figure of a [`Report`] and the configuration that produced it, in a stable
//! shape described by `schema/report.schema.json` (checked in; the tests validate real output
//! against it). Adding a field is compatible; renaming or removing one bumps [`SCHEMA_VERSION`].

use serde::Serialize;

use crate::config::LoadConfig;
use crate::report::{ErrorCounts, LatencySummary, RateSummary, Report, StatusCodes, StatusCounts};

/// Version of the JSON shape; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// The JSON Schema of [`to_json`]'s output.
pub const SCHEMA: &str = include_str!("../schema/report.schema.json");

#[derive(Serialize)]
struct JsonReport<'a> {
    schema_version: u32,
    config: JsonConfig<'a>,
    requests: u64,
    responses: u64,
    elapsed_secs: f64,
    requests_per_sec: f64,
    bytes_read: u64,
    bytes_per_sec: f64,
    interrupted: bool,
    latency_us: JsonLatency,
    thread_req_per_sec: Option<RateSummary>,
    status: StatusCounts,
    /// Responses by status code, the codes seen only (oha's status code distribution).
    status_codes: &'a StatusCodes,
    errors: JsonErrors,
    cpu: JsonCpu,
    tls: Option<JsonTls<'a>>,
    /// With `--h3`: handshakes, 0-RTT, packets; null otherwise.
    h3: Option<&'a crate::report::H3Summary>,
    /// `-U`: latency from each request's actual send (rate mode), or null.
    uncorrected_latency_us: Option<LatencySummary>,
}

#[derive(Serialize)]
struct JsonTls<'a> {
    #[serde(flatten)]
    summary: &'a crate::report::TlsSummary,
    /// The first TLS failure's reason, when there were failures.
    first_error: Option<&'a str>,
}

#[derive(Serialize)]
struct JsonConfig<'a> {
    targets: Vec<JsonTarget<'a>>,
    threads: usize,
    connections: usize,
    pipeline: u32,
    /// HTTP/2 streams in flight per connection; null over HTTP/1.1.
    h2_streams: Option<u32>,
    /// HTTP/3 streams in flight per connection; null otherwise.
    h3_streams: Option<u32>,
    rate: Option<f64>,
    duration_secs: Option<f64>,
    requests: Option<u64>,
    warmup_secs: f64,
    timeout_secs: f64,
    method: &'a str,
    keep_alive: bool,
    http10: bool,
    tls_insecure: bool,
    cacert: Option<String>,
    tls_resume: bool,
}

#[derive(Serialize)]
struct JsonTarget<'a> {
    url: &'a str,
    weight: u32,
}

#[derive(Serialize)]
struct JsonLatency {
    #[serde(flatten)]
    summary: LatencySummary,
    count: u64,
    percentiles: Vec<JsonPercentile>,
}

#[derive(Serialize)]
struct JsonPercentile {
    percentile: f64,
    value_us: u64,
    count: u64,
}

#[derive(Serialize)]
struct JsonErrors {
    #[serde(flatten)]
    counts: ErrorCounts,
    total: u64,
}

#[derive(Serialize)]
struct JsonCpu {
    user_secs: f64,
    system_secs: f64,
    us_per_response: Option<f64>,
}

static EMPTY_TLS: crate::report::TlsSummary = crate::report::TlsSummary {
    protocol: String::new(),
    cipher: String::new(),
    handshakes: 0,
    resumed: 0,
};

/// The report as a JSON value (see the module docs for the schema).
#[must_use]
pub fn to_json(report: &Report, cfg: &LoadConfig) -> serde_json::Value {
    let h = &report.latency;
    let mut total = 0;
    let percentiles = h
        .iter_quantiles(1)
        .map(|v| {
            total += v.count_since_last_iteration();
            JsonPercentile {
                percentile: v.quantile_iterated_to() * 100.0,
                value_us: h.highest_equivalent(v.value_iterated_to()),
                count: total,
            }
        })
        .collect();
    let out = JsonReport {
        schema_version: SCHEMA_VERSION,
        config: JsonConfig {
            targets: cfg
                .targets
                .iter()
                .map(|t| JsonTarget {
                    url: &t.url,
                    weight: t.weight,
                })
                .collect(),
            threads: cfg.threads,
            connections: cfg.connections,
            pipeline: if cfg.h2 || cfg.h3 { 1 } else { cfg.pipeline },
            h2_streams: cfg.h2.then_some(cfg.pipeline),
            h3_streams: cfg.h3.then_some(cfg.pipeline),
            rate: cfg.rate,
            duration_secs: cfg.duration.map(|d| d.as_secs_f64()),
            requests: cfg.requests,
            warmup_secs: cfg.warmup.as_secs_f64(),
            timeout_secs: cfg.timeout.as_secs_f64(),
            method: &cfg.method,
            keep_alive: cfg.keep_alive,
            http10: cfg.http10,
            tls_insecure: cfg.tls.insecure,
            cacert: cfg.tls.cacert.as_ref().map(|p| p.display().to_string()),
            tls_resume: cfg.tls.resume,
        },
        requests: report.requests,
        responses: report.responses,
        elapsed_secs: report.elapsed.as_secs_f64(),
        requests_per_sec: report.requests_per_sec(),
        bytes_read: report.bytes_read,
        bytes_per_sec: report.bytes_per_sec(),
        interrupted: report.interrupted,
        latency_us: JsonLatency {
            summary: report.latency_summary(),
            count: h.len(),
            percentiles,
        },
        thread_req_per_sec: report.thread_rates,
        status: report.status,
        status_codes: &report.status_codes,
        errors: JsonErrors {
            counts: report.errors,
            total: report.errors.total(),
        },
        cpu: JsonCpu {
            user_secs: report.cpu_user.as_secs_f64(),
            system_secs: report.cpu_system.as_secs_f64(),
            us_per_response: report.cpu_us_per_response(),
        },
        tls: if report.tls.is_some() || report.errors.tls > 0 {
            Some(JsonTls {
                summary: report.tls.as_ref().unwrap_or(&EMPTY_TLS),
                first_error: report.tls_error.as_deref(),
            })
        } else {
            None
        },
        h3: report.h3.as_ref(),
        uncorrected_latency_us: report
            .uncorrected_latency
            .as_ref()
            .map(crate::report::summarize),
    };
    serde_json::to_value(out).unwrap_or(serde_json::Value::Null)
}
