//! The miss path: a forwarded response stored while it is relayed to the client that asked.
//!
//! A [`Fill`] travels with the forwarded request's job (`ProxyJob::cache`). The upstream side
//! relays the response through the cache's `Tee` (`tee.rs`), which passes every call on to the
//! client's and hands this fill a copy: at the head it decides (RFC 9111 §3) whether the response may
//! be stored and says so in `Cache-Status`; body bytes are copied while they fit the object
//! limit (past it the copy is dropped and the response goes on streaming); at the end the copy
//! becomes an [`Object`] in the store. A response that fails, is cut, or has trailers is not
//! stored. For an unsafe method the fill only invalidates (§4.4).
//!
//! A fill also holds its request's part in the flight of its key (`inflight`): the leader's is
//! let go as soon as the outcome is known (stored, not storable, too large, cut), so that the
//! requests waiting for it go on; a waiter's ticket is taken when its job is parked.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use lowlat_http::cache::freshness::{lifetime, AgeBase, Source, Stored};
use lowlat_http::cache::index::Indexed;
use lowlat_http::cache::revalidate::{merge, not_modified_applies, Conditional};
use lowlat_http::cache::status::{CacheStatus, Fwd};
use lowlat_http::cache::storable::{field_kept, storable, NotStored, Policy, RequestFacts};
use lowlat_http::cache::{invalidate, values, vary, Directives};
use lowlat_http::client::Header;

use super::entry::Entry;
use super::inflight::{Role, Ticket};
use super::lines::Lines;
use super::object::{reason_of, Body, Object};
use super::store::{Hashed, KeyBytes};
use super::{key, now_secs, RouteCache};

/// What storing a response makes of one of its fields ([`stored_field`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Neither stored nor relayed by the proxy (hop-by-hop fields, `Proxy-*`).
    Dropped,
    /// The framing (`Content-Length`, `Transfer-Encoding`): never stored nor relayed, as every
    /// client protocol frames the body itself.
    Framing,
    /// Relayed but not stored (`Age`, a field `Cache-Control` keeps out of a store).
    Unstored,
    /// Stored.
    Kept,
    /// Stored, and it is `Vary`: the object's key has a variant part.
    Vary,
    /// Stored, and it holds cache-tags (`Cache-Tag`, `Surrogate-Key`) to purge by.
    Tags,
}

/// Whether a response field is stored: what every relay passes on to the client (the proxy's
/// `response_field_passes`: not hop-by-hop, not the framing, no `Trailer` or `Proxy-*`, not
/// named by `Connection`) less what RFC 9111 keeps out of a stored response (`field_kept`),
/// and whether it is one storing looks for. One match on the name's length answers every
/// question asked of a field on a response whose `Connection` and `Cache-Control` name no
/// field (the two questions asked in turn, and then `Vary` and the tag fields asked apart,
/// cost a miss about 50 instructions a field more). Held to the two by the test below.
fn stored_field(name: &str, connection: &[&[u8]], cc: &Directives<'_>) -> Fate {
    let b = name.as_bytes();
    let is = |n: &str| name.eq_ignore_ascii_case(n);
    let kept = match b.len() {
        2 if is("te") => Fate::Dropped,
        3 if is("age") => Fate::Unstored,
        4 if is("vary") => Fate::Vary,
        7 if is("trailer") || is("upgrade") => Fate::Dropped,
        9 if is("cache-tag") => Fate::Tags,
        10 if is("connection") || is("keep-alive") => Fate::Dropped,
        13 if is("surrogate-key") => Fate::Tags,
        14 if is("content-length") => Fate::Framing,
        17 if is("transfer-encoding") => Fate::Framing,
        // `Proxy-*`: `Proxy-Connection`, `Proxy-Authenticate`, `Proxy-Authorization` among them.
        n if n > 6 && b[0] | 0x20 == b'p' && b[..6].eq_ignore_ascii_case(b"proxy-") => {
            Fate::Dropped
        }
        _ => Fate::Kept,
    };
    let named_elsewhere =
        !connection.is_empty() || cc.private_fields.is_some() || cc.no_cache_fields.is_some();
    if !matches!(kept, Fate::Dropped | Fate::Framing) && named_elsewhere {
        if !crate::proxy::headers::response_field_passes(name, connection.iter().copied()) {
            return Fate::Dropped;
        }
        if !field_kept(name, connection, cc) {
            return Fate::Unstored;
        }
    }
    kept
}

/// `Cache-Status`'s `detail` on a response the rule's no-store conditions kept out.
const KEPT_OUT: &str = "no-store-rule";

/// A forwarded request's part in the cache, shared by its job and the relay.
pub(crate) type FillRef = Rc<RefCell<Fill>>;

/// What the fill does with the response.
#[derive(Debug)]
enum Mode {
    /// Store it if it may be.
    Store,
    /// Only invalidate (an unsafe method): the request's `host` for `Location` targets.
    Invalidate { host: Box<[u8]> },
}

/// Where the copy stands.
#[derive(Debug)]
pub(super) enum State {
    /// Nothing relayed yet.
    Head,
    /// Storing: the decided parts and the body so far.
    /// (Not boxed: it lives in the fill's own allocation, one less a miss.)
    Body(Pending),
    /// Nothing (more) to do.
    Off,
}

/// A response being copied.
#[derive(Debug)]
pub(super) struct Pending {
    status: u16,
    reason: std::borrow::Cow<'static, str>,
    /// The fields to store, as the object will hold them, and the body so far after them
    /// (their tail: one allocation for both, sized to the body's length too when the relay
    /// knows it and it fits the object limit).
    kept: Lines,
    age: AgeBase,
    fresh: Stored,
    /// Whether `kept` has a `Vary` line, and cache-tag lines: seen while it was copied, so
    /// that storing it need not look again.
    varies: bool,
    tagged: bool,
}

/// What a 304 from the upstream becomes (see [`Fill::not_modified`]).
pub(super) enum NotModified {
    /// The client's: relayed as it is.
    Relay,
    /// The stored response, refreshed and stored again: sent instead.
    Refreshed(Arc<Object>),
    /// The stored response, which the 304 does not match: sent as it was, not updated.
    Unmatched(Arc<Object>),
}

/// One forwarded request's fill.
#[derive(Debug)]
pub(crate) struct Fill {
    pub(super) cache: RouteCache,
    mode: Mode,
    /// The primary key, and its hash (`CacheStore::hashed`'s).
    pub(super) key: KeyBytes,
    key_hash: u64,
    /// The request's fields (for `Vary`), owned, as the request's head is gone by the time the
    /// response comes.
    pub(super) request: Lines,
    /// When the request was forwarded (RFC 9111 §4.2.3's `request_time`).
    request_time: u64,
    authorization: bool,
    request_no_store: bool,
    /// Why it went forward, for `Cache-Status`.
    pub(super) fwd: Fwd,
    pub(super) state: State,
    /// The stored response this request found but could not use as it was (stale, or to be
    /// revalidated): refreshed by a 304, or sent instead of an error (`stale-if-error`).
    pub(super) stale: Option<Arc<Object>>,
    /// The request's `stale-if-error`, when request directives are honoured.
    request_stale_if_error: Option<u64>,
    /// The forwarded request carries the stale response's validators (ours, not the client's).
    conditional: bool,
    /// A stale response went to the client instead of what the upstream sent: the rest of the
    /// upstream's response is dropped.
    pub(super) replaced: bool,
    /// A tee is relaying through this fill now (a second one must not be stacked on it).
    pub(super) teeing: bool,
    /// Its part in the flight of its key: leading it, waiting for it, or neither.
    role: Role,
    /// The rule's no-store conditions held for the request: nothing is stored.
    kept_out: bool,
    /// What the exchange came to when it is not what the lookup said (a 304 refresh, a stale
    /// response for an error): what its log line says.
    pub(super) outcome: Option<super::CacheOutcome>,
}

impl Fill {
    /// A fill that stores what the response allows, in `role` in the flight of its key
    /// (`authorization`: the request carried one).
    pub(crate) fn store(
        cache: &RouteCache,
        key: Hashed<'_>,
        request: &[lowlat_http::request::Header<'_>],
        authorization: bool,
        req_cc: &Directives<'_>,
        fwd: Fwd,
        role: Role,
    ) -> FillRef {
        Rc::new(RefCell::new(Fill {
            cache: cache.clone(),
            mode: Mode::Store,
            key: KeyBytes::from_slice(key.bytes),
            key_hash: key.hash,
            request: Lines::of(request.iter().map(|h| (h.name, h.value)), |_| true),
            request_time: now_secs(),
            authorization,
            request_no_store: req_cc.no_store,
            fwd,
            state: State::Head,
            stale: None,
            request_stale_if_error: req_cc.stale_if_error,
            conditional: false,
            replaced: false,
            teeing: false,
            role,
            kept_out: false,
            outcome: None,
        }))
    }

    /// The primary key with its hash.
    pub(super) fn key(&self) -> Hashed<'_> {
        Hashed {
            hash: self.key_hash,
            bytes: &self.key,
        }
    }

    /// The ticket of a request that is to wait for another's fill, taken (once) by the upstream
    /// side, which parks the request instead of forwarding it.
    pub(crate) fn take_ticket(&mut self) -> Option<Ticket> {
        match std::mem::replace(&mut self.role, Role::Alone) {
            Role::Wait(ticket) => Some(ticket),
            role => {
                self.role = role;
                None
            }
        }
    }

    /// The rule's no-store conditions held for the request: its answer is relayed unstored.
    pub(crate) fn keep_out(&mut self) {
        self.kept_out = true;
    }

    /// The lifetime of a response (RFC 9111 §4.2.1), or the rule's for its status when the
    /// response gives no explicit one (nginx's `proxy_cache_valid`: it wins over the
    /// heuristic too).
    fn lifetime_of<F: lowlat_http::cache::Fields + ?Sized>(
        &self,
        status: u16,
        fields: &F,
        cc: &Directives<'_>,
        targeted: bool,
        response_time: u64,
    ) -> u64 {
        let policy = &self.cache.policy;
        let (life, source) = lifetime(
            status,
            fields,
            cc,
            targeted,
            response_time,
            &policy.heuristic,
        );
        match source {
            Source::Heuristic | Source::None => {
                super::rules::ttl_for(&policy.ttl, status).unwrap_or(life)
            }
            _ => life,
        }
    }

    /// The outcome is known: the requests waiting for this fill go on.
    fn let_go(&mut self) {
        self.role = Role::Alone;
    }

    /// The stored response the request found unusable as it was: revalidated with its
    /// validators (added to the forwarded `request` unless the client's request is itself
    /// conditional, in which case the client's go upstream and its answer is relayed as is),
    /// and kept for `stale-if-error`.
    pub(crate) fn revalidating(
        fill: &FillRef,
        stale: Arc<Object>,
        client: &[lowlat_http::request::Header<'_>],
        request: &mut Vec<u8>,
    ) {
        let mut f = fill.borrow_mut();
        let own = client.iter().any(|h| {
            [
                "if-none-match",
                "if-modified-since",
                "if-match",
                "if-unmodified-since",
                "if-range",
                "range",
            ]
            .iter()
            .any(|n| h.name.eq_ignore_ascii_case(n))
        });
        let cond = Conditional::of(&*stale);
        if !own && cond.any() {
            if let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                let mut lines = Vec::new();
                if let Some(tag) = cond.if_none_match {
                    lines.extend_from_slice(b"If-None-Match: ");
                    lines.extend_from_slice(tag);
                    lines.extend_from_slice(b"\r\n");
                }
                if let Some(date) = cond.if_modified_since {
                    lines.extend_from_slice(b"If-Modified-Since: ");
                    lines.extend_from_slice(date);
                    lines.extend_from_slice(b"\r\n");
                }
                let at = end + 2;
                request.splice(at..at, lines);
                f.conditional = true;
            }
        }
        f.stale = Some(stale);
    }

    /// The stale response the request found, revalidated by a request written elsewhere
    /// (a FastCGI one, its validators among its variables): `conditional` when it carries them.
    pub(crate) fn revalidating_as(fill: &FillRef, stale: Arc<Object>, conditional: bool) {
        let mut f = fill.borrow_mut();
        f.conditional = conditional;
        f.stale = Some(stale);
    }

    /// Whether the stale response may replace an error now (RFC 5861 §4).
    pub(super) fn stale_for_error(&self) -> Option<Arc<Object>> {
        let o = self.stale.as_ref()?;
        let req = Directives {
            stale_if_error: self.request_stale_if_error,
            ..Directives::default()
        };
        o.fresh
            .usable_on_error(o.age.age_at(now_secs()), &req, self.cache.policy.grace)
            .then(|| Arc::clone(o))
    }

    /// A 304 arrived. To the client's own conditional request it is the client's answer. To
    /// ours it refreshes the stored response: the 304's fields merged in (RFC 9111 §3.2,
    /// §4.3.4), stored again with its new age and lifetime. A 304 whose validator is not the
    /// stored response's must not update it (§4.3.4); the client, which asked for the whole
    /// response, gets the stored one as it was (the 304 still says the validator sent is
    /// current), and it stays as stale as it was.
    pub(super) fn not_modified(&mut self, fields: &[Header<'_>]) -> NotModified {
        let Some(stale) = self.stale.as_ref().filter(|_| self.conditional) else {
            return NotModified::Relay;
        };
        if !not_modified_applies(&**stale, fields) {
            return NotModified::Unmatched(Arc::clone(stale));
        }
        let connection: Vec<&[u8]> = values(fields, "connection").collect();
        let fresh_cc = Directives::default();
        let merged = merge(&**stale, fields, |n| {
            crate::proxy::headers::response_field_passes(n, connection.iter().copied())
                && field_kept(n, &connection, &fresh_cc)
        });
        let targeted = &self.cache.policy.targeted;
        let ignored = self.cache.policy.ignored;
        let decided: Vec<(Box<str>, Box<[u8]>)>;
        let decide: &[(Box<str>, Box<[u8]>)] = if ignored.any() {
            decided = merged
                .iter()
                .filter(|(n, _)| !ignored.hides(n, &self.cache.policy.targeted))
                .cloned()
                .collect();
            &decided
        } else {
            &merged
        };
        let (cc, is_targeted) = Directives::for_response(decide, targeted);
        let response_time = now_secs();
        let life = self.lifetime_of(stale.status, decide, &cc, is_targeted, response_time);
        let object = Arc::new(Object::new(
            stale.status,
            stale.reason.clone(),
            Lines::of(merged.iter().map(|(n, v)| (&**n, &**v)), |_| true),
            stale.shared_body(),
            AgeBase::new(fields, self.request_time, response_time),
            Stored::new(life, &cc),
        ));
        self.put(Entry::Object(Arc::clone(&object)), &object, true);
        self.cache.count(|c| &c.revalidated);
        NotModified::Refreshed(object)
    }

    /// A fill that invalidates what an unsafe method's response says (§4.4).
    pub(crate) fn invalidate(cache: &RouteCache, key: &[u8], host: &[u8]) -> FillRef {
        Rc::new(RefCell::new(Fill {
            cache: cache.clone(),
            mode: Mode::Invalidate { host: host.into() },
            key: KeyBytes::from_slice(key),
            // Invalidation removes by the key's bytes (`CacheStore::remove`).
            key_hash: 0,
            request: Lines::default(),
            request_time: 0,
            authorization: false,
            request_no_store: false,
            fwd: Fwd::Bypass,
            state: State::Off,
            stale: None,
            request_stale_if_error: None,
            conditional: false,
            replaced: false,
            teeing: false,
            role: Role::Alone,
            kept_out: false,
            outcome: None,
        }))
    }

    /// The head arrived: decide, and say so in `Cache-Status` (appended to `line`). `length`:
    /// the body's, when the relay's framing knows it (what the copy is sized to). True when
    /// the response is being stored and its stored lines ([`Fill::stored_lines`]) are exactly
    /// the fields `pass` lets through, in order: the client's head may be written from them.
    pub(super) fn head(
        &mut self,
        status: u16,
        reason: &str,
        fields: &[Header<'_>],
        pass: &dyn Fn(&str) -> bool,
        length: Option<u64>,
        line: &mut Vec<u8>,
    ) -> bool {
        if let Mode::Invalidate { host } = &self.mode {
            // The method was not GET/HEAD: known unsafe, or of unknown safety (§4.4).
            if (200..400).contains(&status) {
                let store = &self.cache.store;
                store.remove(&self.key);
                let origin = key::origin(&self.key);
                for path in invalidate::other_targets(fields, host) {
                    let mut k = origin.to_vec();
                    k.extend_from_slice(path);
                    store.remove(&k);
                }
            }
            return false;
        }
        let policy = &self.cache.policy;
        // The fields the rule ignores are not there for the decisions (they are still relayed).
        let ignored = policy.ignored;
        let decided: Vec<Header<'_>>;
        let decide: &[Header<'_>] = if ignored.any() {
            decided = fields
                .iter()
                .filter(|f| !ignored.hides(f.name, &policy.targeted))
                .copied()
                .collect();
            &decided
        } else {
            fields
        };
        // Every decision below asks the fields by name: each asks the index instead.
        let all = Indexed::new(fields);
        let decide_index;
        let decide = if ignored.any() {
            decide_index = Indexed::new(decide);
            &decide_index
        } else {
            &all
        };
        let (cc, is_targeted) = Directives::for_response(decide, &policy.targeted);
        let req = RequestFacts {
            get: true,
            authorization: self.authorization,
            cc: Directives {
                no_store: self.request_no_store && policy.honour_request,
                ..Directives::default()
            },
        };
        let rules = Policy {
            store_set_cookie: policy.store_set_cookie,
            configured_lifetime: super::rules::ttl_for(&policy.ttl, status).is_some(),
            ..Policy::default()
        };
        let response_time = now_secs();
        let mut status_field = CacheStatus {
            fwd: Some(self.fwd),
            fwd_status: None,
            ..CacheStatus::default()
        };
        let decision = if self.kept_out {
            Err(KEPT_OUT)
        } else {
            storable(&req, status, decide, &cc, &rules).map_err(NotStored::token)
        };
        let exact = match decision {
            Ok(()) => {
                let life = self.lifetime_of(status, decide, &cc, is_targeted, response_time);
                let connection: Vec<&[u8]> = values(&all, "connection").collect();
                let (mut varies, mut tagged) = (false, false);
                // Whether every field that goes on to the client is stored: `pass` asked only
                // of the few that are not stored (the framing, `Age`, hop-by-hop fields).
                let mut exact = true;
                // The whole body in the same allocation when its length is known and fits.
                let announced = length
                    .filter(|&n| n <= self.cache.store.max_object)
                    .and_then(|n| usize::try_from(n).ok());
                let kept = Lines::of_with_tail(
                    fields.iter().map(|f| (f.name, f.value)),
                    |name| {
                        let kept = stored_field(name, &connection, &cc);
                        let keep = matches!(kept, Fate::Kept | Fate::Vary | Fate::Tags)
                        // An ignored `Set-Cookie` is this client's, not the store's.
                        && !(ignored.set_cookie && name.eq_ignore_ascii_case("set-cookie"));
                        debug_assert!(!keep || pass(name), "{name} stored but not relayed");
                        // Relayed but not stored: the client's head cannot be the stored lines.
                        // (`pass` is asked of what is neither: the framing never passes.)
                        exact &=
                            keep || kept == Fate::Framing || (kept == Fate::Dropped && !pass(name));
                        varies |= kept == Fate::Vary;
                        tagged |= kept == Fate::Tags;
                        keep
                    },
                    announced.unwrap_or(0),
                );
                let fresh = Stored::new(life, &cc);
                let age = AgeBase::new(&all, self.request_time, response_time);
                status_field.stored = true;
                status_field.ttl = Some(fresh.ttl(age.age_at(response_time)));
                self.state = State::Body(Pending {
                    status,
                    reason: reason_of(status, reason),
                    kept,
                    age,
                    fresh,
                    varies,
                    tagged,
                });
                exact
            }
            Err(why) => {
                self.cache.count(|c| &c.not_stored);
                status_field.detail = Some(why);
                self.state = State::Off;
                // What waits for this fill goes on now (as `let_go`, with `policy` borrowed).
                self.role = Role::Alone;
                false
            }
        };
        line.extend_from_slice(b"Cache-Status: ");
        status_field.write(&policy.name, line);
        line.extend_from_slice(b"\r\n");
        exact
    }

    /// The stored lines of the response being copied (the fields as they will be stored).
    pub(super) fn stored_lines(&self) -> Option<&[u8]> {
        match &self.state {
            State::Body(p) => Some(p.kept.bytes()),
            _ => None,
        }
    }

    /// Body bytes: copied while they fit.
    pub(super) fn body(&mut self, data: &[u8]) {
        if let State::Body(p) = &mut self.state {
            let max = usize::try_from(self.cache.store.max_object).unwrap_or(usize::MAX);
            if p.kept.tail().len() + data.len() > max {
                self.cache.count(|c| &c.not_stored);
                self.state = State::Off;
                self.let_go();
            } else {
                p.kept.push_tail(data);
            }
        }
    }

    /// The response ended whole: the copy is stored (and what waited for it goes on).
    pub(super) fn end(&mut self) {
        self.store_copy();
        self.let_go();
    }

    /// Stores the copy, when there is one.
    fn store_copy(&mut self) {
        let State::Body(p) = std::mem::replace(&mut self.state, State::Off) else {
            return;
        };
        let object = Object::with_tags(
            p.status,
            p.reason,
            p.kept,
            Body::AfterLines,
            p.age,
            p.fresh,
            p.tagged,
        );
        let object = Arc::new(object);
        self.put(Entry::Object(Arc::clone(&object)), &object, p.varies);
        self.cache.count(|c| &c.stored);
    }

    /// Stores `entry` (holding `object`) under the primary key, or as the variant the request
    /// selects when the response varies (`may_vary`: false when `object` is known to have no
    /// `Vary` line).
    fn put(&mut self, entry: Entry, object: &Object, may_vary: bool) {
        let store = &self.cache.store;
        let vary: Vec<u8> = {
            let mut v = Vec::new();
            // A rule that ignores `Vary` stores one response per key.
            let ignore = self.cache.policy.ignored.vary || !may_vary;
            let lines = if ignore { None } else { Some(object) };
            for value in lines.into_iter().flat_map(|o| values(o, "vary")) {
                if !v.is_empty() {
                    v.push(b',');
                }
                v.extend_from_slice(value);
            }
            v
        };
        if vary.is_empty() {
            // The fill is done with its key once it has stored its response.
            store.insert(std::mem::take(&mut self.key), self.key_hash, entry);
        } else {
            // Reuse the marker when it names the same fields, so the other variants stay.
            let id = match store.get(self.key()) {
                Some(Entry::Vary { value, id }) if *value == *vary => id,
                _ => {
                    let id = store.marker_id();
                    store.insert(
                        self.key.clone(),
                        self.key_hash,
                        Entry::Vary {
                            value: vary.clone().into(),
                            id,
                        },
                    );
                    id
                }
            };
            let vary_field = [("vary", &vary[..])];
            let mut secondary = Vec::new();
            if !vary::secondary_key(&vary_field[..], &self.request, &mut secondary) {
                return;
            }
            let mut k = Vec::new();
            key::variant(&self.key, id, &secondary, &mut k);
            let hash = store.hashed(&k).hash;
            store.insert(KeyBytes::from_vec(k), hash, entry);
        }
    }

    /// The response will not be had whole.
    pub(super) fn abandon(&mut self) {
        self.state = State::Off;
        self.let_go();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::headers::response_field_passes;

    #[test]
    fn stored_fields_are_relayed_fields_less_what_a_cache_drops() {
        let connection: [&[u8]; 1] = [b"close, X-Hop"];
        let cc = Directives {
            private_fields: Some(b"x-private"),
            no_cache_fields: Some(b"X-Fresh-Only"),
            ..Directives::default()
        };
        for name in [
            "Content-Type",
            "Content-Length",
            "content-length",
            "Trailer",
            "Trailers",
            "Transfer-Encoding",
            "Connection",
            "Keep-Alive",
            "TE",
            "Upgrade",
            "Proxy-Authenticate",
            "proxy-authorization",
            "Proxy-X",
            "Proxy",
            "Pragma",
            "Age",
            "X-Hop",
            "x-hop",
            "X-Private",
            "X-Fresh-Only",
            "ETag",
            "Vary",
            "Set-Cookie",
            "Cache-Tag",
            "surrogate-KEY",
            "Proxy-Connection",
            "Keep-Alivf",
            "",
        ] {
            let want = response_field_passes(name, connection.iter().copied())
                && field_kept(name, &connection, &cc);
            let got = stored_field(name, &connection, &cc);
            let stored = !matches!(got, Fate::Dropped | Fate::Framing | Fate::Unstored);
            assert_eq!(stored, want, "{name}");
            // Dropped and the framing: not relayed either.
            let relayed = response_field_passes(name, connection.iter().copied());
            assert_eq!(
                matches!(got, Fate::Dropped | Fate::Framing),
                !relayed,
                "{name} (relayed)"
            );
            // And so when nothing names a field: the answer without asking the two.
            let plain = stored_field(name, &[], &Directives::default());
            let want =
                response_field_passes(name, []) && field_kept(name, &[], &Directives::default());
            let stored = !matches!(plain, Fate::Dropped | Fate::Framing | Fate::Unstored);
            assert_eq!(stored, want, "{name} (plain)");
            assert_eq!(
                matches!(plain, Fate::Dropped | Fate::Framing),
                !response_field_passes(name, []),
                "{name} (plain, relayed)"
            );
            if stored {
                let kind = if name.eq_ignore_ascii_case("vary") {
                    Fate::Vary
                } else if super::super::object::is_tag_field(name) {
                    Fate::Tags
                } else {
                    Fate::Kept
                };
                assert_eq!(plain, kind, "{name}");
            }
        }
    }
}
