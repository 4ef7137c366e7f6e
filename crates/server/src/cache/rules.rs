//! What the configuration adds to RFC 9111's decisions, per site and per forwarding rule, as
//! nginx's `proxy_cache_*` directives do: the key's template (`proxy_cache_key`), conditions
//! that keep a request away from the cache (`proxy_cache_bypass`) or its response out of the
//! store (`proxy_no_cache`), lifetimes per status for responses that give none
//! (`proxy_cache_valid`), and response fields the decisions ignore (`proxy_cache_ignore_headers`).
//!
//! Everything here is compiled when the settings are read; a request only walks what its rule
//! configured (a rule with none of it pays one empty-slice test per kind).

use lowlat_http::request::Request;

use crate::template::{Context, Ports, Template};

/// A request condition: true when its template expands to something other than nothing or
/// `0` (nginx's rule for `proxy_cache_bypass`), or, with `equals`, to exactly that.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub template: Template,
    pub equals: Option<Box<[u8]>>,
}

impl Condition {
    /// Parses `TEMPLATE` or `TEMPLATE==VALUE` (`$cookie_nocache`, `$request_method==HEAD`).
    ///
    /// # Errors
    /// The template's own error.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (template, equals) = match text.split_once("==") {
            Some((t, v)) => (t, Some(v.as_bytes().into())),
            None => (text, None),
        };
        if template.is_empty() {
            return Err(format!(
                "{text:?}: a condition is a template ($cookie_nocache)"
            ));
        }
        Ok(Condition {
            template: Template::compile_request(template)?,
            equals,
        })
    }

    /// Whether the condition holds for `req`; `buf` is scratch space.
    fn holds(&self, req: &Request<'_, '_>, tls: bool, buf: &mut Vec<u8>) -> bool {
        buf.clear();
        if self.template.expand(req, &context(tls), buf).is_err() {
            return false;
        }
        match &self.equals {
            Some(v) => buf[..] == v[..],
            None => !buf.is_empty() && buf[..] != b"0"[..],
        }
    }
}

/// Whether any of `conditions` holds for `req`.
pub(crate) fn any_holds(
    conditions: &[Condition],
    req: &Request<'_, '_>,
    tls: bool,
    buf: &mut Vec<u8>,
) -> bool {
    conditions.iter().any(|c| c.holds(req, tls, buf))
}

/// What a cache template's variables are expanded with: no site name stands in for a missing
/// `Host` (a key without its host would mix sites; the request goes past the cache instead).
pub(crate) fn context(tls: bool) -> Context<'static> {
    Context {
        tls,
        ports: Ports::default(),
        server_name: None,
    }
}

/// A lifetime for responses of some statuses that carry no freshness of their own
/// (`200 302 10m`, `any 1m`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusTtl {
    /// The statuses; empty: any.
    pub statuses: Vec<u16>,
    pub secs: u64,
}

impl StatusTtl {
    /// Parses `[STATUS…|any] DURATION`; with no status, 200, 301 and 302 (as nginx).
    ///
    /// # Errors
    /// A word that is neither a status nor `any`, or a bad duration.
    pub fn parse(text: &str) -> Result<Self, String> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let Some((last, codes)) = words.split_last() else {
            return Err("give statuses and a lifetime (200 302 10m, any 1m)".into());
        };
        if last.bytes().all(|b| b.is_ascii_digit()) {
            // `200` alone reads as a status as much as a lifetime: the unit says which.
            return Err(format!(
                "{text:?}: the lifetime comes last, with its unit (200 302 10m)"
            ));
        }
        let secs = lowlat_http::units::parse_duration(last)
            .map_err(|e| format!("{text:?}: {e}"))?
            .as_secs();
        let mut statuses = Vec::new();
        let mut any = false;
        for c in codes {
            if c.eq_ignore_ascii_case("any") {
                any = true;
                continue;
            }
            let code = c
                .parse::<u16>()
                .ok()
                .filter(|c| (200..=599).contains(c))
                .ok_or_else(|| format!("{text:?}: {c:?} is not a status (200 to 599) or any"))?;
            statuses.push(code);
        }
        if any {
            statuses.clear();
        } else if statuses.is_empty() {
            statuses = vec![200, 301, 302];
        }
        Ok(StatusTtl { statuses, secs })
    }
}

/// The lifetime `ttls` give `status`: the first that names it (or any status).
pub(crate) fn ttl_for(ttls: &[StatusTtl], status: u16) -> Option<u64> {
    ttls.iter()
        .find(|t| t.statuses.is_empty() || t.statuses.contains(&status))
        .map(|t| t.secs)
}

/// Response fields the cache's decisions leave out. The client that caused the fill still
/// gets them all; what is stored differs only for `Set-Cookie`, which is not stored (one
/// user's cookie must not reach the next: where nginx stores it, this cache drops it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ignored {
    /// `Cache-Control` and the targeted fields that replace it (`CDN-Cache-Control`).
    pub cache_control: bool,
    pub expires: bool,
    pub set_cookie: bool,
    /// The response is stored once per key, whatever it varies on.
    pub vary: bool,
}

impl Ignored {
    /// Adds `Cache-Control`, `Expires`, `Set-Cookie` or `Vary` (any case).
    ///
    /// # Errors
    /// Another name.
    pub fn add(&mut self, name: &str) -> Result<(), String> {
        match name.trim().to_ascii_lowercase().as_str() {
            "cache-control" => self.cache_control = true,
            "expires" => self.expires = true,
            "set-cookie" => self.set_cookie = true,
            "vary" => self.vary = true,
            _ => {
                return Err(format!(
                    "{name:?}: the fields that can be ignored are Cache-Control, Expires, Set-Cookie and Vary"
                ))
            }
        }
        Ok(())
    }

    pub(crate) fn any(self) -> bool {
        self.cache_control || self.expires || self.set_cookie || self.vary
    }

    /// Whether the decisions leave out field `name` (`targeted`: the fields that replace
    /// `Cache-Control`).
    pub(crate) fn hides(self, name: &str, targeted: &[String]) -> bool {
        let is = |n: &str| name.eq_ignore_ascii_case(n);
        (self.cache_control && (is("cache-control") || targeted.iter().any(|t| is(t))))
            || (self.expires && is("expires"))
            || (self.set_cookie && is("set-cookie"))
            || (self.vary && is("vary"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lowlat_http::request::{header_slots, parse_request, HeadLimits};
    use lowlat_http::Status;

    #[test]
    fn conditions() {
        let raw = b"HEAD /a?nocache=1&z=0 HTTP/1.1\r\nHost: h\r\nCookie: s=0; t=yes\r\n\r\n";
        let mut slots = header_slots();
        let Ok(Status::Complete(req)) = parse_request(raw, &mut slots, &HeadLimits::default())
        else {
            panic!()
        };
        let cases = [
            ("$arg_nocache", true),
            ("$arg_z", false),
            ("$cookie_s", false),
            ("$cookie_t", true),
            ("$cookie_missing", false),
            ("$http_pragma", false),
            ("$cookie_missing$arg_nocache", true),
            ("$request_method==HEAD", true),
            ("$request_method==GET", false),
            ("$cookie_t==yes", true),
        ];
        let mut buf = Vec::new();
        for (text, want) in cases {
            let c = Condition::parse(text).unwrap();
            assert_eq!(c.holds(&req, false, &mut buf), want, "{text}");
        }
        assert!(Condition::parse("$nope").is_err());
        assert!(Condition::parse("==x").is_err());
    }

    #[test]
    fn lifetimes_per_status() {
        /// The statuses and seconds a text gives; `None`: refused.
        type Want = Option<(&'static [u16], u64)>;
        let cases: &[(&str, Want)] = &[
            ("200 302 10m", Some((&[200, 302], 600))),
            ("10m", Some((&[200, 301, 302], 600))),
            ("any 1m", Some((&[], 60))),
            ("404 any 1s", Some((&[], 1))),
            ("", None),
            ("200", None),
            ("abc 1m", None),
            ("199 1m", None),
        ];
        for (text, want) in cases {
            let got = StatusTtl::parse(text).ok().map(|t| (t.statuses, t.secs));
            assert_eq!(got, want.map(|(s, n)| (s.to_vec(), n)), "{text}");
        }
        let ttls = [
            StatusTtl::parse("404 1m").unwrap(),
            StatusTtl::parse("any 5s").unwrap(),
        ];
        assert_eq!(ttl_for(&ttls, 404), Some(60));
        assert_eq!(ttl_for(&ttls, 200), Some(5));
        assert_eq!(ttl_for(&ttls[..1], 200), None);
    }

    #[test]
    fn ignored_fields() {
        let mut i = Ignored::default();
        assert!(!i.any());
        i.add("Cache-Control").unwrap();
        i.add("set-cookie").unwrap();
        assert!(i.add("Age").is_err());
        let targeted = ["cdn-cache-control".to_owned()];
        assert!(i.hides("cache-control", &targeted));
        assert!(i.hides("CDN-Cache-Control", &targeted));
        assert!(i.hides("Set-Cookie", &targeted));
        assert!(!i.hides("expires", &targeted));
        assert!(!i.hides("vary", &targeted));
    }
}
