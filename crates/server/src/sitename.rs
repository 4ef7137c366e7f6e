//! Whether a site answers to a host name: the one rule by which the router picks a site by a
//! request's `Host` and the TLS layer picks a site's handshake by the ClientHello's SNI
//! (`crate::tls`), so that both always pick the same site for a name. A leaf.

/// Whether `name` (without port or trailing dot) is one of `names` (lower case, as a site's
/// `server_names`): equal without case, or under a `*.example.com` by one label.
#[must_use]
pub fn matches(names: &[String], name: &str) -> bool {
    let parent = name.split_once('.').map(|(_, p)| p);
    names.iter().any(|n| {
        n.eq_ignore_ascii_case(name)
            || n.strip_prefix("*.")
                .is_some_and(|w| parent.is_some_and(|p| p.eq_ignore_ascii_case(w)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let names = ["a.test".to_owned(), "*.wild.test".to_owned()];
        for (name, want) in [
            ("a.test", true),
            ("A.Test", true),
            ("b.test", false),
            ("x.wild.test", true),
            ("y.x.wild.test", false),
            ("wild.test", false),
            ("", false),
        ] {
            assert_eq!(matches(&names, name), want, "{name}");
        }
    }
}
