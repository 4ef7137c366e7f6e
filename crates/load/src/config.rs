//! What a run is asked to do: [`LoadConfig`], built by the CLI or directly by code (the benchmark
//! harness), and the parsing of its textual pieces (URLs with weights, humane durations).
//!
//! Nothing here touches the network; the `plan` module resolves names and checks the combination.

use std::time::Duration;

use crate::error::LoadError;

/// One URL to load, with its share of the requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// An `http://host[:port][/path][?query]` URL.
    pub url: String,
    /// Relative weight among the targets (`URL@W` on the command line); at least 1.
    pub weight: u32,
}

impl Target {
    /// A target of weight 1.
    #[must_use]
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            weight: 1,
        }
    }

    /// Parses `URL` or `URL@W` (a trailing `@` followed only by digits is a weight).
    ///
    /// # Errors
    /// [`LoadError::Config`] for a zero or unparsable weight.
    pub fn parse(spec: &str) -> Result<Self, LoadError> {
        if let Some((url, w)) = spec.rsplit_once('@') {
            if !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()) {
                let weight: u32 = w
                    .parse()
                    .map_err(|_| LoadError::Config(format!("weight of {url} is too large: {w}")))?;
                if weight == 0 {
                    return Err(LoadError::Config(format!(
                        "weight of {url} must be at least 1"
                    )));
                }
                return Ok(Self {
                    url: url.to_owned(),
                    weight,
                });
            }
        }
        Ok(Self::new(spec))
    }
}

impl From<&str> for Target {
    fn from(url: &str) -> Self {
        Self::new(url)
    }
}

/// Everything a run needs. Construct it with `..LoadConfig::default()` and the fields you need.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// The URLs, on one host:port or several. Requests cycle through the targets of a host in
    /// weighted round-robin order; connections are shared among hosts by weight.
    pub targets: Vec<Target>,
    /// Event-loop threads (each with its own connections, histogram and counters).
    pub threads: usize,
    /// Connections in total, spread evenly over the threads.
    pub connections: usize,
    /// How long to measure (after the warm-up). `None` with `requests` set: until the count.
    /// Both `None`: 10 s, wrk's default.
    pub duration: Option<Duration>,
    /// Stop after exactly this many requests have ended, each as a response or an error.
    pub requests: Option<u64>,
    /// Requests in flight per connection (1 = no pipelining).
    pub pipeline: u32,
    /// Constant throughput in requests per second over all connections (wrk2's `-R`); latency is
    /// then measured from each request's scheduled send time. `None`: closed loop, as fast as
    /// responses come back.
    pub rate: Option<f64>,
    /// Request method token.
    pub method: String,
    /// Extra request header fields, in order. A `Host` here replaces the one from the URL.
    pub headers: Vec<(String, String)>,
    /// Request body, sent with a `Content-Length`.
    pub body: Option<Vec<u8>>,
    /// A request unanswered this long ends as a timeout error (and its connection is reopened).
    pub timeout: Duration,
    /// Keep connections open between requests; `false` opens one connection per request.
    pub keep_alive: bool,
    /// Send HTTP/1.0 requests (with `Connection: keep-alive` unless `keep_alive` is false).
    pub http10: bool,
    /// Load applied before measuring starts; what happens during it is not reported.
    pub warmup: Duration,
    /// CPUs to pin the loader threads to, thread `i` to `pin_cpus[i % len]`. Empty: no pinning.
    pub pin_cpus: Vec<usize>,
    /// Also keep a latency histogram per interval of this length (from the end of the warm-up),
    /// for HdrHistogram interval logs: [`crate::Report::intervals`]. `None`: only the total.
    pub latency_intervals: Option<Duration>,
    /// How `https://` targets are reached: certificate verification and session resumption.
    pub tls: TlsOptions,
}

/// TLS settings for `https://` targets (ignored for `http://`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// Accept any certificate, like curl's `-k`: the connection is encrypted but the server is
    /// not authenticated.
    pub insecure: bool,
    /// Trust the certificates in this PEM file instead of the system's root store.
    pub cacert: Option<std::path::PathBuf>,
    /// Resume the TLS session on reconnects (an abbreviated handshake); `false` makes every new
    /// connection a full handshake.
    pub resume: bool,
}

impl Default for LoadConfig {
    fn default() -> Self {
        Self {
            targets: Vec::new(),
            threads: 1,
            connections: 10,
            duration: None,
            requests: None,
            pipeline: 1,
            rate: None,
            method: "GET".to_owned(),
            headers: Vec::new(),
            body: None,
            timeout: DEFAULT_TIMEOUT,
            keep_alive: true,
            http10: false,
            warmup: Duration::ZERO,
            pin_cpus: Vec::new(),
            latency_intervals: None,
            tls: TlsOptions::default(),
        }
    }
}

impl LoadConfig {
    /// Checks everything [`crate::run`] checks before loading: option values, URLs, name
    /// resolution, that the process may open that many connections, and one connection to each
    /// host. Lets a caller report bad input before
    /// printing anything else.
    ///
    /// # Errors
    /// The [`LoadError`] that [`crate::run`] would return before starting.
    pub fn check(&self) -> Result<(), LoadError> {
        let plan = crate::plan::Plan::new(self)?;
        crate::engine::check_fd_limit(self.connections)?;
        plan.check_reachable()
    }
}

/// wrk's default `--timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// wrk's default `--duration`, used when neither a duration nor a count is given.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);

/// Most connections in one run: each holds a socket and a few hundred bytes of state.
pub const MAX_CONNECTIONS: usize = 1_000_000;

/// Most threads in one run.
pub const MAX_THREADS: usize = 1024;

/// Deepest pipeline: every in-flight request keeps its send time.
pub const MAX_PIPELINE: u32 = 1024;

/// Parses a humane duration: `10s`, `2m`, `1h`, `500ms`, `250us`, `1.5s`; a bare number is
/// seconds (as in wrk).
///
/// # Errors
/// A message naming the bad value.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?} (try 10s, 2m, 1h, 500ms)"))?;
    let scale = match unit.trim() {
        "" | "s" | "sec" | "secs" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        _ => {
            return Err(format!(
                "invalid duration unit in {s:?} (try 10s, 2m, 1h, 500ms)"
            ))
        }
    };
    let secs = value * scale;
    // 100 years is absurd enough, and keeps `Instant + duration` from overflowing.
    if !secs.is_finite() || secs > 100.0 * 365.0 * 86400.0 {
        return Err(format!("duration {s:?} is too long"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses a count with an optional `k`/`M`/`G` suffix (`100k` = 100 000).
///
/// # Errors
/// A message naming the bad value.
pub fn parse_count(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 1_000.0),
        Some(b'M') => (&s[..s.len() - 1], 1_000_000.0),
        Some(b'G') => (&s[..s.len() - 1], 1_000_000_000.0),
        _ => (s, 1.0),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("invalid number {s:?} (try 1000, 10k, 2M)"))?;
    let v = v * mult;
    if !v.is_finite() || v < 0.0 || v.fract() != 0.0 || v > 1e18 {
        return Err(format!("invalid number {s:?} (try 1000, 10k, 2M)"));
    }
    // Checked just above: a non-negative integer below 1e18.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(v as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let cases = [
            ("10s", Duration::from_secs(10)),
            ("10", Duration::from_secs(10)),
            ("2m", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
            ("500ms", Duration::from_millis(500)),
            ("250us", Duration::from_micros(250)),
            ("1.5s", Duration::from_millis(1500)),
        ];
        for (s, d) in cases {
            assert_eq!(parse_duration(s), Ok(d), "{s}");
        }
        for bad in ["", "s", "10x", "-1s", "1e999s", "1..2s", "9999999999999h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn counts() {
        assert_eq!(parse_count("1000"), Ok(1000));
        assert_eq!(parse_count("10k"), Ok(10_000));
        assert_eq!(parse_count("2M"), Ok(2_000_000));
        assert_eq!(parse_count("1.5k"), Ok(1500));
        for bad in ["", "k", "-1", "1.5", "abc", "1e30"] {
            assert!(parse_count(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn targets() {
        assert_eq!(
            Target::parse("http://a/x@3").unwrap(),
            Target {
                url: "http://a/x".into(),
                weight: 3
            }
        );
        assert_eq!(Target::parse("http://a/x").unwrap().weight, 1);
        // An `@` not followed by digits is part of the URL.
        assert_eq!(Target::parse("http://a/x@y").unwrap().url, "http://a/x@y");
        assert!(Target::parse("http://a/@0").is_err());
        assert!(Target::parse("http://a/@99999999999").is_err());
    }
}
