//! A target URL taken apart: scheme, host, port and the origin-form request-target, checked for
//! what a load generator can send.
//!
//! Parsing only: names are resolved, and requests built from the parts, in `prepare` and
//! `request`.

use crate::error::LoadError;

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
    pub fn authority(&self) -> String {
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
        "ws" | "wss" => return Err(bad("ws:// and wss:// URLs are for --ws")),
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
}
