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
        let ok = |ip: &str| allowed(&rules, ip.parse().unwrap(), b"/");
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
        let ok = |ip: &str, path: &[u8]| allowed(&rules, ip.parse().unwrap(), path);
        assert!(ok("203.0.113.9", b"/"));
        assert!(ok("203.0.113.9", b"/administrator"));
        assert!(!ok("203.0.113.9", b"/admin/users"));
        assert!(ok("10.1.2.3", b"/admin/users"));
        assert!(allowed(&[], "203.0.113.9".parse().unwrap(), b"/"));
    }
}
