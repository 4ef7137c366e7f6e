//! The `--cache*` flags: whether forwarding rules cache their responses, the store's size, and
//! the policy a site or rule may set for itself (key, bypass and no-store conditions, lifetimes
//! per status, ignored fields: [`CachePolicyArgs`]), compiled here into the runtime's
//! [`CachePolicy`] — the server never reads these flags.

use clap::Args;
use lowlat_http::units::parse_nonzero_size;

use crate::cache::rules::{Condition, Ignored, StatusTtl};
use crate::cache::{CachePolicy, DiskConfig, RouteCache, StoreConfig};

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
    /// A folder for the cache's disk tier: every stored response also written there, read
    /// back when memory no longer holds it, and found again after a restart (off without)
    #[arg(long, value_name = "DIR")]
    pub cache_disk: Option<std::path::PathBuf>,
    /// Budget of the disk tier's files; the least used are removed
    #[arg(long, value_name = "SIZE", default_value = "1g", value_parser = parse_nonzero_size)]
    pub cache_disk_size: u64,
    /// Largest response the disk tier stores (larger than --cache-max-object: kept on disk
    /// only); it is held in memory while it arrives
    #[arg(long, value_name = "SIZE", default_value = "64m", value_parser = parse_nonzero_size)]
    pub cache_disk_max_object: u64,
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
    #[command(flatten)]
    pub policy: CachePolicyArgs,
}

/// What a site (`[[site]]` keys) or a forwarding rule (keys of a `proxy` table) may set for
/// its own cache; the top-level flags are the default of every site.
#[derive(Debug, Clone, Default, PartialEq, Eq, Args)]
pub struct CachePolicyArgs {
    /// The cache key, as nginx's proxy_cache_key: a template over $scheme $host $request_uri
    /// $uri $is_args $args $request_method $http_NAME $cookie_NAME $arg_NAME [default: scheme,
    /// host, path and query]
    #[arg(long, value_name = "TEMPLATE", value_parser = parse_key)]
    pub cache_key: Option<String>,
    /// Requests that go past the cache (neither answered from it nor stored) when TEMPLATE is
    /// not empty nor 0, or equals VALUE ($cookie_nocache, $http_pragma,
    /// $request_method==HEAD); repeatable, any one suffices
    #[arg(long, value_name = "TEMPLATE[==VALUE]", value_parser = parse_condition)]
    pub cache_bypass: Vec<String>,
    /// Requests whose responses are not stored (they may still be answered from the cache), as
    /// nginx's proxy_no_cache; same conditions as --cache-bypass
    #[arg(long, value_name = "TEMPLATE[==VALUE]", value_parser = parse_condition)]
    pub cache_no_store: Vec<String>,
    /// How long responses of these statuses are fresh when they give no Cache-Control max-age
    /// or Expires, as nginx's proxy_cache_valid ("200 302 10m", "404 1m", "any 1m"; no status:
    /// 200 301 302); repeatable, the first naming a status wins
    #[arg(long, value_name = "[STATUS…|any] DURATION", value_parser = parse_ttl)]
    pub cache_ttl: Vec<String>,
    /// Response fields the cache's decisions ignore, as nginx's proxy_cache_ignore_headers:
    /// Cache-Control, Expires, Set-Cookie (the response is stored without it), Vary
    /// (repeatable or comma-separated)
    #[arg(long, value_name = "FIELD", value_parser = parse_ignore)]
    pub cache_ignore: Vec<String>,
}

fn parse_key(text: &str) -> Result<String, String> {
    crate::template::Template::compile_request(text)?;
    if text.trim().is_empty() {
        return Err("the key must not be empty".into());
    }
    Ok(text.to_owned())
}

fn parse_condition(text: &str) -> Result<String, String> {
    Condition::parse(text).map(|_| text.to_owned())
}

fn parse_ttl(text: &str) -> Result<String, String> {
    StatusTtl::parse(text).map(|_| text.to_owned())
}

fn parse_ignore(text: &str) -> Result<String, String> {
    let mut i = Ignored::default();
    for name in text.split(',') {
        i.add(name)?;
    }
    Ok(text.to_owned())
}

impl CachePolicyArgs {
    /// These settings where they are set, `under`'s where they are not (a rule over its site,
    /// a site over the top level).
    #[must_use]
    pub fn over(&self, under: &CachePolicyArgs) -> CachePolicyArgs {
        let pick = |own: &Vec<String>, other: &Vec<String>| {
            if own.is_empty() {
                other.clone()
            } else {
                own.clone()
            }
        };
        CachePolicyArgs {
            cache_key: self.cache_key.clone().or_else(|| under.cache_key.clone()),
            cache_bypass: pick(&self.cache_bypass, &under.cache_bypass),
            cache_no_store: pick(&self.cache_no_store, &under.cache_no_store),
            cache_ttl: pick(&self.cache_ttl, &under.cache_ttl),
            cache_ignore: pick(&self.cache_ignore, &under.cache_ignore),
        }
    }

    /// `base` with these settings compiled in.
    ///
    /// # Errors
    /// A setting that does not compile (each was checked when parsed, so only a settings
    /// value built by hand).
    pub fn compile(&self, base: &CachePolicy) -> Result<CachePolicy, String> {
        let mut p = base.clone();
        p.key = self
            .cache_key
            .as_deref()
            .map(crate::template::Template::compile_request)
            .transpose()?;
        p.bypass = self
            .cache_bypass
            .iter()
            .map(|c| Condition::parse(c))
            .collect::<Result<_, _>>()?;
        p.no_store = self
            .cache_no_store
            .iter()
            .map(|c| Condition::parse(c))
            .collect::<Result<_, _>>()?;
        p.ttl = self
            .cache_ttl
            .iter()
            .map(|t| StatusTtl::parse(t))
            .collect::<Result<_, _>>()?;
        p.ignored = Ignored::default();
        for name in self.cache_ignore.iter().flat_map(|i| i.split(',')) {
            p.ignored.add(name)?;
        }
        Ok(p)
    }
}

/// A forwarding rule's own cache settings (a `proxy` table's `cache*` keys).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleCache {
    /// `cache = true/false`; unset: as its site.
    pub on: Option<bool>,
    pub policy: CachePolicyArgs,
}

impl CacheArgs {
    /// The process's store and the policy of the top-level flags, whether or not `--cache`
    /// turns caching on everywhere (a site or a rule may turn it on for itself).
    ///
    /// # Errors
    /// When the disk tier's folder cannot be made or written.
    pub fn store_and_base(&self) -> Result<RouteCache, String> {
        let disk = self.cache_disk.as_ref().map(|dir| DiskConfig {
            dir: dir.clone(),
            size: self.cache_disk_size,
            max_object: self.cache_disk_max_object,
        });
        let store = crate::cache::store::shared(&StoreConfig {
            size: self.cache_size,
            max_object: self.cache_max_object,
            disk,
        })
        .map_err(|e| {
            let dir = self
                .cache_disk
                .as_deref()
                .unwrap_or(std::path::Path::new(""));
            format!("--cache-disk: cannot use {}: {e}", dir.display())
        })?;
        let mut policy = CachePolicy::default();
        policy.heuristic.enabled = !self.cache_no_heuristic;
        policy.store_set_cookie = self.cache_set_cookie;
        policy.grace = self.cache_grace.as_secs();
        if !self.cache_purge_from.is_empty() {
            policy.purge_from.clone_from(&self.cache_purge_from);
        }
        Ok(RouteCache {
            store,
            policy: std::sync::Arc::new(policy),
            site: std::sync::Arc::default(),
        })
    }
}
