//! Turning a [`LoadConfig`] into a [`Plan`]: validated options, URLs parsed and resolved, the
//! request bytes built once, and connections and request budgets divided among threads.
//!
//! Request bytes are built here, once per run, and never again: each host gets a [`RequestBatch`]
//! holding its weighted round-robin sequence of requests laid out contiguously, with enough
//! repeats that any `pipeline` consecutive requests are one slice. A connection sends `k`
//! requests with one `write` of [`RequestBatch::window`], whatever its position in the cycle.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::config::{
    LoadConfig, Target, DEFAULT_DURATION, MAX_CONNECTIONS, MAX_PIPELINE, MAX_THREADS,
};
use crate::error::LoadError;

/// Longest weighted cycle of URLs on one host (sum of weights after dividing by their gcd).
const MAX_CYCLE: u64 = 10_000;

/// A URL taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Url {
    /// Host as written (`[::1]` keeps its brackets), for the `Host` header and messages.
    pub host: String,
    pub port: u16,
    /// Origin-form request-target: path and query, at least `/`.
    pub target: String,
    /// `https://`: the connection speaks TLS.
    pub tls: bool,
}

impl Url {
    /// The `Host` header value: the host, and the port unless it is the scheme's default.
    fn authority(&self) -> String {
        if self.port == if self.tls { 443 } else { 80 } {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// Parses an `http://` or `https://` URL (with the `url` crate, WHATWG rules: a space in the
/// path is percent-encoded, host names are lower-cased), then refuses what a load generator
/// cannot send: another scheme, user information, port 0.
pub(crate) fn parse_url(text: &str) -> Result<Url, LoadError> {
    let bad = |reason: &str| LoadError::BadUrl {
        url: text.to_owned(),
        reason: reason.to_owned(),
    };
    if !text.contains("://") {
        return Err(bad("expected http://host[:port]/path or https://…"));
    }
    let u = url::Url::parse(text.trim()).map_err(|e| bad(&e.to_string()))?;
    let tls = match u.scheme() {
        "http" => false,
        "https" => true,
        _ => return Err(bad("only http:// and https:// URLs are supported")),
    };
    if !u.username().is_empty() || u.password().is_some() {
        return Err(bad("user information in URLs is not supported"));
    }
    let host = match u.host() {
        Some(url::Host::Domain(d)) => d.to_owned(),
        Some(url::Host::Ipv4(a)) => a.to_string(),
        Some(url::Host::Ipv6(a)) => format!("[{a}]"),
        None => return Err(bad("missing host")),
    };
    if host.is_empty() {
        return Err(bad("missing host"));
    }
    let port = u
        .port_or_known_default()
        .unwrap_or(if tls { 443 } else { 80 });
    if port == 0 {
        return Err(bad("invalid port"));
    }
    // The fragment never goes on the wire.
    let target = match u.query() {
        Some(q) => format!("{}?{q}", u.path()),
        None => u.path().to_owned(),
    };
    Ok(Url {
        host,
        port,
        target,
        tls,
    })
}

/// The requests of one host, laid out so that any `depth` consecutive ones are one slice.
#[derive(Debug, Clone)]
pub(crate) struct RequestBatch {
    bytes: Vec<u8>,
    /// `offsets[i]..offsets[i + 1]` is request `i` of the laid-out sequence.
    offsets: Vec<usize>,
    /// Length of the weighted cycle.
    cycle: usize,
    /// Whether the requests use `HEAD` (their responses have no body).
    pub head: bool,
}

impl RequestBatch {
    /// The bytes of `k` consecutive requests starting at cycle position `pos`, and the position
    /// after them. `k` must not exceed the pipeline depth the batch was built for.
    pub fn window(&self, pos: usize, k: usize) -> (&[u8], usize) {
        let end = pos + k;
        (
            &self.bytes[self.offsets[pos]..self.offsets[end]],
            end % self.cycle,
        )
    }

    /// Byte range of `k` requests from `pos`, for resuming a partial write later.
    pub fn range(&self, pos: usize, k: usize) -> (usize, usize) {
        (self.offsets[pos], self.offsets[pos + k])
    }

    /// The bytes in `start..end`.
    pub fn slice(&self, start: usize, end: usize) -> &[u8] {
        &self.bytes[start..end]
    }
}

/// One host:port: where its connections go and what they send.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    pub addr: SocketAddr,
    /// `host:port` as written, for messages.
    pub authority: String,
    pub requests: RequestBatch,
    /// For `https://`: the name the TLS session asks for and verifies.
    pub tls: Option<rustls::pki_types::ServerName<'static>>,
    /// With `--h2`: the requests as HTTP/2 fields, and the weighted cycle through them.
    pub h2_requests: Vec<crate::h2::H2Request>,
    pub h2_cycle: Vec<usize>,
}

/// One connection's place in the run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnSpec {
    /// Index among all connections of the run (spaces rate-mode send times apart).
    pub global: usize,
    pub group: usize,
}

/// A validated run, ready for the threads.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub groups: Vec<Group>,
    /// Each thread's connections.
    pub threads: Vec<Vec<ConnSpec>>,
    /// Each thread's share of `requests`, when counted.
    pub budgets: Vec<Option<u64>>,
    pub connections: usize,
    pub pipeline: u32,
    /// Interval between two sends of one connection in rate mode.
    pub conn_interval: Option<Duration>,
    /// Measured time; `None` runs until the request count.
    pub duration: Option<Duration>,
    pub warmup: Duration,
    pub timeout: Duration,
    pub keep_alive: bool,
    pub pin_cpus: Vec<usize>,
    pub latency_intervals: Option<Duration>,
    /// The TLS client configuration, when any target is `https://`.
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    /// Rate mode with `-U`: also record latency from the actual send.
    pub uncorrected: bool,
    /// HTTP/2, `pipeline` streams in flight per connection.
    pub h2: bool,
}

impl Plan {
    /// Validates `cfg`, resolves its hosts and builds the request bytes.
    pub fn new(cfg: &LoadConfig) -> Result<Self, LoadError> {
        validate(cfg)?;
        let mut groups: Vec<(Url, Vec<(Url, u32)>)> = Vec::new();
        for Target { url, weight } in &cfg.targets {
            let parsed = parse_url(url)?;
            match groups.iter_mut().find(|(g, _)| {
                g.host.eq_ignore_ascii_case(&parsed.host)
                    && g.port == parsed.port
                    && g.tls == parsed.tls
            }) {
                Some((_, members)) => members.push((parsed, *weight)),
                None => groups.push((parsed.clone(), vec![(parsed, *weight)])),
            }
        }
        if cfg.connections < groups.len() {
            return Err(LoadError::Config(format!(
                "{} connections cannot reach {} hosts: need at least one each",
                cfg.connections,
                groups.len()
            )));
        }
        let mut built = Vec::with_capacity(groups.len());
        let mut weights = Vec::with_capacity(groups.len());
        for (first, members) in &groups {
            let addr = resolve(first)?;
            let cycle = weighted_cycle(members.iter().map(|(_, w)| *w))?;
            let requests: Vec<Vec<u8>> = members
                .iter()
                .map(|(u, _)| build_request(cfg, u))
                .collect::<Result<_, _>>()?;
            let tls = if first.tls {
                Some(
                    crate::tls::server_name(&first.host).map_err(|reason| LoadError::BadUrl {
                        url: cfg.targets[0].url.clone(),
                        reason: format!("{} is not a TLS server name: {reason}", first.host),
                    })?,
                )
            } else {
                None
            };
            let h2_requests = if cfg.h2 {
                members
                    .iter()
                    .map(|(u, _)| build_h2_request(cfg, u))
                    .collect()
            } else {
                Vec::new()
            };
            built.push(Group {
                addr,
                authority: first.authority(),
                requests: lay_out(&requests, &cycle, cfg.pipeline as usize, is_head(cfg)),
                tls,
                h2_requests,
                h2_cycle: if cfg.h2 { cycle.clone() } else { Vec::new() },
            });
            weights.push(members.iter().map(|(_, w)| u64::from(*w)).sum::<u64>());
        }
        let per_group = share(cfg.connections as u64, &weights);
        // Interleave hosts so that every thread gets a fair mix of them.
        let mut order = Vec::with_capacity(cfg.connections);
        let mut left = per_group.clone();
        while order.len() < cfg.connections {
            for (g, n) in left.iter_mut().enumerate() {
                if *n > 0 {
                    *n -= 1;
                    order.push(g);
                }
            }
        }
        let mut threads = vec![Vec::new(); cfg.threads];
        for (global, group) in order.into_iter().enumerate() {
            threads[global % cfg.threads].push(ConnSpec { global, group });
        }
        let budgets = match cfg.requests {
            None => vec![None; cfg.threads],
            Some(n) => share(n, &vec![1; cfg.threads])
                .into_iter()
                .map(Some)
                .collect(),
        };
        let duration = match (cfg.duration, cfg.requests) {
            (None, None) => Some(DEFAULT_DURATION),
            (d, _) => d,
        };
        let conn_interval = cfg
            .rate
            .map(|r| Duration::from_secs_f64(cfg.connections as f64 / r));
        let tls = if built.iter().any(|g| g.tls.is_some()) {
            Some(crate::tls::client_config(&cfg.tls, cfg.h2)?)
        } else {
            None
        };
        Ok(Self {
            tls,
            uncorrected: cfg.uncorrected_latency && cfg.rate.is_some(),
            h2: cfg.h2,
            groups: built,
            threads,
            budgets,
            connections: cfg.connections,
            pipeline: cfg.pipeline,
            conn_interval,
            duration,
            warmup: cfg.warmup,
            timeout: cfg.timeout,
            keep_alive: cfg.keep_alive,
            pin_cpus: cfg.pin_cpus.clone(),
            latency_intervals: cfg.latency_intervals,
        })
    }

    /// Opens and closes one connection to each host, so that an unreachable target is one clear
    /// error before the run rather than a run full of connect errors.
    pub fn check_reachable(&self) -> Result<(), LoadError> {
        let wait = self.timeout.min(Duration::from_secs(5));
        for g in &self.groups {
            TcpStream::connect_timeout(&g.addr, wait).map_err(|source| LoadError::Connect {
                addr: g.authority.clone(),
                source,
            })?;
        }
        Ok(())
    }
}

fn is_head(cfg: &LoadConfig) -> bool {
    cfg.method == "HEAD"
}

fn validate(cfg: &LoadConfig) -> Result<(), LoadError> {
    let err = |m: String| Err(LoadError::Config(m));
    if cfg.targets.is_empty() {
        return err("no URL given".into());
    }
    if cfg.targets.iter().any(|t| t.weight == 0) {
        return err("URL weights must be at least 1".into());
    }
    if cfg.h2 {
        if cfg.http10 || !cfg.keep_alive {
            return err("--h2 keeps connections open and speaks HTTP/2, not HTTP/1.0".into());
        }
        // Request bodies are sent without waiting for window: within the protocol's default.
        if cfg.body.as_ref().is_some_and(|b| b.len() > 65_535) {
            return err("with --h2 a request body can be at most 65535 bytes".into());
        }
    }
    if cfg.threads == 0 || cfg.threads > MAX_THREADS {
        return err(format!(
            "threads must be 1..={MAX_THREADS}, not {}",
            cfg.threads
        ));
    }
    if cfg.connections == 0 || cfg.connections > MAX_CONNECTIONS {
        return err(format!(
            "connections must be 1..={MAX_CONNECTIONS}, not {}",
            cfg.connections
        ));
    }
    if cfg.connections < cfg.threads {
        return err(format!(
            "connections ({}) must be at least threads ({})",
            cfg.connections, cfg.threads
        ));
    }
    if cfg.pipeline == 0 || cfg.pipeline > MAX_PIPELINE {
        return err(format!(
            "pipeline must be 1..={MAX_PIPELINE}, not {}",
            cfg.pipeline
        ));
    }
    if cfg.pipeline > 1 && !cfg.keep_alive {
        return err("pipelining needs keep-alive connections".into());
    }
    if let Some(r) = cfg.rate {
        // Below 0.001/s one connection's interval would overflow a Duration soon enough.
        if !(r.is_finite() && (0.001..=1e9).contains(&r)) {
            return err(format!(
                "rate must be between 0.001 and 1G requests/s, not {r}"
            ));
        }
    }
    // Code callers can pass any Duration; deadlines are `Instant + duration` and must not
    // overflow.
    let century = Duration::from_secs(100 * 365 * 86_400);
    for (name, d) in [
        ("duration", cfg.duration.unwrap_or(Duration::ZERO)),
        ("warmup", cfg.warmup),
        ("timeout", cfg.timeout),
        (
            "latency interval",
            cfg.latency_intervals.unwrap_or(Duration::ZERO),
        ),
    ] {
        if d > century {
            return err(format!("{name} is too long"));
        }
    }
    if cfg.requests == Some(0) {
        return err("request count must be at least 1".into());
    }
    if cfg.duration == Some(Duration::ZERO) {
        return err("duration must be above 0".into());
    }
    if cfg
        .latency_intervals
        .is_some_and(|i| i < Duration::from_millis(1))
    {
        return err("latency intervals must be at least 1 ms".into());
    }
    if cfg.timeout.is_zero() {
        return err("timeout must be above 0".into());
    }
    // Checked here, before any banner, rather than when a thread fails to pin itself.
    let cpus = crate::sys::cpus_configured();
    if let Some(&cpu) = cfg.pin_cpus.iter().find(|&&c| c >= cpus) {
        return err(format!(
            "cannot pin to CPU {cpu}: this machine has CPUs 0–{}",
            cpus - 1
        ));
    }
    if cfg.method.is_empty() || !cfg.method.bytes().all(is_tchar) {
        return err(format!("invalid method {:?}", cfg.method));
    }
    for (name, value) in &cfg.headers {
        if name.is_empty() || !name.bytes().all(is_tchar) {
            return err(format!("invalid header name {name:?}"));
        }
        if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            return err(format!("invalid value for header {name}"));
        }
        if name.eq_ignore_ascii_case("content-length")
            || name.eq_ignore_ascii_case("transfer-encoding")
        {
            return err(format!(
                "{name} is set from the body; use --body or --body-file instead"
            ));
        }
    }
    Ok(())
}

/// RFC 9110 §5.6.2 token characters.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn resolve(url: &Url) -> Result<SocketAddr, LoadError> {
    let host = url.host.trim_start_matches('[').trim_end_matches(']');
    let mut addrs = (host, url.port)
        .to_socket_addrs()
        .map_err(|source| LoadError::Resolve {
            host: url.host.clone(),
            source,
        })?;
    addrs.next().ok_or_else(|| LoadError::Resolve {
        host: url.host.clone(),
        source: std::io::Error::new(std::io::ErrorKind::NotFound, "no address"),
    })
}

/// The bytes of one request, built once.
fn build_request(cfg: &LoadConfig, url: &Url) -> Result<Vec<u8>, LoadError> {
    let mut r = Vec::with_capacity(128);
    r.extend_from_slice(cfg.method.as_bytes());
    r.push(b' ');
    r.extend_from_slice(url.target.as_bytes());
    r.extend_from_slice(if cfg.http10 {
        b" HTTP/1.0\r\n"
    } else {
        b" HTTP/1.1\r\n"
    });
    let has = |n: &str| cfg.headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(n));
    if !has("host") {
        r.extend_from_slice(b"Host: ");
        r.extend_from_slice(url.authority().as_bytes());
        r.extend_from_slice(b"\r\n");
    }
    for (k, v) in &cfg.headers {
        r.extend_from_slice(k.as_bytes());
        r.extend_from_slice(b": ");
        r.extend_from_slice(v.trim().as_bytes());
        r.extend_from_slice(b"\r\n");
    }
    if !has("connection") {
        if !cfg.keep_alive {
            r.extend_from_slice(b"Connection: close\r\n");
        } else if cfg.http10 {
            r.extend_from_slice(b"Connection: keep-alive\r\n");
        }
    }
    if let Some(body) = &cfg.body {
        r.extend_from_slice(b"Content-Length: ");
        r.extend_from_slice(body.len().to_string().as_bytes());
        r.extend_from_slice(b"\r\n\r\n");
        r.extend_from_slice(body);
    } else {
        r.extend_from_slice(b"\r\n");
    }
    if r.len() > 1 << 20 {
        return Err(LoadError::Config(
            "request larger than 1 MiB; use a smaller body".into(),
        ));
    }
    Ok(r)
}

/// One request as HTTP/2 fields: `:method`, `:scheme`, `:authority` (the URL's, or a `Host`
/// given with `-H`), `:path`, then the other fields with their names in lower case, without
/// HTTP/1.1's connection-specific ones.
fn build_h2_request(cfg: &LoadConfig, url: &Url) -> crate::h2::H2Request {
    let authority = cfg
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("host"))
        .map_or_else(|| url.authority(), |(_, v)| v.trim().to_owned());
    let mut fields: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (b":method".to_vec(), cfg.method.as_bytes().to_vec()),
        (
            b":scheme".to_vec(),
            if url.tls { &b"https"[..] } else { b"http" }.to_vec(),
        ),
        (b":authority".to_vec(), authority.into_bytes()),
        (b":path".to_vec(), url.target.as_bytes().to_vec()),
    ];
    for (k, v) in &cfg.headers {
        let k = k.to_ascii_lowercase();
        if matches!(
            k.as_str(),
            "host"
                | "connection"
                | "keep-alive"
                | "proxy-connection"
                | "transfer-encoding"
                | "upgrade"
        ) || (k == "te" && !v.trim().eq_ignore_ascii_case("trailers"))
        {
            continue;
        }
        fields.push((k.into_bytes(), v.trim().as_bytes().to_vec()));
    }
    if let Some(body) = &cfg.body {
        fields.push((
            b"content-length".to_vec(),
            body.len().to_string().into_bytes(),
        ));
    }
    crate::h2::H2Request {
        fields,
        body: cfg.body.clone(),
    }
}

/// Smooth weighted round-robin (as nginx balances upstreams): `a@3, b@1` gives `a a b a`
/// rather than `a a a b`, so a short run still sees every URL in proportion.
fn weighted_cycle(weights: impl Iterator<Item = u32>) -> Result<Vec<usize>, LoadError> {
    let weights: Vec<u64> = weights.map(u64::from).collect();
    let g = weights.iter().copied().fold(0, gcd);
    let weights: Vec<i64> = weights.iter().map(|w| (w / g.max(1)) as i64).collect();
    let total: i64 = weights.iter().sum();
    if total as u64 > MAX_CYCLE {
        return Err(LoadError::Config(format!(
            "URL weights too fine: their sum (after dividing by their gcd) must be at most {MAX_CYCLE}"
        )));
    }
    let mut current = vec![0i64; weights.len()];
    let mut cycle = Vec::with_capacity(total as usize);
    for _ in 0..total {
        for (c, w) in current.iter_mut().zip(&weights) {
            *c += w;
        }
        let (best, _) = current
            .iter()
            .enumerate()
            .max_by_key(|&(i, c)| (*c, std::cmp::Reverse(i)))
            .unwrap_or((0, &0));
        current[best] -= total;
        cycle.push(best);
    }
    Ok(cycle)
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Lays the cycle out `cycle.len() + depth - 1` requests long.
fn lay_out(requests: &[Vec<u8>], cycle: &[usize], depth: usize, head: bool) -> RequestBatch {
    let n = cycle.len() + depth - 1;
    let mut bytes = Vec::new();
    let mut offsets = Vec::with_capacity(n + 1);
    offsets.push(0);
    for i in 0..n {
        bytes.extend_from_slice(&requests[cycle[i % cycle.len()]]);
        offsets.push(bytes.len());
    }
    RequestBatch {
        bytes,
        offsets,
        cycle: cycle.len(),
        head,
    }
}

/// Splits `total` in proportion to `weights` (largest remainder); when `total` allows, every
/// share is at least 1 (taken from the largest share).
fn share(total: u64, weights: &[u64]) -> Vec<u64> {
    let sum = u128::from(weights.iter().sum::<u64>().max(1));
    let exact = |i: usize| u128::from(total) * u128::from(weights[i]);
    let mut out: Vec<u64> = (0..weights.len())
        .map(|i| u64::try_from(exact(i) / sum).unwrap_or(u64::MAX))
        .collect();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(exact(i) % sum));
    let mut rest = total.saturating_sub(out.iter().sum::<u64>());
    for &i in order.iter().cycle().take(weights.len() * 2) {
        if rest == 0 {
            break;
        }
        out[i] += 1;
        rest -= 1;
    }
    if total >= weights.len() as u64 {
        while let Some(zero) = out.iter().position(|&n| n == 0) {
            let (largest, _) = out
                .iter()
                .enumerate()
                .max_by_key(|&(i, n)| (*n, std::cmp::Reverse(i)))
                .unwrap_or((zero, &0));
            out[largest] -= 1;
            out[zero] += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let ok = |s: &str, host: &str, port: u16, target: &str| {
            assert_eq!(
                parse_url(s).unwrap(),
                Url {
                    host: host.into(),
                    port,
                    target: target.into(),
                    tls: s.to_ascii_lowercase().starts_with("https"),
                },
                "{s}"
            );
        };
        ok(
            "http://127.0.0.1:8080/plaintext",
            "127.0.0.1",
            8080,
            "/plaintext",
        );
        ok("http://localhost", "localhost", 80, "/");
        ok("HTTP://a:81?x=1", "a", 81, "/?x=1");
        ok("http://[::1]:9000/a/b?c#frag", "[::1]", 9000, "/a/b?c");
        ok("http://[::1]/", "[::1]", 80, "/");
        ok("https://example.com/x", "example.com", 443, "/x");
        ok("HTTPS://a:8443", "a", 8443, "/");
        // WHATWG rules: a space in the path is encoded, a host name lower-cased.
        ok("http://A.example/b c", "a.example", 80, "/b%20c");
        // The Host header leaves out the scheme's own default port only.
        let host = |s: &str| parse_url(s).unwrap().authority();
        assert_eq!(host("https://a/"), "a");
        assert_eq!(host("https://a:80/"), "a:80");
        assert_eq!(host("http://a:443/"), "a:443");
        for bad in [
            "127.0.0.1:8080",
            "ftp://a/",
            "http://",
            "http://:80/",
            "http://a:0/",
            "http://a:99999/",
            "http://a:x/",
            "http://u@a/",
            "http://[::1/",
            "http://a b/",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn requests_are_built_once_with_the_right_fields() {
        let url = parse_url("http://127.0.0.1:8080/x").unwrap();
        let cfg = LoadConfig::default();
        assert_eq!(
            build_request(&cfg, &url).unwrap(),
            b"GET /x HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n"
        );
        let cfg = LoadConfig {
            method: "POST".into(),
            headers: vec![("X-A".into(), "1".into()), ("host".into(), "h".into())],
            body: Some(b"hi".to_vec()),
            keep_alive: false,
            ..LoadConfig::default()
        };
        assert_eq!(
            build_request(&cfg, &url).unwrap(),
            b"POST /x HTTP/1.1\r\nX-A: 1\r\nhost: h\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi"
        );
        let cfg = LoadConfig {
            http10: true,
            ..LoadConfig::default()
        };
        let url = parse_url("http://a/").unwrap();
        assert_eq!(
            build_request(&cfg, &url).unwrap(),
            b"GET / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n"
        );
    }

    #[test]
    fn cycles_are_smooth() {
        assert_eq!(weighted_cycle([1].into_iter()).unwrap(), vec![0]);
        assert_eq!(
            weighted_cycle([3, 1].into_iter()).unwrap(),
            vec![0, 0, 1, 0]
        );
        assert_eq!(weighted_cycle([2, 2].into_iter()).unwrap(), vec![0, 1]);
        assert!(weighted_cycle([10_000, 1].into_iter()).is_err());
    }

    #[test]
    fn windows_are_contiguous() {
        let reqs = vec![b"A".to_vec(), b"BB".to_vec()];
        let batch = lay_out(&reqs, &[0, 1, 0], 3, false);
        assert_eq!(batch.window(0, 3), (&b"ABBA"[..], 0));
        assert_eq!(batch.window(2, 3), (&b"AABB"[..], 2));
        assert_eq!(batch.window(1, 1), (&b"BB"[..], 2));
    }

    #[test]
    fn shares() {
        assert_eq!(share(10, &[1, 1, 1]), vec![4, 3, 3]);
        assert_eq!(share(3, &[100, 1, 1]), vec![1, 1, 1]);
        assert_eq!(share(4, &[3, 1]), vec![3, 1]);
        assert_eq!(share(0, &[1, 1]), vec![0, 0]);
        assert_eq!(share(1, &[1, 1]), vec![1, 0]);
    }

    #[test]
    fn bad_configs() {
        let base = || LoadConfig {
            targets: vec![Target::new("http://127.0.0.1:1/")],
            ..LoadConfig::default()
        };
        let cases: Vec<LoadConfig> = vec![
            LoadConfig {
                targets: vec![],
                ..base()
            },
            LoadConfig {
                threads: 0,
                ..base()
            },
            LoadConfig {
                connections: 0,
                ..base()
            },
            LoadConfig {
                threads: 4,
                connections: 2,
                ..base()
            },
            LoadConfig {
                pipeline: 0,
                ..base()
            },
            LoadConfig {
                pipeline: 2,
                keep_alive: false,
                ..base()
            },
            LoadConfig {
                rate: Some(0.0),
                ..base()
            },
            LoadConfig {
                rate: Some(f64::NAN),
                ..base()
            },
            LoadConfig {
                rate: Some(1e-300),
                ..base()
            },
            LoadConfig {
                duration: Some(Duration::MAX),
                ..base()
            },
            LoadConfig {
                warmup: Duration::MAX,
                ..base()
            },
            LoadConfig {
                timeout: Duration::MAX,
                ..base()
            },
            LoadConfig {
                latency_intervals: Some(Duration::ZERO),
                ..base()
            },
            LoadConfig {
                requests: Some(0),
                ..base()
            },
            LoadConfig {
                duration: Some(Duration::ZERO),
                ..base()
            },
            LoadConfig {
                timeout: Duration::ZERO,
                ..base()
            },
            LoadConfig {
                method: "G T".into(),
                ..base()
            },
            LoadConfig {
                headers: vec![("X".into(), "a\r\nb".into())],
                ..base()
            },
            LoadConfig {
                headers: vec![("Content-Length".into(), "1".into())],
                ..base()
            },
            LoadConfig {
                pin_cpus: vec![0, 1 << 20],
                ..base()
            },
        ];
        for cfg in cases {
            assert!(
                matches!(Plan::new(&cfg), Err(LoadError::Config(_))),
                "{cfg:?}"
            );
        }
    }

    #[test]
    fn connections_spread_over_threads_and_hosts() {
        let cfg = LoadConfig {
            targets: vec![
                Target::new("http://127.0.0.1:1/a"),
                Target::new("http://127.0.0.1:2/b"),
                Target::new("http://127.0.0.1:1/c"),
            ],
            threads: 2,
            connections: 7,
            requests: Some(11),
            ..LoadConfig::default()
        };
        let plan = Plan::new(&cfg).unwrap();
        assert_eq!(plan.groups.len(), 2);
        assert_eq!(plan.threads[0].len(), 4);
        assert_eq!(plan.threads[1].len(), 3);
        let to_first = plan
            .threads
            .iter()
            .flatten()
            .filter(|c| c.group == 0)
            .count();
        assert_eq!(to_first, 5); // weight 2 of 3, rounded: 4.67 -> 5
        assert_eq!(plan.budgets, vec![Some(6), Some(5)]);
    }
}
