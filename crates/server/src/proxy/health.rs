//! Whether each upstream server is up, shared by every worker: passive checks (a server that
//! fails `max_fails` times within `fail_timeout` is out for `fail_timeout`) and active ones (a
//! thread per group asks each server for a path every interval). Workers only read one atomic per
//! server when they choose one, and write only when a request fails; the checker thread is off
//! the request path.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::config::{HealthCheck, UpstreamAddr, UpstreamGroup};
use super::stats::ServerStats;
use super::upstream_tls::TlsTarget;

/// Milliseconds since the first call: the shared clock of the health state.
pub(crate) fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// One server's health.
#[derive(Debug)]
pub(crate) struct ServerHealth {
    /// Out (passively) until this time (`now_ms`); 0 when in.
    down_until: AtomicU64,
    /// Failures counted since `window_start`.
    fails: AtomicU32,
    window_start: AtomicU64,
    /// The last active check's verdict (true until one says otherwise).
    active_up: AtomicBool,
}

/// The health of a group's servers.
#[derive(Debug)]
pub(crate) struct GroupHealth {
    pub(crate) servers: Vec<ServerHealth>,
    /// The servers' counts, for `/metrics`.
    pub(crate) stats: ServerStats,
    /// FastCGI servers: processes one worker asks the others to give back.
    pub(crate) fastcgi: super::fcgi_share::FcgiShare,
    max_fails: u32,
    fail_timeout_ms: u64,
}

impl GroupHealth {
    pub(crate) fn new(group: &UpstreamGroup, workers: usize) -> Self {
        Self {
            stats: ServerStats::new(group.servers.len(), workers),
            fastcgi: super::fcgi_share::FcgiShare::new(group.servers.len()),
            servers: group
                .servers
                .iter()
                .map(|_| ServerHealth {
                    down_until: AtomicU64::new(0),
                    fails: AtomicU32::new(0),
                    window_start: AtomicU64::new(0),
                    active_up: AtomicBool::new(true),
                })
                .collect(),
            // A group of one server never takes it out: there is nowhere else to go.
            max_fails: if group.servers.len() > 1 {
                group.max_fails
            } else {
                0
            },
            fail_timeout_ms: u64::try_from(group.fail_timeout.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// Whether server `i` may be chosen now.
    pub(crate) fn is_up(&self, i: usize, now_ms: u64) -> bool {
        let s = &self.servers[i];
        s.active_up.load(Ordering::Relaxed) && s.down_until.load(Ordering::Relaxed) <= now_ms
    }

    /// A request to server `i` failed (could not connect, reset, timed out, answered garbage).
    pub(crate) fn failed(&self, i: usize, now_ms: u64) {
        if self.max_fails == 0 {
            return;
        }
        let s = &self.servers[i];
        if now_ms.saturating_sub(s.window_start.load(Ordering::Relaxed)) > self.fail_timeout_ms {
            s.window_start.store(now_ms, Ordering::Relaxed);
            s.fails.store(0, Ordering::Relaxed);
        }
        if s.fails.fetch_add(1, Ordering::Relaxed) + 1 >= self.max_fails {
            s.down_until
                .store(now_ms + self.fail_timeout_ms, Ordering::Relaxed);
            s.fails.store(0, Ordering::Relaxed);
            tracing::warn!(
                server = i,
                "upstream server out for {} ms after {} failures",
                self.fail_timeout_ms,
                self.max_fails
            );
        }
    }
}

/// Starts the active checks of a group on a thread of their own, which ends once `health` is
/// dropped (the group was replaced by a reload, or the server stopped).
pub(crate) fn spawn_checks(group: &UpstreamGroup, health: &Arc<GroupHealth>) {
    let Some(check) = group.health.clone() else {
        return;
    };
    let servers: Vec<(UpstreamAddr, String, Option<TlsTarget>)> = group
        .servers
        .iter()
        .map(|s| (s.addr.clone(), s.label.clone(), s.tls.clone()))
        .collect();
    let fastcgi = group.fastcgi;
    let weak: Weak<GroupHealth> = Arc::downgrade(health);
    let name = group.name.clone();
    let _ = std::thread::Builder::new()
        .name(format!("lowlat-health-{name}"))
        .spawn(move || loop {
            let Some(health) = weak.upgrade() else {
                return;
            };
            for (i, (addr, label, tls)) in servers.iter().enumerate() {
                let up = probe(addr, label, tls.as_ref(), &check, fastcgi);
                let was = health.servers[i].active_up.swap(up, Ordering::Relaxed);
                if was != up {
                    if up {
                        tracing::info!(group = %name, server = %label, "health check: up");
                    } else {
                        tracing::warn!(group = %name, server = %label, "health check: down");
                    }
                }
            }
            drop(health);
            std::thread::sleep(check.interval);
        });
}

/// One check: `GET path` over a fresh connection (through TLS for an `https://` server, its
/// certificate checked as for requests; as a FastCGI request naming `path` as its script for a
/// FastCGI server, which php-fpm's `ping.path` answers); up when the status is one of
/// `statuses`.
fn probe(
    addr: &UpstreamAddr,
    label: &str,
    tls: Option<&TlsTarget>,
    check: &HealthCheck,
    fastcgi: bool,
) -> bool {
    if fastcgi {
        let answer = fastcgi_probe(addr, check);
        if let Err(e) = &answer {
            tracing::debug!(server = %label, "FastCGI health check: {e}");
        }
        return answer.is_ok_and(|status| {
            check
                .statuses
                .iter()
                .any(|&(lo, hi)| (lo..=hi).contains(&status))
        });
    }
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {label}\r\nUser-Agent: lowlat-health-check\r\nConnection: close\r\n\r\n",
        check.path
    );
    let answer = match (addr, tls) {
        (UpstreamAddr::Tcp(a), Some(target)) => {
            std::net::TcpStream::connect_timeout(a, check.timeout)
                .and_then(|s| {
                    let conn = rustls::ClientConnection::new(
                        Arc::clone(&target.config),
                        target.name.clone(),
                    )
                    .map_err(std::io::Error::other)?;
                    let mut s = rustls::StreamOwned::new(conn, s);
                    exchange(
                        &mut s,
                        &request,
                        check.timeout,
                        |s, t| s.sock.set_read_timeout(t),
                        |s, t| s.sock.set_write_timeout(t),
                    )
                })
                .inspect_err(|e| {
                    tracing::debug!(server = %label, "health check over TLS: {e}");
                })
        }
        (UpstreamAddr::Tcp(a), None) => std::net::TcpStream::connect_timeout(a, check.timeout)
            .and_then(|mut s| {
                exchange(
                    &mut s,
                    &request,
                    check.timeout,
                    |s, t| s.set_read_timeout(t),
                    |s, t| s.set_write_timeout(t),
                )
            }),
        (UpstreamAddr::Unix(p), _) => {
            std::os::unix::net::UnixStream::connect(p).and_then(|mut s| {
                exchange(
                    &mut s,
                    &request,
                    check.timeout,
                    |s, t| s.set_read_timeout(t),
                    |s, t| s.set_write_timeout(t),
                )
            })
        }
    };
    let Ok(status) = answer else {
        return false;
    };
    check
        .statuses
        .iter()
        .any(|&(lo, hi)| (lo..=hi).contains(&status))
}

fn exchange<S: Read + Write>(
    s: &mut S,
    request: &str,
    timeout: Duration,
    read_timeout: impl Fn(&S, Option<Duration>) -> std::io::Result<()>,
    write_timeout: impl Fn(&S, Option<Duration>) -> std::io::Result<()>,
) -> std::io::Result<u16> {
    read_timeout(s, Some(timeout))?;
    write_timeout(s, Some(timeout))?;
    s.write_all(request.as_bytes())?;
    // The status as the proxy's relay reads it: the codec's response parser, not a second one.
    let mut buf = vec![0u8; lowlat_http::limits::MAX_HEAD_BYTES + 1];
    let mut n = 0;
    loop {
        let got = s.read(&mut buf[n..])?;
        if got == 0 {
            return Err(std::io::Error::other("closed before a response head"));
        }
        n += got;
        match lowlat_http::client::parse_response_head(&buf[..n], false) {
            Ok(lowlat_http::Status::Complete(head)) if !head.is_interim() => return Ok(head.status),
            Ok(lowlat_http::Status::Complete(head)) => {
                buf.copy_within(head.head_len..n, 0);
                n -= head.head_len;
            }
            Ok(lowlat_http::Status::Partial) => {}
            Err(e) => return Err(std::io::Error::other(e)),
        }
    }
}

/// A FastCGI check: a request whose script is the check's path, over a fresh connection; the
/// status of its CGI head.
fn fastcgi_probe(addr: &UpstreamAddr, check: &HealthCheck) -> std::io::Result<u16> {
    use lowlat_http::fastcgi::{cgi, params, record};
    let mut pairs = Vec::new();
    for (name, value) in [
        ("GATEWAY_INTERFACE", "CGI/1.1"),
        ("REQUEST_METHOD", "GET"),
        ("SCRIPT_NAME", check.path.as_str()),
        ("SCRIPT_FILENAME", check.path.as_str()),
        ("REQUEST_URI", check.path.as_str()),
        ("QUERY_STRING", ""),
        ("SERVER_PROTOCOL", "HTTP/1.1"),
        ("HTTP_USER_AGENT", "lowlat-health-check"),
    ] {
        params::push(&mut pairs, name.as_bytes(), value.as_bytes());
    }
    let mut request = Vec::new();
    record::begin_request(&mut request, 1, false);
    record::stream(&mut request, record::kind::PARAMS, 1, &pairs);
    record::end_stream(&mut request, record::kind::PARAMS, 1);
    record::end_stream(&mut request, record::kind::STDIN, 1);
    let mut s: Box<dyn ReadWrite> = match addr {
        UpstreamAddr::Tcp(a) => {
            let s = std::net::TcpStream::connect_timeout(a, check.timeout)?;
            s.set_read_timeout(Some(check.timeout))?;
            s.set_write_timeout(Some(check.timeout))?;
            Box::new(s)
        }
        UpstreamAddr::Unix(p) => {
            let s = std::os::unix::net::UnixStream::connect(p)?;
            s.set_read_timeout(Some(check.timeout))?;
            s.set_write_timeout(Some(check.timeout))?;
            Box::new(s)
        }
    };
    s.write_all(&request)?;
    let mut decoder = record::Decoder::new(1);
    let mut buf = vec![0u8; 16 * 1024];
    let (mut n, mut stdout) = (0, Vec::new());
    loop {
        let got = s.read(&mut buf[n..])?;
        if got == 0 {
            return Err(std::io::Error::other("closed before a response head"));
        }
        n += got;
        let mut pos = 0;
        while let lowlat_http::Status::Complete((event, used)) = decoder
            .decode(&buf[pos..n])
            .map_err(std::io::Error::other)?
        {
            match event {
                record::Event::Stdout(r) => {
                    stdout.extend_from_slice(&buf[pos + r.start..pos + r.end])
                }
                record::Event::End { .. } => {
                    return Err(std::io::Error::other("ended before a response head"))
                }
                _ => {}
            }
            pos += used;
            if let lowlat_http::Status::Complete(head) =
                cgi::parse_head(&stdout, 8192).map_err(std::io::Error::other)?
            {
                return Ok(head.status);
            }
        }
        buf.copy_within(pos..n, 0);
        n -= pos;
    }
}

/// A socket to read and write, whichever kind.
trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// A group as `/metrics` sees it: its name, its servers' labels, and their shared state.
#[derive(Debug, Clone)]
pub struct GroupView {
    pub(crate) name: String,
    pub(crate) servers: Vec<String>,
    pub(crate) shared: Arc<GroupHealth>,
}

impl GroupView {
    pub(crate) fn new(group: &UpstreamGroup, shared: &Arc<GroupHealth>) -> Self {
        Self {
            name: group.name.clone(),
            servers: group.servers.iter().map(|s| s.label.clone()).collect(),
            shared: Arc::clone(shared),
        }
    }

    /// (group, server, whether it may be chosen now, its totals), for each server.
    pub(crate) fn rows(&self) -> Vec<(&str, &str, bool, super::stats::ServerTotals)> {
        let now = now_ms();
        self.shared
            .stats
            .totals()
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                (
                    self.name.as_str(),
                    self.servers[i].as_str(),
                    self.shared.is_up(i, now),
                    t,
                )
            })
            .collect()
    }
}

/// Appends the upstream families of `/metrics` for `groups` to `s`.
pub(crate) fn render(groups: &[GroupView], s: &mut String) {
    use super::stats::{FAILURE_KINDS, UPSTREAM_BUCKETS_US};
    use std::fmt::Write as _;
    if groups.is_empty() {
        return;
    }
    let rows: Vec<_> = groups.iter().flat_map(GroupView::rows).collect();
    let esc = |v: &str| v.replace('\\', "\\\\").replace('"', "\\\"");
    let head = |s: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}");
    };
    head(
        s,
        "lowlat_upstream_responses_total",
        "counter",
        "Responses relayed from each upstream server, by status class.",
    );
    for (g, srv, _, t) in &rows {
        for (i, n) in t.responses.iter().enumerate() {
            let _ = writeln!(
                s,
                "lowlat_upstream_responses_total{{group=\"{}\",server=\"{}\",class=\"{}xx\"}} {n}",
                esc(g),
                esc(srv),
                i + 1
            );
        }
    }
    head(
        s,
        "lowlat_upstream_failures_total",
        "counter",
        "Exchanges with each upstream server that failed, by kind.",
    );
    for (g, srv, _, t) in &rows {
        for (kind, n) in FAILURE_KINDS.iter().zip(&t.failures) {
            let _ = writeln!(
                s,
                "lowlat_upstream_failures_total{{group=\"{}\",server=\"{}\",kind=\"{kind}\"}} {n}",
                esc(g),
                esc(srv)
            );
        }
    }
    head(
        s,
        "lowlat_upstream_response_seconds",
        "histogram",
        "From a request handed to an upstream server to its response's last byte.",
    );
    for (g, srv, _, t) in &rows {
        let mut cumulative = 0;
        for (i, n) in t.buckets.iter().enumerate() {
            cumulative += n;
            let le = UPSTREAM_BUCKETS_US
                .get(i)
                .map_or_else(|| "+Inf".to_owned(), |b| (*b as f64 / 1e6).to_string());
            let _ = writeln!(s, "lowlat_upstream_response_seconds_bucket{{group=\"{}\",server=\"{}\",le=\"{le}\"}} {cumulative}", esc(g), esc(srv));
        }
        let _ = writeln!(
            s,
            "lowlat_upstream_response_seconds_sum{{group=\"{}\",server=\"{}\"}} {}",
            esc(g),
            esc(srv),
            t.sum_us as f64 / 1e6
        );
        let _ = writeln!(
            s,
            "lowlat_upstream_response_seconds_count{{group=\"{}\",server=\"{}\"}} {cumulative}",
            esc(g),
            esc(srv)
        );
    }
    head(
        s,
        "lowlat_upstream_connects_total",
        "counter",
        "Connections opened to each upstream server (a pooled one reused is not counted).",
    );
    for (g, srv, _, t) in &rows {
        let _ = writeln!(
            s,
            "lowlat_upstream_connects_total{{group=\"{}\",server=\"{}\"}} {}",
            esc(g),
            esc(srv),
            t.connects
        );
    }
    head(
        s,
        "lowlat_upstream_up",
        "gauge",
        "Whether each upstream server may be chosen (passive and active health).",
    );
    for (g, srv, up, _) in &rows {
        let _ = writeln!(
            s,
            "lowlat_upstream_up{{group=\"{}\",server=\"{}\"}} {}",
            esc(g),
            esc(srv),
            u8::from(*up)
        );
    }
    head(
        s,
        "lowlat_upstream_connections",
        "gauge",
        "Connections to each upstream server: in an exchange, or idle in a pool.",
    );
    for (g, srv, _, t) in &rows {
        let _ = writeln!(
            s,
            "lowlat_upstream_connections{{group=\"{}\",server=\"{}\",state=\"active\"}} {}",
            esc(g),
            esc(srv),
            t.active
        );
        let _ = writeln!(
            s,
            "lowlat_upstream_connections{{group=\"{}\",server=\"{}\",state=\"idle\"}} {}",
            esc(g),
            esc(srv),
            t.idle
        );
    }
}
