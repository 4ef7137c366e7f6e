//! Starting exchanges: a forward-auth subrequest before the request it guards, a cache miss
//! parked behind another request's fill of its key, then a server chosen and the request handed
//! to a connection to it: an idle one from the server's pool, else a new one (its PROXY header
//! ready to go first), or, when php-fpm serves all it can, a place in the worker's queue for one.

use std::time::Instant;

use lowlat_http::proxy_protocol;
use mio::{Interest, Token};

use super::fcgi_capacity::is_fastcgi;
use super::pool::gauges;
use super::{Failure, Upstreams, TOKEN_BASE};
use crate::ctx::WorkerCtx;
use crate::proxy::downstream::Downstream;
use crate::proxy::group::WorkerGroup;
use crate::proxy::health::now_ms;
use crate::proxy::job::ProxyJob;
use crate::proxy::upload::UpstreamProtocol;
use crate::proxy::upstream::{BodyLeft, Phase, Sock, UpConn};

impl Upstreams {
    /// Forwards `job` for `client`: a server is chosen, a pooled connection reused or a new one
    /// opened, the request written as far as the socket takes it.
    pub(crate) fn start(
        &mut self,
        client: (Token, u32),
        job: ProxyJob,
        ctx: &mut WorkerCtx<'_>,
        down: &mut dyn Downstream,
    ) {
        if let Some(gate) = job.gate.clone() {
            return self.start_gated(client, job, &gate, ctx, down);
        }
        // A cached exchange's failures before any connection (no server up, a refused
        // connect) go through the cache's tee too: a stale response may answer them.
        match job.cache.clone() {
            None => self.start_job(client, job, ctx, down),
            Some(fill) => {
                // A miss of a key another request is fetching waits for that fetch.
                let ticket = fill.borrow_mut().take_ticket();
                if let Some(ticket) = ticket {
                    return self.parked.park(client, job, ticket, ctx, down);
                }
                match crate::cache::tee::Tee::new(down, &fill) {
                    Ok(mut tee) => self.start_job(client, job, ctx, &mut tee),
                    Err(down) => self.start_job(client, job, ctx, down),
                }
            }
        }
    }

    /// Starts a forward-auth subrequest (`proxy::auth`), its answer judged by its gate; the
    /// request it guards is forwarded if the answer (read at once, or later in
    /// [`Upstreams::drive`]) lets it through.
    fn start_gated(
        &mut self,
        client: (Token, u32),
        job: ProxyJob,
        gate: &crate::proxy::job::GateRef,
        ctx: &mut WorkerCtx<'_>,
        down: &mut dyn Downstream,
    ) {
        if let Some(main) = gate.borrow_mut().main.as_mut() {
            // The site's lines for every response go on the guarded request's answer too.
            main.added.clone_from(&job.added);
        }
        match crate::proxy::auth::AuthGate::new(down, gate) {
            Ok(mut judged) => self.start_job(client, job, ctx, &mut judged),
            // Started again from inside its own gate: that one lets it through.
            Err(down) => return self.start_job(client, job, ctx, down),
        }
        self.let_through(gate, client, ctx, down);
    }

    /// Forwards the request a forward-auth subrequest guards, once its answer let it through.
    pub(super) fn let_through(
        &mut self,
        gate: &crate::proxy::job::GateRef,
        client: (Token, u32),
        ctx: &mut WorkerCtx<'_>,
        down: &mut dyn Downstream,
    ) {
        let passed = gate.borrow_mut().take_passed();
        if let Some(main) = passed {
            self.start(client, main, ctx, down);
        }
    }

    /// Parked requests whose wait is over at `now` (the fill they waited for ended, or their
    /// time is up), for the worker to hand each its client through [`Upstreams::unpark`].
    pub(crate) fn released(&mut self, now: Instant) -> Vec<crate::cache::collapse::Released> {
        self.parked.released(now)
    }

    /// A parked request whose wait is over: answered from the cache when what it finds there
    /// may be used, else forwarded on its own.
    pub(crate) fn unpark(
        &mut self,
        client: (Token, u32),
        job: ProxyJob,
        ctx: &mut WorkerCtx<'_>,
        down: &mut dyn Downstream,
    ) {
        if crate::cache::collapse::answer(&job, ctx, down) {
            job.group.give_buffer(job.request);
            return;
        }
        // Its ticket is taken: it goes, and is not parked again.
        self.start(client, job, ctx, down);
    }

    /// [`Upstreams::start`] for whichever `down` relays.
    fn start_job(
        &mut self,
        client: (Token, u32),
        job: ProxyJob,
        ctx: &mut WorkerCtx<'_>,
        down: &mut dyn Downstream,
    ) {
        let Some(server) = job.group.choose(job.hash, None, now_ms()) else {
            tracing::debug!(group = %job.group.cfg.name, "no upstream server is up");
            job.group.give_buffer(job.request);
            down.relay_error(ctx, 502);
            return;
        };
        self.assign(server, job, client, true, ctx, down);
    }

    /// Hands `job` to a connection to `server`: a pooled one when `pooled` allows, else new.
    pub(super) fn assign(
        &mut self,
        server: usize,
        job: ProxyJob,
        client: (Token, u32),
        pooled: bool,
        ctx: &mut WorkerCtx<'_>,
        down: &mut dyn Downstream,
    ) {
        let group = std::rc::Rc::clone(&job.group);
        if let Some(up) = &job.upload {
            let s = &group.cfg.servers[server];
            up.borrow_mut().frame_for(if s.fastcgi {
                UpstreamProtocol::FastCgi
            } else if s.h2 {
                UpstreamProtocol::Http2
            } else {
                UpstreamProtocol::Http1
            });
        }
        if group.cfg.servers[server].h2 {
            if let Err(job) = self.h2.assign(server, job, client, ctx, down) {
                self.retry_or_answer(server, job, false, Failure::Connect, client, ctx, down);
            }
            return;
        }
        let reuse = if pooled {
            loop {
                let Some(key) = group.idle.borrow_mut()[server].pop() else {
                    break None;
                };
                if self.conns.get(key).is_some_and(|c| c.phase == Phase::Idle) {
                    break Some(key);
                }
            }
        } else {
            None
        };
        let now = ctx.now;
        if reuse.is_none()
            && pooled
            && group.cfg.servers[server].fastcgi
            && self.fastcgi_at_capacity(&group, server, ctx.now)
        {
            let token = self.fcgi_waiting.push(client, job, server, now);
            down.relay_link(token);
            return;
        }
        let key = if let Some(key) = reuse {
            let c = &mut self.conns[key];
            c.phase = Phase::Sending;
            c.reused = true;
            key
        } else if let Some(key) = self.open(&group, server, now, ctx, down) {
            key
        } else {
            return self.retry_or_answer(server, job, false, Failure::Connect, client, ctx, down);
        };
        group.active.borrow_mut()[server] += 1;
        let c = &mut self.conns[key];
        c.client = Some(client);
        c.job = Some(job);
        c.fcgi = group.cfg.servers[server]
            .fastcgi
            .then(|| Box::new(crate::proxy::fcgi_state::FcgiExchange::new()));
        c.wpos = 0;
        c.head_relayed = false;
        c.got_bytes = false;
        c.status = 0;
        c.paused = false;
        c.sent_at = now;
        c.fill = None;
        c.gate = None;
        if c.phase == Phase::Sending {
            c.deadline = now + group.cfg.timeouts.write;
            // A pooled connection is writable (its edge was used long ago): try at once.
            c.writable = true;
        }
        gauges(&group, server, ctx.worker);
        down.relay_link(Token(TOKEN_BASE + key));
        self.drive(key, ctx, down);
    }

    /// A new connection to `server`, registered, its PROXY header ready to go first; `None`
    /// when it could not be opened (a refused connect counts against the server's health; a
    /// registration that failed is this worker's trouble, not the server's) — the caller
    /// retries the request or answers it.
    fn open(
        &mut self,
        group: &std::rc::Rc<WorkerGroup>,
        server: usize,
        now: Instant,
        ctx: &mut WorkerCtx<'_>,
        down: &mut dyn Downstream,
    ) -> Option<usize> {
        group.health.stats.connect(server, ctx.worker);
        let sock = match Sock::connect(&group.cfg.servers[server]) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(server = %group.cfg.servers[server].label, "upstream connect: {e}");
                group.health.failed(server, now_ms());
                group
                    .health
                    .stats
                    .failure(server, ctx.worker, Failure::Connect as usize);
                return None;
            }
        };
        let entry = self.conns.vacant_entry();
        let key = entry.key();
        let mut c = UpConn {
            sock,
            group: std::rc::Rc::clone(group),
            server,
            phase: Phase::Connecting,
            client: None,
            job: None,
            fill: None,
            gate: None,
            wpos: 0,
            preamble: Vec::new(),
            rbuf: Vec::new(),
            rlen: 0,
            body: BodyLeft::UntilClose,
            head_relayed: false,
            got_bytes: false,
            reused: false,
            keep_alive: false,
            status: 0,
            paused: false,
            readable: false,
            writable: false,
            closed_seen: false,
            refused_write: false,
            deadline: now + group.cfg.timeouts.connect,
            sent_at: now,
            tunnel: None,
            fcgi: None,
        };
        if ctx
            .registry
            .register(
                c.sock.source(),
                Token(TOKEN_BASE + key),
                Interest::READABLE | Interest::WRITABLE,
            )
            .is_err()
        {
            return None;
        }
        // Asked only of a group that sends it: the client's connection's addresses.
        match group.cfg.send_proxy_protocol {
            1 => proxy_protocol::write_v1(&mut c.preamble, down.client_addresses()),
            2 => proxy_protocol::write_v2(&mut c.preamble, down.client_addresses()),
            _ => {}
        }
        entry.insert(c);
        if is_fastcgi(group, server) {
            group.fastcgi_open.borrow_mut()[server] += 1;
        }
        Some(key)
    }
}
