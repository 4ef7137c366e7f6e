//! Metrics for dashboards: Prometheus's text format on a listener of its own (`--metrics
//! ADDR:PORT`, off by default, never the public port), summed over the workers' counters.
//!
//! Each worker counts in plain integers of its own (`Counters`, no atomic on the request path)
//! and publishes a copy into its slot of the shared [`Registry`] once per turn of its event loop
//! — relaxed stores of a few dozen words, not per request. A scrape sums the slots, so a figure
//! may lag by one loop turn; counters never go backwards.

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lowlat_http::ParseError;

/// Upper bounds of the request-duration histogram, in microseconds (Prometheus `le`).
pub const DURATION_BUCKETS_US: [u64; 12] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 100_000, 1_000_000, 10_000_000,
];

/// The parse-error kinds, in the order of [`Counters::parse_errors`].
const PARSE_KINDS: [(ParseError, &str); 12] = [
    (ParseError::Malformed, "malformed"),
    (ParseError::UriTooLong, "uri_too_long"),
    (ParseError::HeadTooLarge, "head_too_large"),
    (ParseError::TooManyHeaders, "too_many_headers"),
    (ParseError::VersionNotSupported, "version_not_supported"),
    (ParseError::BadContentLength, "bad_content_length"),
    (ParseError::BadTransferEncoding, "bad_transfer_encoding"),
    (ParseError::BadChunk, "bad_chunk"),
    (ParseError::BadHost, "bad_host"),
    (ParseError::BodyTooLarge, "body_too_large"),
    (ParseError::Timeout, "timeout"),
    (ParseError::PlainHttpOnTls, "plain_http_on_tls"),
];

/// One worker's counts, owned by the worker.
#[derive(Debug, Clone, Default)]
pub(crate) struct Counters {
    /// Responses by site (the router's index, the last slot shared by any beyond it) and
    /// status class: 1xx … 5xx.
    pub(crate) responses: [[u64; 5]; MAX_SITES],
    pub(crate) body_bytes: u64,
    pub(crate) accepted: u64,
    pub(crate) closed: u64,
    pub(crate) timed_out: u64,
    /// Accepting paused: the connection limit or out of descriptors (connections wait).
    pub(crate) accept_pauses: u64,
    pub(crate) parse_errors: [u64; PARSE_KINDS.len()],
    /// Request durations: one count per bucket of [`DURATION_BUCKETS_US`], then `+Inf`.
    pub(crate) duration_buckets: [u64; DURATION_BUCKETS_US.len() + 1],
    /// Nanoseconds: a request answered in under a microsecond still adds to the sum.
    pub(crate) duration_sum_ns: u64,
    /// Gauges, set at publication.
    pub(crate) open: u64,
    pub(crate) idle: u64,
    /// The worker's file cache, read at publication.
    pub(crate) cache_hits: u64,
    pub(crate) cache_misses: u64,
    pub(crate) cache_bytes: u64,
    /// Compression on the fly, read at publication.
    pub(crate) compress: crate::compress::Stats,
    /// QUIC (`--h3-listen`), read at publication: connections accepted, clients sent a Retry,
    /// clients refused (the connection limit), connections open.
    pub(crate) quic: [u64; 4],
    /// Connections on a `proxy_protocol` listener closed for a PROXY header that was bad,
    /// missing or late.
    pub(crate) proxy_protocol_refused: u64,
}

impl Counters {
    /// A response was written.
    #[inline]
    pub(crate) fn response(
        &mut self,
        site: usize,
        status: u16,
        body_bytes: u64,
        duration: Duration,
    ) {
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        self.responses[site.min(MAX_SITES - 1)][class] += 1;
        self.body_bytes += body_bytes;
        let us = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
        let bucket = DURATION_BUCKETS_US
            .iter()
            .position(|&b| us <= b)
            .unwrap_or(DURATION_BUCKETS_US.len());
        self.duration_buckets[bucket] += 1;
        let ns = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        self.duration_sum_ns = self.duration_sum_ns.saturating_add(ns);
    }

    /// A request was refused before a handler saw it.
    pub(crate) fn parse_error(&mut self, e: ParseError) {
        if let Some(i) = PARSE_KINDS.iter().position(|(k, _)| *k == e) {
            self.parse_errors[i] += 1;
        }
    }

    fn words(&self) -> impl Iterator<Item = u64> + '_ {
        self.responses
            .iter()
            .flatten()
            .copied()
            .chain([
                self.body_bytes,
                self.accepted,
                self.closed,
                self.timed_out,
                self.accept_pauses,
            ])
            .chain(self.parse_errors.iter().copied())
            .chain(self.duration_buckets.iter().copied())
            .chain([self.duration_sum_ns, self.open, self.idle])
            .chain([self.cache_hits, self.cache_misses, self.cache_bytes])
            .chain(self.compress.responses)
            .chain(self.compress.saved_bytes)
            .chain([self.compress.cache_bytes])
            .chain(self.quic)
            .chain([self.proxy_protocol_refused])
    }
}

/// Words in one published copy of [`Counters`].
const WORDS: usize = 5 * MAX_SITES
    + 5
    + PARSE_KINDS.len()
    + DURATION_BUCKETS_US.len()
    + 1
    + 3
    + 3
    + 3
    + 3
    + 1
    + 4
    + 1;

/// Sites counted apart in `lowlat_responses_total`; any beyond share the last label, `other`.
pub(crate) const MAX_SITES: usize = 32;

/// Every worker's last published counts.
#[derive(Debug)]
pub struct Registry {
    slots: Vec<[AtomicU64; WORDS]>,
    /// The `site` label of each router index (the first name of each `[[site]]`), replaced at
    /// a reload.
    sites: std::sync::Mutex<Vec<String>>,
    /// The reverse proxy's groups, replaced at a reload.
    upstreams: std::sync::Mutex<Vec<crate::proxy::health::GroupView>>,
}

impl Registry {
    /// Room for `workers` workers.
    #[must_use]
    pub fn new(workers: usize) -> Self {
        Self {
            slots: (0..workers)
                .map(|_| std::array::from_fn(|_| AtomicU64::new(0)))
                .collect(),
            sites: std::sync::Mutex::new(vec!["default".to_owned()]),
            upstreams: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// The reverse proxy's groups to report (from the service in use).
    pub fn set_upstreams(&self, groups: Vec<crate::proxy::health::GroupView>) {
        if let Ok(mut u) = self.upstreams.lock() {
            *u = groups;
        }
    }

    /// Names the sites, in the router's order (the default site first), for the `site` label.
    pub fn set_sites(&self, names: Vec<String>) {
        if let Ok(mut sites) = self.sites.lock() {
            *sites = names;
        }
    }

    /// Worker `index` publishes its counts (relaxed stores: each word is read whole).
    pub(crate) fn publish(&self, index: usize, c: &Counters) {
        if let Some(slot) = self.slots.get(index) {
            for (word, v) in slot.iter().zip(c.words()) {
                word.store(v, Ordering::Relaxed);
            }
        }
    }

    fn sum(&self) -> [u64; WORDS] {
        let mut out = [0u64; WORDS];
        for slot in &self.slots {
            for (o, w) in out.iter_mut().zip(slot) {
                *o += w.load(Ordering::Relaxed);
            }
        }
        out
    }

    /// The Prometheus text exposition of the sums.
    #[must_use]
    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        let v = self.sum();
        let mut at = 0;
        let mut take = |n: usize| {
            let s = &v[at..at + n];
            at += n;
            s.to_vec()
        };
        let responses = take(5 * MAX_SITES);
        let [body, accepted, closed, timed_out, pauses] = take(5)[..] else {
            return String::new();
        };
        let parse = take(PARSE_KINDS.len());
        let buckets = take(DURATION_BUCKETS_US.len() + 1);
        let [sum_ns, open, idle] = take(3)[..] else {
            return String::new();
        };
        let [hits, misses, cache_bytes] = take(3)[..] else {
            return String::new();
        };
        let compressed = take(3);
        let saved = take(3);
        let [compress_cache_bytes] = take(1)[..] else {
            return String::new();
        };
        let [quic_accepted, quic_retries, quic_refused, quic_open] = take(4)[..] else {
            return String::new();
        };
        let [proxy_protocol_refused] = take(1)[..] else {
            return String::new();
        };
        let mut s = String::new();

        family(
            &mut s,
            "lowlat_responses_total",
            "counter",
            "Responses written, by site and status class.",
        );
        let sites = self.sites.lock().map(|g| g.clone()).unwrap_or_default();
        let shown = sites.len().clamp(1, MAX_SITES);
        for (i, by_class) in responses.chunks(5).take(shown).enumerate() {
            let site = if i == MAX_SITES - 1 && sites.len() > MAX_SITES {
                "other"
            } else {
                sites.get(i).map_or("default", String::as_str)
            };
            for (c, n) in by_class.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "lowlat_responses_total{{site=\"{}\",class=\"{}xx\"}} {n}",
                    label(site),
                    c + 1
                );
            }
        }
        family(
            &mut s,
            "lowlat_response_body_bytes_total",
            "counter",
            "Response body bytes sent (heads not included).",
        );
        let _ = writeln!(s, "lowlat_response_body_bytes_total {body}");
        family(
            &mut s,
            "lowlat_connections_accepted_total",
            "counter",
            "Connections accepted.",
        );
        let _ = writeln!(s, "lowlat_connections_accepted_total {accepted}");
        family(
            &mut s,
            "lowlat_connections_closed_total",
            "counter",
            "Connections closed.",
        );
        let _ = writeln!(s, "lowlat_connections_closed_total {closed}");
        family(
            &mut s,
            "lowlat_connections_timed_out_total",
            "counter",
            "Connections closed by a timeout (idle, head, body, write, handshake).",
        );
        let _ = writeln!(s, "lowlat_connections_timed_out_total {timed_out}");
        family(&mut s, "lowlat_accept_pauses_total", "counter", "Times accepting paused: the connection limit, or out of descriptors (new connections wait in the backlog).");
        let _ = writeln!(s, "lowlat_accept_pauses_total {pauses}");
        family(
            &mut s,
            "lowlat_connections_open",
            "gauge",
            "Connections open.",
        );
        let _ = writeln!(s, "lowlat_connections_open {open}");
        family(
            &mut s,
            "lowlat_connections_idle",
            "gauge",
            "Open connections idle between requests.",
        );
        let _ = writeln!(s, "lowlat_connections_idle {idle}");
        family(
            &mut s,
            "lowlat_parse_errors_total",
            "counter",
            "Requests refused before a handler, by kind.",
        );
        for ((_, kind), n) in PARSE_KINDS.iter().zip(&parse) {
            let _ = writeln!(s, "lowlat_parse_errors_total{{kind=\"{kind}\"}} {n}");
        }
        family(
            &mut s,
            "lowlat_request_duration_seconds",
            "histogram",
            "From a request's first byte to its response written into the output buffer.",
        );
        let mut cumulative = 0;
        for (i, n) in buckets.iter().enumerate() {
            cumulative += n;
            match DURATION_BUCKETS_US.get(i) {
                Some(le) => {
                    let _ = writeln!(
                        s,
                        "lowlat_request_duration_seconds_bucket{{le=\"{}\"}} {cumulative}",
                        *le as f64 / 1e6
                    );
                }
                None => {
                    let _ = writeln!(
                        s,
                        "lowlat_request_duration_seconds_bucket{{le=\"+Inf\"}} {cumulative}"
                    );
                }
            }
        }
        let _ = writeln!(
            s,
            "lowlat_request_duration_seconds_sum {}",
            sum_ns as f64 / 1e9
        );
        let _ = writeln!(s, "lowlat_request_duration_seconds_count {cumulative}");
        family(
            &mut s,
            "lowlat_file_cache_lookups_total",
            "counter",
            "Static-file cache lookups, by result.",
        );
        let _ = writeln!(
            s,
            "lowlat_file_cache_lookups_total{{result=\"hit\"}} {hits}"
        );
        let _ = writeln!(
            s,
            "lowlat_file_cache_lookups_total{{result=\"miss\"}} {misses}"
        );
        family(
            &mut s,
            "lowlat_file_cache_bytes",
            "gauge",
            "Bytes the static-file caches hold.",
        );
        let _ = writeln!(s, "lowlat_file_cache_bytes {cache_bytes}");
        family(
            &mut s,
            "lowlat_compressed_responses_total",
            "counter",
            "Responses compressed on the fly, by coding (HEAD not counted).",
        );
        for (coding, n) in crate::compress::Stats::CODINGS.iter().zip(&compressed) {
            let _ = writeln!(
                s,
                "lowlat_compressed_responses_total{{encoding=\"{}\"}} {n}",
                coding.token()
            );
        }
        family(
            &mut s,
            "lowlat_compression_saved_bytes_total",
            "counter",
            "Body bytes not sent thanks to compression on the fly (identity minus encoded), by coding.",
        );
        for (coding, n) in crate::compress::Stats::CODINGS.iter().zip(&saved) {
            let _ = writeln!(
                s,
                "lowlat_compression_saved_bytes_total{{encoding=\"{}\"}} {n}",
                coding.token()
            );
        }
        family(
            &mut s,
            "lowlat_compress_cache_bytes",
            "gauge",
            "Bytes the caches of files compressed on the fly hold.",
        );
        let _ = writeln!(s, "lowlat_compress_cache_bytes {compress_cache_bytes}");
        family(
            &mut s,
            "lowlat_quic_connections_accepted_total",
            "counter",
            "QUIC connections accepted (--h3-listen).",
        );
        let _ = writeln!(s, "lowlat_quic_connections_accepted_total {quic_accepted}");
        family(
            &mut s,
            "lowlat_quic_retries_total",
            "counter",
            "New QUIC clients asked to prove their address with a Retry.",
        );
        let _ = writeln!(s, "lowlat_quic_retries_total {quic_retries}");
        family(
            &mut s,
            "lowlat_quic_refused_total",
            "counter",
            "New QUIC clients refused at the connection limit (--h3-max-conns) or at shutdown.",
        );
        let _ = writeln!(s, "lowlat_quic_refused_total {quic_refused}");
        family(
            &mut s,
            "lowlat_quic_connections_open",
            "gauge",
            "QUIC connections open (handshaking, established or closing).",
        );
        let _ = writeln!(s, "lowlat_quic_connections_open {quic_open}");
        family(
            &mut s,
            "lowlat_proxy_protocol_refused_total",
            "counter",
            "Connections from a balancer closed for a PROXY protocol header that was bad, missing or late.",
        );
        let _ = writeln!(
            s,
            "lowlat_proxy_protocol_refused_total {proxy_protocol_refused}"
        );
        if let Ok(groups) = self.upstreams.lock() {
            crate::proxy::health::render(&groups, &mut s);
        }
        crate::cache::metrics::render(&mut s);
        crate::guard::metrics::render(&mut s);
        process(&mut s);
        s
    }
}

/// The `# HELP` and `# TYPE` lines of a family.
fn family(s: &mut String, name: &str, kind: &str, help: &str) {
    use std::fmt::Write as _;
    let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// The process's own families (Prometheus's standard `process_*` names, as its client libraries
/// export them) and `lowlat_build_info`, read from /proc at the scrape: nothing on the request
/// path.
fn process(s: &mut String) {
    use std::fmt::Write as _;
    // SAFETY: sysconf reads a constant of the system.
    let ticks = match unsafe { libc::sysconf(libc::_SC_CLK_TCK) } {
        t if t > 0 => t as f64,
        _ => 100.0,
    };
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(") ")
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let field = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    if let (Some(utime), Some(stime)) = (field(11), field(12)) {
        family(
            s,
            "process_cpu_seconds_total",
            "counter",
            "User and system CPU time of the process.",
        );
        let _ = writeln!(s, "process_cpu_seconds_total {}", (utime + stime) / ticks);
    }
    let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|t| {
        t.lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<f64>().ok())
    });
    if let (Some(boot), Some(start)) = (boot, field(19)) {
        family(
            s,
            "process_start_time_seconds",
            "gauge",
            "When the process started, in seconds since the epoch.",
        );
        let _ = writeln!(s, "process_start_time_seconds {}", boot + start / ticks);
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    if let Some(rss) = kib("VmRSS:") {
        family(
            s,
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory of the process.",
        );
        let _ = writeln!(s, "process_resident_memory_bytes {}", rss * 1024.0);
    }
    if let Some(vm) = kib("VmSize:") {
        family(
            s,
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory of the process.",
        );
        let _ = writeln!(s, "process_virtual_memory_bytes {}", vm * 1024.0);
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        family(
            s,
            "process_open_fds",
            "gauge",
            "Open file descriptors of the process.",
        );
        let _ = writeln!(s, "process_open_fds {}", fds.count());
    }
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut lim) } == 0 {
        family(
            s,
            "process_max_fds",
            "gauge",
            "The process's limit on open file descriptors.",
        );
        let _ = writeln!(s, "process_max_fds {}", lim.rlim_cur);
    }
    family(
        s,
        "lowlat_build_info",
        "gauge",
        "The running version, as a label; always 1.",
    );
    let _ = writeln!(
        s,
        "lowlat_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
}

/// Serves `GET /metrics` on `addr` from a thread of its own (scrapes are rare; the workers are
/// not disturbed). Returns the bound address.
///
/// # Errors
/// When the address cannot be bound.
pub fn serve(addr: SocketAddr, registry: Arc<Registry>) -> std::io::Result<SocketAddr> {
    serve_on(TcpListener::bind(addr)?, registry, None)
}

/// [`serve`] on a listener already bound (handed over at start).
///
/// # Errors
/// When the listener's address cannot be read or the thread cannot be started.
/// With `health`, `GET /health` is answered there too (for probes that may reach the metrics
/// listener; `--health` gives them one of their own).
pub fn serve_on(
    listener: TcpListener,
    registry: Arc<Registry>,
    health: Option<Arc<crate::health::Health>>,
) -> std::io::Result<SocketAddr> {
    let bound = listener.local_addr()?;
    std::thread::Builder::new()
        .name("lowlat-metrics".into())
        .spawn(move || {
            for conn in listener.incoming().flatten() {
                answer(conn, &registry, health.as_deref());
            }
        })?;
    Ok(bound)
}

/// One scrape: read a head (at most 8 KiB, 2 s), answer, close.
fn answer(mut conn: TcpStream, registry: &Registry, health: Option<&crate::health::Health>) {
    let mut buf = [0u8; 8192];
    let Some(head) = crate::health::read_head(&mut conn, &mut buf) else {
        return;
    };
    let probe = crate::health::is_probe(head);
    let (status, ctype, body) = if let (true, Some(h)) = (probe, health) {
        let (status, body) = h.answer();
        (status, "text/plain", body.to_owned())
    } else if head.starts_with(b"GET /metrics ") {
        (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            registry.render(),
        )
    } else if head.starts_with(b"GET ") || head.starts_with(b"HEAD ") {
        (
            "404 Not Found",
            "text/plain",
            "metrics are at /metrics\n".to_owned(),
        )
    } else {
        (
            "405 Method Not Allowed",
            "text/plain",
            "GET /metrics\n".to_owned(),
        )
    };
    // A HEAD (the health probe, a 404) gets the length its GET would, and no body.
    let length = body.len();
    let body = if head.starts_with(b"HEAD ") {
        ""
    } else {
        &body
    };
    let _ = write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n{body}"
    );
}

/// A label value escaped as the text format asks (backslash, quote, newline).
fn label(v: &str) -> std::borrow::Cow<'_, str> {
    if v.contains(['\\', '"', '\n']) {
        v.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
            .into()
    } else {
        v.into()
    }
}
