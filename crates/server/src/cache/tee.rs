//! The cache's [`Downstream`] for an exchange it takes part in ([`Tee`]): the client's own,
//! with the exchange's [`Fill`] beside it.

use lowlat_http::cache::status::{CacheStatus, Fwd};
use lowlat_http::client::Header;

use super::fill::{Fill, FillRef, NotModified, State};
use super::object::Object;
use super::{now_secs, CacheOutcome};
use crate::ctx::WorkerCtx;
use crate::proxy::claim::{Claim, Claimable};
use crate::proxy::downstream::{Downstream, RelayedFields, TunnelRead};
use crate::proxy::job::RelayBody;

/// The client's [`Downstream`] with a fill beside it: every call goes on to the client; the
/// head, body and end are also copied into the fill. A 304 to the cache's own conditional
/// request becomes the stored response for the client; an error becomes the stale response
/// when `stale-if-error` allows.
pub(crate) struct Tee<'a> {
    inner: &'a mut dyn Downstream,
    fill: Claim<Fill>,
}

impl<'a> Tee<'a> {
    /// A tee over `inner` for `fill`, or `inner` back when one is already relaying for it.
    pub(crate) fn new(
        inner: &'a mut dyn Downstream,
        fill: &FillRef,
    ) -> Result<Self, &'a mut dyn Downstream> {
        match Claim::take(fill) {
            Some(fill) => Ok(Tee { inner, fill }),
            None => Err(inner),
        }
    }

    /// Sends `object` to the client in place of the upstream's answer, with `Cache-Status`
    /// saying why (`fwd_status`: what the upstream said, when it said anything).
    fn send_object(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        object: &Object,
        added: &[u8],
        fwd_status: Option<u16>,
        stored: bool,
    ) {
        let age = object.age.age_at(now_secs());
        let status = CacheStatus {
            fwd: Some(Fwd::Stale),
            fwd_status,
            ttl: Some(object.fresh.ttl(age)),
            stored,
            ..CacheStatus::default()
        };
        let policy = std::sync::Arc::clone(&self.fill.borrow().cache.policy);
        super::send::relay_object(
            &mut *self.inner,
            ctx,
            object,
            age,
            added,
            &status,
            &policy.name,
            false,
        );
    }
}

impl Claimable for Fill {
    fn claimed(&mut self) -> &mut bool {
        &mut self.teeing
    }
}

impl Downstream for Tee<'_> {
    fn client_addresses(&mut self) -> Option<lowlat_http::proxy_protocol::Addresses> {
        self.inner.client_addresses()
    }

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
        if status == 304 {
            let answer = self.fill.borrow_mut().not_modified(fields);
            let (object, stored) = match answer {
                NotModified::Relay => (None, false),
                NotModified::Refreshed(object) => (Some(object), true),
                NotModified::Unmatched(object) => (Some(object), false),
            };
            if let Some(object) = object {
                let mut f = self.fill.borrow_mut();
                f.replaced = true;
                f.state = State::Off;
                if stored {
                    f.outcome = Some(CacheOutcome::Revalidated);
                }
                drop(f);
                self.send_object(ctx, &object, added, Some(304), stored);
                return;
            }
        }
        if status >= 500 {
            let stale = self.fill.borrow().stale_for_error();
            if let Some(object) = stale {
                let mut f = self.fill.borrow_mut();
                f.replaced = true;
                f.state = State::Off;
                f.outcome = Some(CacheOutcome::Stale);
                f.cache.count(|c| &c.stale);
                drop(f);
                self.send_object(ctx, &object, added, Some(status), false);
                return;
            }
        }
        // `Cache-Status`, in a buffer of the worker's pool (no allocation a miss).
        let mut own = ctx.pool.take_write();
        let length = match body {
            RelayBody::Length(n) => Some(n),
            _ => None,
        };
        let exact = self
            .fill
            .borrow_mut()
            .head(status, reason, fields, pass, length, &mut own);
        let fill = self.fill.borrow();
        // A response being stored whose passing fields are all stored: the client's head may be
        // written from the stored lines.
        let head = RelayedFields {
            fields,
            pass,
            lines: fill.stored_lines().filter(|_| exact),
        };
        self.inner
            .relay_head_lines(ctx, status, reason, head, added, &own, body);
        drop(fill);
        ctx.pool.give_write(own);
    }

    fn relay_body(&mut self, ctx: &mut WorkerCtx<'_>, data: &[u8]) {
        let mut f = self.fill.borrow_mut();
        if f.replaced {
            return;
        }
        f.body(data);
        drop(f);
        self.inner.relay_body(ctx, data);
    }

    fn relay_trailers(&mut self, ctx: &mut WorkerCtx<'_>, fields: &[(&[u8], &[u8])]) {
        // Trailers are not stored, so neither is a response that had them.
        let mut f = self.fill.borrow_mut();
        f.abandon();
        if f.replaced {
            return;
        }
        drop(f);
        self.inner.relay_trailers(ctx, fields);
    }

    fn relay_end(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        upstream: &str,
        status: u16,
        took: std::time::Duration,
    ) {
        let status = {
            let f = self.fill.borrow();
            match (&f.stale, f.replaced) {
                // What the client got is what the access log says.
                (Some(o), true) => o.status,
                _ => status,
            }
        };
        let outcome = {
            let mut f = self.fill.borrow_mut();
            f.end();
            f.outcome
        };
        let inner = &mut *self.inner;
        super::relaying_as(outcome, || inner.relay_end(ctx, upstream, status, took));
    }

    fn relay_abort(&mut self, ctx: &mut WorkerCtx<'_>) {
        self.fill.borrow_mut().abandon();
        self.inner.relay_abort(ctx);
    }

    fn relay_error(&mut self, ctx: &mut WorkerCtx<'_>, status: u16) {
        self.fill.borrow_mut().abandon();
        // The upstream is down or timed out: the stale response, if it may stand in.
        let stale = self.fill.borrow().stale_for_error();
        if let Some(object) = stale {
            self.fill.borrow_mut().replaced = true;
            self.fill.borrow().cache.count(|c| &c.stale);
            self.send_object(ctx, &object, b"", Some(status), false);
            let inner = &mut *self.inner;
            super::relaying_as(Some(CacheOutcome::Stale), || {
                inner.relay_end(ctx, "-", object.status, std::time::Duration::ZERO);
            });
            // As a finished exchange is: what was relayed is written now.
            self.inner.flush_relayed(ctx);
            return;
        }
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
