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
//! With `--cache-disk`, a [`DiskTier`] holds every entry too (more than memory, larger objects,
//! across restarts): what memory misses is looked for there and kept in memory again.
//!
//! Entries under a primary key (scheme, host, path and query) are the response itself, or —
//! when its response had `Vary` — a marker holding the `Vary` value, the variants being
//! stored under the primary key followed by their secondary key (RFC 9111 §4.1).

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::{Equivalent, Lifecycle, OptionsBuilder, Weighter};

use super::disk::{DiskConfig, DiskTier};
use super::entry::Entry;
use crate::prehashed::Prehashed;

/// A key's bytes as the map and a fill hold them: in place up to 56 bytes (the slot is then
/// 64 bytes, as a boxed key's 16 and its allocation of 48 or more are), on the heap past that.
/// A stored object whose key had an allocation of its own cost a miss about 190 instructions
/// of `malloc` (callgrind: a long-lived block, never from the thread's cache).
pub(crate) type KeyBytes = smallvec::SmallVec<[u8; 56]>;

/// A key as the map files it: its bytes and their hash. The hash is made once a request
/// ([`CacheStore::hashed`]) and used for every look-up, insert and flight of the key: a
/// miss asked for it four times (two look-ups, its flight, the insert), about 180
/// instructions of foldhash over a URL-long key.
///
/// Its weight rides with it: the map weighs an entry as it evicts it, and a weight read from
/// the object behind the entry's `Arc` was a read of memory no cache held (`perf record` on the
/// server's core, a miss in a full store: a third of the eviction scan's samples;
/// docs/PERFORMANCE.md).
#[derive(Debug, Clone)]
pub(crate) struct StoreKey {
    hash: u64,
    /// What [`Bytes`] weighs the entry filed under this key (made with it: [`StoreKey::new`]).
    weight: u64,
    bytes: KeyBytes,
}

impl StoreKey {
    /// The key of `entry`, weighed.
    fn new(hash: u64, bytes: KeyBytes, entry: &Entry) -> Self {
        // The slot's key, and its bytes when they did not fit in it.
        let key = std::mem::size_of::<StoreKey>() + if bytes.spilled() { bytes.len() } else { 0 };
        let weight = match entry {
            Entry::Object(o) => o.weight(key),
            Entry::Vary { value, .. } => (key + value.len() + 64) as u64,
        };
        StoreKey {
            hash,
            weight,
            bytes,
        }
    }
}

/// Keys are equal by their bytes (the hash is of them; the weight is the entry's).
impl PartialEq for StoreKey {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.bytes == other.bytes
    }
}

impl Eq for StoreKey {}

impl Hash for StoreKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// A key's bytes with their hash, to look up or file.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hashed<'a> {
    pub(crate) hash: u64,
    pub(crate) bytes: &'a [u8],
}

impl Hash for Hashed<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl Equivalent<StoreKey> for Hashed<'_> {
    fn equivalent(&self, key: &StoreKey) -> bool {
        self.hash == key.hash && self.bytes == &*key.bytes
    }
}

/// Weighs entries in bytes.
#[derive(Debug, Clone, Copy)]
struct Bytes;

impl Weighter<StoreKey, Entry> for Bytes {
    fn weight(&self, key: &StoreKey, _val: &Entry) -> u64 {
        key.weight
    }
}

/// Counts evictions for `/metrics`.
#[derive(Debug, Clone)]
struct Evictions(Arc<AtomicU64>);

impl Lifecycle<StoreKey, Entry> for Evictions {
    type RequestState = ();

    fn on_evict(&self, (): &mut (), _key: StoreKey, _val: Entry) {
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// The memory budget, bytes.
    pub size: u64,
    /// The largest response kept in memory; a larger one streams through unstored (or goes
    /// to the disk tier alone, when it takes it).
    pub max_object: u64,
    /// The disk tier, if any.
    pub disk: Option<DiskConfig>,
}

/// Shards of the map: enough that workers rarely meet on one lock (16 × the cores of most
/// machines this runs on would be wasted; 64 keeps each shard's budget large enough to hold
/// a few big objects at the default 256 MiB).
const SHARDS: usize = 64;

/// The process's cache.
pub struct CacheStore {
    /// The next `Vary` marker's id.
    next_marker: AtomicU64,
    map: Cache<StoreKey, Entry, Bytes, Prehashed, Evictions>,
    /// Hashes keys: foldhash, random-seeded per process (URLs are the client's to choose).
    keys: foldhash::quality::RandomState,
    /// The largest object stored in any tier (bytes of body).
    pub(crate) max_object: u64,
    /// The largest object memory holds, capped to what one shard can hold.
    memory_max: u64,
    pub(crate) disk: Option<DiskTier>,
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
    ///
    /// # Errors
    /// When the disk tier's folder cannot be made or written.
    pub fn new(cfg: &StoreConfig) -> std::io::Result<Self> {
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
            Prehashed,
            Evictions(Arc::clone(&counters.evictions)),
        );
        // An object larger than a shard's budget would be refused by the map anyway; half of
        // one leaves room for others beside it.
        let memory_max = cfg.max_object.min(map.shard_capacity() / 2);
        let disk = cfg.disk.as_ref().map(DiskTier::open).transpose()?;
        let max_object = memory_max.max(disk.as_ref().map_or(0, |d| d.max_object));
        // Marker ids start at the time of start, so that none repeats one stored on disk by
        // an earlier run (a variant's key holds its marker's id).
        let first_marker = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs() << 24);
        Ok(CacheStore {
            next_marker: AtomicU64::new(first_marker),
            map,
            keys: foldhash::quality::RandomState::default(),
            max_object,
            memory_max,
            disk,
            counters,
            flights: Arc::default(),
        })
    }

    /// Whether memory holds `entry` (the disk tier may take larger objects).
    fn fits_memory(&self, entry: &Entry) -> bool {
        match entry {
            Entry::Object(o) => o.body().len() as u64 <= self.memory_max,
            Entry::Vary { .. } => true,
        }
    }

    /// `key` with its hash, for the calls below.
    pub(crate) fn hashed<'a>(&self, key: &'a [u8]) -> Hashed<'a> {
        Hashed {
            hash: self.keys.hash_one(key),
            bytes: key,
        }
    }

    /// What is stored under `key`: in memory, else on disk (then kept in memory again).
    pub(crate) fn get(&self, key: Hashed<'_>) -> Option<Entry> {
        let found = self.map.get(&key);
        if found.is_some() {
            return found;
        }
        let entry = self.disk.as_ref()?.read(key.bytes)?;
        if self.fits_memory(&entry) {
            self.map.insert(
                StoreKey::new(key.hash, KeyBytes::from_slice(key.bytes), &entry),
                entry.clone(),
            );
        }
        Some(entry)
    }

    /// Stores `entry` under `key` (its bytes, and `hash` as [`CacheStore::hashed`] made it),
    /// replacing what was there, in memory when it fits and on disk when there is a disk tier.
    pub(crate) fn insert(&self, key: KeyBytes, hash: u64, entry: Entry) {
        if let Some(disk) = &self.disk {
            disk.write(&key, &entry);
        }
        if self.fits_memory(&entry) {
            self.map.insert(StoreKey::new(hash, key, &entry), entry);
        } else {
            self.map.remove(&Hashed { hash, bytes: &key });
        }
    }

    /// Removes what is stored under `key`; true if something was.
    pub(crate) fn remove(&self, key: &[u8]) -> bool {
        let on_disk = self.disk.as_ref().is_some_and(|d| d.remove(key));
        self.map.remove(&self.hashed(key)).is_some() || on_disk
    }

    /// Removes every entry for which `doomed(key, its cache-tags)` says so (purge by prefix
    /// or tag): a walk over the whole map, shard by shard, and over the disk tier's index.
    /// Returns how many keys went.
    pub(crate) fn remove_where(&self, doomed: impl Fn(&[u8], &[Box<[u8]>]) -> bool) -> u64 {
        fn tags(v: &Entry) -> &[Box<[u8]>] {
            match v {
                Entry::Object(o) => &o.tags,
                Entry::Vary { .. } => &[],
            }
        }
        let Some(disk) = &self.disk else {
            let before = self.map.len();
            self.map.retain(|k, v| !doomed(&k.bytes, tags(v)));
            return (before.saturating_sub(self.map.len())) as u64;
        };
        let gone = std::cell::RefCell::new(std::collections::HashSet::<Box<[u8]>>::new());
        self.map.retain(|k, v| {
            let doom = doomed(&k.bytes, tags(v));
            if doom {
                gone.borrow_mut().insert(Box::from(&k.bytes[..]));
            }
            !doom
        });
        let mut gone = gone.into_inner();
        gone.extend(disk.remove_where(&doomed).iter().map(|k| Box::from(&k[..])));
        gone.len() as u64
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
static SHARED: std::sync::Mutex<Option<(StoreConfig, Arc<CacheStore>)>> =
    std::sync::Mutex::new(None);

/// The process's store, if caching was ever turned on (for `/metrics`).
pub(crate) fn current() -> Option<Arc<CacheStore>> {
    SHARED
        .lock()
        .ok()
        .and_then(|s| s.as_ref().map(|(_, store)| Arc::clone(store)))
}

/// The process's store for this configuration: the one made before when its configuration
/// is the same (so a reload keeps what is cached), else a new one.
///
/// # Errors
/// When the disk tier's folder cannot be made or written.
pub fn shared(cfg: &StoreConfig) -> std::io::Result<Arc<CacheStore>> {
    let mut slot = SHARED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((made_for, store)) = &*slot {
        if made_for == cfg {
            return Ok(Arc::clone(store));
        }
    }
    // The old store (and its disk tier's threads) goes once no worker holds it.
    let store = Arc::new(CacheStore::new(cfg)?);
    *slot = Some((cfg.clone(), Arc::clone(&store)));
    Ok(store)
}

#[cfg(test)]
mod tests {
    use super::super::object::Object;
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

    fn insert(store: &CacheStore, key: &[u8], entry: Entry) {
        let hash = store.hashed(key).hash;
        store.insert(KeyBytes::from_slice(key), hash, entry);
    }

    #[test]
    fn a_key_slot_is_what_a_boxed_key_took() {
        assert_eq!(std::mem::size_of::<KeyBytes>(), 64);
        assert!(!KeyBytes::from_slice(&[b'k'; 56]).spilled());
        assert!(KeyBytes::from_slice(&[b'k'; 57]).spilled());
    }

    #[test]
    fn keys_are_found_by_their_bytes() {
        let store = CacheStore::new(&StoreConfig {
            size: 4 << 20,
            max_object: 1 << 20,
            disk: None,
        })
        .unwrap();
        insert(&store, b"http://h/a", object(10));
        assert!(store.get(store.hashed(b"http://h/a")).is_some());
        assert!(store.get(store.hashed(b"http://h/b")).is_none());
        // The same hash with other bytes is another key.
        let forged = Hashed {
            hash: store.hashed(b"http://h/a").hash,
            bytes: b"http://h/b",
        };
        assert!(store.get(forged).is_none());
    }

    #[test]
    fn keeps_within_budget_under_a_flood_of_keys() {
        let store = CacheStore::new(&StoreConfig {
            size: 4 << 20,
            max_object: 1 << 20,
            disk: None,
        })
        .unwrap();
        for i in 0..100_000u32 {
            insert(&store, format!("http://a/{i}").as_bytes(), object(1000));
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
        let store = CacheStore::new(&StoreConfig {
            size: 4 << 20,
            max_object: 1 << 20,
            disk: None,
        })
        .unwrap();
        let hot: Vec<Box<[u8]>> = (0..500)
            .map(|i| format!("http://a/hot/{i}").into_bytes().into())
            .collect();
        for k in &hot {
            insert(&store, k, object(1000));
        }
        // The hot set is used again and again while a scan of one-hit URLs goes by.
        for i in 0..20_000u32 {
            if i % 10 == 0 {
                for k in &hot {
                    let _ = store.get(store.hashed(k));
                }
            }
            insert(
                &store,
                format!("http://a/scan/{i}").as_bytes(),
                object(1000),
            );
        }
        let kept = hot
            .iter()
            .filter(|k| store.get(store.hashed(k)).is_some())
            .count();
        assert!(
            kept >= 450,
            "only {kept} of 500 hot objects survived the scan"
        );
    }

    #[test]
    fn max_object_fits_a_shard() {
        let store = CacheStore::new(&StoreConfig {
            size: 8 << 20,
            max_object: 1 << 30,
            disk: None,
        })
        .unwrap();
        assert!(store.max_object <= 4 << 20, "{}", store.max_object);
        let store = CacheStore::new(&StoreConfig {
            size: 1 << 30,
            max_object: 1 << 20,
            disk: None,
        })
        .unwrap();
        assert_eq!(store.max_object, 1 << 20);
    }

    #[test]
    fn remove_and_remove_where() {
        let store = CacheStore::new(&StoreConfig {
            size: 4 << 20,
            max_object: 1 << 20,
            disk: None,
        })
        .unwrap();
        for p in ["/a/1", "/a/2", "/b/1"] {
            insert(&store, format!("http://h{p}").as_bytes(), object(10));
        }
        assert!(store.remove(b"http://h/b/1"));
        assert!(!store.remove(b"http://h/b/1"));
        assert_eq!(store.remove_where(|k, _| k.starts_with(b"http://h/a/")), 2);
        assert_eq!(store.objects(), 0);
    }
}
