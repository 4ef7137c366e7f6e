//! The responders: one per word, each with a call counter shared by every worker, and the
//! ordered prefix lookup that routes a request to one of them.
//!
//! Words are kept sorted by bytes in one compact array, so "the first word starting with
//! `prefix`" is a binary search: O(log n) comparisons, no allocation. Counters live in a separate
//! array, one cache line each, so two workers counting different words never contend for a line.

use std::sync::atomic::{AtomicU64, Ordering};

/// A call counter alone on its cache line (64 bytes on x86-64 and most ARM cores).
#[derive(Debug, Default)]
#[repr(align(64))]
struct Counter(AtomicU64);

/// Every responder, by word order.
#[derive(Debug)]
pub struct Responders {
    /// Sorted by bytes, unique: the order the prefix search relies on.
    words: Box<[Box<str>]>,
    /// `counters[i]` counts the calls of `words[i]`.
    counters: Box<[Counter]>,
}

impl Responders {
    /// Responders for `words`, which are sorted and deduplicated here.
    #[must_use]
    pub fn new(mut words: Vec<String>) -> Self {
        words.sort_unstable();
        words.dedup();
        let counters = words.iter().map(|_| Counter::default()).collect();
        Self {
            words: words.into_iter().map(String::into_boxed_str).collect(),
            counters,
        }
    }

    /// How many responders there are.
    #[must_use]
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// The word of responder `index`.
    #[must_use]
    pub fn word(&self, index: usize) -> &str {
        self.words.get(index).map_or("", |w| w)
    }

    /// The responder of the first word (in byte order) that starts with `prefix`; the empty
    /// prefix names the first word.
    #[must_use]
    pub fn first_with_prefix(&self, prefix: &[u8]) -> Option<usize> {
        let index = self.words.partition_point(|w| w.as_bytes() < prefix);
        self.words
            .get(index)
            .is_some_and(|w| w.as_bytes().starts_with(prefix))
            .then_some(index)
    }

    /// Counts one call of responder `index` and returns the count after it.
    ///
    /// `fetch_add` is one atomic read-modify-write: no increment is lost, and each call gets a
    /// distinct count. `Relaxed` suffices: every read-modify-write of one atomic reads the latest
    /// value in its single modification order, so a request sent after another's answer arrived
    /// always sees a larger count; nothing else is published through the counter.
    pub fn call(&self, index: usize) -> u64 {
        self.counters
            .get(index)
            .map_or(0, |c| c.0.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Every word with its current count, in word order.
    pub fn counts(&self) -> impl ExactSizeIterator<Item = (&str, u64)> + '_ {
        self.words
            .iter()
            .zip(self.counters.iter())
            .map(|(w, c)| (&**w, c.0.load(Ordering::Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn responders(words: &[&str]) -> Responders {
        Responders::new(words.iter().map(|&w| w.to_owned()).collect())
    }

    #[test]
    fn prefix_lookup() {
        let r = responders(&[
            "banana", "apple", "apricot", "Zebra", "bandana", "café", "apple",
        ]);
        assert_eq!(r.len(), 6, "duplicates removed");
        let cases: &[(&str, Option<&str>)] = &[
            ("", Some("Zebra")), // byte order: capitals first
            ("a", Some("apple")),
            ("ap", Some("apple")),
            ("apr", Some("apricot")),
            ("apple", Some("apple")),
            ("apples", None),
            ("ban", Some("banana")),
            ("band", Some("bandana")),
            ("caf", Some("café")),
            ("café", Some("café")),
            ("z", None),
            ("zebra", None),
            ("Z", Some("Zebra")),
            ("0", None),
            ("\u{ff}", None),
        ];
        for &(prefix, want) in cases {
            let got = r.first_with_prefix(prefix.as_bytes()).map(|i| r.word(i));
            assert_eq!(got, want, "{prefix:?}");
        }
        assert_eq!(responders(&[]).first_with_prefix(b""), None);
    }

    #[test]
    fn counters_count_exactly_across_threads() {
        let r = responders(&["a", "b"]);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    let mut last = 0;
                    for _ in 0..10_000 {
                        let now = r.call(1);
                        assert!(now > last, "counts only go up");
                        last = now;
                    }
                });
            }
        });
        let counts: Vec<(&str, u64)> = r.counts().collect();
        assert_eq!(counts, [("a", 0), ("b", 40_000)]);
        assert_eq!(r.call(9), 0, "an unknown index counts nothing");
    }

    #[test]
    fn counters_have_their_own_cache_lines() {
        assert_eq!(std::mem::size_of::<Counter>(), 64);
    }
}
