//! Protection in front of what a site serves: access rules by network and rate limits by key,
//! asked before the site's routes (an early hook of the router), over HTTP/1.1, HTTP/2 and
//! HTTP/3 alike, since all three go through the one request path.
//!
//! # Layout
//! - [`access`]: `allow` / `deny` rules, first match wins (403).
//! - [`ratelimit`]: `limit_req` zones: leaky buckets per key, shared by every worker (429).
//! - `client`: the client's address after trusted proxies, which both judge.
//! - `metrics`: the zones' counts on `/metrics`.

pub mod access;
mod client;
pub(crate) mod metrics;
pub mod ratelimit;

use std::sync::Arc;

use crate::handler::{Handler, Req, Response};
use crate::proxy::config::Cidr;
use access::AccessRule;
use ratelimit::{Verdict, Zone};

/// A site's guard: its access rules, then its rate-limit zones.
pub struct Guard {
    rules: Arc<[AccessRule]>,
    zones: Vec<Arc<Zone>>,
    trusted: Arc<Vec<Cidr>>,
    /// Reused for `Retry-After` lines.
    line: Vec<u8>,
}

impl Guard {
    /// A guard, or `None` when there is nothing to guard (no hook, no cost).
    #[must_use]
    pub fn new(
        rules: Arc<[AccessRule]>,
        zones: Vec<Arc<Zone>>,
        trusted: Arc<Vec<Cidr>>,
    ) -> Option<Guard> {
        (!rules.is_empty() || !zones.is_empty()).then(|| Guard {
            rules,
            zones,
            trusted,
            line: Vec::new(),
        })
    }
}

impl Handler for Guard {
    /// Refuses what the rules deny (403) and what a zone finds over its limit; leaves the rest
    /// to the routes (sends nothing).
    fn handle(&mut self, req: &Req<'_, '_, '_>, res: &mut Response<'_>) {
        let Some(peer) = res.client().map(|c| c.peer.ip()) else {
            return;
        };
        let head = req.head;
        let ip = client::address(peer, head.headers, &self.trusted);
        if !access::allowed(&self.rules, ip, head.path.as_bytes()) {
            res.send_status(403);
            return;
        }
        let now = crate::clock::loop_now();
        for zone in &self.zones {
            if !head.path.starts_with(&zone.spec.prefix) {
                continue;
            }
            if let Verdict::Refuse { retry_after } = zone.check(head, ip, now) {
                self.line.clear();
                self.line.extend_from_slice(b"Retry-After: ");
                self.line
                    .extend_from_slice(itoa::Buffer::new().format(retry_after).as_bytes());
                self.line.extend_from_slice(b"\r\n");
                res.send_status_with(zone.spec.status, &self.line);
                return;
            }
        }
    }
}
