//! A failed exchange: counted against its server (and marked in its health, unless only a
//! pooled connection had gone stale), then, when nothing was relayed yet, sent once more where
//! that is safe or answered 502/504; after the head went out, the client's response is cut
//! short.

use mio::Token;

use super::{Failure, Upstreams};
use crate::ctx::WorkerCtx;
use crate::proxy::downstream::Downstream;
use crate::proxy::health::now_ms;
use crate::proxy::job::ProxyJob;

impl Upstreams {
    /// An exchange failed: retried, answered 502/504, or cut short, as far as it got.
    pub(super) fn fail(
        &mut self,
        key: usize,
        why: Failure,
        ctx: &mut WorkerCtx<'_>,
        down: &mut dyn Downstream,
    ) {
        let c = &mut self.conns[key];
        let server = c.server;
        let stale = c.reused && !c.got_bytes && why == Failure::Closed;
        c.group
            .health
            .stats
            .failure(server, ctx.worker, why as usize);
        if !stale {
            c.group.health.failed(server, now_ms());
        }
        tracing::debug!(server = %c.group.cfg.servers[server].label, ?why, "upstream exchange failed");
        let job = c.job.take();
        let relayed = c.head_relayed;
        let client = c.client;
        self.close(key, ctx);
        if relayed {
            down.relay_abort(ctx);
            return;
        }
        match (job, client) {
            (Some(job), Some(client)) => {
                self.retry_or_answer(server, job, stale, why, client, ctx, down);
            }
            (job, _) => {
                if let Some(job) = job {
                    job.group.give_buffer(job.request);
                }
                down.relay_error(ctx, status_for(why));
            }
        }
    }

    /// A request that got no response from `server`: sent once more where that is safe, else
    /// answered 502/504.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn retry_or_answer(
        &mut self,
        server: usize,
        mut job: ProxyJob,
        stale: bool,
        why: Failure,
        client: (Token, u32),
        ctx: &mut WorkerCtx<'_>,
        down: &mut dyn Downstream,
    ) {
        if job.upload.as_ref().is_some_and(|u| u.borrow().sent() > 0) {
            // Part of the body is gone: it cannot be sent again.
            job.group.give_buffer(std::mem::take(&mut job.request));
            return down.relay_error(ctx, status_for(why));
        }
        if job.idempotent && stale && !job.stale_retried {
            // The pool's connection had been closed by the server: a fresh one, same server.
            job.stale_retried = true;
            return self.assign(server, job, client, false, ctx, down);
        }
        if job.idempotent && !job.retried {
            job.retried = true;
            if let Some(other) = job.group.choose(job.hash, Some(server), now_ms()) {
                return self.assign(other, job, client, true, ctx, down);
            }
        }
        job.group.give_buffer(std::mem::take(&mut job.request));
        down.relay_error(ctx, status_for(why));
    }
}

fn status_for(why: Failure) -> u16 {
    if why == Failure::Timeout {
        504
    } else {
        502
    }
}
