//! An exchange upgraded to a WebSocket tunnel (a `101` to a handshake): its connection leaves
//! the request/response cycle for good, and closes, never pooled, when the tunnel ends. The
//! bytes are copied both ways by `proxy::tunnel`.

use super::Upstreams;
use crate::ctx::WorkerCtx;
use crate::proxy::downstream::Downstream;
use crate::proxy::upstream::{Phase, Tunnel};

impl Upstreams {
    /// The upstream switched protocols and the client was told: the connection becomes a
    /// tunnel. `rbuf` holds the 101's head (`head_len` bytes) and maybe the first tunnelled
    /// bytes after it.
    pub(super) fn open_tunnel(
        &mut self,
        key: usize,
        rbuf: Vec<u8>,
        head_len: usize,
        ctx: &mut WorkerCtx<'_>,
        down: &mut dyn Downstream,
    ) {
        let c = &mut self.conns[key];
        let took = ctx.now.saturating_duration_since(c.sent_at);
        c.group
            .health
            .stats
            .response(c.server, ctx.worker, 101, took);
        c.status = 101;
        c.head_relayed = true;
        c.keep_alive = false;
        if let Some(job) = c.job.take() {
            job.group.give_buffer(job.request);
        }
        if c.rlen > head_len {
            down.tunnel_write(ctx, &rbuf[head_len..c.rlen]);
        }
        c.rbuf = rbuf;
        c.rlen = 0;
        c.phase = Phase::Tunnel;
        c.tunnel = Some(Box::new(Tunnel::new(ctx.pool.take_read())));
        c.deadline = ctx.now + c.group.cfg.timeouts.tunnel_idle;
        down.flush_relayed(ctx);
    }

    /// A tunnel is over (closed both ways, broken, or idle too long): the upstream connection
    /// closes (never pooled) and the client's side ends.
    pub(super) fn end_tunnel(
        &mut self,
        key: usize,
        ctx: &mut WorkerCtx<'_>,
        down: &mut dyn Downstream,
    ) {
        self.close(key, ctx);
        down.tunnel_end(ctx);
    }
}
