//! What a limit counts by: a key made of parts of the request (the client's address, a field,
//! a cookie, the Host, the path), hashed with a per-process random seed so that no one can aim
//! two keys at one counter. Rate limits and connection limits key the same way. The usual key,
//! the client's address alone, is two multiplications by random words, without a hasher.
//!
//! A rate-limit zone kept in Redis also names each key the same way on every instance
//! ([`fleet_id`]): a seed would differ from process to process, so that name is a hash without
//! one — SHA-256, which no one can aim either — and always 16 bytes, whatever the parts' size.

use std::hash::{BuildHasher, Hash, Hasher};
use std::net::IpAddr;

use lowlat_http::request::Request;

/// One part of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPart {
    /// The client's address (after trusted proxies).
    Addr,
    /// A request field, by name (lower case); absent counts as empty.
    Header(String),
    /// A cookie, by name.
    Cookie(String),
    /// The `Host` (lower case, as sent).
    Host,
    /// The path, without the query.
    Path,
}

impl std::fmt::Display for KeyPart {
    /// As `key=` writes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Addr => f.write_str("addr"),
            Self::Header(name) => write!(f, "header:{name}"),
            Self::Cookie(name) => write!(f, "cookie:{name}"),
            Self::Host => f.write_str("host"),
            Self::Path => f.write_str("path"),
        }
    }
}

/// A zone's seed: foldhash's random state, per process and per zone, and words drawn from it
/// for [`Seed::addr`].
pub(super) struct Seed {
    state: foldhash::quality::RandomState,
    words: [u64; 4],
}

impl Default for Seed {
    fn default() -> Seed {
        let state = foldhash::quality::RandomState::default();
        let words = std::array::from_fn(|i| state.hash_one(i as u64));
        Seed { state, words }
    }
}

/// The 128-bit product of `a` and `b`, its halves folded together: foldhash's (and wyhash's)
/// mixing step.
#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ (p >> 64) as u64
}

impl Seed {
    /// The key of a client address alone, as foldhash would make it of one or two words — the
    /// words taken with random ones and folded, then folded once more — without a hasher built
    /// and finished (96 instructions a request that way, by callgrind). An IPv4 address is
    /// folded with another random word than an IPv6 one's high half, so that neither family can
    /// aim at the other's keys.
    #[inline]
    fn addr(&self, client: IpAddr) -> u64 {
        let [k0, k1, k2, k3] = self.words;
        let folded = match client {
            IpAddr::V4(a) => fold(u64::from(a.to_bits()) ^ k0, k2),
            IpAddr::V6(a) => {
                let bits = a.to_bits();
                fold(bits as u64 ^ k0, (bits >> 64) as u64 ^ k1)
            }
        };
        // foldhash's finishing constant (the first digits of pi), odd.
        fold(folded ^ k3, 0x243f_6a88_85a3_08d3)
    }
}

/// The key of `req` from a client at `client`: every part, together, hashed with `seed`.
/// `path` is the request's path in its normal form (`crate::scope`), so that another spelling
/// of a path counts as the path.
#[inline]
pub(super) fn hash(
    parts: &[KeyPart],
    seed: &Seed,
    req: &Request<'_, '_>,
    path: &str,
    client: IpAddr,
) -> u64 {
    if let [KeyPart::Addr] = parts {
        return seed.addr(client);
    }
    hash_parts(parts, seed, req, path, client)
}

/// [`hash`] of any other key, with foldhash. Out of line, so that the address's key is all
/// its callers hold.
#[inline(never)]
fn hash_parts(
    parts: &[KeyPart],
    seed: &Seed,
    req: &Request<'_, '_>,
    path: &str,
    client: IpAddr,
) -> u64 {
    let mut h = seed.state.build_hasher();
    for part in parts {
        match part {
            // The address's bits in one write: `IpAddr`'s own `Hash` writes its variant and a
            // length-prefixed array, 107 instructions a request in all (callgrind).
            KeyPart::Addr => match client {
                IpAddr::V4(a) => h.write_u64(u64::from(a.to_bits()) | 1 << 32),
                IpAddr::V6(a) => h.write_u128(a.to_bits()),
            },
            KeyPart::Header(name) => req.header(name).unwrap_or_default().hash(&mut h),
            KeyPart::Cookie(name) => cookie(req, name).unwrap_or_default().hash(&mut h),
            KeyPart::Host => {
                for b in req.header("host").unwrap_or_default() {
                    h.write_u8(b.to_ascii_lowercase());
                }
            }
            KeyPart::Path => path.hash(&mut h),
        }
    }
    h.finish()
}

/// The key of `req` as every instance names it: SHA-256 of every part (each with its length,
/// so that parts cannot run into one another), its first 16 bytes. Costs a hash of a few
/// dozen bytes, paid once per key (when its bucket is made), not per request.
pub(super) fn fleet_id(
    parts: &[KeyPart],
    req: &Request<'_, '_>,
    path: &str,
    client: IpAddr,
) -> [u8; 16] {
    let mut h = ring::digest::Context::new(&ring::digest::SHA256);
    let mut part = |tag: u8, bytes: &[u8]| {
        h.update(&[tag]);
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    let mut host = Vec::new();
    for p in parts {
        match p {
            KeyPart::Addr => match client {
                IpAddr::V4(a) => part(b'4', &a.octets()),
                IpAddr::V6(a) => part(b'6', &a.octets()),
            },
            KeyPart::Header(name) => part(b'h', req.header(name).unwrap_or_default()),
            KeyPart::Cookie(name) => part(b'c', cookie(req, name).unwrap_or_default()),
            KeyPart::Host => {
                host.clear();
                host.extend(
                    req.header("host")
                        .unwrap_or_default()
                        .iter()
                        .map(u8::to_ascii_lowercase),
                );
                part(b'H', &host);
            }
            KeyPart::Path => part(b'p', path.as_bytes()),
        }
    }
    let digest = h.finish();
    let mut id = [0; 16];
    id.copy_from_slice(&digest.as_ref()[..16]);
    id
}

/// The value of cookie `name` in the request's `Cookie` fields.
fn cookie<'a>(req: &Request<'a, '_>, name: &str) -> Option<&'a [u8]> {
    req.headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("cookie"))
        .flat_map(|h| h.value.split(|&b| b == b';'))
        .find_map(|pair| {
            let pair = pair.trim_ascii_start();
            let (n, v) = pair.split_at(pair.iter().position(|&b| b == b'=')?);
            (n == name.as_bytes()).then(|| &v[1..])
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_keys_are_one_per_address_and_per_seed() {
        let (a, b) = (Seed::default(), Seed::default());
        let ips: Vec<IpAddr> = ["192.0.2.1", "192.0.2.2", "2001:db8::1", "::c000:201", "::1"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        for (i, x) in ips.iter().enumerate() {
            assert_eq!(a.addr(*x), a.addr(*x));
            assert_ne!(a.addr(*x), b.addr(*x), "another zone, another key");
            for y in &ips[i + 1..] {
                assert_ne!(a.addr(*x), a.addr(*y), "{x} and {y}");
            }
        }
    }
}
