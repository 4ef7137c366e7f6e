//! The fields that belong to one connection or one hop, named once: what HTTP/2 and HTTP/3
//! forbid (RFC 9113 §8.2.2, RFC 9114 §4.2) and what a proxy or a cache does not pass on (RFC
//! 9110 §7.6.1). Every layer that filters fields — the HTTP/2 and HTTP/3 head checks, the
//! translation of a handler's head for them, the proxy's forwarded request and relayed
//! response, the HTTP/2 upstream's request, the cache's stored fields — asks here.

/// HTTP/1.1's connection-specific fields, which HTTP/2 and HTTP/3 forbid in a message (lower
/// case).
pub const CONNECTION_SPECIFIC: [&[u8]; 5] = [
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"transfer-encoding",
    b"upgrade",
];

/// Whether `name` (lower case, as HTTP/2 and HTTP/3 send it) is connection-specific.
#[must_use]
#[inline]
pub fn is_connection_specific(name: &[u8]) -> bool {
    // The names all start with one of these letters: most fields skip the compares.
    matches!(name.first(), Some(b'c' | b'k' | b'p' | b't' | b'u'))
        && CONNECTION_SPECIFIC.contains(&name)
}

/// Whether `name` (any case) is a hop-by-hop field (RFC 9110 §7.6.1): the connection-specific
/// ones and `TE`, which a proxy neither forwards nor a cache stores, besides those
/// `Connection` names.
#[must_use]
#[inline]
pub fn is_hop_by_hop(name: &str) -> bool {
    // By length first: asked of every field of every relayed or stored head, and most names
    // have a length none of these has (one comparison instead of seven).
    let is = |n: &str| name.eq_ignore_ascii_case(n);
    match name.len() {
        2 => is("te"),
        7 => is("upgrade"),
        10 => is("connection") || is("keep-alive"),
        16 => is("proxy-connection"),
        17 => is("transfer-encoding"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lists_agree() {
        for name in CONNECTION_SPECIFIC {
            let text = std::str::from_utf8(name).unwrap();
            assert!(is_connection_specific(name), "{text}");
            assert!(is_hop_by_hop(text), "{text}");
            assert!(is_hop_by_hop(&text.to_ascii_uppercase()), "{text}");
        }
        assert!(is_hop_by_hop("TE"));
        for name in [
            "content-type",
            "host",
            "trailer",
            "tk",
            "upgrade-insecure-requests",
        ] {
            assert!(!is_hop_by_hop(name), "{name}");
            assert!(!is_connection_specific(name.as_bytes()), "{name}");
        }
    }
}
