//! The access log's three line formats — nginx's `combined`, one JSON object, a compiled
//! `log_format` — each written straight into the worker's buffer (`super::writer`).

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use super::config::Format;
use super::entry::Entry;
use super::text::{basic_user, escaped, hex64, push_ip, seconds_ms};
use super::writer::WorkerLog;
use crate::guard::ratelimit::LimitOutcome;
use lowlat_http::Version;

impl WorkerLog {
    pub(super) fn combined(&mut self, e: &Entry<'_>) {
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
    pub(super) fn custom(&mut self, e: &Entry<'_>) {
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

    pub(super) fn json(&mut self, e: &Entry<'_>) {
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
