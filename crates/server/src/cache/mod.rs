//! The proxy's cache (RFC 9111): responses of forwarding rules stored once per process and
//! served from memory by every worker, the way a file is.
//!
//! A cached route's request goes: the proxy handler asks [`lookup`] first — a usable stored
//! response is answered on the spot from the shared [`store::CacheStore`] (head from the
//! stored lines with `Age` and `Cache-Status`, body from the stored bytes; `HEAD` from a
//! stored `GET`); otherwise the request is forwarded as usual, carrying a [`fill::Fill`] in
//! its job. The worker's upstream side (HTTP/1.1 connections and HTTP/2 exchanges alike)
//! relays the response through `tee::Tee`, which hands
//! every piece on to the client unchanged and keeps a copy; when the response ends, the copy
//! becomes an immutable [`object::Object`] in the store. The decisions (what may be stored,
//! for how long, when it may be used) are the codec's (`lowlat_http::cache`); this module only
//! applies them.
//!
//! Concurrent misses of one key make one upstream request: the first leads the key's flight
//! ([`inflight`]), the others are parked by their worker until its fill ends and are then
//! answered from the store, or sent on their own when nothing usable was stored (`collapse`).
//! A stale response within its `stale-while-revalidate` window is sent at once and refreshed
//! by one request in the background, which has no client (`refresh`).
//!
//! A route without a cache pays one `Option` test in the proxy handler and one in the
//! upstream side per event; nothing else on the request path changes. A hit never touches the
//! flights.
//!
//! # Layout
//! - [`store`]: the shared store: sharded, weighted by bytes, scan-resistant eviction.
//! - [`disk`]: the disk tier beside it (`--cache-disk`): files written in the background,
//!   read on a memory miss, reloaded at start.
//! - `entry`: what is stored under a key: a response, or a `Vary` marker.
//! - `record`: one entry as a file holds it.
//! - `object`: one stored response, immutable, shared as an `Arc`.
//! - `lines`: header fields owned in one buffer as `Name: value` lines (stored heads, the
//!   request fields a fill keeps).
//! - `key`: the cache key of a request (scheme, host, path, query, or the rule's template) and
//!   its variants' keys.
//! - [`rules`]: what a site or rule configures beside RFC 9111: key template, bypass and
//!   no-store conditions, lifetimes per status, ignored response fields.
//! - `lookup`: the hit path: find, decide, answer from memory or let the request go on.
//! - `asked`: the request fields the look-up reads, found in one walk of them.
//! - `partial`: a `Range` answered from a stored complete response (206, 416).
//! - `fill`: the miss path: a response relayed to its client and stored on the way.
//! - `tee`: the client's `Downstream` with the fill beside it: copies, refreshes, stands in.
//! - `send`: a stored response relayed through a `Downstream` (standing in, after a wait).
//! - `inflight`: the fills in progress, one per key, and the wake-up of those waiting.
//! - `collapse`: a worker's requests parked while another's fill of their key is made.
//! - `refresh`: background refreshes (`stale-while-revalidate`): queued, and their sink.
//! - `metrics`: the cache's families on `/metrics`.
//! - `purge`: `PURGE` by URL, prefix or tag, from trusted networks.

pub(crate) mod asked;
pub(crate) mod collapse;
pub mod disk;
pub(crate) mod entry;
pub(crate) mod fill;
pub(crate) mod inflight;
pub(crate) mod key;
pub(crate) mod lines;
pub(crate) mod lookup;
pub(crate) mod metrics;
pub(crate) mod object;
pub(crate) mod partial;
pub(crate) mod purge;
pub(crate) mod record;
pub(crate) mod refresh;
pub mod rules;
pub(crate) mod send;
pub mod store;
pub(crate) mod tee;

use std::sync::Arc;

use lowlat_http::cache::freshness::Heuristic;

pub use disk::DiskConfig;
pub use store::{CacheStore, StoreConfig};

/// How a forwarding rule caches: the shared store, the rule's policy, and its site's counters.
#[derive(Debug, Clone)]
pub struct RouteCache {
    pub store: Arc<CacheStore>,
    pub policy: Arc<CachePolicy>,
    /// The counters of the rule's site (`/metrics`' `site` label), beside the store's totals.
    pub site: Arc<metrics::SiteCounters>,
}

impl RouteCache {
    /// Counts one event in the store's totals and in the site's.
    pub(crate) fn count(&self, which: fn(&store::CacheCounters) -> &std::sync::atomic::AtomicU64) {
        use std::sync::atomic::Ordering::Relaxed;
        which(&self.store.counters).fetch_add(1, Relaxed);
        which(&self.site.counts).fetch_add(1, Relaxed);
    }
}

/// A rule's caching policy.
#[derive(Debug, Clone)]
pub struct CachePolicy {
    /// Targeted fields (RFC 9213), in order of precedence, lower-case: the first present in a
    /// response replaces its `Cache-Control` and `Expires`.
    pub targeted: Vec<String>,
    /// Heuristic freshness for responses with `Last-Modified` only.
    pub heuristic: Heuristic,
    /// Store responses that set cookies.
    pub store_set_cookie: bool,
    /// Honour the request's `Cache-Control` (`no-cache`, `max-age`, `no-store`, …).
    pub honour_request: bool,
    /// The name this cache gives itself in `Cache-Status`.
    pub name: String,
    /// Seconds a stale response may still stand in for an error beyond what its own (or the
    /// request's) `stale-if-error` allows.
    pub grace: u64,
    /// Who may send `PURGE`.
    pub purge_from: Vec<crate::proxy::config::Cidr>,
    /// The key's template (nginx's `proxy_cache_key`); none: scheme, host, path and query.
    pub key: Option<crate::template::Template>,
    /// Requests that go past the cache: neither answered from it nor stored.
    pub bypass: Vec<rules::Condition>,
    /// Requests whose responses are not stored (they may still be answered from the store).
    pub no_store: Vec<rules::Condition>,
    /// Lifetimes per status for responses without explicit freshness.
    pub ttl: Vec<rules::StatusTtl>,
    /// Response fields the decisions leave out.
    pub ignored: rules::Ignored,
}

impl Default for CachePolicy {
    fn default() -> Self {
        CachePolicy {
            targeted: vec!["cdn-cache-control".to_owned()],
            heuristic: Heuristic::default(),
            store_set_cookie: false,
            honour_request: true,
            name: "lowlat".to_owned(),
            grace: 0,
            purge_from: ["127.0.0.0", "::1"]
                .iter()
                .map(|a| crate::proxy::config::Cidr {
                    addr: a.parse().unwrap_or(std::net::Ipv4Addr::LOCALHOST.into()),
                    bits: if a.contains(':') { 128 } else { 8 },
                })
                .collect(),
            key: None,
            bypass: Vec::new(),
            no_store: Vec::new(),
            ttl: Vec::new(),
            ignored: rules::Ignored::default(),
        }
    }
}

/// What the cache did for a request, as nginx's `$upstream_cache_status` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Answered from the store (fresh, or from another request's fetch it waited for).
    Hit,
    /// Nothing stored: forwarded.
    Miss,
    /// A stored response that could not be used as it was: forwarded (to revalidate it).
    Expired,
    /// A stale response sent (`max-stale`, `stale-if-error`, grace).
    Stale,
    /// A stale response sent while it is refreshed in the background
    /// (`stale-while-revalidate`).
    Updating,
    /// A stored response refreshed by a 304 and sent.
    Revalidated,
    /// Forwarded past the cache (a method, a rule's condition, an unkeyed field).
    Bypass,
}

impl CacheOutcome {
    /// nginx's word for it.
    #[must_use]
    pub fn token(self) -> &'static str {
        match self {
            CacheOutcome::Hit => "HIT",
            CacheOutcome::Miss => "MISS",
            CacheOutcome::Expired => "EXPIRED",
            CacheOutcome::Stale => "STALE",
            CacheOutcome::Updating => "UPDATING",
            CacheOutcome::Revalidated => "REVALIDATED",
            CacheOutcome::Bypass => "BYPASS",
        }
    }
}

thread_local! {
    /// What the cache made of the exchange whose end is being relayed now, when that differs
    /// from what the lookup said (a stale response standing in, a 304 refresh, a collapsed
    /// request answered from the store): set only around that one call, read by its log line.
    static RELAYING: std::cell::Cell<Option<CacheOutcome>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` (the client's `relay_end`) with `outcome` as what its log line says.
pub(crate) fn relaying_as<R>(outcome: Option<CacheOutcome>, f: impl FnOnce() -> R) -> R {
    RELAYING.with(|r| r.set(outcome));
    let out = f();
    RELAYING.with(|r| r.set(None));
    out
}

/// What the exchange whose end is being relayed came to, when the cache said (see
/// [`relaying_as`]).
pub(crate) fn relaying() -> Option<CacheOutcome> {
    RELAYING.with(std::cell::Cell::get)
}

/// The time now in whole seconds since the epoch, from the worker loop's clock: the wall
/// clock is read once per thread and the loop's monotonic time added to it (the system clock
/// per request cost 4% of a worker at a million requests a second; see `clock`). The answer
/// is kept for the loop time it was made for: a miss asks three or four times within one turn
/// of the loop, and comparing two times is cheaper than subtracting them (~100 instructions a
/// miss, callgrind).
pub(crate) fn now_secs() -> u64 {
    use std::cell::Cell;
    use std::time::{Instant, SystemTime, UNIX_EPOCH};
    thread_local! {
        static BASE: (Instant, u64) = (
            Instant::now(),
            SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        );
        static LAST: Cell<Option<(Instant, u64)>> = const { Cell::new(None) };
    }
    let now = crate::clock::loop_now();
    LAST.with(|last| match last.get() {
        Some((at, secs)) if at == now => secs,
        _ => {
            let secs = BASE.with(|(at, secs)| secs + now.saturating_duration_since(*at).as_secs());
            last.set(Some((now, secs)));
            secs
        }
    })
}
