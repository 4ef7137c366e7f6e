//! nginx's `return`: a rule answers every request under its prefix with a fixed status — a
//! redirect (`301 https://$host$request_uri`) or a short text (`403 Forbidden`, `200 ok`) — and
//! the HTTP→HTTPS redirect of a site (`https_redirect = true`).
//!
//! A rule is parsed and its template compiled once, at config load ([`parse_return_rule`]); a
//! request walks the compiled pieces into a reused buffer. Rules are mounted as router prefixes,
//! beside the proxy's, so the longest matching prefix wins among both (and over files and the
//! built-in routes), whatever the order they are given in.

use lowlat_http::request::{Method, Request};

use crate::handler::{Handler, Req, Response};
use crate::router::{RouteError, Router};
use crate::template::{Context, ExpandError, Ports, Template, Var};

/// The statuses that redirect: they need a URL, which goes in `Location`.
const REDIRECTS: [u16; 5] = [301, 302, 303, 307, 308];

/// Longest text or URL a rule may give (before expansion).
pub const MAX_RETURN_TEXT: usize = 4096;

/// The prefix under which ACME HTTP-01 challenges are answered: it stays served in clear when a
/// site redirects to HTTPS, so a certificate can be obtained (and renewed) for it.
pub const ACME_CHALLENGE_PREFIX: &str = "/.well-known/acme-challenge/";

/// One `--return PREFIX=STATUS[ URL|TEXT]` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReturnRule {
    pub prefix: String,
    pub status: u16,
    /// The `Location` of a redirect, or the body of another status (`None`: the status page).
    pub text: Option<Template>,
}

/// Parses `PREFIX=STATUS[ URL|TEXT]` (`/old/=301 https://example.com$request_uri`,
/// `/private/=403`, `/health=200 ok`).
///
/// # Errors
/// A message for clap naming what is wrong.
pub fn parse_return_rule(text: &str) -> Result<ReturnRule, String> {
    let (prefix, rest) = text.split_once('=').ok_or_else(|| {
        format!("{text:?} is not PREFIX=STATUS [URL or TEXT] (e.g. /old/=301 https://$host/new/)")
    })?;
    if !prefix.starts_with('/')
        || prefix.contains(['?', '#', '{', '}', ' ', '*'])
        || prefix.split('/').any(|seg| seg == "." || seg == "..")
    {
        return Err(format!("{text:?}: the prefix must be a path such as /old/"));
    }
    let rest = rest.trim_start();
    let (code, body) = match rest.split_once(' ') {
        Some((c, b)) => (c, Some(b.trim())),
        None => (rest, None),
    };
    let body = body.filter(|b| !b.is_empty());
    let status: u16 = code
        .parse()
        .ok()
        .filter(|s| (200..=599).contains(s))
        .ok_or_else(|| format!("{text:?}: {code:?} is not a status from 200 to 599"))?;
    if body.is_some_and(|b| b.len() > MAX_RETURN_TEXT) {
        return Err(format!(
            "{text:?}: the text is longer than {MAX_RETURN_TEXT} bytes"
        ));
    }
    if body.is_some_and(|b| b.bytes().any(|c| c.is_ascii_control() && c != b'\t')) {
        return Err(format!("{text:?}: the text holds a control character"));
    }
    let redirect = REDIRECTS.contains(&status);
    if redirect {
        let Some(url) = body else {
            return Err(format!("{text:?}: a {status} redirect needs a URL"));
        };
        if url.contains([' ', '\t', '"', '<', '>', '\\']) {
            return Err(format!(
                "{text:?}: {url:?} is not a URL (no spaces or quotes)"
            ));
        }
    } else if (300..400).contains(&status) {
        return Err(format!(
            "{text:?}: {status} is not a redirect lowlat sends (301, 302, 303, 307, 308)"
        ));
    } else if body.is_some() && matches!(status, 204 | 205) {
        return Err(format!("{text:?}: a {status} answer has no body"));
    }
    let text = body
        .map(Template::compile)
        .transpose()
        .map_err(|e| format!("{text:?}: {e}"))?;
    Ok(ReturnRule {
        prefix: prefix.to_owned(),
        status,
        text,
    })
}

/// What a site's returns need besides their rule: the ports and the site's name.
#[derive(Debug, Clone, Default)]
pub struct SiteContext {
    pub ports: Ports,
    pub server_name: Option<String>,
}

impl SiteContext {
    fn context(&self, tls: bool) -> Context<'_> {
        Context {
            tls,
            ports: self.ports,
            server_name: self.server_name.as_deref(),
        }
    }
}

/// Answers the requests of one rule.
struct ReturnHandler {
    status: u16,
    text: Option<Template>,
    site: SiteContext,
    /// The expanded `Location` line or body (reused).
    buf: Vec<u8>,
}

/// Mounts `rule` on `router` for one worker.
///
/// # Errors
/// When the prefix is the same as another rule's.
pub fn mount(router: &mut Router, rule: &ReturnRule, site: &SiteContext) -> Result<(), RouteError> {
    let handler = ReturnHandler {
        status: rule.status,
        text: rule.text.clone(),
        site: site.clone(),
        buf: Vec::new(),
    };
    router.prefix(&rule.prefix, &Method::ALL, handler)
}

impl Handler for ReturnHandler {
    fn handle(&mut self, req: &Req<'_, '_, '_>, res: &mut Response<'_>) {
        let tls = res.client().is_some_and(|c| c.tls);
        let cx = self.site.context(tls);
        let Some(text) = &self.text else {
            res.send_status(self.status);
            return;
        };
        self.buf.clear();
        if REDIRECTS.contains(&self.status) {
            self.buf.extend_from_slice(b"Location: ");
            if text.expand(req.head, &cx, &mut self.buf) == Err(ExpandError::NoHost) {
                res.send_status(400);
                return;
            }
            self.buf.extend_from_slice(b"\r\n");
            res.send_status_with(self.status, &self.buf);
        } else {
            if text.expand(req.head, &cx, &mut self.buf) == Err(ExpandError::NoHost) {
                res.send_status(400);
                return;
            }
            res.send(self.status, b"text/plain; charset=utf-8", &self.buf);
        }
    }
}

/// A site's HTTP→HTTPS redirect: a clear-text request gets `308 Permanent Redirect` to the
/// same host, path and query over HTTPS (308 rather than 301 so that a POST stays a POST with
/// its body, RFC 9110 §15.4.9), except under [`ACME_CHALLENGE_PREFIX`].
#[derive(Debug, Clone)]
pub struct HttpsRedirect {
    /// `Location: https://` and the template's host, port and target, compiled once.
    template: Template,
    site: SiteContext,
    buf: Vec<u8>,
}

impl HttpsRedirect {
    /// The redirect for a site; the port is left out of the URL when it is 443 or unknown.
    #[must_use]
    pub fn new(site: SiteContext) -> Self {
        let text = match site.ports.tls {
            Some(p) if p != 443 => format!("https://$host:{p}$request_uri"),
            _ => "https://$host$request_uri".to_owned(),
        };
        // Only known variables and a number: this compiles.
        let template = Template::compile(&text).unwrap_or_default();
        debug_assert!(template.uses(&Var::Host));
        Self {
            template,
            site,
            buf: Vec::new(),
        }
    }
}

impl Handler for HttpsRedirect {
    /// Answers with the redirect when the request came in clear; leaves it to the routes (sends
    /// nothing) when it came over TLS or asks for an ACME challenge.
    fn handle(&mut self, req: &Req<'_, '_, '_>, res: &mut Response<'_>) {
        let req: &Request<'_, '_> = req.head;
        if res.client().is_some_and(|c| c.tls) || req.path.starts_with(ACME_CHALLENGE_PREFIX) {
            return;
        }
        self.buf.clear();
        self.buf.extend_from_slice(b"Location: ");
        let cx = self.site.context(false);
        if self.template.expand(req, &cx, &mut self.buf).is_err() {
            res.send_status(400);
            return;
        }
        // `OPTIONS *` has no path to keep: the site's root.
        if req.target == "*" {
            let len = self.buf.len();
            self.buf[len - 1] = b'/';
        }
        self.buf.extend_from_slice(b"\r\n");
        res.send_status_with(308, &self.buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules() {
        // (flag value, Ok((prefix, status, literal text)) or Err(words in the message))
        let ok: &[(&str, &str, u16, Option<&str>)] = &[
            (
                "/old/=301 https://example.com/new/",
                "/old/",
                301,
                Some("https://example.com/new/"),
            ),
            ("/=308 https://$host$request_uri", "/", 308, None),
            ("/private/=403", "/private/", 403, None),
            (
                "/gone=410 Gone for good",
                "/gone",
                410,
                Some("Gone for good"),
            ),
            ("/health=200 ok", "/health", 200, Some("ok")),
            ("/x= 302 /y", "/x", 302, Some("/y")),
        ];
        for &(text, prefix, status, literal) in ok {
            let r = parse_return_rule(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!((r.prefix.as_str(), r.status), (prefix, status), "{text}");
            if let Some(l) = literal {
                assert_eq!(r.text.unwrap().literal().unwrap(), l.as_bytes(), "{text}");
            }
        }
        let bad: &[(&str, &str)] = &[
            ("/old", "PREFIX=STATUS"),
            ("old=301 /x", "prefix"),
            ("/a/../b=301 /x", "prefix"),
            ("/a=301", "needs a URL"),
            ("/a=999", "200 to 599"),
            ("/a=100", "200 to 599"),
            ("/a=abc", "200 to 599"),
            ("/a=304 /x", "not a redirect"),
            ("/a=204 text", "no body"),
            ("/a=301 https://$hots/", "unknown variable $hots"),
            ("/a=301 a b", "not a URL"),
            ("/a=200 $", "must name a variable"),
        ];
        for &(text, words) in bad {
            let e = parse_return_rule(text).unwrap_err();
            assert!(e.contains(words), "{text}: {e}");
        }
    }
}
