//! The miss path: a forwarded response stored while it is relayed to the client that asked.
//!
//! A [`Fill`] travels with the forwarded request's job (`ProxyJob::cache`). The upstream side
//! relays the response through [`Tee`], a [`Downstream`] that passes every call on to the
//! client's and keeps a copy: at the head it decides (RFC 9111 §3) whether the response may
//! be stored and says so in `Cache-Status`; body bytes are copied while they fit the object
//! limit (past it the copy is dropped and the response goes on streaming); at the end the copy
//! becomes an [`Object`] in the store. A response that fails, is cut, or has trailers is not
//! stored. For an unsafe method the fill only invalidates (§4.4).

use std::cell::RefCell;
use std::rc::Rc;

use lowlat_http::cache::freshness::{lifetime, AgeBase, Stored};
use lowlat_http::cache::status::{CacheStatus, Fwd};
use lowlat_http::cache::storable::{field_kept, storable, Policy, RequestFacts};
use lowlat_http::cache::{invalidate, values, vary, Directives};
use lowlat_http::client::Header;

use super::object::Object;
use super::store::Entry;
use super::{key, now_secs, RouteCache};
use crate::ctx::WorkerCtx;
use crate::proxy::downstream::{Downstream, TunnelRead};
use crate::proxy::job::RelayBody;

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
enum State {
    /// Nothing relayed yet.
    Head,
    /// Storing: the decided parts and the body so far.
    Body(Box<Pending>),
    /// Nothing (more) to do.
    Off,
}

/// A response being copied.
#[derive(Debug)]
struct Pending {
    status: u16,
    reason: Box<str>,
    fields: Vec<(Box<str>, Box<[u8]>)>,
    body: Vec<u8>,
    age: AgeBase,
    fresh: Stored,
}

/// One forwarded request's fill.
#[derive(Debug)]
pub(crate) struct Fill {
    cache: RouteCache,
    mode: Mode,
    /// The primary key.
    key: Box<[u8]>,
    /// The request's fields (for `Vary`): names and values, owned, as the request's head is
    /// gone by the time the response comes.
    request: Vec<(Box<str>, Box<[u8]>)>,
    /// When the request was forwarded (RFC 9111 §4.2.3's `request_time`).
    request_time: u64,
    authorization: bool,
    request_no_store: bool,
    /// Why it went forward, for `Cache-Status`.
    fwd: Fwd,
    state: State,
}

impl Fill {
    /// A fill that stores what the response allows.
    pub(crate) fn store(
        cache: &RouteCache,
        key: &[u8],
        request: &[lowlat_http::request::Header<'_>],
        req_cc: &Directives<'_>,
        fwd: Fwd,
    ) -> FillRef {
        let authorization = request
            .iter()
            .any(|h| h.name.eq_ignore_ascii_case("authorization"));
        Rc::new(RefCell::new(Fill {
            cache: cache.clone(),
            mode: Mode::Store,
            key: key.into(),
            request: request
                .iter()
                .map(|h| (Box::<str>::from(h.name), Box::<[u8]>::from(h.value)))
                .collect(),
            request_time: now_secs(),
            authorization,
            request_no_store: req_cc.no_store,
            fwd,
            state: State::Head,
        }))
    }

    /// A fill that invalidates what an unsafe method's response says (§4.4).
    pub(crate) fn invalidate(cache: &RouteCache, key: &[u8], host: &[u8]) -> FillRef {
        Rc::new(RefCell::new(Fill {
            cache: cache.clone(),
            mode: Mode::Invalidate { host: host.into() },
            key: key.into(),
            request: Vec::new(),
            request_time: 0,
            authorization: false,
            request_no_store: false,
            fwd: Fwd::Bypass,
            state: State::Off,
        }))
    }

    /// The head arrived: decide, and say so in `Cache-Status` (appended to `status_line`).
    fn head(
        &mut self,
        status: u16,
        reason: &str,
        fields: &[Header<'_>],
        pass: &dyn Fn(&str) -> bool,
        line: &mut Vec<u8>,
    ) {
        let counters = &self.cache.store.counters;
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
            return;
        }
        let policy = &self.cache.policy;
        let targeted: Vec<&str> = policy.targeted.iter().map(String::as_str).collect();
        let (cc, is_targeted) = Directives::for_response(fields, &targeted);
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
            ..Policy::default()
        };
        let response_time = now_secs();
        let mut status_field = CacheStatus {
            fwd: Some(self.fwd),
            fwd_status: None,
            ..CacheStatus::default()
        };
        match storable(&req, status, fields, &cc, &rules) {
            Ok(()) => {
                let (life, _) = lifetime(
                    status,
                    fields,
                    &cc,
                    is_targeted,
                    response_time,
                    &policy.heuristic,
                );
                let connection: Vec<&[u8]> = values(fields, "connection").collect();
                let kept = fields
                    .iter()
                    .filter(|f| pass(f.name) && field_kept(f.name, &connection, &cc))
                    .map(|f| (Box::<str>::from(f.name), Box::<[u8]>::from(f.value)))
                    .collect();
                let fresh = Stored::new(life, &cc);
                let age = AgeBase::new(fields, self.request_time, response_time);
                status_field.stored = true;
                status_field.ttl = Some(fresh.ttl(age.age_at(response_time)));
                self.state = State::Body(Box::new(Pending {
                    status,
                    reason: reason.into(),
                    fields: kept,
                    body: Vec::new(),
                    age,
                    fresh,
                }));
            }
            Err(why) => {
                counters
                    .not_stored
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                status_field.detail = Some(why.token());
                self.state = State::Off;
            }
        }
        line.extend_from_slice(b"Cache-Status: ");
        status_field.write(&policy.name, line);
        line.extend_from_slice(b"\r\n");
    }

    /// Body bytes: copied while they fit.
    fn body(&mut self, data: &[u8]) {
        if let State::Body(p) = &mut self.state {
            let max = usize::try_from(self.cache.store.max_object).unwrap_or(usize::MAX);
            if p.body.len() + data.len() > max {
                self.cache
                    .store
                    .counters
                    .not_stored
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.state = State::Off;
            } else {
                p.body.extend_from_slice(data);
            }
        }
    }

    /// The response ended whole: the copy is stored.
    fn end(&mut self) {
        let State::Body(p) = std::mem::replace(&mut self.state, State::Off) else {
            return;
        };
        let p = *p;
        let store = &self.cache.store;
        let object = Object::new(
            p.status,
            &p.reason,
            p.fields.iter().map(|(n, v)| (&**n, &**v)),
            bytes::Bytes::from(p.body),
            p.age,
            p.fresh,
        );
        let vary: Vec<u8> = {
            let mut v = Vec::new();
            for value in values(&object, "vary") {
                if !v.is_empty() {
                    v.push(b',');
                }
                v.extend_from_slice(value);
            }
            v
        };
        let entry = Entry::Object(std::sync::Arc::new(object));
        if vary.is_empty() {
            store.insert(self.key.clone(), entry);
        } else {
            // Reuse the marker when it names the same fields, so the other variants stay.
            let id = match store.get(&self.key) {
                Some(Entry::Vary { value, id }) if *value == *vary => id,
                _ => {
                    let id = store.marker_id();
                    store.insert(
                        self.key.clone(),
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
            if !vary::secondary_key(&vary_field[..], &self.request[..], &mut secondary) {
                return;
            }
            let mut k = Vec::new();
            key::variant(&self.key, id, &secondary, &mut k);
            store.insert(k.into_boxed_slice(), entry);
        }
        store
            .counters
            .stored
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The response will not be had whole.
    fn abandon(&mut self) {
        self.state = State::Off;
    }
}

/// The client's [`Downstream`] with a fill beside it: every call goes on to the client; the
/// head, body and end are also copied into the fill.
pub(crate) struct Tee<'a> {
    pub(crate) inner: &'a mut dyn Downstream,
    pub(crate) fill: FillRef,
}

impl Downstream for Tee<'_> {
    fn relay_head(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        status: u16,
        reason: &str,
        fields: &[Header<'_>],
        pass: &dyn Fn(&str) -> bool,
        added: &[u8],
        body: RelayBody,
    ) {
        let mut lines = added.to_vec();
        self.fill
            .borrow_mut()
            .head(status, reason, fields, pass, &mut lines);
        self.inner
            .relay_head(ctx, status, reason, fields, pass, &lines, body);
    }

    fn relay_body(&mut self, ctx: &mut WorkerCtx<'_>, data: &[u8]) {
        self.fill.borrow_mut().body(data);
        self.inner.relay_body(ctx, data);
    }

    fn relay_trailers(&mut self, ctx: &mut WorkerCtx<'_>, fields: &[(&[u8], &[u8])]) {
        // Trailers are not stored, so neither is a response that had them.
        self.fill.borrow_mut().abandon();
        self.inner.relay_trailers(ctx, fields);
    }

    fn relay_end(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        upstream: &str,
        status: u16,
        took: std::time::Duration,
    ) {
        self.fill.borrow_mut().end();
        self.inner.relay_end(ctx, upstream, status, took);
    }

    fn relay_abort(&mut self, ctx: &mut WorkerCtx<'_>) {
        self.fill.borrow_mut().abandon();
        self.inner.relay_abort(ctx);
    }

    fn relay_error(&mut self, ctx: &mut WorkerCtx<'_>, status: u16) {
        self.fill.borrow_mut().abandon();
        self.inner.relay_error(ctx, status);
    }

    fn backlog(&self) -> usize {
        self.inner.backlog()
    }

    fn relay_link(&mut self, upstream: mio::Token) {
        self.inner.relay_link(upstream);
    }

    fn flush_relayed(&mut self, ctx: &mut WorkerCtx<'_>) {
        self.inner.flush_relayed(ctx);
    }

    fn upload_drained(&mut self, ctx: &mut WorkerCtx<'_>) {
        self.inner.upload_drained(ctx);
    }

    fn tunnel_open(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        reason: &str,
        fields: &[Header<'_>],
        pass: &dyn Fn(&str) -> bool,
        upstream: &str,
    ) -> bool {
        self.fill.borrow_mut().abandon();
        self.inner.tunnel_open(ctx, reason, fields, pass, upstream)
    }

    fn tunnel_read(&mut self, ctx: &mut WorkerCtx<'_>, buf: &mut [u8]) -> TunnelRead {
        self.inner.tunnel_read(ctx, buf)
    }

    fn tunnel_write(&mut self, ctx: &mut WorkerCtx<'_>, data: &[u8]) {
        self.inner.tunnel_write(ctx, data);
    }

    fn tunnel_shutdown(&mut self, ctx: &mut WorkerCtx<'_>) {
        self.inner.tunnel_shutdown(ctx);
    }

    fn tunnel_end(&mut self, ctx: &mut WorkerCtx<'_>) {
        self.inner.tunnel_end(ctx);
    }
}
