//! The `--cache*` flags: whether forwarding rules cache their responses, and the store's size.

use clap::Args;
use lowlat_http::units::parse_nonzero_size;

use crate::cache::{CachePolicy, RouteCache, StoreConfig};

/// The cache's flags.
#[derive(Debug, Clone, Args)]
pub struct CacheArgs {
    /// Cache what forwarding rules answer (RFC 9111: shared-cache rules, one store for every
    /// worker), served from memory while fresh
    #[arg(long)]
    pub cache: bool,
    /// Memory budget of the cache (objects, their heads and keys); the least useful are evicted
    #[arg(long, value_name = "SIZE", default_value = "256m", value_parser = parse_nonzero_size)]
    pub cache_size: u64,
    /// Largest response the cache stores; larger ones stream through unstored
    #[arg(long, value_name = "SIZE", default_value = "16m", value_parser = parse_nonzero_size)]
    pub cache_max_object: u64,
    /// Give no heuristic lifetime (by default a response with `Last-Modified` and no explicit
    /// freshness is fresh for 10% of its age, at most a day: RFC 9111 §4.2.2)
    #[arg(long)]
    pub cache_no_heuristic: bool,
    /// Store responses that set cookies (off: a response with Set-Cookie is one user's)
    #[arg(long)]
    pub cache_set_cookie: bool,
    /// How much longer than its `stale-if-error` allows a stale response may still answer for
    /// an upstream that is down or answers 5xx (varnish's grace); `must-revalidate` always wins
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = lowlat_http::units::parse_duration)]
    pub cache_grace: std::time::Duration,
    /// Networks allowed to send PURGE (repeatable, ADDR or ADDR/BITS; default loopback only)
    #[arg(long = "cache-purge-from", value_name = "NETWORK", value_parser = super::proxy::parse_cidr)]
    pub cache_purge_from: Vec<crate::proxy::config::Cidr>,
}

impl CacheArgs {
    /// The rules' cache, when caching is on: the process's store (kept across reloads while
    /// its size is unchanged) and the policy.
    #[must_use]
    pub fn route_cache(&self) -> Option<RouteCache> {
        if !self.cache {
            return None;
        }
        let store = crate::cache::store::shared(StoreConfig {
            size: self.cache_size,
            max_object: self.cache_max_object,
        });
        let mut policy = CachePolicy::default();
        policy.heuristic.enabled = !self.cache_no_heuristic;
        policy.store_set_cookie = self.cache_set_cookie;
        policy.grace = self.cache_grace.as_secs();
        if !self.cache_purge_from.is_empty() {
            policy.purge_from.clone_from(&self.cache_purge_from);
        }
        Some(RouteCache {
            store,
            policy: std::sync::Arc::new(policy),
        })
    }
}
