//! The cache's families on `/metrics` (process-wide: one store serves every site).

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

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
}
