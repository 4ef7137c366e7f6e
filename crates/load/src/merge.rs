//! `lowlat load merge A.hlog B.hlog …`: one report from the interval logs of several load
//! agents that ran at once (each started by any scheduler with the same `--start-at`, each
//! writing `--hdr-log`). Latency percentiles come from the merged histograms — never from
//! averaging the agents' percentiles, which means nothing — and the total rate is the sum of
//! the agents' rates over their own measured spans.

use std::path::Path;
use std::time::Duration;

use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::report::{new_latency_histogram, summarize, LatencySummary};

/// Why a log could not be merged.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not an HdrHistogram interval log ({reason})")]
    Format { path: String, reason: String },
    #[error("{path}: no interval in it")]
    Empty { path: String },
}

/// One agent's log, read.
#[derive(Debug, Clone)]
pub struct AgentLog {
    /// Its `--tag`, or the file's name without extension.
    pub name: String,
    pub latency: Histogram<u64>,
    /// From the start of its first interval to the end of its last.
    pub span: Duration,
    pub intervals: usize,
}

impl AgentLog {
    /// Responses per second over the agent's span.
    #[must_use]
    pub fn rate(&self) -> f64 {
        let s = self.span.as_secs_f64();
        if s > 0.0 {
            self.latency.len() as f64 / s
        } else {
            0.0
        }
    }
}

/// Reads one interval log (`lowlat load --hdr-log`, or any HdrHistogram interval log whose
/// values are microseconds).
///
/// # Errors
/// [`MergeError`] naming the file.
pub fn read_log(path: &Path) -> Result<AgentLog, MergeError> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| MergeError::Read {
        path: shown.clone(),
        source,
    })?;
    let stem = path
        .file_stem()
        .map_or_else(|| shown.clone(), |s| s.to_string_lossy().into_owned());
    parse_log(&bytes, &stem).map_err(|e| match e {
        ParseFailure::Format(reason) => MergeError::Format {
            path: shown.clone(),
            reason,
        },
        ParseFailure::Empty => MergeError::Empty { path: shown },
    })
}

enum ParseFailure {
    Format(String),
    Empty,
}

fn parse_log(bytes: &[u8], default_name: &str) -> Result<AgentLog, ParseFailure> {
    let mut latency = new_latency_histogram();
    let mut deserializer = Deserializer::new();
    let mut name = None;
    let mut first: Option<Duration> = None;
    let mut last_end = Duration::ZERO;
    let mut intervals = 0;
    for entry in IntervalLogIterator::new(bytes) {
        let entry = entry.map_err(|e| ParseFailure::Format(format!("{e:?}")))?;
        let LogEntry::Interval(iv) = entry else {
            continue;
        };
        if name.is_none() {
            name = iv.tag().map(|t| t.as_str().to_owned());
        }
        let raw = base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            iv.encoded_histogram(),
        )
        .map_err(|e| ParseFailure::Format(format!("interval {intervals}: {e}")))?;
        let h: Histogram<u64> = deserializer
            .deserialize(&mut raw.as_slice())
            .map_err(|e| ParseFailure::Format(format!("interval {intervals}: {e:?}")))?;
        latency
            .add(&h)
            .map_err(|e| ParseFailure::Format(format!("interval {intervals}: {e:?}")))?;
        let start = iv.start_timestamp();
        first = Some(first.map_or(start, |f| f.min(start)));
        last_end = last_end.max(start + iv.duration());
        intervals += 1;
    }
    let Some(first) = first else {
        return Err(ParseFailure::Empty);
    };
    Ok(AgentLog {
        name: name.unwrap_or_else(|| default_name.to_owned()),
        latency,
        span: last_end.saturating_sub(first),
        intervals,
    })
}

/// The agents' logs merged.
#[derive(Debug, Clone)]
pub struct Merged {
    pub agents: Vec<AgentLog>,
    pub latency: Histogram<u64>,
}

/// Merges the agents' histograms (counts add; percentiles are read from the sum).
#[must_use]
pub fn merge(agents: Vec<AgentLog>) -> Merged {
    let mut latency = new_latency_histogram();
    for a in &agents {
        // Histograms of the same bounds and precision always add (auto-resizing).
        let _ = latency.add(&a.latency);
    }
    Merged { agents, latency }
}

impl Merged {
    /// The agents' rates added: they ran at the same time.
    #[must_use]
    pub fn total_rate(&self) -> f64 {
        self.agents.iter().map(AgentLog::rate).sum()
    }
}

#[derive(Serialize)]
struct JsonAgent<'a> {
    name: &'a str,
    responses: u64,
    span_secs: f64,
    requests_per_sec: f64,
    intervals: usize,
    latency_us: LatencySummary,
}

#[derive(Serialize)]
struct JsonMerged<'a> {
    agents: Vec<JsonAgent<'a>>,
    responses: u64,
    requests_per_sec: f64,
    latency_us: LatencySummary,
}

/// The merged report as JSON.
#[must_use]
pub fn to_json(m: &Merged) -> serde_json::Value {
    let out = JsonMerged {
        agents: m
            .agents
            .iter()
            .map(|a| JsonAgent {
                name: &a.name,
                responses: a.latency.len(),
                span_secs: a.span.as_secs_f64(),
                requests_per_sec: a.rate(),
                intervals: a.intervals,
                latency_us: summarize(&a.latency),
            })
            .collect(),
        responses: m.latency.len(),
        requests_per_sec: m.total_rate(),
        latency_us: summarize(&m.latency),
    };
    serde_json::to_value(out).unwrap_or(serde_json::Value::Null)
}

/// The merged report as text: one row per agent, then the total and the combined percentiles.
#[must_use]
pub fn render_text(m: &Merged) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "  {:<20} {:>12} {:>10} {:>12} {:>10} {:>10}",
        "agent", "responses", "span", "req/s", "p50", "p99"
    );
    let row = |s: &mut String, name: &str, n: u64, span: String, rate: f64, h: &Histogram<u64>| {
        let _ = writeln!(
            s,
            "  {name:<20} {n:>12} {span:>10} {rate:>12.2} {:>10} {:>10}",
            crate::text::micros(h.value_at_quantile(0.5) as f64),
            crate::text::micros(h.value_at_quantile(0.99) as f64)
        );
    };
    for a in &m.agents {
        row(
            &mut s,
            &a.name,
            a.latency.len(),
            crate::text::duration(a.span.as_secs_f64()),
            a.rate(),
            &a.latency,
        );
    }
    row(
        &mut s,
        "all agents",
        m.latency.len(),
        String::new(),
        m.total_rate(),
        &m.latency,
    );
    let l = summarize(&m.latency);
    let _ = writeln!(s, "  Latency Distribution (merged histograms)");
    for (p, v) in [
        ("50", l.p50),
        ("75", l.p75),
        ("90", l.p90),
        ("99", l.p99),
        ("99.9", l.p99_9),
        ("99.99", l.p99_99),
    ] {
        let _ = writeln!(s, "  {p:>6}% {:>9}", crate::text::micros(v as f64));
    }
    let _ = writeln!(s, "Requests/sec: {:>9.2}", m.total_rate());
    s
}
