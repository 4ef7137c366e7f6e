//! Access rules (nginx's `allow` and `deny`): networks allowed or refused, per site and per
//! path prefix, in order — the first rule whose prefix and network match decides; a request no
//! rule matches is allowed.

use std::net::IpAddr;

use crate::proxy::config::Cidr;

/// One rule: under `prefix` (`""`: every path), `allow` or deny the clients in `net` (`None`:
/// every client, nginx's `all`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessRule {
    pub prefix: String,
    pub allow: bool,
    pub net: Option<Cidr>,
}

impl AccessRule {
    fn matches(&self, ip: IpAddr, path: &[u8]) -> bool {
        path.starts_with(self.prefix.as_bytes()) && self.net.as_ref().is_none_or(|n| n.contains(ip))
    }
}

/// Whether `rules` let the client at `ip` ask for `path`.
#[must_use]
pub fn allowed(rules: &[AccessRule], ip: IpAddr, path: &[u8]) -> bool {
    rules
        .iter()
        .find(|r| r.matches(ip, path))
        .is_none_or(|r| r.allow)
}

/// The rules as a guard asks them per request, the same answers as [`allowed`]: each network
/// as a family, a mask and the masked address, so that a rule is an AND and two comparisons
/// on the client's address as 128 bits, and a rule for every path tests no prefix.
/// (`Cidr::contains` maps the address and builds the mask anew for each rule: [`allowed`] was
/// 85 instructions a request for `--allow 127.0.0.0/8 --deny all`, by callgrind.)
#[derive(Debug)]
pub(crate) struct AccessList {
    rules: Box<[Compiled]>,
}

#[derive(Debug)]
struct Compiled {
    /// `None`: every path.
    prefix: Option<Box<[u8]>>,
    allow: bool,
    /// The address families it applies to: [`V4`], [`V6`] or both (`all`).
    family: u8,
    mask: u128,
    /// The network's address, masked.
    net: u128,
}

const V4: u8 = 1;
const V6: u8 = 2;

/// `ip`'s family and bits, an IPv4-mapped IPv6 address as its IPv4 one (as `Cidr::contains`).
#[inline]
fn bits(ip: IpAddr) -> (u8, u128) {
    match ip.to_canonical() {
        IpAddr::V4(a) => (V4, u128::from(a.to_bits())),
        IpAddr::V6(a) => (V6, a.to_bits()),
    }
}

impl AccessList {
    #[must_use]
    pub(crate) fn new(rules: &[AccessRule]) -> AccessList {
        let compile = |r: &AccessRule| {
            let (family, mask, net) = match r.net {
                None => (V4 | V6, 0, 0),
                // The network's own address as written: an IPv6 one (even IPv4-mapped) never
                // holds an IPv4 client, as `Cidr::contains` has it.
                Some(Cidr {
                    addr: IpAddr::V4(a),
                    bits,
                }) => {
                    let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
                    (V4, u128::from(mask), u128::from(a.to_bits() & mask))
                }
                Some(Cidr {
                    addr: IpAddr::V6(a),
                    bits,
                }) => {
                    let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
                    (V6, mask, a.to_bits() & mask)
                }
            };
            Compiled {
                prefix: (!r.prefix.is_empty()).then(|| r.prefix.as_bytes().into()),
                allow: r.allow,
                family,
                mask,
                net,
            }
        };
        AccessList {
            rules: rules.iter().map(compile).collect(),
        }
    }

    /// Whether the rules let the client at `ip` ask for `path`: the first rule whose prefix and
    /// network match decides; none matching allows.
    #[inline]
    pub(crate) fn allows(&self, ip: IpAddr, path: &[u8]) -> bool {
        if self.rules.is_empty() {
            return true;
        }
        let (family, bits) = bits(ip);
        self.rules
            .iter()
            .find(|r| {
                r.family & family != 0
                    && bits & r.mask == r.net
                    && r.prefix.as_deref().is_none_or(|p| path.starts_with(p))
            })
            .is_none_or(|r| r.allow)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(prefix: &str, allow: bool, net: Option<&str>) -> AccessRule {
        AccessRule {
            prefix: prefix.to_owned(),
            allow,
            net: net.map(|n| {
                let (a, b) = n.split_once('/').unwrap();
                Cidr {
                    addr: a.parse().unwrap(),
                    bits: b.parse().unwrap(),
                }
            }),
        }
    }

    #[test]
    fn first_match_wins_as_nginx() {
        // deny 192.168.1.1; allow 192.168.1.0/24; allow 2001:db8::/32; deny all;
        let rules = [
            rule("", false, Some("192.168.1.1/32")),
            rule("", true, Some("192.168.1.0/24")),
            rule("", true, Some("2001:db8::/32")),
            rule("", false, None),
        ];
        let list = AccessList::new(&rules);
        let ok = |ip: &str| {
            let ip = ip.parse().unwrap();
            let answer = allowed(&rules, ip, b"/");
            assert_eq!(list.allows(ip, b"/"), answer, "{ip}");
            answer
        };
        assert!(!ok("192.168.1.1"));
        assert!(ok("192.168.1.2"));
        assert!(
            ok("::ffff:192.168.1.2"),
            "an IPv4-mapped address is its IPv4 one"
        );
        assert!(!ok("::ffff:192.168.1.1"));
        assert!(ok("2001:db8::1"));
        assert!(!ok("2001:db9::1"));
        assert!(!ok("10.0.0.1"));
    }

    #[test]
    fn prefixes_scope_rules_and_no_match_allows() {
        let rules = [
            rule("/admin/", true, Some("10.0.0.0/8")),
            rule("/admin/", false, None),
        ];
        let list = AccessList::new(&rules);
        let ok = |ip: &str, path: &[u8]| {
            let ip = ip.parse().unwrap();
            let answer = allowed(&rules, ip, path);
            assert_eq!(list.allows(ip, path), answer, "{ip}");
            answer
        };
        assert!(ok("203.0.113.9", b"/"));
        assert!(ok("203.0.113.9", b"/administrator"));
        assert!(!ok("203.0.113.9", b"/admin/users"));
        assert!(ok("10.1.2.3", b"/admin/users"));
        assert!(allowed(&[], "203.0.113.9".parse().unwrap(), b"/"));
        assert!(AccessList::new(&[]).allows("203.0.113.9".parse().unwrap(), b"/"));
    }

    #[test]
    fn the_compiled_list_answers_as_the_rules() {
        // Every family against every kind of network, with and without a prefix, and the
        // edges of each mask: /0, /32 and /128, a mapped network (which holds no IPv4 client).
        let nets = [
            None,
            Some("0.0.0.0/0"),
            Some("10.0.0.0/8"),
            Some("10.1.2.3/32"),
            Some("::/0"),
            Some("2001:db8::/32"),
            Some("::1/128"),
            Some("::ffff:10.0.0.0/104"),
        ];
        let ips = [
            "10.1.2.3",
            "10.9.9.9",
            "11.0.0.1",
            "::ffff:10.1.2.3",
            "2001:db8::5",
            "2001:db9::5",
            "::1",
            "::a01:203",
        ];
        for net in nets {
            for prefix in ["", "/admin/"] {
                for allow in [true, false] {
                    // The rule first, then its opposite for everyone: what the rule decides
                    // and what it leaves both show.
                    let rules = [rule(prefix, allow, net), rule("", !allow, None)];
                    let list = AccessList::new(&rules);
                    for ip in ips {
                        for path in [&b"/"[..], b"/admin/x"] {
                            let ip: IpAddr = ip.parse().unwrap();
                            assert_eq!(
                                list.allows(ip, path),
                                allowed(&rules, ip, path),
                                "{net:?} {prefix} {allow} {ip}"
                            );
                        }
                    }
                }
            }
        }
    }
}
