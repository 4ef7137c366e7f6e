//! A worker's own index of one rate-limit zone's buckets, in front of the zone's shared table:
//! a key this worker met lately finds its bucket here by one comparison, without the shared
//! table's lock, its hash, and the bucket's reference count taken and given back (the shared
//! look-up was 205 of the 740 instructions a zone and an allow list added to `/plaintext`, by
//! callgrind; its atomic operations cost more in time than their count says).
//!
//! It finds, it does not count: the bucket found is the zone's own, so every worker still counts
//! a key against one bucket (nginx's `limit_req` zone, shared by every worker). Two rules keep
//! it from drifting away from the shared table:
//! - a bucket the table evicted is marked so (`Bucket::evicted`, by the table's eviction hook),
//!   and an entry whose bucket is marked is looked up again: a worker never goes on counting on
//!   a bucket the zone dropped while the others count on its successor;
//! - an entry goes back to the shared table at least every [`TOUCH_MS`]: that look-up is what
//!   tells the table the key is in use (it evicts keys seen once before keys seen often), so a
//!   key found here keeps its standing there.
//!
//! Not a cache of decisions: every request still goes through the bucket's compare-and-swap.

use std::sync::Arc;

use super::bucket::Bucket;

/// Entries kept, direct-mapped by the key's low bits: two keys that meet on one entry take
/// turns, each look-up that misses is the shared table's, as without this index.
const ENTRIES: usize = 64;

/// Longest an entry is used without a look-up in the shared table, in milliseconds. At this
/// pace a key busy on a worker is seen by the table 20 times a second at least, which keeps it
/// among the keys seen often unless a flood turns the whole table over faster than that (two
/// million new keys a second for the default 100k keys).
pub(super) const TOUCH_MS: u64 = 50;

/// One zone's index, on one worker.
pub(crate) struct LocalBuckets {
    entries: Box<[Entry; ENTRIES]>,
}

struct Entry {
    /// The zone's key (a seeded hash, `super::key::hash`).
    key: u64,
    /// When the shared table last gave this bucket, in `crate::clock::millis`.
    found_ms: u64,
    /// The zone's bucket for `key`; before the entry is first filled, a bucket marked evicted
    /// that no zone holds, so that an empty entry needs no test of its own.
    bucket: Arc<Bucket>,
}

impl LocalBuckets {
    pub(crate) fn new() -> LocalBuckets {
        let none = Arc::new(Bucket::new([0; 16]));
        none.mark_evicted();
        LocalBuckets {
            entries: Box::new(std::array::from_fn(|_| Entry {
                key: 0,
                found_ms: 0,
                bucket: Arc::clone(&none),
            })),
        }
    }

    /// The bucket of `key` at `now_ms`: this worker's entry while it is fresh and its bucket
    /// still the zone's, else `shared()` (the zone's look-up), kept for the next request.
    #[inline]
    pub(super) fn find(
        &mut self,
        key: u64,
        now_ms: u64,
        shared: impl FnOnce() -> Arc<Bucket>,
    ) -> &Arc<Bucket> {
        let entry = &mut self.entries[key as usize % ENTRIES];
        if entry.key != key
            || now_ms.wrapping_sub(entry.found_ms) >= TOUCH_MS
            || entry.bucket.evicted()
        {
            *entry = Entry {
                key,
                found_ms: now_ms,
                bucket: shared(),
            };
        }
        &entry.bucket
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A look-up that counts how often the shared table was asked.
    fn table<'a>(
        asked: &'a std::cell::Cell<u32>,
        bucket: &Arc<Bucket>,
    ) -> impl FnOnce() -> Arc<Bucket> + 'a {
        let bucket = Arc::clone(bucket);
        move || {
            asked.set(asked.get() + 1);
            bucket
        }
    }

    #[test]
    fn a_fresh_entry_spares_the_shared_table() {
        let (asked, b) = (std::cell::Cell::new(0), Arc::new(Bucket::new([0; 16])));
        let mut local = LocalBuckets::new();
        // An empty entry, even for key 0 at time 0, asks the table.
        assert!(Arc::ptr_eq(local.find(0, 0, table(&asked, &b)), &b));
        assert_eq!(asked.get(), 1);
        for ms in 0..TOUCH_MS {
            assert!(Arc::ptr_eq(local.find(0, ms, table(&asked, &b)), &b));
        }
        assert_eq!(asked.get(), 1, "within TOUCH_MS the entry answers");
        // TOUCH_MS later the table is asked again (and so sees the key in use).
        local.find(0, TOUCH_MS, table(&asked, &b));
        assert_eq!(asked.get(), 2);
        // Another key on the same entry takes it; the first is asked for again after it.
        let other = ENTRIES as u64;
        local.find(other, TOUCH_MS, table(&asked, &b));
        local.find(0, TOUCH_MS, table(&asked, &b));
        assert_eq!(asked.get(), 4);
    }

    #[test]
    fn an_evicted_bucket_is_looked_up_again() {
        let asked = std::cell::Cell::new(0);
        let (old, new) = (
            Arc::new(Bucket::new([0; 16])),
            Arc::new(Bucket::new([0; 16])),
        );
        let mut local = LocalBuckets::new();
        local.find(7, 1000, table(&asked, &old));
        old.mark_evicted();
        assert!(Arc::ptr_eq(local.find(7, 1001, table(&asked, &new)), &new));
        assert_eq!(asked.get(), 2);
    }
}
