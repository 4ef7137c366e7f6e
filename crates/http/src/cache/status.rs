//! The `Cache-Status` response field (RFC 9211): what this cache did with a request, as a
//! structured-field list member `lowlat; hit; ttl=42` or `lowlat; fwd=miss; stored`.
//!
//! One member, ours: a cache adds its own after those of caches nearer the origin (§2), so
//! an upstream's `Cache-Status` is kept and ours appended to it by the caller.

/// Why a request went forward (RFC 9211 §2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fwd {
    /// Configuration or the request's method kept the cache out of it.
    Bypass,
    /// Nothing was stored for the key.
    UriMiss,
    /// Something was stored for the key, but not for these `Vary` values.
    VaryMiss,
    /// A stored response was found, but not usable without the origin: it was stale.
    Stale,
    /// The request's directives (`no-cache`, `max-age`) asked for the origin.
    Request,
    /// A stored response was found but only partly usable.
    Partial,
    /// Forwarded with nothing more precise to say (RFC 9211's `miss`).
    Miss,
}

impl Fwd {
    /// The token RFC 9211 §2.2 names.
    #[must_use]
    pub fn token(self) -> &'static str {
        match self {
            Fwd::Bypass => "bypass",
            Fwd::UriMiss => "uri-miss",
            Fwd::VaryMiss => "vary-miss",
            Fwd::Stale => "stale",
            Fwd::Request => "request",
            Fwd::Partial => "partial",
            Fwd::Miss => "miss",
        }
    }
}

/// What to say in one `Cache-Status` member.
#[derive(Debug, Clone, Copy, Default)]
pub struct CacheStatus<'a> {
    /// The response came from the cache without going forward (§2.1).
    pub hit: bool,
    /// It went forward, and why (§2.2).
    pub fwd: Option<Fwd>,
    /// The status the forward got (§2.3), when it is not the one sent (a 304 that refreshed).
    pub fwd_status: Option<u16>,
    /// Seconds of freshness left (§2.4); negative when stale.
    pub ttl: Option<i64>,
    /// The response was stored (§2.5).
    pub stored: bool,
    /// The request waited for another's forward (§2.6).
    pub collapsed: bool,
    /// The cache key (§2.7), written as a string.
    pub key: Option<&'a [u8]>,
    /// More (§2.8): a token, such as why a response was not stored.
    pub detail: Option<&'a str>,
}

impl CacheStatus<'_> {
    /// Appends the member, named `cache` (an sf-token: our name), to `out`.
    pub fn write(&self, cache: &str, out: &mut Vec<u8>) {
        out.extend_from_slice(cache.as_bytes());
        if self.hit {
            out.extend_from_slice(b"; hit");
        }
        if let Some(fwd) = self.fwd {
            out.extend_from_slice(b"; fwd=");
            out.extend_from_slice(fwd.token().as_bytes());
        }
        if let Some(s) = self.fwd_status {
            out.extend_from_slice(b"; fwd-status=");
            out.extend_from_slice(itoa::Buffer::new().format(s).as_bytes());
        }
        if let Some(ttl) = self.ttl {
            out.extend_from_slice(b"; ttl=");
            out.extend_from_slice(itoa::Buffer::new().format(ttl).as_bytes());
        }
        if self.stored {
            out.extend_from_slice(b"; stored");
        }
        if self.collapsed {
            out.extend_from_slice(b"; collapsed");
        }
        if let Some(key) = self.key {
            out.extend_from_slice(b"; key=\"");
            for &b in key {
                // An sf-string holds printable ASCII; `"` and `\` escaped (RFC 8941 §3.3.3).
                match b {
                    b'"' | b'\\' => {
                        out.push(b'\\');
                        out.push(b);
                    }
                    0x20..=0x7e => out.push(b),
                    _ => out.push(b'?'),
                }
            }
            out.push(b'"');
        }
        if let Some(detail) = self.detail {
            out.extend_from_slice(b"; detail=");
            out.extend_from_slice(detail.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members() {
        let cases: &[(CacheStatus<'_>, &str)] = &[
            (
                CacheStatus {
                    hit: true,
                    ttl: Some(42),
                    ..CacheStatus::default()
                },
                "lowlat; hit; ttl=42",
            ),
            (
                CacheStatus {
                    fwd: Some(Fwd::UriMiss),
                    stored: true,
                    ttl: Some(60),
                    ..CacheStatus::default()
                },
                "lowlat; fwd=uri-miss; ttl=60; stored",
            ),
            (
                CacheStatus {
                    fwd: Some(Fwd::Stale),
                    fwd_status: Some(304),
                    ttl: Some(-3),
                    ..CacheStatus::default()
                },
                "lowlat; fwd=stale; fwd-status=304; ttl=-3",
            ),
            (
                CacheStatus {
                    fwd: Some(Fwd::UriMiss),
                    collapsed: true,
                    key: Some(b"GET http://a/\"x\"\\\x01"),
                    ..CacheStatus::default()
                },
                "lowlat; fwd=uri-miss; collapsed; key=\"GET http://a/\\\"x\\\"\\\\?\"",
            ),
            (
                CacheStatus {
                    fwd: Some(Fwd::Bypass),
                    detail: Some("set-cookie"),
                    ..CacheStatus::default()
                },
                "lowlat; fwd=bypass; detail=set-cookie",
            ),
        ];
        for (status, want) in cases {
            let mut out = Vec::new();
            status.write("lowlat", &mut out);
            assert_eq!(String::from_utf8(out).unwrap(), *want);
        }
    }
}
