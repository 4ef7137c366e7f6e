//! Protection in front of what a site serves: access rules by network and rate limits by key,
//! asked before the site's routes (an early hook of the router), over HTTP/1.1, HTTP/2 and
//! HTTP/3 alike, since all three go through the one request path.
//!
//! # Layout
//! - [`access`]: `allow` / `deny` rules, first match wins (403).
//! - [`basic`]: HTTP Basic authentication against htpasswd files (401).
//! - [`forward`]: forward authentication: the subrequest to an auth service whose answer lets
//!   the request through (`crate::proxy::auth` judges it).
//! - [`auth_rule`]: a forward-auth rule's shared part: what it copies, its counts.
//! - [`ratelimit`]: `limit_req` zones: leaky buckets per key, shared by every worker (429).
//! - `bucket`: one key's leaky bucket, one word updated by compare-and-swap.
//! - `local`: a worker's own index of a zone's buckets, in front of the zone's shared table.
//! - [`fleet`]: zones kept in Redis, counted with the other instances off the workers' threads.
//! - [`connlimit`]: `limit_conn` zones: requests in progress per key (503).
//! - [`key`]: what the limits count by.
//! - `client`: the client's address after trusted proxies, which all of them judge.
//! - `metrics`: the zones' counts on `/metrics`.

pub mod access;
pub mod auth_rule;
pub mod basic;
mod bucket;
mod client;
pub mod connlimit;
pub mod fleet;
pub mod forward;
pub mod key;
mod local;
pub(crate) mod metrics;
pub mod ratelimit;

use std::sync::Arc;

use crate::handler::{Handler, Req, Response};
use crate::proxy::config::Cidr;
use access::AccessRule;
use connlimit::{ConnZone, Taken};
use local::LocalBuckets;
use ratelimit::{LimitOutcome, Verdict, Zone};

/// A forward-auth rule with this worker's view of its auth service's group (`None` for `off`).
pub(crate) type ForwardRule = (
    Arc<forward::ForwardAuth>,
    Option<std::rc::Rc<crate::proxy::group::WorkerGroup>>,
);

/// A site's guard: its rate-limit zones, its connection-limit zones, then its access rules,
/// then its Basic authentication, then its forward authentication (nginx's order: `limit_req`
/// and `limit_conn` before `allow`/`deny`, `auth_basic` and `auth_request`).
pub struct Guard {
    rules: access::AccessList,
    /// Each zone with this worker's index of its buckets.
    zones: Vec<(Arc<Zone>, LocalBuckets)>,
    conns: Vec<Arc<ConnZone>>,
    auth: Vec<Arc<basic::BasicAuth>>,
    /// Forward-auth rules.
    forward: Vec<ForwardRule>,
    trusted: Arc<Vec<Cidr>>,
    /// Some rule or key reads the path (a prefix other than every path's, a key with the
    /// path, forward authentication): only then is its normal form worked out.
    reads_path: bool,
    /// Reused for `Retry-After` lines.
    line: Vec<u8>,
}

impl Guard {
    /// A guard, or `None` when there is nothing to guard (no hook, no cost).
    #[must_use]
    pub(crate) fn new(
        rules: Arc<[AccessRule]>,
        (zones, conns): (Vec<Arc<Zone>>, Vec<Arc<ConnZone>>),
        (auth, forward): (Vec<Arc<basic::BasicAuth>>, Vec<ForwardRule>),
        trusted: Arc<Vec<Cidr>>,
    ) -> Option<Guard> {
        let nothing = rules.is_empty()
            && zones.is_empty()
            && conns.is_empty()
            && auth.is_empty()
            && forward.is_empty();
        let keyed_by_path = |key: &[key::KeyPart]| key.contains(&key::KeyPart::Path);
        let reads_path = rules.iter().any(|r| !r.prefix.is_empty())
            || zones
                .iter()
                .any(|z| !z.spec.prefix.is_empty() || keyed_by_path(&z.spec.key))
            || conns
                .iter()
                .any(|z| !z.spec.prefix.is_empty() || keyed_by_path(&z.spec.key))
            || auth.iter().any(|a| !a.prefix.is_empty())
            || !forward.is_empty();
        (!nothing).then(|| Guard {
            rules: access::AccessList::new(&rules),
            zones: zones
                .into_iter()
                .map(|z| (z, LocalBuckets::new()))
                .collect(),
            conns,
            auth,
            forward,
            trusted,
            reads_path,
            line: Vec::new(),
        })
    }

    fn too_many(&mut self, res: &mut Response<'_>, status: u16, retry_after: u64) {
        self.line.clear();
        self.line.extend_from_slice(b"Retry-After: ");
        self.line
            .extend_from_slice(itoa::Buffer::new().format(retry_after).as_bytes());
        self.line.extend_from_slice(b"\r\n");
        res.send_status_with(status, &self.line);
    }
}

impl Guard {
    /// Counts the request in every rate-limit zone that applies; whether it is answered (or
    /// held back) here. The longest delay any zone asks for holds it (nginx's `limit_req`
    /// with several zones); the outcome logged is the strongest word: `DELAYED`, then
    /// `REJECTED_DRY_RUN`, `DELAYED_DRY_RUN`, `PASSED`.
    fn rate_limits(
        &mut self,
        req: &Req<'_, '_, '_>,
        path: &str,
        ip: std::net::IpAddr,
        res: &mut Response<'_>,
    ) -> bool {
        let head = req.head;
        let mut limited = None;
        let mut longest: Option<(std::time::Duration, usize)> = None;
        let now_ms = crate::clock::loop_millis();
        for i in 0..self.zones.len() {
            let (zone, local) = &mut self.zones[i];
            if !under(path, &zone.spec.prefix) {
                continue;
            }
            match zone.check_local(local, head, path, ip, now_ms) {
                Verdict::Refuse { retry_after } => {
                    let status = zone.spec.status;
                    res.set_limit_outcome(LimitOutcome::Rejected);
                    self.too_many(res, status, retry_after);
                    return true;
                }
                Verdict::DryRunRefuse => limited = Some(LimitOutcome::RejectedDryRun),
                Verdict::Delay(wait) => {
                    if longest.is_none_or(|(w, _)| wait > w) {
                        longest = Some((wait, i));
                    }
                }
                Verdict::DryRunDelay => {
                    if limited != Some(LimitOutcome::RejectedDryRun) {
                        limited = Some(LimitOutcome::DelayedDryRun);
                    }
                }
                Verdict::Pass => {
                    limited.get_or_insert(LimitOutcome::Passed);
                }
            }
        }
        if let Some((wait, i)) = longest {
            res.set_limit_outcome(LimitOutcome::Delayed);
            let until = crate::clock::loop_now() + wait;
            res.hold(crate::hold::Hold::new(until, &self.zones[i].0.waiting));
            return true;
        }
        if let Some(outcome) = limited {
            res.set_limit_outcome(outcome);
        }
        false
    }
}

impl Guard {
    /// Takes a place in every connection-limit zone that applies; whether the request was
    /// refused here (then it holds none).
    fn conn_limits(
        &mut self,
        head: &lowlat_http::request::Request<'_, '_>,
        path: &str,
        ip: std::net::IpAddr,
        res: &mut Response<'_>,
    ) -> bool {
        let mut slots = Vec::new();
        for (i, zone) in self.conns.iter().enumerate() {
            if !under(path, &zone.spec.prefix) {
                continue;
            }
            match zone.take(head, path, ip) {
                Taken::Pass(slot) => {
                    // Room for this zone and the ones after it, taken at the first that
                    // applies: a request outside every zone's prefix allocates nothing, and
                    // the usual one boxes its places without a second allocation (a malloc, a
                    // realloc and a free were 620 of the 1 347 instructions a zone added to
                    // /plaintext, by callgrind).
                    if slots.capacity() == 0 {
                        slots.reserve_exact(self.conns.len() - i);
                    }
                    slots.push(slot);
                }
                Taken::Refuse => {
                    // The places taken in earlier zones are given back with `slots`.
                    res.send_status(zone.spec.status);
                    return true;
                }
            }
        }
        if !slots.is_empty() {
            res.hold_slots(slots.into_boxed_slice());
        }
        false
    }

    /// Asks every Basic authentication that applies; whether the request was answered here
    /// (401, or 429 for a client that failed too often).
    fn basic_auth(
        &mut self,
        head: &lowlat_http::request::Request<'_, '_>,
        path: &str,
        ip: std::net::IpAddr,
        res: &mut Response<'_>,
    ) -> bool {
        for i in 0..self.auth.len() {
            let auth = Arc::clone(&self.auth[i]);
            if !under(path, &auth.prefix) {
                continue;
            }
            let now = crate::clock::loop_now();
            match auth.check(head, ip, now, crate::cache::now_secs()) {
                basic::Outcome::Pass => {}
                basic::Outcome::Challenge => {
                    res.send_status_with(401, auth.challenge());
                    return true;
                }
                basic::Outcome::TooMany { retry_after } => {
                    self.too_many(res, 429, retry_after);
                    return true;
                }
            }
        }
        false
    }

    /// The forward-auth rule of the longest prefix (which may be `off`): its subrequest stands
    /// in the forward slot, the request waits behind it (`Response::forward`).
    fn forward_auth(
        &self,
        head: &lowlat_http::request::Request<'_, '_>,
        path: &str,
        ip: std::net::IpAddr,
        res: &mut Response<'_>,
    ) {
        let rule = self
            .forward
            .iter()
            .filter(|(f, _)| under(path, &f.prefix))
            .max_by_key(|(f, _)| f.prefix.len());
        if let Some((rule, Some(group))) = rule {
            let tls = res.client().is_some_and(|c| c.tls);
            let subrequest = rule.subrequest(group, head, ip, tls);
            if !res.forward_auth(subrequest) {
                res.send_status(500);
            }
        }
    }
}

/// Whether `path` is under `prefix`; the usual empty prefix without a call to `memcmp` (which
/// `starts_with` makes even for nothing to compare: 7 instructions, by callgrind).
#[inline]
fn under(path: &str, prefix: &str) -> bool {
    prefix.is_empty() || path.starts_with(prefix)
}

impl Handler for Guard {
    /// Refuses what a zone finds over its limit (429), holds back what a zone delays (it comes
    /// back here once its time has come), refuses what the rules deny (403) and what lacks
    /// good credentials (401); leaves the rest to the routes (sends nothing), behind a
    /// forward-auth subrequest where a rule applies.
    fn handle(&mut self, req: &Req<'_, '_, '_>, res: &mut Response<'_>) {
        let Some(peer) = res.client().map(|c| c.peer.ip()) else {
            return;
        };
        let head = req.head;
        // Every prefix below is matched against the path as it will be read (`crate::scope`).
        // A site whose rules all cover every path and key on no path reads none: the router
        // still answers a path not in its normal form, after the limits counted it (72
        // instructions a request spared on `/plaintext`: docs/PERFORMANCE.md, "Protection").
        let normal;
        let path: &str = if self.reads_path {
            normal = match crate::scope::normal_form(head.path) {
                Ok(path) => path,
                Err(status) => {
                    res.send_status(status);
                    return;
                }
            };
            &normal
        } else {
            head.path
        };
        let ip = client::address(peer, head.headers, &self.trusted);
        // Each kind of rule asked only where the site has one: a guard of one zone and an
        // allow list pays for nothing else (callgrind counts each test and call it skips).
        // A request released after its delay was counted when it came (nginx counts once).
        if !self.zones.is_empty()
            && res.limit_outcome() != Some(LimitOutcome::Delayed)
            && self.rate_limits(req, path, ip, res)
        {
            return;
        }
        if !self.conns.is_empty() && self.conn_limits(head, path, ip, res) {
            return;
        }
        if !self.rules.allows(ip, path.as_bytes()) {
            res.send_status(403);
            return;
        }
        if !self.auth.is_empty() && self.basic_auth(head, path, ip, res) {
            return;
        }
        if !self.forward.is_empty() {
            self.forward_auth(head, path, ip, res);
        }
    }
}

/// `f` of a request for `/` (the zones' unit tests).
#[cfg(test)]
fn with_request<T>(f: impl FnOnce(&lowlat_http::request::Request<'_, '_>) -> T) -> T {
    let mut slots = lowlat_http::request::header_slots();
    let Ok(lowlat_http::Status::Complete(req)) = lowlat_http::request::parse_request(
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        &mut slots,
        &lowlat_http::request::HeadLimits::default(),
    ) else {
        panic!("a request")
    };
    f(&req)
}
