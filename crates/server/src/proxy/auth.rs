//! Forward authentication's exchange (nginx's `auth_request`, caddy's `forward_auth`): the
//! subrequest to the auth service is a [`ProxyJob`] of its own, sent first, whose response the
//! server reads instead of relaying it, through [`AuthGate`], a [`Downstream`] in front of the
//! client's. The request it guards waits in the subrequest's [`Gate`]:
//!
//! - a 2xx lets it through: the fields the rule copies are taken from the auth service's
//!   answer and written into the waiting request (the client's own fields of those names
//!   dropped first, so they cannot be forged), which the engine then forwards as any other —
//!   or, for a route answered in the worker, the answer it gave is relayed (`super::auth_held`);
//! - a 401, a 403 or a redirect (the login page) is relayed to the client: its status and
//!   body, with `WWW-Authenticate`, `Location`, `Set-Cookie`, `Content-Type` and
//!   `Cache-Control` only;
//! - anything else, a failed connect or a timeout fails closed: 500 for an answer that is
//!   none of those (as nginx), 502/504 for no answer.
//!
//! The subrequest is made where the rule applies (`crate::guard::forward`); the engine starts
//! it and the waiting request (`super::engine`). Nothing here runs for a request outside every
//! rule's prefix.

use std::cell::{RefCell, RefMut};
use std::rc::Rc;
use std::sync::atomic::Ordering;

use lowlat_http::client::Header;

use super::claim::{Claim, Claimable};
use super::downstream::Downstream;
use super::job::{Gate, GateRef, ProxyJob, RelayBody, Verdict};
use crate::ctx::WorkerCtx;
use crate::guard::auth_rule::AuthRule;

impl Gate {
    /// The gate of a subrequest for `rule`: nothing heard yet, no request waiting behind it.
    pub(crate) fn new(rule: std::sync::Arc<AuthRule>) -> GateRef {
        Rc::new(RefCell::new(Gate {
            main: None,
            held: None,
            rule,
            verdict: Verdict::Waiting,
            copied: Vec::new(),
            wrapping: false,
            ready: false,
        }))
    }

    /// The guarded request, with the copied fields written in, once the auth service let it
    /// through; `None` before, and after.
    pub(crate) fn take_passed(&mut self) -> Option<ProxyJob> {
        if !self.ready {
            return None;
        }
        self.ready = false;
        let mut job = self.main.take()?;
        if job.group.cfg.fastcgi {
            super::cgi_request::replace_http_params(
                &mut job.request,
                &self.rule.copy,
                &self.copied,
            );
        } else {
            replace_fields(&mut job.request, &self.rule.copy, &self.copied);
        }
        Some(job)
    }

    /// The user the auth service named (the rule's user field, copied), for the log.
    pub(crate) fn user(&self) -> Option<&[u8]> {
        let name = self.rule.user_field.as_deref()?;
        lines(&self.copied).find_map(|(n, v)| n.eq_ignore_ascii_case(name.as_bytes()).then_some(v))
    }
}

/// The `Name: value` lines of `text` (CRLF-ended), as (name, value).
fn lines(text: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    text.split(|&b| b == b'\n').filter_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = memchr::memchr(b':', line)?;
        let value = &line[colon + 1..];
        let start = value.iter().position(|&b| b != b' ').unwrap_or(value.len());
        Some((&line[..colon], &value[start..]))
    })
}

/// Rewrites the HTTP/1.1 request head at the start of `request`: every field named in `copy`
/// dropped (what the client sent under those names), then `copied` added before the blank line.
fn replace_fields(request: &mut Vec<u8>, copy: &[Box<str>], copied: &[u8]) {
    let Some(end) = memchr::memmem::find(request, b"\r\n\r\n") else {
        return;
    };
    let Some(first) = memchr::memchr(b'\n', request).map(|i| i + 1) else {
        return;
    };
    let mut out = Vec::with_capacity(request.len() + copied.len());
    out.extend_from_slice(&request[..first]);
    let mut at = first;
    while at < end + 2 {
        let line_end = at + memchr::memchr(b'\n', &request[at..]).map_or(end + 2 - at, |i| i + 1);
        let line = &request[at..line_end];
        let name = &line[..memchr::memchr(b':', line).unwrap_or(line.len())];
        if !copy.iter().any(|c| c.as_bytes().eq_ignore_ascii_case(name)) {
            out.extend_from_slice(line);
        }
        at = line_end;
    }
    out.extend_from_slice(copied);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&request[end + 4..]);
    *request = out;
}

/// Whether a response field of a refusal reaches the client.
fn relayed_field(name: &str) -> bool {
    [
        "www-authenticate",
        "location",
        "set-cookie",
        "content-type",
        "cache-control",
    ]
    .iter()
    .any(|n| n.eq_ignore_ascii_case(name))
}

/// The client's [`Downstream`] as the auth service's answer sees it: that answer judged, and
/// relayed only when it refuses.
pub(crate) struct AuthGate<'a> {
    inner: &'a mut dyn Downstream,
    gate: Claim<Gate>,
}

impl<'a> AuthGate<'a> {
    /// A gate over `inner` for `gate`, or `inner` back when one already stands for it.
    pub(crate) fn new(
        inner: &'a mut dyn Downstream,
        gate: &GateRef,
    ) -> Result<Self, &'a mut dyn Downstream> {
        match Claim::take(gate) {
            Some(gate) => Ok(AuthGate { inner, gate }),
            None => Err(inner),
        }
    }

    fn state(&self) -> RefMut<'_, Gate> {
        self.gate.borrow_mut()
    }

    /// Fails the request closed (`status`), counted.
    fn fail_closed(&mut self, ctx: &mut WorkerCtx<'_>, status: u16) {
        {
            let mut g = self.state();
            g.rule.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(rule = %g.rule.label, status, "forward auth failed: the request is refused");
            g.verdict = Verdict::Refused;
            if let Some(job) = g.main.take() {
                job.group.give_buffer(job.request);
            }
            g.held = None;
        }
        self.inner.relay_error(ctx, status);
    }
}

impl Claimable for Gate {
    fn claimed(&mut self) -> &mut bool {
        &mut self.wrapping
    }
}

impl Downstream for AuthGate<'_> {
    fn relay_head(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        status: u16,
        reason: &str,
        fields: &[Header<'_>],
        pass: &dyn Fn(&str) -> bool,
        added: &[u8],
        body: RelayBody,
    ) {
        let verdict = match status {
            200..=299 => Verdict::Passed,
            401 | 403 | 301 | 302 | 303 | 307 | 308 => Verdict::Relaying,
            _ => Verdict::Refused,
        };
        let mut g = self.state();
        g.verdict = verdict;
        match verdict {
            Verdict::Passed => {
                let Gate { rule, copied, .. } = &mut *g;
                copied.clear();
                for f in fields {
                    // Each copied field under its configured name; a value with a line break
                    // cannot come from the codec, which refuses one.
                    if let Some(name) = rule.copy.iter().find(|c| c.eq_ignore_ascii_case(f.name)) {
                        copied.extend_from_slice(name.as_bytes());
                        copied.extend_from_slice(b": ");
                        copied.extend_from_slice(f.value);
                        copied.extend_from_slice(b"\r\n");
                    }
                }
            }
            Verdict::Relaying => {
                g.rule.denied.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(rule = %g.rule.label, status, "forward auth refused the request");
                if let Some(job) = g.main.take() {
                    job.group.give_buffer(job.request);
                }
                g.held = None;
                drop(g);
                let only = |name: &str| relayed_field(name) && pass(name);
                self.inner
                    .relay_head(ctx, status, reason, fields, &only, added, body);
            }
            Verdict::Waiting | Verdict::Refused => {
                tracing::debug!(rule = %g.rule.label, status, "forward auth answered neither yes nor no");
            }
        }
    }

    fn relay_body(&mut self, ctx: &mut WorkerCtx<'_>, data: &[u8]) {
        if self.state().verdict == Verdict::Relaying {
            self.inner.relay_body(ctx, data);
        }
    }

    fn relay_file(&mut self, ctx: &mut WorkerCtx<'_>, file: crate::file_body::FileBody) {
        if self.state().verdict == Verdict::Relaying {
            self.inner.relay_file(ctx, file);
        }
    }

    fn relay_trailers(&mut self, ctx: &mut WorkerCtx<'_>, fields: &[(&[u8], &[u8])]) {
        if self.state().verdict == Verdict::Relaying {
            self.inner.relay_trailers(ctx, fields);
        }
    }

    fn relay_end(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        upstream: &str,
        status: u16,
        took: std::time::Duration,
    ) {
        let verdict = self.state().verdict;
        match verdict {
            Verdict::Relaying => self.inner.relay_end(ctx, upstream, status, took),
            Verdict::Passed => {
                let (waiting, user, held) = {
                    let mut g = self.state();
                    g.rule.passed.fetch_add(1, Ordering::Relaxed);
                    (
                        g.main.is_some(),
                        g.user().map(<[u8]>::to_vec),
                        g.held.take(),
                    )
                };
                if !waiting && held.is_none() {
                    // Neither a request to forward nor an answer: nothing was let through.
                    return self.fail_closed(ctx, 500);
                }
                if let Some(user) = &user {
                    // The guarded request's log line names who it went on as.
                    self.inner.auth_user(user);
                }
                match held {
                    // The route answered in the worker: that answer goes now.
                    Some(held) => super::auth_held::relay(*held, ctx, self.inner),
                    None => self.state().ready = true,
                }
            }
            Verdict::Waiting | Verdict::Refused => self.fail_closed(ctx, 500),
        }
    }

    fn relay_abort(&mut self, ctx: &mut WorkerCtx<'_>) {
        if self.state().verdict == Verdict::Relaying {
            self.inner.relay_abort(ctx);
        } else {
            self.fail_closed(ctx, 502);
        }
    }

    fn relay_error(&mut self, ctx: &mut WorkerCtx<'_>, status: u16) {
        self.fail_closed(ctx, status);
    }

    fn backlog(&self) -> usize {
        self.inner.backlog()
    }

    fn relay_link(&mut self, upstream: mio::Token) {
        self.inner.relay_link(upstream);
    }

    fn flush_relayed(&mut self, ctx: &mut WorkerCtx<'_>) {
        self.inner.flush_relayed(ctx);
    }

    fn client_addresses(&mut self) -> Option<lowlat_http::proxy_protocol::Addresses> {
        self.inner.client_addresses()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copied_fields_replace_the_clients() {
        let mut req =
            b"GET /a HTTP/1.1\r\nHost: x\r\nx-auth-request-user: forged\r\nAccept: */*\r\n\r\nbody"
                .to_vec();
        let copy: Vec<Box<str>> = vec!["X-Auth-Request-User".into(), "X-Auth-Request-Email".into()];
        replace_fields(&mut req, &copy, b"X-Auth-Request-User: alice\r\n");
        assert_eq!(
            std::str::from_utf8(&req).unwrap(),
            "GET /a HTTP/1.1\r\nHost: x\r\nAccept: */*\r\nX-Auth-Request-User: alice\r\n\r\nbody"
        );
        let mut plain = b"GET / HTTP/1.1\r\n\r\n".to_vec();
        replace_fields(&mut plain, &copy, b"");
        assert_eq!(plain, b"GET / HTTP/1.1\r\n\r\n");
    }

    #[test]
    fn the_user_is_read_from_its_field() {
        let rule = AuthRule::new(
            "r".into(),
            vec!["X-Auth-Request-Email".into(), "X-Auth-Request-User".into()],
        );
        assert_eq!(rule.user_field.as_deref(), Some("X-Auth-Request-User"));
        let gate = Gate::new(std::sync::Arc::new(rule));
        gate.borrow_mut().copied =
            b"X-Auth-Request-Email: a@b\r\nX-Auth-Request-User: al\r\n".to_vec();
        assert_eq!(gate.borrow().user(), Some(&b"al"[..]));
    }
}
