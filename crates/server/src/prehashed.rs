//! A table's hasher for keys that carry their hash already ([`Prehashed`]): the hash is handed
//! on as it is rather than hashed a second time. The cache's store files a key by its bytes and
//! the hash made of them once a request (`cache::store`), the rate-limit zones by the key's
//! seeded hash itself (`guard::ratelimit`); both hashes are random-seeded per process, so the
//! tables keep their defence against keys chosen to collide.

use std::hash::{BuildHasher, Hasher};

/// Builds [`PrehashedHasher`]s.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Prehashed;

impl BuildHasher for Prehashed {
    type Hasher = PrehashedHasher;
    fn build_hasher(&self) -> PrehashedHasher {
        PrehashedHasher(0)
    }
}

/// The hasher: the `u64` a key writes is its hash.
#[derive(Debug)]
pub(crate) struct PrehashedHasher(u64);

impl Hasher for PrehashedHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }
    /// Not a `u64`: never so in these tables, but folded in rather than lost.
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_u64_is_its_own_hash_and_bytes_are_folded_in() {
        assert_eq!(Prehashed.hash_one(0xdead_beef_u64), 0xdead_beef);
        let (a, b) = (Prehashed.hash_one([1u8, 2]), Prehashed.hash_one([2u8, 1]));
        assert_ne!(a, b);
    }
}
