//! The cache's families on `/metrics`: the process's totals (one store serves every site),
//! `lowlat_cache_*`, and the same request counts per site, `lowlat_cache_site_*{site="…"}` (a
//! family of their own, so that a sum over a family never counts a request twice).

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::store::CacheCounters;

/// One site's counts (the rules of a site share them).
#[derive(Debug, Default)]
pub struct SiteCounters {
    /// The site's first server name, `default` without `[[site]]` tables.
    pub label: String,
    pub counts: CacheCounters,
}

/// The sites' counters, in the order they were first made (kept across reloads by label).
static SITES: Mutex<Vec<Arc<SiteCounters>>> = Mutex::new(Vec::new());

/// The counters of site `label`: the ones already counting under this label (a reload keeps
/// them), or new ones.
pub fn site_counters(label: &str) -> Arc<SiteCounters> {
    let mut sites = SITES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(c) = sites.iter().find(|c| c.label == label) {
        return Arc::clone(c);
    }
    let c = Arc::new(SiteCounters {
        label: label.to_owned(),
        counts: CacheCounters::default(),
    });
    sites.push(Arc::clone(&c));
    c
}

/// Keeps only the sites in `labels` reported (those of the settings now in use).
pub fn retain_sites(labels: &[String]) {
    SITES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .retain(|c| labels.contains(&c.label));
}

/// A label value escaped as the text format asks (backslash, quote, newline); `crate::metrics`
/// has the same, but this module is what it renders from, so it does not reach back there.
fn label(v: &str) -> std::borrow::Cow<'_, str> {
    if v.contains(['\\', '"', '\n']) {
        v.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
            .into()
    } else {
        v.into()
    }
}

/// The request counts shown per site: (name, what it counts).
const PER_SITE: [(&str, &str); 7] = [
    ("hits", "Requests answered from the cache, per site."),
    (
        "misses",
        "Cacheable requests forwarded (nothing usable stored), per site.",
    ),
    ("stale", "Stale responses served, per site."),
    (
        "revalidated",
        "Stored responses refreshed by a 304, per site.",
    ),
    (
        "collapsed",
        "Misses answered from another request's fetch, per site.",
    ),
    ("refreshes", "Background refreshes started, per site."),
    ("bypass", "Requests the cache stayed out of, per site."),
];

fn per_site(c: &CacheCounters, name: &str) -> u64 {
    let v = match name {
        "hits" => &c.hits,
        "misses" => &c.misses,
        "stale" => &c.stale,
        "revalidated" => &c.revalidated,
        "collapsed" => &c.collapsed,
        "refreshes" => &c.refreshes,
        _ => &c.bypass,
    };
    v.load(Ordering::Relaxed)
}

/// Appends the cache's counters and gauges to `s`, when caching is on.
pub(crate) fn render(s: &mut String) {
    let Some(store) = super::store::current() else {
        return;
    };
    let c = &store.counters;
    let counters = [
        ("hits", &c.hits, "Requests answered from the cache."),
        (
            "misses",
            &c.misses,
            "Cacheable requests forwarded (nothing usable stored).",
        ),
        (
            "stale",
            &c.stale,
            "Stale responses served (max-stale, stale-if-error, grace).",
        ),
        (
            "revalidated",
            &c.revalidated,
            "Stored responses refreshed by a 304.",
        ),
        (
            "collapsed",
            &c.collapsed,
            "Misses answered from another request's fetch, which they waited for.",
        ),
        (
            "refreshes",
            &c.refreshes,
            "Background refreshes started (stale-while-revalidate).",
        ),
        (
            "bypass",
            &c.bypass,
            "Requests the cache stayed out of (method, unkeyed fields, purge).",
        ),
        ("stored", &c.stored, "Responses stored."),
        (
            "not_stored",
            &c.not_stored,
            "Responses not stored (RFC 9111 rules, object limit).",
        ),
    ];
    for (name, v, help) in counters {
        let _ = writeln!(
            s,
            "# HELP lowlat_cache_{name}_total {help}\n# TYPE lowlat_cache_{name}_total counter\nlowlat_cache_{name}_total {}",
            v.load(Ordering::Relaxed)
        );
    }
    let evictions = c.evictions.load(Ordering::Relaxed);
    let _ = writeln!(
        s,
        "# HELP lowlat_cache_evictions_total Objects evicted to keep within the budget.\n# TYPE lowlat_cache_evictions_total counter\nlowlat_cache_evictions_total {evictions}"
    );
    for (name, v, help) in [
        (
            "objects",
            store.objects(),
            "Entries stored (responses and Vary markers).",
        ),
        (
            "bytes",
            store.bytes(),
            "Bytes held, by the budget's measure.",
        ),
        (
            "capacity_bytes",
            store.capacity(),
            "The memory budget (--cache-size).",
        ),
    ] {
        let _ = writeln!(
            s,
            "# HELP lowlat_cache_{name} {help}\n# TYPE lowlat_cache_{name} gauge\nlowlat_cache_{name} {v}"
        );
    }
    if let Some(disk) = &store.disk {
        render_disk(s, disk);
    }
    let sites = SITES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if sites.is_empty() {
        return;
    }
    for (name, help) in PER_SITE {
        let _ = writeln!(
            s,
            "# HELP lowlat_cache_site_{name}_total {help}\n# TYPE lowlat_cache_site_{name}_total counter"
        );
        for site in sites.iter() {
            let _ = writeln!(
                s,
                "lowlat_cache_site_{name}_total{{site=\"{}\"}} {}",
                label(&site.label),
                per_site(&site.counts, name)
            );
        }
    }
}

/// The disk tier's families, `lowlat_cache_disk_*`.
fn render_disk(s: &mut String, disk: &super::disk::DiskTier) {
    let c = disk.counters();
    for (name, v, help) in [
        (
            "reads",
            &c.reads,
            "Entries read back from disk on a memory miss.",
        ),
        ("writes", &c.writes, "Entries written to disk."),
        (
            "dropped",
            &c.dropped,
            "Writes dropped because the disk tier's queue was full.",
        ),
        (
            "errors",
            &c.errors,
            "Disk writes that failed and files found damaged or gone.",
        ),
        (
            "evictions",
            &c.evictions,
            "Files removed to keep within --cache-disk-size.",
        ),
    ] {
        let _ = writeln!(
            s,
            "# HELP lowlat_cache_disk_{name}_total {help}\n# TYPE lowlat_cache_disk_{name}_total counter\nlowlat_cache_disk_{name}_total {}",
            v.load(Ordering::Relaxed)
        );
    }
    let (files, bytes) = disk.usage();
    for (name, v, help) in [
        ("objects", files, "Entries held on disk."),
        ("bytes", bytes, "Bytes of the disk tier's files."),
        (
            "capacity_bytes",
            disk.capacity(),
            "The disk tier's budget (--cache-disk-size).",
        ),
        (
            "loaded",
            u64::from(disk.loaded()),
            "1 once the files found at start are all indexed.",
        ),
    ] {
        let _ = writeln!(
            s,
            "# HELP lowlat_cache_disk_{name} {help}\n# TYPE lowlat_cache_disk_{name} gauge\nlowlat_cache_disk_{name} {v}"
        );
    }
}
