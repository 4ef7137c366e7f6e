//! One worker's view of an upstream group: the balancer's state, the requests in flight per
//! server, the idle keep-alive connections of each server, and reusable request buffers — all
//! owned by the worker (no lock), beside the health state that every worker shares.

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use super::config::{Balance, UpstreamGroup};
use super::health::GroupHealth;

/// Virtual points per unit of weight on the hash ring (ketama uses 160 per server).
const RING_POINTS: u32 = 160;
/// Request buffers kept for reuse per group and worker.
const SPARE_BUFFERS: usize = 64;

/// A group as one worker uses it.
#[derive(Debug)]
pub(crate) struct WorkerGroup {
    pub(crate) cfg: Arc<UpstreamGroup>,
    pub(crate) health: Arc<GroupHealth>,
    /// Smooth weighted round-robin: each server's current weight.
    current: RefCell<Vec<i64>>,
    /// Requests in flight from this worker, per server (least-connections).
    pub(crate) active: RefCell<Vec<u32>>,
    /// Idle pooled connections per server: keys of the worker's upstream connections.
    pub(crate) idle: RefCell<Vec<Vec<usize>>>,
    /// The consistent-hash ring: (point, server), sorted by point.
    ring: Vec<(u64, usize)>,
    spare: RefCell<Vec<Vec<u8>>>,
    /// Requests forwarded through this group by this worker (for a request id).
    pub(crate) sequence: Cell<u64>,
    /// A reload replaced this group: its connections are closed once idle, never pooled.
    pub(crate) retired: Cell<bool>,
    /// FastCGI servers: the most connections of this worker php-fpm has been seen to hold a
    /// process for at once, per server (see `Upstreams::fastcgi_queued`).
    pub(crate) fastcgi_capacity: RefCell<Vec<usize>>,
    /// FastCGI servers: once a request of this worker was seen queued in php-fpm's backlog,
    /// requests beyond its capacity wait in the worker instead (`super::fcgi_queue`), and one
    /// connection more may be tried from this instant on.
    pub(crate) fastcgi_full: RefCell<Vec<Option<std::time::Instant>>>,
    /// FastCGI servers: this worker's connections open to each (kept on connect and removal,
    /// so that the queue's check is no scan of them all).
    pub(crate) fastcgi_open: RefCell<Vec<usize>>,
    /// This worker's waker was given to the group's shared FastCGI state (once it pooled a
    /// connection: it may then be asked for a process back).
    pub(crate) fastcgi_registered: Cell<bool>,
}

impl WorkerGroup {
    pub(crate) fn new(cfg: Arc<UpstreamGroup>, health: Arc<GroupHealth>) -> Self {
        let n = cfg.servers.len();
        let mut ring = Vec::new();
        if matches!(cfg.balance, Balance::Hash(_)) {
            for (i, s) in cfg.servers.iter().enumerate() {
                for p in 0..RING_POINTS * s.weight.max(1) {
                    ring.push((fnv(format!("{}-{p}", s.label).as_bytes()), i));
                }
            }
            ring.sort_unstable();
        }
        Self {
            cfg,
            health,
            current: RefCell::new(vec![0; n]),
            active: RefCell::new(vec![0; n]),
            idle: RefCell::new(vec![Vec::new(); n]),
            ring,
            spare: RefCell::new(Vec::new()),
            sequence: Cell::new(0),
            retired: Cell::new(false),
            fastcgi_capacity: RefCell::new(vec![0; n]),
            fastcgi_full: RefCell::new(vec![None; n]),
            fastcgi_open: RefCell::new(vec![0; n]),
            fastcgi_registered: Cell::new(false),
        }
    }

    /// Chooses a server for a request (`hash` is the request's key under hashing), skipping
    /// those that are down and `exclude` (the one a retry failed on). `None` when none is up.
    pub(crate) fn choose(&self, hash: u64, exclude: Option<usize>, now_ms: u64) -> Option<usize> {
        let usable = |i: usize| Some(i) != exclude && self.health.is_up(i, now_ms);
        let n = self.cfg.servers.len();
        if n == 1 {
            return usable(0).then_some(0);
        }
        match &self.cfg.balance {
            Balance::RoundRobin => self.round_robin(usable),
            Balance::LeastConn => {
                // The fewest in flight relative to weight (a/wa < b/wb ⇔ a·wb < b·wa); ties
                // share by weighted round-robin, as nginx's least_conn does.
                let active = self.active.borrow();
                let load = |i: usize| {
                    (
                        u64::from(active[i]),
                        u64::from(self.cfg.servers[i].weight.max(1)),
                    )
                };
                let best = (0..n).filter(|&i| usable(i)).min_by(|&a, &b| {
                    let ((la, wa), (lb, wb)) = (load(a), load(b));
                    (la * wb).cmp(&(lb * wa))
                })?;
                let (lb, wb) = load(best);
                drop(active);
                self.round_robin(|i| {
                    usable(i) && {
                        let active = self.active.borrow();
                        u64::from(active[i]) * wb
                            == lb * u64::from(self.cfg.servers[i].weight.max(1))
                    }
                })
            }
            Balance::Hash(_) => {
                let start = self.ring.partition_point(|&(p, _)| p < hash);
                (0..self.ring.len())
                    .map(|k| self.ring[(start + k) % self.ring.len()].1)
                    .find(|&i| usable(i))
            }
        }
    }

    /// nginx's smooth weighted round-robin over the servers `usable` accepts: every one gains its
    /// weight, the highest is chosen and loses the total.
    fn round_robin(&self, usable: impl Fn(usize) -> bool) -> Option<usize> {
        let mut current = self.current.borrow_mut();
        let mut total = 0i64;
        let mut best: Option<usize> = None;
        for i in 0..self.cfg.servers.len() {
            if !usable(i) {
                continue;
            }
            let w = i64::from(self.cfg.servers[i].weight.max(1));
            current[i] += w;
            total += w;
            if best.is_none_or(|b| current[i] > current[b]) {
                best = Some(i);
            }
        }
        let b = best?;
        current[b] -= total;
        Some(b)
    }

    /// A buffer for a request to this group (reused once warm).
    pub(crate) fn take_buffer(&self) -> Vec<u8> {
        self.spare.borrow_mut().pop().unwrap_or_default()
    }

    /// Gives a request buffer back.
    pub(crate) fn give_buffer(&self, mut buf: Vec<u8>) {
        let mut spare = self.spare.borrow_mut();
        if spare.len() < SPARE_BUFFERS && buf.capacity() <= 64 * 1024 {
            buf.clear();
            spare.push(buf);
        }
    }
}

/// The hash of ring points and keys: FNV-1a, 64 bits, then murmur3's finaliser (FNV alone
/// leaves similar short strings close together, which bunches a ring's points). Stable across
/// runs and workers, so every worker sends a key to the same server.
pub(crate) fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::config::{HashKey, UpstreamAddr, UpstreamServer, UpstreamTimeouts};
    use std::time::Duration;

    fn group(weights: &[u32], balance: Balance) -> WorkerGroup {
        let cfg = UpstreamGroup {
            name: "g".into(),
            servers: weights
                .iter()
                .enumerate()
                .map(|(i, &w)| UpstreamServer {
                    addr: UpstreamAddr::Tcp(format!("127.0.0.1:{}", 9000 + i).parse().unwrap()),
                    label: format!("127.0.0.1:{}", 9000 + i),
                    weight: w,
                    tls: None,
                    h2: false,
                    fastcgi: false,
                })
                .collect(),
            balance,
            timeouts: UpstreamTimeouts {
                connect: Duration::from_secs(1),
                first_byte: Duration::from_secs(1),
                read: Duration::from_secs(1),
                write: Duration::from_secs(1),
                tunnel_idle: Duration::from_secs(1),
            },
            max_body: 1 << 20,
            keepalive: 8,
            keepalive_timeout: Duration::from_secs(60),
            max_fails: 1,
            fail_timeout: Duration::from_secs(10),
            health: None,
            fastcgi: false,
            fastcgi_params: Vec::new(),
            send_proxy_protocol: 0,
        };
        let health = Arc::new(GroupHealth::new(&cfg, 1));
        WorkerGroup::new(Arc::new(cfg), health)
    }

    #[test]
    fn weighted_round_robin_is_smooth() {
        let g = group(&[5, 1, 1], Balance::RoundRobin);
        let picks: Vec<usize> = (0..7).map(|_| g.choose(0, None, 0).unwrap()).collect();
        // nginx's sequence for weights 5, 1, 1: a a b a c a a.
        assert_eq!(picks, [0, 0, 1, 0, 2, 0, 0]);
    }

    #[test]
    fn a_failed_server_is_skipped_and_excluded() {
        let g = group(&[1, 1], Balance::RoundRobin);
        g.health.failed(0, 1000);
        for _ in 0..4 {
            assert_eq!(g.choose(0, None, 1000), Some(1));
        }
        assert_eq!(g.choose(0, Some(1), 1000), None);
        // Back after fail_timeout.
        assert!(g.choose(0, Some(1), 1000 + 10_001).is_some());
    }

    #[test]
    fn least_connections() {
        let g = group(&[1, 1, 1], Balance::LeastConn);
        g.active.borrow_mut().copy_from_slice(&[3, 1, 2]);
        assert_eq!(g.choose(0, None, 0), Some(1));
        // Ties take turns.
        g.active.borrow_mut().copy_from_slice(&[0, 0, 0]);
        let picks: Vec<usize> = (0..3).map(|_| g.choose(0, None, 0).unwrap()).collect();
        assert_eq!(
            picks.iter().collect::<std::collections::HashSet<_>>().len(),
            3
        );
    }

    #[test]
    fn consistent_hash_moves_only_the_lost_servers_keys() {
        let g = group(&[1, 1, 1, 1], Balance::Hash(HashKey::Client));
        let keys: Vec<u64> = (0..1000)
            .map(|k| fnv(format!("10.0.0.{k}").as_bytes()))
            .collect();
        let before: Vec<usize> = keys
            .iter()
            .map(|&k| g.choose(k, None, 0).unwrap())
            .collect();
        g.health.failed(2, 0);
        let after: Vec<usize> = keys
            .iter()
            .map(|&k| g.choose(k, None, 0).unwrap())
            .collect();
        for (b, a) in before.iter().zip(&after) {
            if *b != 2 {
                assert_eq!(a, b, "a key of a server still up moved");
            } else {
                assert_ne!(*a, 2);
            }
        }
        let on: Vec<usize> = (0..4)
            .map(|s| before.iter().filter(|&&b| b == s).count())
            .collect();
        assert!(on.iter().all(|&n| n > 150), "uneven ring: {on:?}");
    }
}
