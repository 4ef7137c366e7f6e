//! The access log: one line per answered request, in nginx's `combined` format (which goaccess
//! and every log tool read), as one JSON object a line, or in a `log_format` of the config file
//! (compiled once into segments by [`crate::log_format`], walked per line here).
//!
//! Each worker writes its own lines into its own buffer and hands them to the file in one
//! `write(2)` when the buffer passes [`FLUSH_BYTES`] or at least once a second — never a write
//! per request. Every worker opens the file with `O_APPEND`, so the kernel appends each of
//! those writes whole. SIGUSR1 (as nginx's `reopen`, for logrotate's `postrotate`) bumps a
//! shared generation; each worker reopens the file at its next flush. A write that fails (a full
//! disk, a file that became unwritable) never stops serving: the lines are dropped, counted,
//! and said once on the error log.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::guard::ratelimit::LimitOutcome;
use lowlat_http::Version;

/// A worker's buffer is written out once it holds this much.
pub const FLUSH_BYTES: usize = 64 * 1024;
/// ... and at least this often.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// Line format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format {
    /// `$remote_addr - - [$time_local] "$request" $status $body_bytes_sent "$http_referer"
    /// "$http_user_agent"`, times in UTC.
    Combined,
    /// `{"time":…,"remote":…,"method":…,"target":…,"protocol":…,"status":…,"bytes":…,
    /// "duration_us":…,"user_agent":…,"referer":…,"worker":…,"site":…}`.
    Json,
    /// A `log_format`, compiled.
    Custom(Arc<crate::log_format::LogFormat>),
}

/// The access log every worker writes to: where, how, and the reopen generation.
#[derive(Debug)]
pub struct AccessLogConfig {
    pub path: PathBuf,
    pub format: Format,
    /// Each site's name (`$site`, the JSON `site`), by the index the router gives it.
    pub sites: Vec<String>,
    generation: AtomicU64,
}

impl AccessLogConfig {
    #[must_use]
    pub fn new(path: PathBuf, format: Format) -> Self {
        Self {
            path,
            format,
            sites: vec!["default".to_owned()],
            generation: AtomicU64::new(0),
        }
    }

    /// The sites' names, by router index (the first is the default site).
    #[must_use]
    pub fn with_sites(mut self, sites: Vec<String>) -> Self {
        self.sites = sites;
        self
    }

    /// Whether proxied requests must keep all their fields for their line.
    fn needs_fields(&self) -> bool {
        matches!(self.format, Format::Custom(_))
    }

    /// Asks every worker to reopen the file at its next flush (SIGUSR1).
    pub fn reopen(&self) {
        self.generation.fetch_add(1, Ordering::Release);
    }

    fn open(&self) -> std::io::Result<File> {
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o644)
            .open(&self.path)
    }

    /// Opens the file once, so that an unusable path is an error at start.
    ///
    /// # Errors
    /// The open error.
    pub fn check(&self) -> std::io::Result<()> {
        self.open().map(drop)
    }
}

/// What one line says about one request.
pub(crate) struct Entry<'a> {
    pub(crate) remote: SocketAddr,
    pub(crate) method: &'a str,
    pub(crate) target: &'a str,
    pub(crate) version: Version,
    pub(crate) status: u16,
    pub(crate) bytes: u64,
    pub(crate) duration: Duration,
    pub(crate) user_agent: Option<&'a [u8]>,
    pub(crate) referer: Option<&'a [u8]>,
    pub(crate) worker: usize,
    /// For a proxied request: the upstream server, its status and its response time (nginx's
    /// `$upstream_addr`, `$upstream_status`, `$upstream_response_time`).
    pub(crate) upstream: Option<UpstreamFields<'a>>,
    /// Bytes received from the client through a WebSocket tunnel (`bytes` are those sent to
    /// it); only on a tunnel's line.
    pub(crate) received: Option<u64>,
    /// The site that answered (its router index); `None` for a request refused before routing.
    pub(crate) site: Option<usize>,
    /// The request came over TLS.
    pub(crate) tls: bool,
    /// The response head's length (`$bytes_sent` is this plus `bytes`).
    pub(crate) head_bytes: u64,
    /// The request's fields, for `$http_NAME`, `$host`, `$remote_user`, `$request_id`.
    pub(crate) fields: Fields<'a>,
    /// What the cache did (`$upstream_cache_status`), on a cached route.
    pub(crate) cache: Option<crate::cache::CacheOutcome>,
    /// What the rate limits did (`$limit_req_status`), where a zone applies.
    pub(crate) limit: Option<LimitOutcome>,
    /// The client's certificate, when it was verified for the request's site
    /// (`$ssl_client_*`; `$ssl_client_verify` is `SUCCESS` then, `NONE` otherwise).
    pub(crate) cert: Option<&'a crate::client_cert::ClientCert>,
}

impl<'a> Entry<'a> {
    /// The line of a request a handler answered itself (not forwarded, not refused): what the
    /// request says of itself, and what was sent.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn answered(
        req: &lowlat_http::request::Request<'a, 'a>,
        remote: SocketAddr,
        status: u16,
        bytes: u64,
        head_bytes: u64,
        duration: Duration,
        worker: usize,
        site: usize,
        tls: bool,
        cache: Option<crate::cache::CacheOutcome>,
        limit: Option<LimitOutcome>,
    ) -> Self {
        Entry {
            cache,
            limit,
            cert: None,
            remote,
            method: req.method_token,
            target: req.target,
            version: req.version,
            status,
            bytes,
            duration,
            user_agent: req.header("user-agent"),
            referer: req.header("referer"),
            worker,
            upstream: None,
            received: None,
            site: Some(site),
            tls,
            head_bytes,
            fields: Fields::Head(req.headers),
        }
    }
}

/// Where a log line finds the request's header fields.
#[derive(Clone, Copy)]
pub(crate) enum Fields<'a> {
    /// Refused before its fields were read.
    None,
    /// Answered while its head is still in the buffer.
    Head(&'a [lowlat_http::request::Header<'a>]),
    /// Kept while an upstream answered.
    Held(&'a HeldRequest),
}

impl<'a> Fields<'a> {
    /// The first field named `name` (ASCII case-insensitive).
    /// The user a forward-auth service named, on a forwarded request's line.
    fn user(self) -> Option<&'a [u8]> {
        match self {
            Self::Held(h) => h.user.clone().map(|r| &h.buf[r]),
            Self::None | Self::Head(_) => None,
        }
    }

    fn get(self, name: &str) -> Option<&'a [u8]> {
        match self {
            Self::None => None,
            Self::Head(h) => h
                .iter()
                .find(|f| f.name.eq_ignore_ascii_case(name))
                .map(|f| f.value),
            Self::Held(h) => h
                .fields
                .iter()
                .find(|(n, _)| h.buf[n.clone()].eq_ignore_ascii_case(name.as_bytes()))
                .map(|(_, v)| &h.buf[v.clone()]),
        }
    }
}

/// What the access log says of a proxied request's upstream.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UpstreamFields<'a> {
    pub(crate) addr: &'a str,
    pub(crate) status: u16,
    pub(crate) time: Duration,
}

/// A request's logged fields, kept until its answer is known (a proxied request is answered
/// after the buffer it arrived in has moved on). Reused from request to request.
#[derive(Debug, Default)]
pub(crate) struct HeldRequest {
    buf: Vec<u8>,
    method: std::ops::Range<usize>,
    target: std::ops::Range<usize>,
    user_agent: Option<std::ops::Range<usize>>,
    referer: Option<std::ops::Range<usize>>,
    version: Option<Version>,
    /// Every field (name, value), kept only for a `log_format` (which may name any).
    fields: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>,
    site: usize,
    tls: bool,
    /// What the cache's lookup did (the relay's end may say otherwise).
    cache: Option<crate::cache::CacheOutcome>,
    /// What the rate limits did.
    limit: Option<LimitOutcome>,
    /// The client's certificate, when it was verified for the request's site.
    pub(crate) cert: Option<std::rc::Rc<crate::client_cert::ClientCert>>,
    /// The user a forward-auth service named for the request (`$remote_user`), in `buf`.
    user: Option<std::ops::Range<usize>>,
}

impl HeldRequest {
    /// Keeps what the log line of `req`, answered by `site`, will need.
    pub(crate) fn hold(
        &mut self,
        req: &lowlat_http::request::Request<'_, '_>,
        site: usize,
        tls: bool,
        cache: Option<crate::cache::CacheOutcome>,
        limit: Option<LimitOutcome>,
        cfg: &AccessLogConfig,
    ) {
        self.buf.clear();
        self.fields.clear();
        self.user = None;
        self.cache = cache;
        self.limit = limit;
        self.site = site;
        self.tls = tls;
        let put = |bytes: &[u8], buf: &mut Vec<u8>| {
            let at = buf.len();
            buf.extend_from_slice(bytes);
            at..buf.len()
        };
        self.method = put(req.method_token.as_bytes(), &mut self.buf);
        self.target = put(req.target.as_bytes(), &mut self.buf);
        self.user_agent = req.header("user-agent").map(|v| put(v, &mut self.buf));
        self.referer = req.header("referer").map(|v| put(v, &mut self.buf));
        self.version = Some(req.version);
        if cfg.needs_fields() {
            for f in req.headers {
                let name = put(f.name.as_bytes(), &mut self.buf);
                let value = put(f.value, &mut self.buf);
                self.fields.push((name, value));
            }
        }
    }

    /// Says who the request goes on as: the user a forward-auth service named
    /// (`crate::proxy::auth`), the line's `$remote_user`.
    pub(crate) fn set_user(&mut self, user: &[u8]) {
        let at = self.buf.len();
        self.buf.extend_from_slice(user);
        self.user = Some(at..self.buf.len());
    }

    /// The log line's entry for the held request.
    pub(crate) fn entry<'a>(
        &'a self,
        remote: SocketAddr,
        status: u16,
        bytes: u64,
        duration: Duration,
        worker: usize,
        upstream: Option<UpstreamFields<'a>>,
    ) -> Entry<'a> {
        let text =
            |r: &std::ops::Range<usize>| std::str::from_utf8(&self.buf[r.clone()]).unwrap_or("-");
        Entry {
            cache: crate::cache::relaying().or(self.cache),
            limit: self.limit,
            cert: self.cert.as_deref(),
            remote,
            method: text(&self.method),
            target: text(&self.target),
            version: self.version.unwrap_or(Version::Http11),
            status,
            bytes,
            duration,
            user_agent: self.user_agent.clone().map(|r| &self.buf[r]),
            referer: self.referer.clone().map(|r| &self.buf[r]),
            worker,
            upstream,
            received: None,
            site: Some(self.site),
            tls: self.tls,
            head_bytes: 0,
            fields: Fields::Held(self),
        }
    }
}

/// One worker's side of the log.
pub(crate) struct WorkerLog {
    cfg: Arc<AccessLogConfig>,
    file: Option<File>,
    generation: u64,
    buf: Vec<u8>,
    next_flush: Instant,
    /// The second the cached timestamps are for, and their text.
    second: u64,
    combined_time: [u8; 26],
    iso_time: [u8; 20],
    dropped: u64,
    said_dropped: bool,
    /// This worker's `$request_id` prefix (random per start) and count: ids unique across
    /// workers and restarts without a clock read or a lock per request.
    id_seed: u64,
    ids: u64,
}

impl WorkerLog {
    pub(crate) fn new(cfg: Arc<AccessLogConfig>, now: Instant) -> Self {
        let file = cfg.open().ok();
        let generation = cfg.generation.load(Ordering::Acquire);
        Self {
            cfg,
            file,
            generation,
            buf: Vec::with_capacity(FLUSH_BYTES + 4096),
            next_flush: now + FLUSH_EVERY,
            second: u64::MAX,
            combined_time: [0; 26],
            iso_time: [0; 20],
            dropped: 0,
            said_dropped: false,
            id_seed: {
                use std::hash::{BuildHasher, Hasher};
                let mut h = std::collections::hash_map::RandomState::new().build_hasher();
                h.write_u64(now.elapsed().as_nanos() as u64);
                h.finish()
            },
            ids: 0,
        }
    }

    /// The log's settings.
    pub(crate) fn config(&self) -> &AccessLogConfig {
        &self.cfg
    }

    /// Appends one line; writes the buffer out when it is full.
    pub(crate) fn record(&mut self, e: &Entry<'_>) {
        self.refresh_time();
        match &self.cfg.format {
            Format::Combined => self.combined(e),
            Format::Json => self.json(e),
            Format::Custom(_) => self.custom(e),
        }
        if self.buf.len() >= FLUSH_BYTES {
            self.flush();
        }
    }

    /// Writes the buffer out if a second has passed since the last time.
    pub(crate) fn tick(&mut self, now: Instant) {
        if now >= self.next_flush {
            self.next_flush = now + FLUSH_EVERY;
            self.flush();
        }
    }

    /// Writes the buffer out (reopening first when SIGUSR1 asked for it).
    pub(crate) fn flush(&mut self) {
        let generation = self.cfg.generation.load(Ordering::Acquire);
        if generation != self.generation || self.file.is_none() {
            self.generation = generation;
            self.file = self.cfg.open().ok();
        }
        if self.buf.is_empty() {
            return;
        }
        let written = match &mut self.file {
            Some(f) => f.write_all(&self.buf),
            None => Err(std::io::Error::other("the file could not be opened")),
        };
        if let Err(e) = written {
            self.dropped += self.buf.iter().filter(|&&b| b == b'\n').count() as u64;
            if !self.said_dropped {
                self.said_dropped = true;
                tracing::error!(
                    path = %self.cfg.path.display(),
                    "access log: cannot write ({e}); lines are dropped, serving goes on"
                );
            }
        }
        self.buf.clear();
    }

    fn refresh_time(&mut self) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if now == self.second {
            return;
        }
        self.second = now;
        let (y, mo, d) = civil_from_days(now / 86_400);
        let s = now % 86_400;
        let (h, mi, se) = (s / 3600, s / 60 % 60, s % 60);
        const MONTHS: [&str; 12] = [
            "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
        ];
        let combined = format!(
            "{d:02}/{}/{y:04}:{h:02}:{mi:02}:{se:02} +0000",
            MONTHS[(mo - 1) as usize]
        );
        let iso = format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{se:02}Z");
        self.combined_time
            .copy_from_slice(&combined.as_bytes()[..26]);
        self.iso_time.copy_from_slice(&iso.as_bytes()[..20]);
    }

    fn combined(&mut self, e: &Entry<'_>) {
        let b = &mut self.buf;
        let mut ip = itoa::Buffer::new();
        // The address without its port, as nginx's $remote_addr.
        push_ip(b, e.remote.ip());
        b.extend_from_slice(b" - ");
        match e.fields.user() {
            Some(user) => escaped(b, user),
            None => b.push(b'-'),
        }
        b.extend_from_slice(b" [");
        b.extend_from_slice(&self.combined_time);
        b.extend_from_slice(b"] \"");
        escaped(b, e.method.as_bytes());
        b.push(b' ');
        escaped(b, e.target.as_bytes());
        b.extend_from_slice(match e.version {
            Version::Http11 => b" HTTP/1.1\" ",
            Version::Http10 => b" HTTP/1.0\" ",
            Version::Http2 => b" HTTP/2.0\" ",
            Version::Http3 => b" HTTP/3.0\" ",
        });
        b.extend_from_slice(ip.format(e.status).as_bytes());
        b.push(b' ');
        b.extend_from_slice(ip.format(e.bytes).as_bytes());
        for v in [e.referer, e.user_agent] {
            b.extend_from_slice(b" \"");
            match v {
                Some(v) => escaped(b, v),
                None => b.push(b'-'),
            }
            b.push(b'"');
        }
        // nginx's "$upstream_addr $upstream_status $upstream_response_time", after the
        // combined fields, on proxied requests only.
        if let Some(u) = e.upstream {
            b.extend_from_slice(b" \"");
            escaped(b, u.addr.as_bytes());
            b.extend_from_slice(b"\" ");
            b.extend_from_slice(ip.format(u.status).as_bytes());
            let _ = write!(b, " {:.6}", u.time.as_secs_f64());
        }
        // A tunnel's line also says what the client sent through it.
        if let Some(n) = e.received {
            b.push(b' ');
            b.extend_from_slice(ip.format(n).as_bytes());
        }
        b.push(b'\n');
    }

    /// A line of a `log_format`: each segment in turn, every value escaped, `-` for none.
    fn custom(&mut self, e: &Entry<'_>) {
        use crate::log_format::{LogVar, Segment};
        let Self {
            cfg,
            buf: b,
            combined_time,
            iso_time,
            id_seed,
            ids,
            ..
        } = self;
        let Format::Custom(format) = &cfg.format else {
            return;
        };
        let mut num = itoa::Buffer::new();
        let dash = |b: &mut Vec<u8>, v: Option<&[u8]>| match v {
            Some(v) if !v.is_empty() => escaped(b, v),
            _ => b.push(b'-'),
        };
        let protocol: &[u8] = match e.version {
            Version::Http11 => b"HTTP/1.1",
            Version::Http10 => b"HTTP/1.0",
            Version::Http2 => b"HTTP/2.0",
            Version::Http3 => b"HTTP/3.0",
        };
        for seg in &format.segments {
            let v = match seg {
                Segment::Literal(l) => {
                    b.extend_from_slice(l);
                    continue;
                }
                Segment::Var(v) => v,
            };
            match v {
                LogVar::RemoteAddr => push_ip(b, e.remote.ip()),
                LogVar::RemoteUser => match e.fields.user() {
                    // The user a forward-auth service named, over what the client claims.
                    Some(user) => escaped(b, user),
                    None => basic_user(b, e.fields.get("authorization")),
                },
                LogVar::TimeLocal => b.extend_from_slice(&combined_time[..]),
                LogVar::TimeIso8601 => {
                    // nginx's form: an offset rather than `Z`.
                    b.extend_from_slice(&iso_time[..19]);
                    b.extend_from_slice(b"+00:00");
                }
                LogVar::Msec => {
                    let now = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .unwrap_or_default();
                    let _ = write!(b, "{}.{:03}", now.as_secs(), now.subsec_millis());
                }
                LogVar::Request => {
                    escaped(b, e.method.as_bytes());
                    b.push(b' ');
                    escaped(b, e.target.as_bytes());
                    b.push(b' ');
                    b.extend_from_slice(protocol);
                }
                LogVar::RequestMethod => escaped(b, e.method.as_bytes()),
                LogVar::RequestUri => escaped(b, e.target.as_bytes()),
                LogVar::Uri => escaped(b, e.target.split('?').next().unwrap_or("").as_bytes()),
                LogVar::Args => dash(b, e.target.split_once('?').map(|(_, q)| q.as_bytes())),
                LogVar::ServerProtocol => b.extend_from_slice(protocol),
                LogVar::Scheme => b.extend_from_slice(if e.tls { b"https" } else { b"http" }),
                LogVar::Status => b.extend_from_slice(num.format(e.status).as_bytes()),
                LogVar::BodyBytesSent => b.extend_from_slice(num.format(e.bytes).as_bytes()),
                LogVar::BytesSent => {
                    b.extend_from_slice(num.format(e.bytes + e.head_bytes).as_bytes());
                }
                LogVar::Http(name) => dash(b, e.fields.get(name)),
                LogVar::UserAgent => dash(b, e.user_agent),
                LogVar::Referer => dash(b, e.referer),
                LogVar::Host => match e.fields.get("host").and_then(crate::template::host_name) {
                    Some(h) => {
                        let at = b.len();
                        b.extend_from_slice(h);
                        b[at..].make_ascii_lowercase();
                    }
                    None => dash(
                        b,
                        e.site.and_then(|i| cfg.sites.get(i)).map(String::as_bytes),
                    ),
                },
                LogVar::Site => dash(
                    b,
                    e.site.and_then(|i| cfg.sites.get(i)).map(String::as_bytes),
                ),
                LogVar::RequestTime => seconds_ms(b, e.duration),
                LogVar::RequestId => match e.fields.get("x-request-id") {
                    Some(id) if !id.is_empty() => escaped(b, id),
                    _ => {
                        // nginx's form: 32 hex digits, made only when a format uses it: the
                        // worker's seed, then its count mixed with it (unique per worker and
                        // start, not guessable from outside).
                        *ids += 1;
                        hex64(b, *id_seed);
                        hex64(b, ids.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ *id_seed);
                    }
                },
                LogVar::UpstreamAddr => dash(b, e.upstream.map(|u| u.addr.as_bytes())),
                LogVar::UpstreamStatus => match e.upstream {
                    Some(u) => b.extend_from_slice(num.format(u.status).as_bytes()),
                    None => b.push(b'-'),
                },
                LogVar::UpstreamResponseTime => match e.upstream {
                    Some(u) => seconds_ms(b, u.time),
                    None => b.push(b'-'),
                },
                LogVar::Worker => b.extend_from_slice(num.format(e.worker).as_bytes()),
                LogVar::UpstreamCacheStatus => {
                    dash(b, e.cache.map(|c| c.token().as_bytes()));
                }
                LogVar::LimitReqStatus => dash(b, e.limit.map(|l| l.token().as_bytes())),
                LogVar::SslClientVerify => b.extend_from_slice(match (e.cert, e.tls) {
                    (Some(_), _) => crate::client_cert::VERIFY_SUCCESS.as_bytes(),
                    (None, true) => crate::client_cert::VERIFY_NONE.as_bytes(),
                    (None, false) => b"-",
                }),
                LogVar::SslClientSDn => dash(b, e.cert.map(|c| c.subject.as_bytes())),
                LogVar::SslClientIDn => dash(b, e.cert.map(|c| c.issuer.as_bytes())),
                LogVar::SslClientSerial => dash(b, e.cert.map(|c| c.serial.as_bytes())),
                LogVar::SslClientFingerprint => {
                    dash(b, e.cert.map(|c| c.fingerprint.as_bytes()));
                }
            }
        }
        b.push(b'\n');
    }

    fn json(&mut self, e: &Entry<'_>) {
        #[derive(serde::Serialize)]
        struct Line<'a> {
            time: &'a str,
            remote: String,
            method: &'a str,
            target: &'a str,
            protocol: &'a str,
            status: u16,
            bytes: u64,
            /// Microseconds, with nanoseconds as the fraction.
            duration_us: f64,
            user_agent: Option<std::borrow::Cow<'a, str>>,
            referer: Option<std::borrow::Cow<'a, str>>,
            worker: usize,
            #[serde(skip_serializing_if = "Option::is_none")]
            upstream_addr: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            upstream_status: Option<u16>,
            #[serde(skip_serializing_if = "Option::is_none")]
            upstream_response_time: Option<f64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            bytes_received: Option<u64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            upstream_cache_status: Option<&'static str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            limit_req_status: Option<&'static str>,
            /// The user a forward-auth service let the request through as.
            #[serde(skip_serializing_if = "Option::is_none")]
            remote_user: Option<std::borrow::Cow<'a, str>>,
            /// The site's first server name; absent for a request refused before routing.
            #[serde(skip_serializing_if = "Option::is_none")]
            site: Option<&'a str>,
            /// The client certificate verified for the request's site: absent without one.
            #[serde(skip_serializing_if = "Option::is_none")]
            ssl_client_verify: Option<&'static str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            ssl_client_s_dn: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            ssl_client_i_dn: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            ssl_client_serial: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            ssl_client_fingerprint: Option<&'a str>,
        }
        let line = Line {
            time: std::str::from_utf8(&self.iso_time).unwrap_or(""),
            remote: e.remote.ip().to_string(),
            method: e.method,
            target: e.target,
            protocol: match e.version {
                Version::Http11 => "HTTP/1.1",
                Version::Http10 => "HTTP/1.0",
                Version::Http2 => "HTTP/2.0",
                Version::Http3 => "HTTP/3.0",
            },
            status: e.status,
            bytes: e.bytes,
            duration_us: e.duration.as_nanos() as f64 / 1e3,
            user_agent: e.user_agent.map(String::from_utf8_lossy),
            referer: e.referer.map(String::from_utf8_lossy),
            worker: e.worker,
            upstream_addr: e.upstream.map(|u| u.addr),
            upstream_status: e.upstream.map(|u| u.status),
            upstream_response_time: e.upstream.map(|u| u.time.as_secs_f64()),
            bytes_received: e.received,
            upstream_cache_status: e.cache.map(crate::cache::CacheOutcome::token),
            limit_req_status: e.limit.map(LimitOutcome::token),
            remote_user: e.fields.user().map(String::from_utf8_lossy),
            site: e
                .site
                .and_then(|i| self.cfg.sites.get(i))
                .map(String::as_str),
            ssl_client_verify: e.cert.map(|_| crate::client_cert::VERIFY_SUCCESS),
            ssl_client_s_dn: e.cert.map(|c| &*c.subject),
            ssl_client_i_dn: e.cert.map(|c| &*c.issuer),
            ssl_client_serial: e.cert.map(|c| &*c.serial),
            ssl_client_fingerprint: e.cert.map(|c| &*c.fingerprint),
        };
        if serde_json::to_writer(&mut self.buf, &line).is_ok() {
            self.buf.push(b'\n');
        }
    }
}

impl Drop for WorkerLog {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Copies a header value or request part into a quoted field, escaping `"`, `\` and bytes
/// outside printable ASCII as `\xHH`, as nginx does: a client cannot forge a line or a field.
fn escaped(out: &mut Vec<u8>, v: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &c in v {
        if c == b'"' || c == b'\\' || !(0x20..0x7f).contains(&c) {
            out.extend_from_slice(&[
                b'\\',
                b'x',
                HEX[usize::from(c >> 4)],
                HEX[usize::from(c & 15)],
            ]);
        } else {
            out.push(c);
        }
    }
}

/// An address as `Display` writes it (`127.0.0.1`, `::1`), IPv4 by hand: `write!` through the
/// formatting machinery cost ~650 instructions a line, 15% of a logged `/plaintext` request
/// (callgrind, docs/PERFORMANCE.md).
fn push_ip(out: &mut Vec<u8>, ip: std::net::IpAddr) {
    match ip {
        std::net::IpAddr::V4(v4) => {
            let mut num = itoa::Buffer::new();
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                out.extend_from_slice(num.format(octet).as_bytes());
            }
        }
        std::net::IpAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
}

/// Seconds with milliseconds, as nginx's `$request_time` (`0.003`). By hand rather than
/// `write!`, whose formatting machinery cost ~300 instructions a line (callgrind).
fn seconds_ms(out: &mut Vec<u8>, d: Duration) {
    let ms = d.as_millis();
    out.extend_from_slice(itoa::Buffer::new().format(ms / 1000).as_bytes());
    let frac = (ms % 1000) as u16;
    out.extend_from_slice(&[
        b'.',
        b'0' + (frac / 100) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ]);
}

/// 16 lower-case hex digits.
fn hex64(out: &mut Vec<u8>, v: u64) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    for (i, d) in digits.iter_mut().enumerate() {
        *d = HEX[((v >> (60 - 4 * i)) & 15) as usize];
    }
    out.extend_from_slice(&digits);
}

/// Longest `Authorization: Basic` credentials decoded for `$remote_user`.
const MAX_BASIC_CREDENTIALS: usize = 768;

/// Writes the user name of an `Authorization: Basic` field (nginx's `$remote_user`), escaped,
/// or `-` when there is none or it does not decode. Decoded on the stack: no allocation.
fn basic_user(out: &mut Vec<u8>, field: Option<&[u8]>) {
    use base64::Engine;
    let basic = field.and_then(|field| {
        let (scheme, token) = field.split_at(field.iter().position(|&b| b == b' ')?);
        scheme.eq_ignore_ascii_case(b"basic").then_some(token)
    });
    let Some(token) = basic else {
        out.push(b'-');
        return;
    };
    let mut decoded = [0u8; MAX_BASIC_CREDENTIALS];
    let user = {
        let n = base64::engine::general_purpose::STANDARD
            .decode_slice(token.trim_ascii(), &mut decoded)
            .unwrap_or(0);
        decoded[..n]
            .iter()
            .position(|&b| b == b':')
            .map(|end| &decoded[..end])
    };
    match user {
        Some(u) if !u.is_empty() => escaped(out, u),
        _ => out.push(b'-'),
    }
}

/// (year, month 1–12, day 1–31) of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_781), (2026, 11, 24));
    }

    #[test]
    fn addresses_as_display_writes_them() {
        for ip in [
            "127.0.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "10.20.3.40",
            "::1",
            "::ffff:1.2.3.4",
            "2001:db8::8a2e:370:7334",
        ] {
            let ip: std::net::IpAddr = ip.parse().unwrap();
            let mut out = Vec::new();
            push_ip(&mut out, ip);
            assert_eq!(String::from_utf8(out).unwrap(), ip.to_string());
        }
    }

    #[test]
    fn numbers() {
        let mut out = Vec::new();
        for ms in [0, 3, 1_234, 60_007] {
            seconds_ms(&mut out, Duration::from_millis(ms));
            out.push(b' ');
        }
        hex64(&mut out, 0x0123_4567_89ab_cdef);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "0.000 0.003 1.234 60.007 0123456789abcdef"
        );
    }

    #[test]
    fn remote_users() {
        let cases: &[(Option<&[u8]>, &str)] = &[
            (Some(b"Basic YWxpY2U6c2VjcmV0"), "alice"),
            (Some(b"basic YWxpY2U6c2VjcmV0"), "alice"),
            (Some(b"Basic Ym9iOg=="), "bob"),
            (Some(b"Basic bm9jb2xvbg=="), "-"),
            (Some(b"Basic !!!"), "-"),
            (Some(b"Bearer YWxpY2U6c2VjcmV0"), "-"),
            (Some(b"Basic InE6eA=="), "\\x22q"),
            (None, "-"),
        ];
        for &(field, want) in cases {
            let mut out = Vec::new();
            basic_user(&mut out, field);
            assert_eq!(String::from_utf8(out).unwrap(), want, "{field:?}");
        }
    }

    #[test]
    fn escaping() {
        let mut out = Vec::new();
        escaped(&mut out, b"a\"b\\c\n\xff");
        assert_eq!(out, b"a\\x22b\\x5Cc\\x0A\\xFF");
    }
}
