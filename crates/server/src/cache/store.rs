//! The process's one cache ([`CacheStore`]): shared by every worker through an `Arc`, so a
//! response stored by one worker is a hit on the next.
//!
//! The map is `quick_cache`'s concurrent cache, chosen over writing one: it is sharded (each
//! shard its own lock, held only for a lookup or an insert, never while bytes are written to a
//! socket — values are `Arc`s cloned out), weighted (the budget is bytes, each entry weighing
//! what it holds), and its eviction is CLOCK-Pro-like with a ghost list, so a scan of URLs
//! fetched once passes through the cold part without flushing the hot set — an LRU would
//! lose every hot object to a crawl. `moka` was the other candidate: its W-TinyLFU admission
//! is as scan-resistant but it runs maintenance on a background thread and costs more per
//! read; `quick_cache` reads under a shard's read lock with one atomic for the reference bit.
//!
//! Entries under a primary key (scheme, host, path and query) are the response itself, or —
//! when its response had `Vary` — a marker holding the `Vary` value, the variants being
//! stored under the primary key followed by their secondary key (RFC 9111 §4.1).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::{DefaultHashBuilder, Lifecycle, OptionsBuilder, Weighter};

use super::object::Object;

/// What is stored under a key.
#[derive(Debug, Clone)]
pub(crate) enum Entry {
    /// A response.
    Object(Arc<Object>),
    /// The responses for this primary key vary on the fields `value` names (a `Vary` value,
    /// combined); their keys hold `id` (see `key::variant`).
    Vary { value: Arc<[u8]>, id: u64 },
}

/// Weighs entries in bytes.
#[derive(Debug, Clone, Copy)]
struct Bytes;

impl Weighter<Box<[u8]>, Entry> for Bytes {
    fn weight(&self, key: &Box<[u8]>, val: &Entry) -> u64 {
        match val {
            Entry::Object(o) => o.weight(key.len()),
            Entry::Vary { value, .. } => (key.len() + value.len() + 64) as u64,
        }
    }
}

/// Counts evictions for `/metrics`.
#[derive(Debug, Clone)]
struct Evictions(Arc<AtomicU64>);

impl Lifecycle<Box<[u8]>, Entry> for Evictions {
    type RequestState = ();

    fn on_evict(&self, (): &mut (), _key: Box<[u8]>, _val: Entry) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// The counters `/metrics` shows for the cache (shared by the workers: one relaxed atomic
/// add per event, on the cache's own paths only).
#[derive(Debug, Default)]
pub struct CacheCounters {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub stale: AtomicU64,
    pub revalidated: AtomicU64,
    pub collapsed: AtomicU64,
    pub refreshes: AtomicU64,
    pub bypass: AtomicU64,
    pub stored: AtomicU64,
    pub not_stored: AtomicU64,
    pub evictions: Arc<AtomicU64>,
}

/// The cache's size settings.
#[derive(Debug, Clone, Copy)]
pub struct StoreConfig {
    /// The memory budget, bytes.
    pub size: u64,
    /// The largest response stored; a larger one streams through unstored.
    pub max_object: u64,
}

/// Shards of the map: enough that workers rarely meet on one lock (16 × the cores of most
/// machines this runs on would be wasted; 64 keeps each shard's budget large enough to hold
/// a few big objects at the default 256 MiB).
const SHARDS: usize = 64;

/// The process's cache.
pub struct CacheStore {
    /// The next `Vary` marker's id.
    next_marker: AtomicU64,
    map: Cache<Box<[u8]>, Entry, Bytes, DefaultHashBuilder, Evictions>,
    /// The largest object stored (bytes of body), capped to what one shard can hold.
    pub(crate) max_object: u64,
    pub counters: CacheCounters,
    /// The fills in progress (request collapsing, background refreshes).
    pub(crate) flights: Arc<super::inflight::Flights>,
}

impl std::fmt::Debug for CacheStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheStore")
            .field("objects", &self.map.len())
            .field("bytes", &self.map.weight())
            .finish_non_exhaustive()
    }
}

impl CacheStore {
    /// A store with this budget.
    #[must_use]
    pub fn new(cfg: StoreConfig) -> Self {
        let counters = CacheCounters::default();
        let size = cfg.size.max(1 << 20);
        // The estimate sizes the shards' tables; 8 KiB an object is a typical web response.
        let items = usize::try_from(size / 8192).unwrap_or(usize::MAX).max(1024);
        let shards = SHARDS.min(items / 32).max(1);
        let options = OptionsBuilder::new()
            .estimated_items_capacity(items)
            .weight_capacity(size)
            .shards(shards)
            .build()
            .unwrap_or_else(|_| unreachable!("capacities are positive"));
        let map = Cache::with_options(
            options,
            Bytes,
            DefaultHashBuilder::default(),
            Evictions(Arc::clone(&counters.evictions)),
        );
        // An object larger than a shard's budget would be refused by the map anyway; half of
        // one leaves room for others beside it.
        let max_object = cfg.max_object.min(map.shard_capacity() / 2);
        CacheStore {
            next_marker: AtomicU64::new(1),
            map,
            max_object,
            counters,
            flights: Arc::default(),
        }
    }

    /// What is stored under `key`.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Entry> {
        self.map.get(key)
    }

    /// Stores `entry` under `key` (replacing what was there).
    pub(crate) fn insert(&self, key: Box<[u8]>, entry: Entry) {
        self.map.insert(key, entry);
    }

    /// Removes what is stored under `key`; true if something was.
    pub(crate) fn remove(&self, key: &[u8]) -> bool {
        self.map.remove(key).is_some()
    }

    /// Removes every entry for which `doomed` says so (purge by prefix or tag): a walk over
    /// the whole map, shard by shard.
    pub(crate) fn remove_where(&self, doomed: impl Fn(&[u8], &Entry) -> bool) -> u64 {
        let before = self.map.len();
        self.map.retain(|k, v| !doomed(k, v));
        (before.saturating_sub(self.map.len())) as u64
    }

    /// A new `Vary` marker id.
    pub(crate) fn marker_id(&self) -> u64 {
        self.next_marker.fetch_add(1, Ordering::Relaxed)
    }

    /// Objects held.
    #[must_use]
    pub fn objects(&self) -> u64 {
        self.map.len() as u64
    }

    /// Bytes held (by the budget's measure).
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.map.weight()
    }

    /// The budget.
    #[must_use]
    pub fn capacity(&self) -> u64 {
        self.map.capacity()
    }
}

/// The process's store, with the size settings it was made for.
static SHARED: std::sync::Mutex<Option<(u64, u64, Arc<CacheStore>)>> = std::sync::Mutex::new(None);

/// The process's store, if caching was ever turned on (for `/metrics`).
pub(crate) fn current() -> Option<Arc<CacheStore>> {
    SHARED
        .lock()
        .ok()
        .and_then(|s| s.as_ref().map(|(_, _, store)| Arc::clone(store)))
}

/// The process's store for this configuration: the one made before when its configuration
/// is the same (so a reload keeps what is cached), else a new one.
#[must_use]
pub fn shared(cfg: StoreConfig) -> Arc<CacheStore> {
    let mut slot = SHARED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((size, max, store)) = &*slot {
        if *size == cfg.size && *max == cfg.max_object {
            return Arc::clone(store);
        }
    }
    let store = Arc::new(CacheStore::new(cfg));
    *slot = Some((cfg.size, cfg.max_object, Arc::clone(&store)));
    store
}

#[cfg(test)]
mod tests {
    use super::*;
    use lowlat_http::cache::freshness::{AgeBase, Stored};
    use lowlat_http::cache::Directives;

    fn object(body: usize) -> Entry {
        Entry::Object(Arc::new(Object::new(
            200,
            std::borrow::Cow::Borrowed("OK"),
            super::super::lines::Lines::default(),
            bytes::Bytes::from(vec![b'x'; body]),
            AgeBase {
                initial: 0,
                response_time: 0,
            },
            Stored::new(60, &Directives::default()),
        )))
    }

    #[test]
    fn keeps_within_budget_under_a_flood_of_keys() {
        let store = CacheStore::new(StoreConfig {
            size: 4 << 20,
            max_object: 1 << 20,
        });
        for i in 0..100_000u32 {
            store.insert(format!("http://a/{i}").into_bytes().into(), object(1000));
        }
        assert!(
            store.bytes() <= store.capacity(),
            "{} > {}",
            store.bytes(),
            store.capacity()
        );
        assert!(store.objects() > 1000, "{}", store.objects());
        assert!(store.counters.evictions.load(Ordering::Relaxed) > 90_000);
    }

    #[test]
    fn a_scan_does_not_flush_the_hot_set() {
        let store = CacheStore::new(StoreConfig {
            size: 4 << 20,
            max_object: 1 << 20,
        });
        let hot: Vec<Box<[u8]>> = (0..500)
            .map(|i| format!("http://a/hot/{i}").into_bytes().into())
            .collect();
        for k in &hot {
            store.insert(k.clone(), object(1000));
        }
        // The hot set is used again and again while a scan of one-hit URLs goes by.
        for i in 0..20_000u32 {
            if i % 10 == 0 {
                for k in &hot {
                    let _ = store.get(k);
                }
            }
            store.insert(
                format!("http://a/scan/{i}").into_bytes().into(),
                object(1000),
            );
        }
        let kept = hot.iter().filter(|k| store.get(k).is_some()).count();
        assert!(
            kept >= 450,
            "only {kept} of 500 hot objects survived the scan"
        );
    }

    #[test]
    fn max_object_fits_a_shard() {
        let store = CacheStore::new(StoreConfig {
            size: 8 << 20,
            max_object: 1 << 30,
        });
        assert!(store.max_object <= 4 << 20, "{}", store.max_object);
        let store = CacheStore::new(StoreConfig {
            size: 1 << 30,
            max_object: 1 << 20,
        });
        assert_eq!(store.max_object, 1 << 20);
    }

    #[test]
    fn remove_and_remove_where() {
        let store = CacheStore::new(StoreConfig {
            size: 4 << 20,
            max_object: 1 << 20,
        });
        for p in ["/a/1", "/a/2", "/b/1"] {
            store.insert(format!("http://h{p}").into_bytes().into(), object(10));
        }
        assert!(store.remove(b"http://h/b/1"));
        assert!(!store.remove(b"http://h/b/1"));
        assert_eq!(store.remove_where(|k, _| k.starts_with(b"http://h/a/")), 2);
        assert_eq!(store.objects(), 0);
    }
}
