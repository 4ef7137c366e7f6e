//! A bounded per-worker cache keyed by normalised request path, evicting by size with the CLOCK
//! algorithm (a second-chance approximation of LRU: O(1) per hit — one flag set — and amortised
//! O(1) per eviction, where an exact LRU list would touch two links on every hit).
//!
//! Each worker owns one; nothing is shared, nothing is locked. The cache knows nothing about
//! files: the caller says what an entry costs (bytes held) and whether it holds a descriptor,
//! and the cache keeps both totals under their limits.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// FNV-1a: keys are short paths (`/100.html`), for which it is several times faster than the
/// default SipHash; the keys are normalised paths an attacker could pick, but a flood of
/// colliding paths costs only lookups in a map bounded by the cache size.
#[derive(Default)]
pub struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

struct Slot<V> {
    key: Box<[u8]>,
    value: V,
    cost: usize,
    holds_fd: bool,
    /// Set on every hit, cleared as the clock hand passes: an entry survives one sweep per use.
    referenced: bool,
}

/// A size-bounded map from key to `V`.
pub struct Cache<V> {
    map: HashMap<Box<[u8]>, usize, BuildHasherDefault<Fnv>>,
    slots: Vec<Option<Slot<V>>>,
    free: Vec<usize>,
    hand: usize,
    used_bytes: usize,
    budget_bytes: usize,
    open_fds: usize,
    max_fds: usize,
}

impl<V> Cache<V> {
    /// A cache holding at most `budget_bytes` (as costed by the caller) and `max_fds` entries
    /// that keep a file descriptor open.
    #[must_use]
    pub fn new(budget_bytes: usize, max_fds: usize) -> Self {
        Self {
            map: HashMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            hand: 0,
            used_bytes: 0,
            budget_bytes,
            open_fds: 0,
            max_fds,
        }
    }

    /// The entry for `key`, marked as recently used.
    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut V> {
        let &index = self.map.get(key)?;
        let slot = self.slots.get_mut(index)?.as_mut()?;
        slot.referenced = true;
        Some(&mut slot.value)
    }

    /// Inserts (or replaces) `key`, evicting others until it fits. Returns false, inserting
    /// nothing, when it can never fit.
    pub fn insert(&mut self, key: &[u8], value: V, cost: usize, holds_fd: bool) -> bool {
        self.remove(key);
        if cost > self.budget_bytes || (holds_fd && self.max_fds == 0) {
            return false;
        }
        while self.used_bytes + cost > self.budget_bytes
            || (holds_fd && self.open_fds >= self.max_fds)
        {
            if !self.evict_one() {
                return false;
            }
        }
        let slot = Slot {
            key: key.into(),
            value,
            cost,
            holds_fd,
            referenced: false,
        };
        let index = if let Some(index) = self.free.pop() {
            self.slots[index] = Some(slot);
            index
        } else {
            self.slots.push(Some(slot));
            self.slots.len() - 1
        };
        self.map.insert(key.into(), index);
        self.used_bytes += cost;
        self.open_fds += usize::from(holds_fd);
        true
    }

    /// Drops `key`'s entry, if any.
    pub fn remove(&mut self, key: &[u8]) {
        if let Some(index) = self.map.remove(key) {
            self.release(index);
        }
    }

    /// Drops every entry that holds a file descriptor; returns how many were dropped.
    pub fn close_fds(&mut self) -> usize {
        let held: Vec<usize> = (0..self.slots.len())
            .filter(|&i| self.slots[i].as_ref().is_some_and(|s| s.holds_fd))
            .collect();
        for &index in &held {
            if let Some(slot) = &self.slots[index] {
                let key = slot.key.clone();
                self.map.remove(&key);
            }
            self.release(index);
        }
        held.len()
    }

    /// Bytes held, as costed by the caller.
    #[must_use]
    pub fn used_bytes(&self) -> usize {
        self.used_bytes
    }

    /// Number of entries.
    #[must_use]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the cache holds nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    fn release(&mut self, index: usize) {
        if let Some(slot) = self.slots.get_mut(index).and_then(Option::take) {
            self.used_bytes -= slot.cost;
            self.open_fds -= usize::from(slot.holds_fd);
            self.free.push(index);
        }
    }

    /// Advances the clock hand to the first entry not used since its last pass and evicts it.
    /// Two full turns always find one (the first clears every flag).
    fn evict_one(&mut self) -> bool {
        if self.map.is_empty() {
            return false;
        }
        for _ in 0..2 * self.slots.len() {
            if self.hand >= self.slots.len() {
                self.hand = 0;
            }
            let index = self.hand;
            self.hand += 1;
            let Some(slot) = self.slots[index].as_mut() else {
                continue;
            };
            if slot.referenced {
                slot.referenced = false;
                continue;
            }
            let key = std::mem::take(&mut slot.key);
            self.map.remove(&key);
            self.release(index);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_by_size_sparing_recently_used() {
        let mut c = Cache::new(100, 10);
        assert!(c.insert(b"a", 1, 40, false));
        assert!(c.insert(b"b", 2, 40, false));
        assert!(c.get_mut(b"a").is_some());
        // Needs 40 more: `b` was not used since insertion, `a` was: `b` goes.
        assert!(c.insert(b"c", 3, 40, false));
        assert_eq!(c.get_mut(b"b"), None);
        assert_eq!(c.get_mut(b"a"), Some(&mut 1));
        assert_eq!(c.get_mut(b"c"), Some(&mut 3));
        assert_eq!(c.used_bytes(), 80);
        // Too big ever to fit.
        assert!(!c.insert(b"d", 4, 101, false));
        // Fits only by evicting everything.
        assert!(c.insert(b"e", 5, 100, false));
        assert_eq!(c.len(), 1);
        assert_eq!(c.used_bytes(), 100);
    }

    #[test]
    fn replaces_and_removes() {
        let mut c = Cache::new(100, 10);
        assert!(c.insert(b"a", 1, 30, false));
        assert!(c.insert(b"a", 2, 50, false));
        assert_eq!(c.len(), 1);
        assert_eq!(c.used_bytes(), 50);
        c.remove(b"a");
        assert!(c.is_empty());
        assert_eq!(c.used_bytes(), 0);
    }

    #[test]
    fn bounds_descriptors() {
        let mut c = Cache::new(1000, 2);
        assert!(c.insert(b"a", 1, 10, true));
        assert!(c.insert(b"b", 2, 10, true));
        assert!(c.insert(b"m", 0, 10, false));
        assert!(c.insert(b"c", 3, 10, true));
        assert_eq!(c.len(), 3);
        assert_eq!(c.get_mut(b"c"), Some(&mut 3));
        assert!(!Cache::new(1000, 0).insert(b"x", 1, 1, true));
    }

    #[test]
    fn churn_stays_bounded() {
        let mut c = Cache::new(1000, 0);
        for i in 0u32..10_000 {
            c.insert(&i.to_le_bytes(), i, 1 + (i as usize % 97), false);
            assert!(c.used_bytes() <= 1000);
        }
    }
}
