//! The access log: one line per answered request, in nginx's `combined` format (which goaccess
//! and every log tool read) or as one JSON object a line.
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

use lowlat_http::Version;

/// A worker's buffer is written out once it holds this much.
pub const FLUSH_BYTES: usize = 64 * 1024;
/// ... and at least this often.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// Line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `$remote_addr - - [$time_local] "$request" $status $body_bytes_sent "$http_referer"
    /// "$http_user_agent"`, times in UTC.
    Combined,
    /// `{"time":…,"remote":…,"method":…,"target":…,"protocol":…,"status":…,"bytes":…,
    /// "duration_us":…,"user_agent":…,"referer":…,"worker":…}`.
    Json,
}

/// The access log every worker writes to: where, how, and the reopen generation.
#[derive(Debug)]
pub struct AccessLogConfig {
    pub path: PathBuf,
    pub format: Format,
    generation: AtomicU64,
}

impl AccessLogConfig {
    #[must_use]
    pub fn new(path: PathBuf, format: Format) -> Self {
        Self {
            path,
            format,
            generation: AtomicU64::new(0),
        }
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
}

impl HeldRequest {
    /// Keeps what the log line of `req` will need.
    pub(crate) fn hold(&mut self, req: &lowlat_http::request::Request<'_, '_>) {
        self.buf.clear();
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
        }
    }

    /// Appends one line; writes the buffer out when it is full.
    pub(crate) fn record(&mut self, e: &Entry<'_>) {
        self.refresh_time();
        match self.cfg.format {
            Format::Combined => self.combined(e),
            Format::Json => self.json(e),
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
        let _ = write!(b, "{}", e.remote.ip());
        b.extend_from_slice(b" - - [");
        b.extend_from_slice(&self.combined_time);
        b.extend_from_slice(b"] \"");
        escaped(b, e.method.as_bytes());
        b.push(b' ');
        escaped(b, e.target.as_bytes());
        b.extend_from_slice(match e.version {
            Version::Http11 => b" HTTP/1.1\" ",
            Version::Http10 => b" HTTP/1.0\" ",
            Version::Http2 => b" HTTP/2.0\" ",
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
    fn escaping() {
        let mut out = Vec::new();
        escaped(&mut out, b"a\"b\\c\n\xff");
        assert_eq!(out, b"a\\x22b\\x5Cc\\x0A\\xFF");
    }
}
