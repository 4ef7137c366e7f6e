//! nginx's `log_format`: a line such as `$remote_addr - $remote_user [$time_local] "$request"
//! $status $body_bytes_sent`, compiled once at config load into literal segments and variables,
//! which the access log walks per request (`crate::access_log`): no name lookup, no parsing and
//! no allocation per line.
//!
//! Variables are nginx's common ones, plus `$site` (the site's first server name). The client
//! certificate's (`$ssl_client_s_dn`, `$ssl_client_fingerprint`…) are nginx's but for the
//! fingerprint, which is SHA-256 where nginx's is SHA-1. A value is
//! escaped as nginx's default `escape=default` does: `"`, `\` and bytes outside printable ASCII
//! become `\xHH`, so a client cannot forge a line or a field. A value that is missing is `-`.
//! An unknown variable is refused when the format is compiled (so by `--check-config`).

use crate::template::{split, Piece};

/// Longest format text.
pub const MAX_FORMAT_BYTES: usize = 4096;

/// The formats built in; a `[log_format]` table may not redefine them.
pub const BUILT_IN: [&str; 2] = ["combined", "json"];

/// nginx's `combined`, as a `log_format` text (what `combined` writes, without the upstream
/// fields it adds on proxied requests).
pub const COMBINED: &str = "$remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent \"$http_referer\" \"$http_user_agent\"";

/// A variable of a log format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogVar {
    /// The client's address, without port.
    RemoteAddr,
    /// The user name of `Authorization: Basic`, else `-`.
    RemoteUser,
    /// `25/Nov/2026:20:30:00 +0000`.
    TimeLocal,
    /// `2026-11-25T20:30:00+00:00`.
    TimeIso8601,
    /// Seconds since the epoch with milliseconds, `1764102600.123`.
    Msec,
    /// `GET /x?y HTTP/1.1`.
    Request,
    RequestMethod,
    /// The request-target as received.
    RequestUri,
    /// The path, without the query.
    Uri,
    /// The query without `?`, else `-`.
    Args,
    /// `HTTP/1.1`, `HTTP/2.0`.
    ServerProtocol,
    /// `http` or `https`.
    Scheme,
    Status,
    /// Body bytes sent.
    BodyBytesSent,
    /// Head and body bytes sent (for HTTP/2, the head as the handler wrote it in HTTP/1.1 form).
    BytesSent,
    /// A request field by its lower-case name, `_` read as `-` (`$http_x_forwarded_for`).
    Http(Box<str>),
    /// `$http_user_agent` and `$http_referer`: found once per request for every format, so a
    /// line does not scan the fields for them again.
    UserAgent,
    Referer,
    /// The request's host without port, lower-cased, else the site's name.
    Host,
    /// The site's first server name (`$server_name`, `$site`); `default` with no `[[site]]`.
    Site,
    /// Seconds from the request's first byte to its answer, with milliseconds (`0.003`).
    RequestTime,
    /// The incoming `X-Request-Id`, else 32 hex digits made for this request.
    RequestId,
    UpstreamAddr,
    UpstreamStatus,
    /// Seconds, with milliseconds.
    UpstreamResponseTime,
    /// The worker thread's index.
    Worker,
    /// What the cache did: HIT, MISS, EXPIRED, STALE, UPDATING, REVALIDATED, BYPASS; `-` on a
    /// route without a cache (as nginx's).
    UpstreamCacheStatus,
    /// What the rate limits did: PASSED, REJECTED, REJECTED_DRY_RUN; `-` where no zone
    /// applies (as nginx's).
    LimitReqStatus,
    /// `SUCCESS` when a client certificate was verified for the request's site, `NONE` over
    /// TLS without one, `-` in clear.
    SslClientVerify,
    /// The verified certificate's subject (RFC 4514), issuer, serial (hex) and SHA-256
    /// fingerprint (hex); `-` without one.
    SslClientSDn,
    SslClientIDn,
    SslClientSerial,
    SslClientFingerprint,
}

const NAMES: [(&str, LogVar); 32] = [
    ("remote_addr", LogVar::RemoteAddr),
    ("remote_user", LogVar::RemoteUser),
    ("time_local", LogVar::TimeLocal),
    ("time_iso8601", LogVar::TimeIso8601),
    ("msec", LogVar::Msec),
    ("request", LogVar::Request),
    ("request_method", LogVar::RequestMethod),
    ("request_uri", LogVar::RequestUri),
    ("uri", LogVar::Uri),
    ("document_uri", LogVar::Uri),
    ("args", LogVar::Args),
    ("query_string", LogVar::Args),
    ("server_protocol", LogVar::ServerProtocol),
    ("scheme", LogVar::Scheme),
    ("status", LogVar::Status),
    ("body_bytes_sent", LogVar::BodyBytesSent),
    ("bytes_sent", LogVar::BytesSent),
    ("host", LogVar::Host),
    ("server_name", LogVar::Site),
    ("site", LogVar::Site),
    ("request_time", LogVar::RequestTime),
    ("request_id", LogVar::RequestId),
    ("upstream_addr", LogVar::UpstreamAddr),
    ("upstream_status", LogVar::UpstreamStatus),
    ("upstream_response_time", LogVar::UpstreamResponseTime),
    ("upstream_cache_status", LogVar::UpstreamCacheStatus),
    ("limit_req_status", LogVar::LimitReqStatus),
    ("ssl_client_verify", LogVar::SslClientVerify),
    ("ssl_client_s_dn", LogVar::SslClientSDn),
    ("ssl_client_i_dn", LogVar::SslClientIDn),
    ("ssl_client_serial", LogVar::SslClientSerial),
    ("ssl_client_fingerprint", LogVar::SslClientFingerprint),
];

/// One piece of a compiled format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Literal(Box<[u8]>),
    Var(LogVar),
}

/// A `log_format`, compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogFormat {
    pub segments: Vec<Segment>,
}

impl LogFormat {
    /// Compiles a format text.
    ///
    /// # Errors
    /// A malformed `$`, an unknown variable (named), a line break, or a text too long.
    pub fn compile(text: &str) -> Result<Self, String> {
        if text.len() > MAX_FORMAT_BYTES {
            return Err(format!("longer than {MAX_FORMAT_BYTES} bytes"));
        }
        if text.contains(['\n', '\r']) {
            return Err("a format is one line (each request gets a line break after it)".into());
        }
        let mut segments = Vec::new();
        for piece in split(text)? {
            segments.push(match piece {
                Piece::Literal(l) => Segment::Literal(l.into_bytes().into_boxed_slice()),
                Piece::Var(name) => Segment::Var(var(name)?),
            });
        }
        Ok(Self { segments })
    }

    /// Whether a line of this format needs the request's fields (`$http_…`, `$host`,
    /// `$remote_user`, `$request_id`), which a proxied request must keep until it is answered.
    #[must_use]
    pub fn uses(&self, v: &LogVar) -> bool {
        self.segments.contains(&Segment::Var(v.clone()))
    }
}

fn var(name: &str) -> Result<LogVar, String> {
    if let Some(field) = name.strip_prefix("http_") {
        if field.is_empty() {
            return Err("$http_ needs a field name ($http_user_agent)".into());
        }
        return Ok(LogVar::Http(
            field
                .to_ascii_lowercase()
                .replace('_', "-")
                .into_boxed_str(),
        ));
    }
    if name == "worker" {
        return Ok(LogVar::Worker);
    }
    NAMES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.clone())
        .ok_or_else(|| {
            format!(
                "unknown variable ${name} (known: {} $worker $http_NAME)",
                NAMES.map(|(n, _)| format!("${n}")).join(" ")
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiles() {
        let f = LogFormat::compile(
            "$remote_addr [$time_local] \"$request\" $http_X_Real_IP ${status}s",
        )
        .unwrap();
        assert_eq!(
            f.segments,
            vec![
                Segment::Var(LogVar::RemoteAddr),
                Segment::Literal(b" [".to_vec().into()),
                Segment::Var(LogVar::TimeLocal),
                Segment::Literal(b"] \"".to_vec().into()),
                Segment::Var(LogVar::Request),
                Segment::Literal(b"\" ".to_vec().into()),
                Segment::Var(LogVar::Http("x-real-ip".into())),
                Segment::Literal(b" ".to_vec().into()),
                Segment::Var(LogVar::Status),
                Segment::Literal(b"s".to_vec().into()),
            ]
        );
        assert!(LogFormat::compile(COMBINED).is_ok());
    }

    #[test]
    fn refuses() {
        for (text, words) in [
            ("$remote_adr", "unknown variable $remote_adr"),
            ("$http_", "field name"),
            ("a\nb", "one line"),
            ("cost $", "must name a variable"),
        ] {
            let e = LogFormat::compile(text).unwrap_err();
            assert!(e.contains(words), "{text}: {e}");
        }
    }
}
