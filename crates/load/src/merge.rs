//! `lowlat load merge A.hlog B.hlog …`: one report from the interval logs of several load
//! agents that ran at once (each started by any scheduler with the same `--start-at`, each
//! writing `--hdr-log`). Latency percentiles come from the merged histograms — never from
//! averaging the agents' percentiles, which means nothing — and the total rate is every
//! response over the time the logs cover together: the union of their spans, read from the
//! wall-clock times the logs carry (`#[BaseTime: …]`). Agents that ran together cover one span
//! and their rates add up; logs of runs made one after the other do not overlap, are said to
//! ([`Merged::warning`]), and their rate is the one that happened — never the sum of rates that
//! were never reached at once.

use std::ops::Range;
use std::path::Path;
use std::time::{Duration, SystemTime};

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
    /// When that span began and ended (wall clock), from the log's `#[BaseTime: …]` or
    /// `#[StartTime: …]`, or from absolute interval times; `None` for a log of relative times
    /// only.
    pub ran: Option<Range<SystemTime>>,
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

/// Interval times this far below the log's StartTime are relative to it; nearer ones are
/// seconds since the epoch (HdrHistogram's own reader decides so, with a year).
const RELATIVE_BELOW: Duration = Duration::from_secs(365 * 24 * 3600);

fn parse_log(bytes: &[u8], default_name: &str) -> Result<AgentLog, ParseFailure> {
    let mut latency = new_latency_histogram();
    let mut deserializer = Deserializer::new();
    let mut name = None;
    let mut first: Option<Duration> = None;
    let mut last_end = Duration::ZERO;
    let mut intervals = 0;
    let (mut base_time, mut start_time) = (None, None);
    // Since the epoch, while every interval so far has had a wall-clock time.
    let mut wall: Option<Range<Duration>> = None;
    let mut wall_known = true;
    for entry in IntervalLogIterator::new(bytes) {
        let entry = entry.map_err(|e| ParseFailure::Format(format!("{e:?}")))?;
        let iv = match entry {
            LogEntry::BaseTime(t) => {
                base_time = Some(t);
                continue;
            }
            LogEntry::StartTime(t) => {
                start_time = Some(t);
                continue;
            }
            LogEntry::Interval(iv) => iv,
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
        // HdrHistogram's rules: BaseTime makes the times relative to it; StartTime alone does
        // when they are far below it; with neither, large times are seconds since the epoch.
        let since_epoch = match (base_time, start_time) {
            (Some(base), _) => Some(base + start),
            (None, Some(st)) if start + RELATIVE_BELOW < st => Some(st + start),
            _ if start >= RELATIVE_BELOW => Some(start),
            _ => None,
        };
        match since_epoch {
            Some(at) if wall_known => {
                let end = at + iv.duration();
                wall = Some(match wall {
                    Some(w) => w.start.min(at)..w.end.max(end),
                    None => at..end,
                });
            }
            _ => wall_known = false,
        }
    }
    let Some(first) = first else {
        return Err(ParseFailure::Empty);
    };
    Ok(AgentLog {
        name: name.unwrap_or_else(|| default_name.to_owned()),
        latency,
        span: last_end.saturating_sub(first),
        intervals,
        ran: wall
            .filter(|_| wall_known)
            .map(|w| SystemTime::UNIX_EPOCH + w.start..SystemTime::UNIX_EPOCH + w.end),
    })
}

/// The agents' logs merged.
#[derive(Debug, Clone)]
pub struct Merged {
    pub agents: Vec<AgentLog>,
    pub latency: Histogram<u64>,
    /// When every log has wall-clock times: how long the agents' spans cover together (their
    /// union) and how long all of them ran at once (their intersection, zero when some pair
    /// never overlapped).
    pub timing: Option<Timing>,
}

/// How the agents' runs lay in time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// The union of the agents' spans: the time the rate is taken over.
    pub covered: Duration,
    /// The time every agent was running.
    pub together: Duration,
}

/// Merges the agents' histograms (counts add; percentiles are read from the sum) and lays
/// their spans side by side in time.
#[must_use]
pub fn merge(agents: Vec<AgentLog>) -> Merged {
    let mut latency = new_latency_histogram();
    for a in &agents {
        // Histograms of the same bounds and precision always add (auto-resizing).
        let _ = latency.add(&a.latency);
    }
    let spans: Option<Vec<Range<SystemTime>>> = agents.iter().map(|a| a.ran.clone()).collect();
    let timing = spans.filter(|s| !s.is_empty()).map(timing_of);
    Merged {
        agents,
        latency,
        timing,
    }
}

/// The union and the intersection of some spans' lengths.
fn timing_of(mut spans: Vec<Range<SystemTime>>) -> Timing {
    let latest_start = spans.iter().map(|s| s.start).max();
    let earliest_end = spans.iter().map(|s| s.end).min();
    let together = match (latest_start, earliest_end) {
        (Some(a), Some(b)) => b.duration_since(a).unwrap_or(Duration::ZERO),
        _ => Duration::ZERO,
    };
    spans.sort_by_key(|s| s.start);
    let mut covered = Duration::ZERO;
    let mut current: Option<Range<SystemTime>> = None;
    for s in spans {
        match &mut current {
            Some(c) if s.start <= c.end => c.end = c.end.max(s.end),
            _ => {
                if let Some(c) = current.replace(s) {
                    covered += c.end.duration_since(c.start).unwrap_or(Duration::ZERO);
                }
            }
        }
    }
    if let Some(c) = current {
        covered += c.end.duration_since(c.start).unwrap_or(Duration::ZERO);
    }
    Timing { covered, together }
}

impl Merged {
    /// Responses per second over the time the agents covered together (the union of their
    /// spans): the agents' rates added when they ran at once, and the rate that really
    /// happened when they did not. Logs without wall-clock times cannot be placed: their
    /// agents are taken to have run together, and their rates are added.
    #[must_use]
    pub fn total_rate(&self) -> f64 {
        match self.timing {
            Some(t) if !t.covered.is_zero() => self.latency.len() as f64 / t.covered.as_secs_f64(),
            Some(_) => 0.0,
            None => self.agents.iter().map(AgentLog::rate).sum(),
        }
    }

    /// What the reader of the merged figures should know about how the logs lie in time: that
    /// they do not overlap (or overlap for less than half the time they cover, so the rate is
    /// not that of the agents at once), or that some cannot be placed in time.
    #[must_use]
    pub fn warning(&self) -> Option<String> {
        let Some(t) = self.timing else {
            let unplaced: Vec<&str> = self
                .agents
                .iter()
                .filter(|a| a.ran.is_none())
                .map(|a| a.name.as_str())
                .collect();
            return (self.agents.len() > 1).then(|| {
                format!(
                    "{} {} no wall-clock times (#[BaseTime]): cannot check that the logs overlap; \
                     the rates are added as if the agents ran together",
                    unplaced.join(", "),
                    if unplaced.len() == 1 { "has" } else { "have" }
                )
            });
        };
        if self.agents.len() < 2 || t.together.as_secs_f64() * 2.0 >= t.covered.as_secs_f64() {
            return None;
        }
        let spans: Vec<String> = self
            .agents
            .iter()
            .filter_map(|a| {
                let r = a.ran.as_ref()?;
                Some(format!(
                    "{} {}–{}",
                    a.name,
                    humantime::format_rfc3339_seconds(r.start),
                    humantime::format_rfc3339_seconds(r.end)
                ))
            })
            .collect();
        let how = if t.together.is_zero() {
            "do not overlap in time".to_owned()
        } else {
            format!(
                "overlap for only {} of the {} they cover",
                crate::text::duration(t.together.as_secs_f64()),
                crate::text::duration(t.covered.as_secs_f64())
            )
        };
        Some(format!(
            "the logs {how} ({}): the rate is over the {} they cover, not the agents' rates \
             added",
            spans.join(", "),
            crate::text::duration(t.covered.as_secs_f64())
        ))
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
    /// The union of the agents' spans (what the rate is over); null without wall-clock times.
    covered_secs: Option<f64>,
    /// The time all agents ran at once; null without wall-clock times.
    together_secs: Option<f64>,
    /// [`Merged::warning`], or null.
    warning: Option<String>,
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
        covered_secs: m.timing.map(|t| t.covered.as_secs_f64()),
        together_secs: m.timing.map(|t| t.together.as_secs_f64()),
        warning: m.warning(),
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
        m.timing
            .map(|t| crate::text::duration(t.covered.as_secs_f64()))
            .unwrap_or_default(),
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
