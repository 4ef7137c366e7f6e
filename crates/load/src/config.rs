//! What a run is asked to do: [`LoadConfig`], built by the CLI or directly by code (the benchmark
//! harness), and the parsing of its textual pieces (URLs with weights, humane durations).
//!
//! Nothing here touches the network: `validate` checks the values against each other and the
//! limits, and `prepare` resolves names and turns the whole into the plan the threads run
//! ([`LoadConfig::check`] is defined there).

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
    /// With `rate`, also keep the latency measured from each request's actual send, as wrk2's
    /// `-U` does ([`crate::Report::uncorrected_latency`]): the figure coordinated omission
    /// hides behind, printed beside the corrected one.
    pub uncorrected_latency: bool,
    /// Speak HTTP/2: ALPN `h2` for `https://`, prior knowledge (h2c) for `http://`;
    /// `pipeline` is then the number of streams in flight per connection (h2load's `-m`).
    pub h2: bool,
    /// Speak HTTP/3 over QUIC (`https://` only, ALPN `h3`); `pipeline` is then the number of
    /// request streams in flight per connection, as with `h2`.
    pub h3: bool,
    /// wrk's Lua script (`-s`): its requests replace the ones built from the URL, `method`,
    /// `headers` and `body` (which fill its `wrk` table); `pipeline` counts its `request()`
    /// batches in flight.
    pub script: Option<ScriptOptions>,
    /// WebSocket mode (`--ws`): each connection opens with the handshake, then sends messages
    /// (each a request) and waits for their echoes (each its response).
    pub ws: Option<WsOptions>,
}

/// `--ws`: what each message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WsOptions {
    /// Payload bytes of each message (one binary frame).
    pub message_size: usize,
}

/// Largest `--ws-message-size`: 16 MiB, the most a connection holds in its output at once.
pub const MAX_WS_MESSAGE: usize = 16 << 20;

/// A Lua script with wrk's API (`-s FILE -- ARGS`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScriptOptions {
    pub path: std::path::PathBuf,
    /// The arguments after `--`, `init(args)`'s `args[1]`, `args[2]`, ... (`args[0]` is the URL).
    pub args: Vec<String>,
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
            uncorrected_latency: false,
            h2: false,
            h3: false,
            script: None,
            ws: None,
        }
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

/// The units every command line shares (tested in `lowlat_http::units`).
pub use lowlat_http::units::{parse_count, parse_duration};

#[cfg(test)]
mod tests {
    use super::*;

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
