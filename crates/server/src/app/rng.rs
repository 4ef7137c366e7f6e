//! The app's random numbers: SplitMix64, small enough to own and stable across releases, so
//! `--seed` picks the same words in every version of lowlat (a library's `StdRng` makes no such
//! promise). Each worker owns one generator; nothing here is shared or locked.
//!
//! Not for anything secret: the app uses it to pick words and to route requests at random.

/// A SplitMix64 generator (Steele, Lea and Flood, "Fast splittable pseudorandom number
/// generators", 2014): one add, two multiplies and three shifts per number, and every seed is a
/// good one, including 0.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator starting from `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0), by Lemire's multiply-shift: no division, and a bias
    /// below n / 2^64, which for a thousand words is about 5e-17.
    pub fn below(&mut self, n: usize) -> usize {
        let n = n as u64;
        let wide = u128::from(self.next_u64()) * u128::from(n);
        // The high half is < n, which came from a usize, so it fits.
        usize::try_from(wide >> 64).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference outputs of SplitMix64 for seed 1234567, from the authors' C code.
    #[test]
    fn matches_reference_sequence() {
        let mut rng = SplitMix64::new(1_234_567);
        let expected = [
            6_457_827_717_110_365_317,
            3_203_168_211_198_807_973,
            9_817_491_932_198_370_423,
            4_593_380_528_125_082_431,
            16_408_922_859_458_223_821,
        ];
        for want in expected {
            assert_eq!(rng.next_u64(), want);
        }
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut rng = SplitMix64::new(7);
        let mut seen = [false; 10];
        for _ in 0..1000 {
            let i = rng.below(10);
            assert!(i < 10);
            seen[i] = true;
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(rng.below(0), 0);
        assert_eq!(rng.below(1), 0);
    }
}
