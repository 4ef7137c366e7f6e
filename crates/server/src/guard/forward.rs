//! Forward authentication where a rule applies (nginx's `auth_request`, caddy's
//! `forward_auth`): the subrequest to the auth service, written from the client's request —
//! `GET` of the rule's URL with the original method and URI (`X-Forwarded-Method`,
//! `X-Forwarded-Uri`, `X-Original-URI`, `X-Original-Method`), `X-Forwarded-Host`,
//! `X-Forwarded-Proto`, `X-Forwarded-For`, and the client's `Cookie` and `Authorization`; no
//! body. The request waits behind it in the forward slot; what the answer does is
//! `crate::proxy::auth`'s.

use std::net::IpAddr;
use std::rc::Rc;
use std::sync::Arc;

use lowlat_http::request::{Method, Request};

use super::auth_rule::AuthRule;
use crate::proxy::group::WorkerGroup;
use crate::proxy::job::Gate;
use crate::proxy::job::ProxyJob;

/// A `--forward-auth` rule as the workers use it.
#[derive(Debug)]
pub struct ForwardAuth {
    /// The paths it guards.
    pub prefix: String,
    /// Its upstream group (the auth service), by index among the service's groups; `None` for
    /// `off`, a prefix left unguarded inside a guarded one (nginx's `auth_request off`).
    pub group: Option<usize>,
    /// The auth service's path (with its query, if the URL has one).
    pub path: String,
    /// `Host` of the subrequest: the URL's authority.
    pub host: String,
    pub rule: Arc<AuthRule>,
}

impl ForwardAuth {
    /// The subrequest for `req` from the client at `ip` (over TLS or not), to `group` (this
    /// worker's view of the rule's), carrying its gate.
    pub(crate) fn subrequest(
        &self,
        group: &Rc<WorkerGroup>,
        req: &Request<'_, '_>,
        ip: IpAddr,
        tls: bool,
    ) -> ProxyJob {
        let mut b = group.take_buffer();
        let mut line = |name: &[u8], value: &[u8]| {
            b.extend_from_slice(name);
            b.extend_from_slice(b": ");
            b.extend_from_slice(value);
            b.extend_from_slice(b"\r\n");
        };
        let request_line = format!("GET {} HTTP/1.1\r\nHost", self.path);
        line(request_line.as_bytes(), self.host.as_bytes());
        let method = req.method_token.as_bytes();
        let target = req.target.as_bytes();
        line(b"X-Forwarded-Method", method);
        line(b"X-Forwarded-Uri", target);
        line(b"X-Original-Method", method);
        line(b"X-Original-URI", target);
        if let Some(host) = req.header("host") {
            line(b"X-Forwarded-Host", host);
        }
        line(b"X-Forwarded-Proto", if tls { b"https" } else { b"http" });
        line(b"X-Forwarded-For", ip.to_string().as_bytes());
        if let Some(auth) = req.header("authorization") {
            line(b"Authorization", auth);
        }
        // HTTP/2 and HTTP/3 split cookies into fields of their own: one line, as RFC 9113
        // §8.2.3 says an HTTP/1.1 hop joins them.
        let mut cookie = Vec::new();
        for h in req
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case("cookie"))
        {
            if !cookie.is_empty() {
                cookie.extend_from_slice(b"; ");
            }
            cookie.extend_from_slice(h.value);
        }
        if !cookie.is_empty() {
            line(b"Cookie", &cookie);
        }
        b.extend_from_slice(b"\r\n");
        let mut job = ProxyJob::new(group, b, Method::Get, 0);
        job.gate = Some(Gate::new(Arc::clone(&self.rule)));
        job
    }
}
