//! Prefixed integers (RFC 7541 §5.1): an integer that starts in the low `n` bits of a byte whose
//! high bits belong to the representation around it, and goes on in 7-bit continuation bytes,
//! least significant first. HPACK uses it with 4- to 7-bit prefixes; QPACK (RFC 9204 §4.1.1)
//! with the same representation and prefixes of 3 to 8 bits, for values up to 2^62 − 1. Both
//! codecs write and read their integers here; each names its own ceiling and its own error.

/// How a codec says why an integer could not be read, in its own error type: [`read_int`] is
/// generic over it, so each codec gets its own copy returning its error directly (mapping one
/// shared error type at each call cost QPACK's decoding ~100 instructions per response).
pub(crate) trait IntError {
    /// The input ends inside it; it is at least `need` bytes long.
    fn partial(need: usize) -> Self;
    /// Above the caller's ceiling, or continuation bytes carrying more than 62 bits.
    fn overflow() -> Self;
}

/// Appends `v` with an `n`-bit prefix (1 ≤ n ≤ 8), the first byte's high bits `flags`.
pub fn put_int(mut v: u64, n: u8, flags: u8, out: &mut Vec<u8>) {
    let max = (1u64 << n) - 1;
    if v < max {
        out.push(flags | v as u8);
        return;
    }
    out.push(flags | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// Reads an integer with an `n`-bit prefix starting at `input[*at]`, of at most `ceiling`, and
/// moves `at` past it. On [`IntError::partial`], `at` is left at the missing byte.
pub(crate) fn read_int<E: IntError>(
    input: &[u8],
    at: &mut usize,
    n: u8,
    ceiling: u64,
) -> Result<u64, E> {
    let byte = |at: usize| input.get(at).copied().ok_or_else(|| E::partial(at + 1));
    let max = (1u64 << n) - 1;
    let first = u64::from(byte(*at)?) & max;
    *at += 1;
    if first < max {
        return Ok(first);
    }
    let mut value = max;
    let mut shift = 0u32;
    loop {
        let b = byte(*at)?;
        *at += 1;
        // Ten continuation bytes carry 70 bits: past 62, an overflow, padded or not.
        if shift > 62 {
            return Err(E::overflow());
        }
        value = value
            .checked_add(u64::from(b & 0x7f) << shift)
            .filter(|&v| v <= ceiling)
            .ok_or_else(E::overflow)?;
        if b & 0x80 == 0 {
            return Ok(value);
        }
        shift += 7;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // QPACK's error tells the two outcomes apart (HPACK's does not).
    use crate::h3::qpack::wire::Short as Why;

    fn read(input: &[u8], at: &mut usize, n: u8, ceiling: u64) -> Result<u64, Why> {
        read_int(input, at, n, ceiling)
    }

    /// RFC 7541 C.1 (10 and 1337 with 5-bit prefixes, 42 with 8), prefixes from 1 to 8 bits
    /// around each boundary, and the flags kept: written, read back, and every cut short of the
    /// end asks for the next byte.
    #[test]
    fn round_trips() {
        for (v, n, bytes) in [
            (10u64, 5u8, &[0x0a][..]),
            (1337, 5, &[0x1f, 0x9a, 0x0a]),
            (42, 8, &[0x2a]),
        ] {
            let mut out = Vec::new();
            put_int(v, n, 0, &mut out);
            assert_eq!(out, bytes);
            for cut in 0..bytes.len() {
                let mut at = 0;
                assert_eq!(
                    read(&bytes[..cut], &mut at, n, u64::MAX),
                    Err(Why::Partial { need: cut + 1 })
                );
                assert_eq!(at, cut);
            }
        }
        for n in 1..=8u8 {
            let flags = 0xffu8.checked_shl(u32::from(n)).unwrap_or(0);
            let max = (1u64 << n) - 1;
            for v in [
                0,
                max - 1,
                max,
                max + 1,
                max + 127,
                max + 128,
                1 << 28,
                (1 << 62) - 1,
            ] {
                let mut out = vec![0xaa];
                put_int(v, n, flags, &mut out);
                assert_eq!(out[1] & flags, flags, "{v} with {n} bits");
                let mut at = 1;
                assert_eq!(read(&out, &mut at, n, u64::MAX), Ok(v), "{v} with {n} bits");
                assert_eq!(at, out.len());
            }
        }
    }

    /// The ceiling is each codec's (HPACK's 2^28 here), and continuation bytes past 62 bits are
    /// an overflow even when they add nothing.
    #[test]
    fn overflow() {
        let ceiling = 1 << 28;
        for (v, want) in [(ceiling, Ok(ceiling)), (ceiling + 1, Err(Why::Overflow))] {
            let mut out = Vec::new();
            put_int(v, 7, 0, &mut out);
            assert_eq!(read(&out, &mut 0, 7, ceiling), want);
        }
        let mut padded = vec![0xff];
        padded.extend([0x80; 20]);
        padded.push(0);
        assert_eq!(read(&padded, &mut 0, 8, u64::MAX), Err(Why::Overflow));
    }
}
