//! One worker thread: its own epoll instance (through mio), its own `SO_REUSEPORT` listening
//! sockets, its own connections, buffers, router and date cache. Nothing on the request path is
//! shared with another worker — no lock, channel or queue — so workers scale with cores.
//!
//! The loop: wait for events (at most until the next timer sweep), accept, drive each ready
//! connection, continue large file sends that yielded their turn, and every so often sweep the
//! connections for expired deadlines. A connection limit or `EMFILE` pauses accepting (new
//! connections wait in the backlog) without spinning: accepting resumes when a connection closes
//! or after a short back-off.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lowlat_http::date::DateCache;
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Registry, Token};
use slab::Slab;

use crate::clients::{Clients, FIRST_CONN};
use crate::config::ServerConfig;
use crate::ctx::WorkerCtx;
use crate::pool::BufferPool;
use crate::proto::Connection;
use crate::proxied::AwaitingHeader;
use crate::proxy::engine::{is_upstream, Readiness, Upstreams};
use crate::quic::QuicWorker;
use crate::router::Router;

/// Token of the waker that announces shutdown.
pub(crate) const WAKER: Token = Token(usize::MAX - 1);
/// Token of the worker's QUIC socket (below the connections, above any listener).
const QUIC: Token = Token(FIRST_CONN - 1);
/// Token of the worker's QUIC hand-off inbox, where a newer process (USR2) passes datagrams of
/// this one's connections.
const QUIC_HANDOFF: Token = Token(FIRST_CONN - 2);
/// How long accepting pauses after `EMFILE`/`ENFILE`/`ENOBUFS` before it is tried again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Events taken from epoll per wait.
const EVENTS_CAPACITY: usize = 1024;

/// A listening socket, whether what it accepts speaks TLS, and whether connections from a
/// balancer start with a PROXY header.
pub(crate) struct Listener {
    pub(crate) sock: TcpListener,
    pub(crate) tls: bool,
    pub(crate) proxy_protocol: bool,
}

/// A worker, ready to run on its own thread.
pub(crate) struct Worker {
    pub(crate) index: usize,
    pub(crate) cfg: Arc<ServerConfig>,
    pub(crate) poll: Poll,
    pub(crate) listeners: Vec<Listener>,
    pub(crate) shutdown: Arc<AtomicBool>,
    /// Set with `shutdown` when a new process takes over (USR2).
    pub(crate) handing_over: Arc<AtomicBool>,
    /// The service to build the router from, replaced on reload.
    pub(crate) services: Arc<crate::service::ServiceSlot>,
    /// This worker's QUIC socket, its hand-off inbox and what its endpoint is built from
    /// (`--h3-listen`).
    pub(crate) quic: Option<(
        std::net::UdpSocket,
        crate::quic::Inbox,
        Arc<crate::quic::QuicShared>,
    )>,
    /// What wakes this worker's loop ([`WAKER`]): shutdown and reload ring it, and the cache
    /// (a flight a request of this worker waits for ended; a background refresh was queued).
    pub(crate) waker: Arc<mio::Waker>,
}

impl Worker {
    /// Runs the event loop until shutdown completes.
    pub(crate) fn run(mut self, mut router: Router) -> io::Result<()> {
        let cfg = Arc::clone(&self.cfg);
        let cfg = &*cfg;
        crate::own_waker::set(Arc::clone(&self.waker));
        for (i, l) in self.listeners.iter_mut().enumerate() {
            self.poll
                .registry()
                .register(&mut l.sock, Token(i), Interest::READABLE)?;
        }
        // HTTP/3 is advertised on every response (RFC 7838), unless a site's own `add_header`
        // says otherwise: `Alt-Svc: h3=":PORT"` with the port QUIC actually bound.
        let alt_svc = self
            .quic
            .as_ref()
            .and_then(|(sock, _, _)| sock.local_addr().ok())
            .map(|a| format!("Alt-Svc: h3=\":{}\"; ma=86400", a.port()));
        if let Some(line) = &alt_svc {
            router.add_default_header(line);
        }
        let quic = match self.quic.take() {
            Some((sock, inbox, shared)) => Some(QuicWorker::new(
                self.index,
                sock,
                QUIC,
                inbox,
                QUIC_HANDOFF,
                self.poll.registry(),
                shared,
                crate::h3::protocol_for,
            )?),
            None => None,
        };
        // Datagrams were left unread (the per-turn budget ran out): poll without waiting.
        let mut quic_more = false;
        let mut events = Events::with_capacity(EVENTS_CAPACITY);
        let mut clients = Clients {
            conns: Slab::new(),
            quic,
        };
        let mut pool = BufferPool::default();
        let mut date = DateCache::new();
        let mut scratch = Vec::new();
        let mut file_chunk = Vec::new();
        let mut counters = crate::metrics::Counters::default();
        let mut access_log = cfg
            .access_log
            .as_ref()
            .map(|c| crate::access_log::WorkerLog::new(std::sync::Arc::clone(c), Instant::now()));
        let mut deferred = Vec::new();
        let mut deferred_now = Vec::new();
        let mut holds = crate::hold::Timers::default();
        let mut released = Vec::new();
        let mut upstreams = Upstreams::default();
        let mut proxy_starts = Vec::new();
        let mut proxy_cancels = Vec::new();
        let mut relays = Vec::new();
        let sweep_every =
            (cfg.shortest_timeout() / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut next_sweep = Instant::now() + sweep_every;
        let mut accept_paused = false;
        let mut accept_retry_at: Option<Instant> = None;
        let mut shutting_down = false;
        let mut handing_over = false;
        let mut grace_deadline = None;
        // The router was built from generation 0; a reload before this thread started shows.
        let mut generation = 0;

        // What a connection (or the upstream side) may use of this worker while it is driven:
        // everything the worker owns, lent for one call.
        let timed = cfg.metrics.is_some() || cfg.access_log.is_some();
        macro_rules! worker_ctx {
            ($token:expr, $now:expr, $shutting_down:expr) => {
                WorkerCtx {
                    cfg,
                    registry: self.poll.registry(),
                    pool: &mut pool,
                    router: &mut router,
                    date: &date,
                    scratch: &mut scratch,
                    file_chunk: &mut file_chunk,
                    access_log: access_log.as_mut(),
                    counters: &mut counters,
                    proxy_starts: &mut proxy_starts,
                    proxy_cancels: &mut proxy_cancels,
                    deferred: &mut deferred,
                    holds: &mut holds,
                    token: $token,
                    worker: self.index,
                    now: $now,
                    timed,
                    shutting_down: $shutting_down,
                    handing_over,
                }
            };
        }

        loop {
            // A reload: the next requests are answered by a router built from the new service.
            let latest = self.services.generation();
            if latest != generation {
                generation = latest;
                router =
                    (self.services.current())(&crate::service::WorkerInfo { index: self.index });
                if let Some(line) = &alt_svc {
                    router.add_default_header(line);
                }
                // The new router's groups start with empty pools: the old ones' connections
                // would never be chosen again.
                let mut ctx = worker_ctx!(Token(0), Instant::now(), shutting_down);
                upstreams.retire_groups(&mut ctx);
                clients.start_forwarded(&mut upstreams, &mut ctx);
            }
            let now = Instant::now();
            let timeout = if deferred.is_empty() && !quic_more {
                let wake = clients
                    .quic
                    .as_ref()
                    .and_then(QuicWorker::next_timer)
                    .map_or(next_sweep, |t| t.min(next_sweep));
                let wake = upstreams.fastcgi_check_at.map_or(wake, |t| t.min(wake));
                let wake = holds.next().map_or(wake, |t| t.min(wake));
                wake.saturating_duration_since(now)
            } else {
                Duration::ZERO
            };
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            let now = Instant::now();
            crate::clock::set_loop_now(now);
            date.refresh();

            if !shutting_down && self.shutdown.load(Ordering::Acquire) {
                shutting_down = true;
                handing_over = self.handing_over.load(Ordering::Acquire);
                grace_deadline = Some(now + cfg.grace);
                for l in &mut self.listeners {
                    let _ = self.poll.registry().deregister(&mut l.sock);
                }
                self.listeners.clear();
                next_sweep = now; // close idle connections right away
                if let Some(q) = &mut clients.quic {
                    let mut ctx = worker_ctx!(QUIC, now, shutting_down);
                    q.shut_down(now, &mut ctx);
                    clients.settle(&mut upstreams, QUIC, &mut ctx, &mut relays);
                }
            }

            // The waker rang: shutdown and reload are flags read above; the cache's news (a
            // flight ended, a refresh queued) is handled after this turn's events.
            let mut rung = false;
            for event in &events {
                let token = event.token();
                if token == WAKER {
                    rung = true;
                    continue;
                }
                if token == QUIC {
                    if let Some(q) = &mut clients.quic {
                        let mut ctx = worker_ctx!(QUIC, now, shutting_down);
                        // Or-ed: an event that only says writable leaves what was unread.
                        quic_more |= q.on_event(
                            event.is_readable() || event.is_error(),
                            event.is_writable(),
                            now,
                            &mut ctx,
                        );
                        clients.settle(&mut upstreams, QUIC, &mut ctx, &mut relays);
                    }
                    continue;
                }
                if token == QUIC_HANDOFF {
                    if let Some(q) = &mut clients.quic {
                        let mut ctx = worker_ctx!(QUIC, now, shutting_down);
                        quic_more |= q.on_inbox(now, &mut ctx);
                        clients.settle(&mut upstreams, QUIC, &mut ctx, &mut relays);
                    }
                    continue;
                }
                if token.0 < FIRST_CONN {
                    if !shutting_down && !accept_paused {
                        let listener = &self.listeners[token.0];
                        let paused = accept_all(
                            listener,
                            &mut clients.conns,
                            self.poll.registry(),
                            cfg,
                            now,
                            &mut counters,
                        );
                        if let Some(paused) = paused {
                            accept_paused = true;
                            accept_retry_at = paused.then_some(now + ACCEPT_BACKOFF);
                            counters.accept_pauses += 1;
                            say_paused(self.index, paused, clients.conns.len());
                        }
                    }
                    continue;
                }
                if is_upstream(token) {
                    let mut ctx = worker_ctx!(token, now, shutting_down);
                    let ready = Readiness {
                        readable: event.is_readable() || event.is_read_closed() || event.is_error(),
                        writable: event.is_writable()
                            || event.is_write_closed()
                            || event.is_error(),
                        // The peer's FIN or a reset: a short read no longer means drained.
                        closed: event.is_read_closed() || event.is_error(),
                    };
                    // What the client does while its response is relayed (answer the requests
                    // pipelined behind it, forward the next) is on the client's behalf.
                    clients.upstream_event(&mut upstreams, token, ready, &mut ctx, &mut relays);
                    continue;
                }
                let Some(conn) = clients.conns.get_mut(token.0 - FIRST_CONN) else {
                    continue;
                };
                let mut ctx = worker_ctx!(token, now, shutting_down);
                conn.on_event(
                    &mut ctx,
                    event.is_readable() || event.is_error(),
                    event.is_read_closed(),
                    event.is_writable() || event.is_write_closed(),
                );
                clients.settle(&mut upstreams, token, &mut ctx, &mut relays);
            }

            // What HTTP/2 upstream connections read (or failed) reaches each client concerned.
            {
                let mut ctx = worker_ctx!(Token(0), now, shutting_down);
                clients.deliver_touched(&mut upstreams, &mut ctx, &mut relays);
                if rung {
                    clients.cache_news(&mut upstreams, &mut ctx, &mut relays);
                    // Or another worker asked for a php-fpm process its idle connections hold.
                    upstreams.give_back_asked(&mut ctx);
                    clients.start_forwarded(&mut upstreams, &mut ctx);
                }
            }

            // php-fpm connections that may wait behind idle ones, once it can be told.
            if upstreams.fastcgi_check_at.is_some_and(|t| now >= t) {
                let mut ctx = worker_ctx!(Token(0), now, shutting_down);
                upstreams.release_for_queued(&mut ctx);
                clients.start_forwarded(&mut upstreams, &mut ctx);
            }

            // QUIC: datagrams left over from a busy turn, then the timers due.
            if let Some(q) = &mut clients.quic {
                let mut ctx = worker_ctx!(QUIC, now, shutting_down);
                if quic_more {
                    quic_more = q.receive(now, &mut ctx);
                }
                q.on_timers(now, &mut ctx);
                clients.settle(&mut upstreams, QUIC, &mut ctx, &mut relays);
            }

            // Held requests whose time has come go on (`crate::hold`).
            holds.take_due(now, &mut released);
            for token in released.drain(..) {
                if crate::quic::owns_client(token) {
                    if let Some(q) = &mut clients.quic {
                        let mut ctx = worker_ctx!(QUIC, now, shutting_down);
                        q.release_held(token, &mut ctx);
                        clients.settle(&mut upstreams, QUIC, &mut ctx, &mut relays);
                    }
                    continue;
                }
                let Some(conn) = token
                    .0
                    .checked_sub(FIRST_CONN)
                    .and_then(|k| clients.conns.get_mut(k))
                else {
                    continue;
                };
                let mut ctx = worker_ctx!(token, now, shutting_down);
                conn.release_held(&mut ctx);
                clients.settle(&mut upstreams, token, &mut ctx, &mut relays);
            }

            // File sends and upstream relays that yielded their turn continue now.
            std::mem::swap(&mut deferred, &mut deferred_now);
            for token in deferred_now.drain(..) {
                if is_upstream(token) {
                    // Still marked readable: the drive reads on where it stopped.
                    let mut ctx = worker_ctx!(token, now, shutting_down);
                    let again = Readiness {
                        readable: false,
                        writable: false,
                        closed: false,
                    };
                    clients.upstream_event(&mut upstreams, token, again, &mut ctx, &mut relays);
                    continue;
                }
                let Some(conn) = clients.conns.get_mut(token.0 - FIRST_CONN) else {
                    continue;
                };
                let mut ctx = worker_ctx!(token, now, shutting_down);
                conn.drive(&mut ctx);
                clients.settle(&mut upstreams, token, &mut ctx, &mut relays);
            }

            if let Some(log) = &mut access_log {
                log.tick(now);
            }
            if now >= next_sweep {
                next_sweep = now + sweep_every;
                let mut ctx = worker_ctx!(Token(0), now, shutting_down);
                let mut idle = 0;
                clients.conns.retain(|key, conn| {
                    ctx.token = Token(key + FIRST_CONN);
                    let timed_out = now >= conn.deadline();
                    if timed_out {
                        ctx.counters.timed_out += 1;
                        conn.expire(&mut ctx);
                    } else if shutting_down {
                        conn.shut_down(&mut ctx);
                    }
                    idle += u64::from(!conn.closed() && conn.is_idle());
                    !conn.closed()
                });
                if let Some(q) = &mut clients.quic {
                    q.sweep(&mut ctx);
                    clients.settle(&mut upstreams, QUIC, &mut ctx, &mut relays);
                }
                while let Some(up) = ctx.proxy_cancels.pop() {
                    upstreams.cancel(up, &mut ctx);
                }
                upstreams.release_for_queued(&mut ctx);
                clients.start_forwarded(&mut upstreams, &mut ctx);
                // Upstream timeouts: 504 (or a cut response) to their clients; idle pooled
                // connections past their keep-alive time close.
                for up in upstreams.expired(now) {
                    clients.upstream_expired(&mut upstreams, up, &mut ctx, &mut relays);
                }
                // Requests that waited for another's fill past their time go on their own.
                clients.release_waiters(&mut upstreams, &mut ctx, &mut relays);
                clients.deliver_touched(&mut upstreams, &mut ctx, &mut relays);
                if let Some(registry) = &cfg.metrics {
                    counters.open = clients.conns.len() as u64;
                    counters.idle = idle;
                    let (hits, misses, bytes) = crate::files::cache_stats();
                    counters.cache_hits = hits;
                    counters.cache_misses = misses;
                    counters.cache_bytes = bytes as u64;
                    counters.compress = crate::compress::stats();
                    if let Some(q) = &clients.quic {
                        let c = q.counts;
                        counters.quic = [c.accepted, c.retries, c.refused, q.len() as u64];
                    }
                    registry.publish(self.index, &counters);
                }
            }

            if shutting_down {
                let quic_open = clients.quic.as_ref().map_or(0, QuicWorker::len);
                if (clients.conns.is_empty() && quic_open == 0)
                    || grace_deadline.is_some_and(|d| now >= d)
                {
                    if let Some(q) = &clients.quic {
                        q.report();
                    }
                    return Ok(());
                }
                continue;
            }

            // Resume accepting once below the limit, or after the EMFILE back-off.
            if accept_paused
                && clients.conns.len() < cfg.max_conns_per_worker
                && accept_retry_at.is_none_or(|t| now >= t)
            {
                accept_paused = false;
                accept_retry_at = None;
                for listener in &self.listeners {
                    if let Some(paused) = accept_all(
                        listener,
                        &mut clients.conns,
                        self.poll.registry(),
                        cfg,
                        now,
                        &mut counters,
                    ) {
                        accept_paused = true;
                        accept_retry_at = paused.then_some(now + ACCEPT_BACKOFF);
                        break;
                    }
                }
            }
            if accept_retry_at.is_some() {
                next_sweep = next_sweep.min(accept_retry_at.unwrap_or(next_sweep));
            }
        }
    }
}

/// Says why accepting paused: once per pause, never per connection.
fn say_paused(worker: usize, out_of_descriptors: bool, open: usize) {
    if out_of_descriptors {
        tracing::warn!(
            worker,
            open,
            "accept failed (out of descriptors or memory): new connections wait in the backlog; \
             retrying in 100 ms"
        );
    } else {
        tracing::info!(
            worker,
            open,
            "connection limit reached (--max-conns): new connections wait in the backlog"
        );
    }
}

/// Accepts until the backlog is empty. Returns `Some(false)` when the connection limit stopped
/// it, `Some(true)` when the process ran out of descriptors or memory (back off), `None` when
/// the backlog was drained.
fn accept_all(
    listener: &Listener,
    conns: &mut Slab<Connection>,
    registry: &Registry,
    cfg: &ServerConfig,
    now: Instant,
    counters: &mut crate::metrics::Counters,
) -> Option<bool> {
    loop {
        if conns.len() >= cfg.max_conns_per_worker {
            return Some(false);
        }
        match listener.sock.accept() {
            Ok((mut stream, peer)) => {
                let _ = stream.set_nodelay(true);
                let entry = conns.vacant_entry();
                let token = Token(entry.key() + FIRST_CONN);
                if registry
                    .register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)
                    .is_err()
                {
                    continue;
                }
                counters.accepted += 1;
                // One branch per connection, and only a listener marked for it looks further.
                if listener.proxy_protocol && cfg.proxy_protocol.expected_from(peer.ip()) {
                    let deadline = now + cfg.header_timeout;
                    let header = AwaitingHeader::new(stream, peer, listener.tls, deadline);
                    entry.insert(Connection::awaiting_header(header));
                    continue;
                }
                let Some((io, first_deadline)) =
                    crate::proxied::transport(cfg, stream, listener.tls)
                else {
                    continue;
                };
                entry.insert(Connection::accepted(io, peer, now, first_deadline));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
            Err(e) => match e.raw_os_error() {
                // The client gave up before we accepted it, or a signal: take the next one.
                Some(libc::ECONNABORTED | libc::EINTR | libc::EPROTO | libc::EPERM) => {}
                // Out of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) or anything
                // unexpected: back off instead of spinning on an error that will repeat.
                _ => {
                    tracing::debug!(errno = e.raw_os_error(), "accept: {e}");
                    return Some(true);
                }
            },
        }
    }
}
