//! The hit path: a cached route's request looked up before it is forwarded. A usable stored
//! response is written from memory like a file (status line and stored lines, then `Age`,
//! `Cache-Status` and `Content-Length`, then the body unless `HEAD`; a 304 for a client's
//! current copy, a part of it for a `Range`); anything else goes on to the upstream with a
//! fill that stores what comes back, after entering the flight of its key (`inflight`): a miss
//! of a key another request is fetching waits for that fetch. A stale response within its
//! `stale-while-revalidate` window is sent at once and refreshed in the background (`refresh`).

use std::cell::RefCell;

use lowlat_http::cache::freshness::{age_value, Use};
use lowlat_http::cache::status::{CacheStatus, Fwd};
use lowlat_http::cache::{vary, Directives};
use lowlat_http::request::Method;

use super::asked::Asked;
use super::entry::Entry;
use super::fill::{Fill, FillRef};
use super::inflight::Role;
use super::object::Object;
use super::store::Hashed;
use super::{key, now_secs, CacheOutcome, RouteCache};
use crate::handler::{Req, Response};

/// What the lookup did.
pub(crate) enum Lookup {
    /// Answered from the cache.
    Served,
    /// Answered with a stale response within its `stale-while-revalidate` window: it is to be
    /// refreshed in the background with this fill (which leads the flight of its key), from
    /// the stale response it holds (for its validators).
    Refresh(FillRef, std::sync::Arc<Object>),
    /// To be forwarded, with this fill (none: the cache stays out of it), and the stored
    /// response it found unusable as it was (to revalidate, or to stand in for an error).
    Forward(Option<FillRef>, Option<std::sync::Arc<Object>>),
}

thread_local! {
    /// This worker's key and head-line buffers (reused: no allocation per hit).
    static SCRATCH: RefCell<(Vec<u8>, Vec<u8>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// `Cache-Status`'s `detail` on a stale response sent while it is refreshed.
const REVALIDATING: &str = "stale-while-revalidate";

/// Looks `req` up in the route's cache; answers it when a stored response may be used.
pub(crate) fn lookup(
    cache: &RouteCache,
    req: &Req<'_, '_, '_>,
    res: &mut Response<'_>,
    client: &crate::proxy::headers::ClientInfo,
) -> Lookup {
    let tls = client.tls;
    let head = req.head;
    let safe = matches!(head.method, Method::Get | Method::Head);
    let asked = Asked::of(head.headers);
    let policy = &cache.policy;
    SCRATCH.with_borrow_mut(|(primary, lines)| {
        if !key::primary_by(policy.key.as_ref(), head, &asked, tls, primary) {
            // The rule's key cannot be made for this request: the cache stays out of it (a
            // purge names nothing then; it is the cache's, never the upstream's).
            if super::purge::is_purge(head) {
                res.send_status(400);
                return Lookup::Served;
            }
            if safe {
                cache.count(|c| &c.bypass);
                res.set_cache_outcome(CacheOutcome::Bypass);
            }
            return Lookup::Forward(None, None);
        }
        if !safe {
            if super::purge::is_purge(head) {
                super::purge::purge(cache, head, primary, client.peer.ip(), res);
                return Lookup::Served;
            }
            if matches!(head.method, Method::Options | Method::Trace) {
                return Lookup::Forward(None, None);
            }
            cache.count(|c| &c.bypass);
            res.set_cache_outcome(CacheOutcome::Bypass);
            let host = head.header("host").unwrap_or_default();
            return Lookup::Forward(Some(Fill::invalidate(cache, primary, host)), None);
        }
        // If-Match and If-Unmodified-Since guard a change the origin decides (RFC 9110
        // §13.1.1): they go to the origin.
        if asked.unkeyed
            || head.protocol.is_some()
            || !req.body.is_empty()
            || res.streamed().is_some()
            || asked.upgrade
            || asked.guarded_change
        {
            cache.count(|c| &c.bypass);
            res.set_cache_outcome(CacheOutcome::Bypass);
            return Lookup::Forward(None, None);
        }
        // The rule's own conditions (`lines` is free until a head is written in it).
        if !policy.bypass.is_empty() && super::rules::any_holds(&policy.bypass, head, tls, lines) {
            cache.count(|c| &c.bypass);
            res.set_cache_outcome(CacheOutcome::Bypass);
            return Lookup::Forward(None, None);
        }
        let no_store = !policy.no_store.is_empty()
            && super::rules::any_holds(&policy.no_store, head, tls, lines);
        let req_cc = if cache.policy.honour_request && asked.cache_control {
            Directives::parse(head.headers, "cache-control")
        } else {
            Directives::default()
        };
        let primary = cache.store.hashed(primary);
        let ended = cache.store.flights.ended();
        let (found, variant) = find(cache, primary, head.headers, lines);
        let (object, fwd) = match found {
            Found::Object(o) => (Some(o), Fwd::Stale),
            Found::VaryMiss => (None, Fwd::VaryMiss),
            Found::Nothing => (None, Fwd::UriMiss),
        };
        let now = now_secs();
        if let Some(o) = object {
            let age = o.age.age_at(now);
            let (usable, refresh) = match o.fresh.use_for(age, &req_cc) {
                Use::Fresh => {
                    res.set_cache_outcome(CacheOutcome::Hit);
                    (true, false)
                }
                Use::Stale { refresh } => {
                    cache.count(|c| &c.stale);
                    res.set_cache_outcome(if refresh {
                        CacheOutcome::Updating
                    } else {
                        CacheOutcome::Stale
                    });
                    (true, refresh)
                }
                Use::Revalidate => (false, false),
            };
            if usable {
                // The flight is the variant's when the response varies (`variant`: its key's
                // hash). A response this request may not store is not refreshed by it either.
                let background = (refresh && !no_store)
                    .then(|| refresh_fill(cache, head, primary, variant))
                    .flatten();
                cache.count(|c| &c.hits);
                let status = CacheStatus {
                    hit: true,
                    ttl: Some(o.fresh.ttl(age)),
                    detail: refresh.then_some(REVALIDATING),
                    ..CacheStatus::default()
                };
                send(cache, head, &asked, res, &o, age, &status, lines);
                return match background {
                    Some(fill) => Lookup::Refresh(fill, o),
                    None => Lookup::Served,
                };
            }
            let fwd = if req_cc.no_cache || req_cc.max_age.is_some() || req_cc.min_fresh.is_some() {
                Fwd::Request
            } else {
                fwd
            };
            return miss(
                cache,
                head,
                Miss {
                    primary,
                    ended,
                    asked: &asked,
                    req_cc: &req_cc,
                    fwd,
                    variant,
                    no_store,
                },
                Some(o),
                res,
                lines,
            );
        }
        if req_cc.only_if_cached {
            // RFC 9111 §5.2.1.7: nothing stored that may be used: 504.
            res.set_cache_outcome(CacheOutcome::Miss);
            res.send_status(504);
            return Lookup::Served;
        }
        miss(
            cache,
            head,
            Miss {
                primary,
                ended,
                asked: &asked,
                req_cc: &req_cc,
                fwd,
                variant,
                no_store,
            },
            None,
            res,
            lines,
        )
    })
}

/// Writes a stored response for the request: the status line and stored lines, `Age` and
/// `Cache-Status` (`lines` is the buffer they are written in), then the body — or a 304 when
/// the client's own copy is current (RFC 9110 §13.1.2, §13.1.3).
#[inline]
#[allow(clippy::too_many_arguments)] // the parts of one answer, each from its own place
fn send(
    cache: &RouteCache,
    head: &lowlat_http::request::Request<'_, '_>,
    asked: &Asked<'_>,
    res: &mut Response<'_>,
    o: &Object,
    age: u64,
    status: &CacheStatus<'_>,
    lines: &mut Vec<u8>,
) {
    lines.clear();
    lines.extend_from_slice(b"Age: ");
    lines.extend_from_slice(itoa::Buffer::new().format(age_value(age)).as_bytes());
    lines.extend_from_slice(b"\r\nCache-Status: ");
    status.write(&cache.policy.name, lines);
    lines.extend_from_slice(b"\r\n");
    if o.status == 200 && not_modified(asked.if_none_match, asked.if_modified_since, o) {
        // The client's own copy is current (RFC 9110 §13.1.2, §13.1.3).
        res.send_stored(304, "Not Modified", o.lines.bytes(), lines, b"");
    } else if asked.range.is_none() || !super::partial::send_range(head, o, lines, res) {
        res.send_stored(o.status, &o.reason, o.lines.bytes(), lines, o.body());
    }
}

/// What a miss was found to be.
struct Miss<'k, 'd> {
    primary: Hashed<'k>,
    /// `Flights::ended` before the look-up.
    ended: u64,
    asked: &'k Asked<'d>,
    req_cc: &'k Directives<'d>,
    fwd: Fwd,
    /// The response varies: the hash of the variant's key (its flight's).
    variant: Option<u64>,
    /// The rule's no-store conditions hold: the answer is relayed, not stored, and no one
    /// waits for it.
    no_store: bool,
}

/// A request that found nothing it may use: forwarded with a fill that stores the answer
/// (a `GET`; a `HEAD` miss goes on as it is, its answer having no body to store), after it
/// entered the flight of its key — to lead it, or to wait for it (the upstream side parks it
/// then). A request whose own directives ask for the origin (`fwd=request`) does not wait for
/// a fetch that began before it.
fn miss(
    cache: &RouteCache,
    head: &lowlat_http::request::Request<'_, '_>,
    m: Miss<'_, '_>,
    stale: Option<std::sync::Arc<Object>>,
    res: &mut Response<'_>,
    lines: &mut Vec<u8>,
) -> Lookup {
    let Miss {
        primary,
        ended,
        asked,
        req_cc,
        fwd,
        variant,
        no_store,
    } = m;
    res.set_cache_outcome(if stale.is_some() {
        CacheOutcome::Expired
    } else {
        CacheOutcome::Miss
    });
    if head.method != Method::Get {
        cache.count(|c| &c.misses);
        return Lookup::Forward(None, stale);
    }
    let flight = variant.unwrap_or(primary.hash);
    let role = if no_store {
        Role::Alone
    } else {
        super::inflight::enter(&cache.store.flights, flight, fwd != Fwd::Request)
    };
    if matches!(role, Role::Lead(_)) && fwd != Fwd::Request && cache.store.flights.ended() != ended
    {
        // The flight before this one may have ended between the look-up and the entry: what
        // it stored is used (it is stored before its flight ends, so it is found now).
        if let (Found::Object(o), _) = find(cache, primary, head.headers, lines) {
            let age = o.age.age_at(now_secs());
            if o.fresh.use_for(age, req_cc) == Use::Fresh {
                drop(role);
                cache.count(|c| &c.hits);
                res.set_cache_outcome(CacheOutcome::Hit);
                let status = CacheStatus {
                    hit: true,
                    ttl: Some(o.fresh.ttl(age)),
                    ..CacheStatus::default()
                };
                send(cache, head, asked, res, &o, age, &status, lines);
                return Lookup::Served;
            }
        }
    }
    // A waiter is a miss only if it goes upstream after all (`collapse::answer`).
    if !matches!(role, Role::Wait(_)) {
        cache.count(|c| &c.misses);
    }
    let fill = Fill::store(
        cache,
        primary,
        head.headers,
        asked.authorization,
        req_cc,
        fwd,
        role,
    );
    if no_store {
        fill.borrow_mut().keep_out();
    }
    Lookup::Forward(Some(fill), stale)
}

/// The fill of a background refresh of the stale response `head` found, when no other fill
/// of its key (`variant`'s, when the response varies) is in progress: it leads the flight, so
/// that the refresh is made once, and requests that cannot use the stale response wait for
/// it. It carries the request's fields but not its conditionals or `Range`: what comes back
/// is for the store, not for this client.
fn refresh_fill(
    cache: &RouteCache,
    head: &lowlat_http::request::Request<'_, '_>,
    primary: Hashed<'_>,
    variant: Option<u64>,
) -> Option<FillRef> {
    if head.method != Method::Get {
        return None;
    }
    let role = super::inflight::enter(&cache.store.flights, variant.unwrap_or(primary.hash), false);
    if !matches!(role, Role::Lead(_)) {
        return None;
    }
    let fields = super::refresh::request_fields(head.headers);
    let req_cc = if cache.policy.honour_request {
        Directives::parse(&fields[..], "cache-control")
    } else {
        Directives::default()
    };
    let authorization = fields
        .iter()
        .any(|h| h.name.eq_ignore_ascii_case("authorization"));
    Some(Fill::store(
        cache,
        primary,
        &fields,
        authorization,
        &req_cc,
        Fwd::Stale,
        role,
    ))
}

/// What a request that waited for another's fill may be answered with now: the response its
/// fields select in the store, when it may be used without the origin (fresh, or stale where
/// its directives or the response's allow). `None`: it goes upstream on its own.
pub(crate) fn after_wait(fill: &Fill) -> Option<(std::sync::Arc<Object>, u64)> {
    let cache = &fill.cache;
    let mut buf = Vec::new();
    let (Found::Object(o), _) = find(cache, fill.key(), &fill.request, &mut buf) else {
        return None;
    };
    let req_cc = if cache.policy.honour_request {
        Directives::parse(&fill.request, "cache-control")
    } else {
        Directives::default()
    };
    let age = o.age.age_at(now_secs());
    match o.fresh.use_for(age, &req_cc) {
        Use::Fresh | Use::Stale { .. } => Some((o, age)),
        Use::Revalidate => None,
    }
}

/// Whether the client's `If-None-Match` (else `If-Modified-Since`) says its copy of the stored
/// response is current: evaluated as the file handler evaluates them, against the stored
/// `ETag` (compared weakly) and `Last-Modified`.
pub(super) fn not_modified(
    if_none_match: Option<&[u8]>,
    if_modified_since: Option<&[u8]>,
    o: &Object,
) -> bool {
    use crate::files::conditional::{evaluate, Outcome, Preconditions, Validators};
    if if_none_match.is_none() && if_modified_since.is_none() {
        return false;
    }
    let etag = lowlat_http::cache::first(o, "etag").map_or(&b""[..], <[u8]>::trim_ascii);
    let last_modified = lowlat_http::cache::first(o, "last-modified").unwrap_or(b"\0");
    let v = Validators {
        // If-None-Match compares weakly: a weak stored tag matches its strong spelling.
        etag: etag.strip_prefix(b"W/").unwrap_or(etag),
        last_modified,
        mtime_secs: lowlat_http::cache::parse_date(last_modified).unwrap_or(u64::MAX),
    };
    let pre = Preconditions {
        if_none_match,
        if_modified_since,
        ..Preconditions::default()
    };
    evaluate(&pre, &v) == Outcome::NotModified
}

/// What the store holds for a request.
enum Found {
    Object(std::sync::Arc<Object>),
    /// Variants are stored for this URL, but not this one.
    VaryMiss,
    Nothing,
}

/// Finds the response stored for the request: the primary key's, or the variant its `Vary`
/// fields select. Beside it, when the response varies, the hash of the variant's key (which
/// `buf` holds).
fn find<F: lowlat_http::cache::Fields + ?Sized>(
    cache: &RouteCache,
    primary: Hashed<'_>,
    request: &F,
    buf: &mut Vec<u8>,
) -> (Found, Option<u64>) {
    match cache.store.get(primary) {
        None => (Found::Nothing, None),
        Some(Entry::Object(o)) => (Found::Object(o), None),
        Some(Entry::Vary { value, id }) => {
            let vary_field = [("vary", &value[..])];
            let mut secondary = Vec::new();
            if !vary::secondary_key(&vary_field[..], request, &mut secondary) {
                return (Found::VaryMiss, None);
            }
            key::variant(primary.bytes, id, &secondary, buf);
            let variant = cache.store.hashed(buf);
            match cache.store.get(variant) {
                Some(Entry::Object(o)) => (Found::Object(o), Some(variant.hash)),
                _ => (Found::VaryMiss, Some(variant.hash)),
            }
        }
    }
}
