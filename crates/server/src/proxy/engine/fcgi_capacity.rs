//! How many connections this worker holds to a php-fpm. php-fpm gives each connection a process
//! for as long as it stays open, so a connection past the processes it has waits in its backlog
//! behind idle pooled ones. This learns how many php-fpm serves at once, closes a connection
//! rather than pooling it while one of this worker's may be queued, keeps further requests in the
//! worker (`fcgi_queue`) once php-fpm is full, and frees processes that other workers ask for
//! (`fcgi_share`).

use std::time::Instant;

use super::Upstreams;
use crate::ctx::WorkerCtx;
use crate::proxy::group::WorkerGroup;
use crate::proxy::upstream::{Phase, UpConn};

/// How long a new php-fpm connection's request must have waited unread to count as queued in
/// php-fpm's backlog rather than about to be read by a process coming for it (see
/// `Upstreams::fastcgi_queued`): a process that is free takes a connection well within it,
/// even on a loaded machine, where a shorter wait was mistaken for a queue and every request
/// cost a connection; a connection truly queued waits this much longer before a process is
/// freed for it.
const QUEUED_AFTER: std::time::Duration = std::time::Duration::from_millis(20);

/// How often a worker whose php-fpm serves all it can tries one connection more (see
/// `Upstreams::fastcgi_at_capacity`).
pub(super) const FASTCGI_PROBE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

impl Upstreams {
    /// Whether a connection of this worker to connection `key`'s FastCGI server may be queued
    /// in php-fpm's backlog, so that `key`, whose exchange just ended, is closed rather than
    /// pooled. php-fpm gives each connection a process of its own for as long as it stays open
    /// (`FCGI_KEEP_CONN`), so a connection kept in the pool holds a process that a queued
    /// connection may be waiting for; closed, its process takes the next one. (Pooled
    /// connections and php-fpm's `pm.max_children`: docs/php.md.)
    ///
    /// None can be queued while this worker has no more connections open to the server than
    /// php-fpm has been seen to serve at once (each connection that has had a byte of answer,
    /// or whose request php-fpm has read, holds a process): requests that merely overlap then
    /// keep their connections. Beyond
    /// that, queued is a new connection (none of its requests answered) with no byte of
    /// answer of whose request php-fpm has read nothing for [`QUEUED_AFTER`]: over a Unix socket the
    /// kernel says so (its request unread); over TCP it cannot (it acknowledges bytes no one
    /// has read), and any new connection still waiting that long counts. One waiting less
    /// long may be about to be read: the connection is pooled, and the worker looks again
    /// when the time is up ([`Upstreams::fastcgi_check_at`]). A
    /// process held elsewhere (another worker's pool) can make the count wrong: the sweep's
    /// [`Upstreams::release_for_queued`] then frees one.
    pub(super) fn fastcgi_queued(&mut self, key: usize, now: Instant) -> bool {
        let (open, mut held) = self.fastcgi_seen(key);
        let c = &self.conns[key];
        let same = |o: &UpConn| o.server == c.server && std::rc::Rc::ptr_eq(&o.group, &c.group);
        let mut capacity = c.group.fastcgi_capacity.borrow_mut();
        let seen = &mut capacity[c.server];
        if open <= *seen {
            return false;
        }
        // The new connections still waiting: one whose request php-fpm has not read for a
        // while is queued; those it has read hold a process (and teach how many it serves).
        let mut recheck: Option<Instant> = None;
        for (k, o) in self.conns.iter().filter(|(_, o)| same(o)) {
            if k == key || o.reused || o.got_bytes {
                continue;
            }
            let taken = match o.phase {
                Phase::Connecting => return true,
                Phase::Sending | Phase::Waiting => request_taken(o),
                _ => continue,
            };
            if taken == Some(true) {
                held += 1;
                *seen = (*seen).max(held);
                if open <= *seen {
                    return false;
                }
            } else if now.saturating_duration_since(o.sent_at) > QUEUED_AFTER {
                return true;
            } else {
                let at = o.sent_at + QUEUED_AFTER;
                recheck = Some(recheck.map_or(at, |r| r.min(at)));
            }
        }
        drop(capacity);
        if let Some(at) = recheck {
            // Too soon to tell: kept for now, looked at again once it is not.
            let next = self.fastcgi_check_at.map_or(at, |t| t.min(at));
            self.fastcgi_check_at = Some(next);
        }
        false
    }

    /// Whether this worker holds as many connections to FastCGI `server` of `group` as it may
    /// at `now`: once one of its requests was seen queued in php-fpm's backlog, as many as
    /// php-fpm has been seen to serve at once — and one more every [`FASTCGI_PROBE_EVERY`], to
    /// find out whether it serves more now (a dynamic pool grows); queued too, that one costs
    /// a pooled connection closed to free a process for it.
    pub(super) fn fastcgi_at_capacity(
        &self,
        group: &std::rc::Rc<WorkerGroup>,
        server: usize,
        now: Instant,
    ) -> bool {
        let Some(probe_at) = group.fastcgi_full.borrow()[server] else {
            return false;
        };
        let allowed = group.fastcgi_capacity.borrow()[server] + usize::from(now >= probe_at);
        group.fastcgi_open.borrow()[server] >= allowed
    }

    /// A connection to FastCGI `server` of `group` came free (pooled) or closed: the request
    /// that has waited longest for one is started (by the client side's settle, on its
    /// client's behalf).
    pub(super) fn wake_waiter(
        &mut self,
        group: &std::rc::Rc<WorkerGroup>,
        server: usize,
        ctx: &mut WorkerCtx<'_>,
    ) {
        if self.fcgi_waiting.is_empty() {
            return;
        }
        if let Some((client, job)) = self.fcgi_waiting.next_for(group, server) {
            ctx.proxy_starts.push((client.0, client.1, job));
        }
    }

    /// Learns how many of this worker's connections to connection `key`'s php-fpm hold a
    /// process at once (each that has had a byte of answer): at least that many are served.
    /// Returns the connections open to it and those holding a process.
    pub(super) fn fastcgi_seen(&self, key: usize) -> (usize, usize) {
        let c = &self.conns[key];
        let (mut open, mut held) = (0, 0);
        for (_, o) in &self.conns {
            if o.server == c.server && std::rc::Rc::ptr_eq(&o.group, &c.group) {
                open += 1;
                held += usize::from(o.reused || o.got_bytes);
            }
        }
        let mut capacity = c.group.fastcgi_capacity.borrow_mut();
        capacity[c.server] = capacity[c.server].max(held);
        (open, held)
    }

    /// The sweep's part for php-fpm, and what runs at [`Upstreams::fastcgi_check_at`]: a new
    /// connection whose request has waited unread (over TCP: without a byte of answer) longer
    /// than [`QUEUED_AFTER`] while this worker pools
    /// idle connections to the same php-fpm (through any group: `--php` and a `--proxy` rule
    /// may name one pool) is queued behind processes those hold — which `fastcgi_queued` did
    /// not foresee (another group's or worker's connections hold processes too). One idle
    /// connection closes per such server and sweep, its process takes the queued one, and what
    /// was learnt of the server's capacity is forgotten. With no idle connection of its own to
    /// close, the worker asks the others that pool connections to the server to give a process
    /// back (`proxy::fcgi_share`); and it gives back what others asked of it.
    pub(crate) fn release_for_queued(&mut self, ctx: &mut WorkerCtx<'_>) {
        let now = ctx.now;
        let mut stuck: Vec<(
            crate::proxy::config::UpstreamAddr,
            std::rc::Rc<WorkerGroup>,
            usize,
        )> = Vec::new();
        // A request not yet waiting long enough is looked at again when it has: a sweep must
        // not drop the recheck `fastcgi_queued` asked for.
        let mut recheck: Option<Instant> = None;
        for (_, o) in &self.conns {
            if o.fcgi.is_none()
                || o.reused
                || o.got_bytes
                || !matches!(o.phase, Phase::Sending | Phase::Waiting)
                || request_taken(o) == Some(true)
            {
                continue;
            }
            if now.saturating_duration_since(o.sent_at) <= QUEUED_AFTER {
                let at = o.sent_at + QUEUED_AFTER;
                recheck = Some(recheck.map_or(at, |r| r.min(at)));
                continue;
            }
            let addr = &o.group.cfg.servers[o.server].addr;
            if !stuck.iter().any(|(a, _, _)| a == addr) {
                stuck.push((addr.clone(), std::rc::Rc::clone(&o.group), o.server));
            }
        }
        self.fastcgi_check_at = recheck;
        for (addr, asking, asked) in stuck {
            let idle = self.conns.iter().find_map(|(k, c)| {
                (c.phase == Phase::Idle && c.group.cfg.servers[c.server].addr == addr)
                    .then(|| (k, std::rc::Rc::clone(&c.group), c.server))
            });
            if let Some((key, group, server)) = idle {
                group.fastcgi_capacity.borrow_mut()[server] = 0;
                self.close(key, ctx);
            } else {
                let own = crate::own_waker::get();
                asking.health.fastcgi.ask(asked, own.as_ref());
            }
        }
        self.give_back_asked(ctx);
    }

    /// Another worker asked for a process of a FastCGI server this worker pools connections to
    /// (`proxy::fcgi_share`): one idle connection to it closes, and php-fpm's process takes the
    /// connection queued in its backlog. Run when the worker is rung and at each sweep; an ask
    /// no idle connection answers is taken by the next exchange to end (`finish`).
    pub(crate) fn give_back_asked(&mut self, ctx: &mut WorkerCtx<'_>) {
        let give: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                c.phase == Phase::Idle
                    && is_fastcgi(&c.group, c.server)
                    && c.group.health.fastcgi.take_ask(c.server)
            })
            .map(|(k, _)| k)
            .collect();
        for key in give {
            self.close(key, ctx);
        }
    }
}

/// Whether a process has taken connection `o`'s request. Over a Unix socket the kernel counts
/// what the reader has not consumed (`SIOCOUTQ`, in the weight of the buffers each write made,
/// freed only when read whole). A connection waiting in php-fpm's backlog has all its request
/// there; a process that takes it reads the records up to the parameters at once, but the
/// request's last, empty `STDIN` record only when the script asks for its input. So the last
/// record of a new connection's request goes in a write of its own ([`split_tail`]): while its
/// script runs, only that write's weight is left ([`tail_weight`]), where a request in the
/// backlog leaves both. `None` over TCP (see `Sock::unread_output`).
pub(super) fn request_taken(o: &UpConn) -> Option<bool> {
    let unread = o.sock.unread_output()?;
    let sent_split = o.phase == Phase::Waiting && split_tail(o).is_some();
    Some(unread == 0 || (sent_split && unread <= tail_weight()))
}

/// The length of the request's head to write before its last record, for a new connection to
/// php-fpm over a Unix socket (see [`request_taken`]); `None` for any other: a reused
/// connection holds its process already, and over TCP nothing is learnt from it.
pub(super) fn split_tail(c: &UpConn) -> Option<usize> {
    const RECORD_HEADER: usize = 8;
    if c.reused || c.fcgi.is_none() || !matches!(c.sock, crate::proxy::upstream::Sock::Unix(_)) {
        return None;
    }
    let len = c.job.as_ref()?.request.len();
    len.checked_sub(RECORD_HEADER).filter(|&n| n > 0)
}

/// What the kernel counts for one 8-byte write left unread on a Unix stream socket (the weight
/// of its buffer, not its bytes), measured once on a socket pair of the process's own; 0 when
/// it cannot be, which leaves [`request_taken`] to "nothing unread" alone.
fn tail_weight() -> usize {
    static WEIGHT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *WEIGHT.get_or_init(|| {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        let Ok((mut a, _b)) = std::os::unix::net::UnixStream::pair() else {
            return 0;
        };
        if a.write_all(&[0; 8]).is_err() {
            return 0;
        }
        let mut n: libc::c_int = 0;
        // SAFETY: SIOCOUTQ (TIOCOUTQ's number on Linux) writes one c_int through the pointer,
        // which points at `n`, alive for the call; the descriptor is `a`'s, open.
        let rc = unsafe { libc::ioctl(a.as_raw_fd(), libc::TIOCOUTQ, &raw mut n) };
        if rc == 0 {
            usize::try_from(n).unwrap_or(0)
        } else {
            0
        }
    })
}

/// Whether `server` of `group` is a FastCGI server.
pub(super) fn is_fastcgi(group: &WorkerGroup, server: usize) -> bool {
    group.cfg.servers[server].fastcgi
}
