//! `PURGE`: removing stored responses on request, as varnish and CDNs take it, from the
//! networks `--cache-purge-from` trusts (loopback by default) and no one else (403).
//!
//! - `PURGE /path?query` removes that URL (all its variants: the `Vary` marker goes, so they
//!   can no longer be found, and are evicted in time).
//! - `PURGE /prefix/*` removes every URL of the host under `/prefix/`.
//! - `PURGE /` with `Cache-Tag: a, b` (or `Surrogate-Key: a b`) removes every response stored
//!   with one of those tags.
//!
//! The answer is `200` with `{"purged": N}`. Prefix and tag purges walk the whole store, shard by
//! shard, each shard locked only for its own walk.

use std::net::IpAddr;

use lowlat_http::request::Request;

use super::RouteCache;
use crate::handler::Response;

/// Whether a request is a purge.
pub(crate) fn is_purge(head: &Request<'_, '_>) -> bool {
    head.method_token == "PURGE"
}

/// For `PURGE /prefix/*`, the start every key under the prefix has: the purge's own key up to
/// where its path's `*` landed. With the default key that is the scheme, host and prefix; a
/// rule's key template puts the path where it says (`$host$uri|$cookie_lang`), and what follows
/// it in the key (the cookie) then matters no more than the rest of the path. `None` for any
/// other purge, and when the template leaves the path out (the purge then names one key).
fn prefix_of<'k>(primary: &'k [u8], path: &str) -> Option<&'k [u8]> {
    let stem = path.strip_suffix('*')?.as_bytes();
    if !stem.starts_with(b"/") {
        return None;
    }
    let at = memchr::memmem::find(primary, path.as_bytes())?;
    Some(&primary[..at + stem.len()])
}

/// Answers a purge from `peer`; `primary` is its target's key.
pub(crate) fn purge(
    cache: &RouteCache,
    head: &Request<'_, '_>,
    primary: &[u8],
    peer: IpAddr,
    res: &mut Response<'_>,
) {
    if !cache.policy.purge_from.iter().any(|c| c.contains(peer)) {
        res.send_status(403);
        return;
    }
    let store = &cache.store;
    let tags: Vec<&[u8]> = head
        .headers
        .iter()
        .filter(|h| {
            h.name.eq_ignore_ascii_case("cache-tag") || h.name.eq_ignore_ascii_case("surrogate-key")
        })
        .flat_map(|h| h.value.split(|&b| b == b',' || b == b' '))
        .filter(|t| !t.is_empty())
        .collect();
    let purged = if !tags.is_empty() {
        store.remove_where(|_, stored| stored.iter().any(|t| tags.contains(&&t[..])))
    } else if let Some(prefix) = prefix_of(primary, head.path) {
        store.remove_where(|k, _| k.starts_with(prefix))
    } else {
        u64::from(store.remove(primary))
    };
    let mut body = Vec::with_capacity(24);
    body.extend_from_slice(b"{\"purged\": ");
    body.extend_from_slice(itoa::Buffer::new().format(purged).as_bytes());
    body.extend_from_slice(b"}\n");
    res.send(200, b"application/json", &body);
}

#[cfg(test)]
mod tests {
    use super::prefix_of;

    #[test]
    fn prefixes() {
        assert_eq!(
            prefix_of(b"http://h/a/*", "/a/*"),
            Some(&b"http://h/a/"[..])
        );
        assert_eq!(prefix_of(b"http://h/*", "/*"), Some(&b"http://h/"[..]));
        assert_eq!(prefix_of(b"h/a/*|fr", "/a/*"), Some(&b"h/a/"[..]));
        assert_eq!(prefix_of(b"http://h/a/1", "/a/1"), None);
        // The template leaves the path out: one key, no prefix.
        assert_eq!(prefix_of(b"h|fr", "/a/*"), None);
        assert_eq!(prefix_of(b"h*", "*"), None);
    }
}
