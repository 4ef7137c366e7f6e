//! What one access-log line says about one request ([`Entry`]), where it finds the request's
//! header fields ([`Fields`]), and a forwarded request's fields held until its answer is known
//! ([`HeldRequest`]). No writing here: `super::line` turns an entry into text.

use std::net::SocketAddr;
use std::time::Duration;

use super::config::AccessLogConfig;
use crate::guard::ratelimit::LimitOutcome;
use lowlat_http::Version;

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
    /// The user a forward-auth service named, on a forwarded request's line.
    pub(super) fn user(self) -> Option<&'a [u8]> {
        match self {
            Self::Held(h) => h.user.clone().map(|r| &h.buf[r]),
            Self::None | Self::Head(_) => None,
        }
    }

    /// The first field named `name` (ASCII case-insensitive).
    pub(super) fn get(self, name: &str) -> Option<&'a [u8]> {
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
