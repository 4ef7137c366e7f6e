//! Rate-limit zones kept in Redis (`redis=`), so that many instances behind one balancer hold
//! one limit: what each instance admits, per key, is added up in Redis, and each instance adds
//! what the others admitted to its own bucket for the key.
//!
//! # Why this shape
//! Workers run one event loop per core and must never wait on Redis, slow or dead: a round
//! trip per request would put Redis's latency (and its failures) on every limited request. So
//! the decision stays local — the zone's bucket per key, one compare-and-swap, as in a zone of
//! one instance — and the counting with the fleet happens beside it, on one thread per zone
//! that every [`EXCHANGE_INTERVAL`]:
//!
//! 1. takes, from every key it tracks, the requests this instance admitted since the last
//!    exchange (a counter in the key's bucket, swapped to zero);
//! 2. in one pipelined round trip, adds them to the key's total in Redis (`INCRBY`, `PEXPIRE`)
//!    or, for a key with nothing new here, reads it (`GET`);
//! 3. learns from each total what the other instances admitted since the last exchange (the
//!    total's growth, less this instance's part) and adds that to the key's bucket
//!    ([`Bucket::inject`](super::bucket::Bucket::inject)).
//!
//! A worker's admission adds one atomic increment to the local zone's work, and for the first
//! request of a key not yet followed hands the bucket to this thread over a bounded channel
//! (lock-free, and no system call: the thread never sleeps on the channel, it polls it, so
//! there is never a sleeper to wake). No allocation, no lock, no system call.
//!
//! # What it guarantees
//! The fleet admits the zone's limit, give or take one interval: between two exchanges each
//! instance decides on what it knows, so the fleet may admit up to the rate × the interval
//! more per instance, and pays it back (its buckets hold the excess, and refuse until it
//! drains). An instance that meets a key for the first time learns the fleet's count from its
//! second exchange on — it cannot tell a total counted a moment ago from one counted an hour
//! ago — so each instance may admit one burst of a key before it knows what the others did.
//!
//! # Redis unreachable
//! At start, or later (down, slow past [`IO_TIMEOUT`], restarted): the zone counts on this
//! instance alone — its buckets are its own, so nothing changes for the workers — and says so
//! once in the error log; it tries again after a back-off (doubling up to [`RETRY_MAX`]), and
//! says once when Redis is back. What was admitted while Redis was away is not sent later (it
//! would land on the others as if it had just happened). No client is ever refused because of
//! Redis.
//!
//! # Keys in Redis
//! `lowlat:rl:ZONE:KEY`: ZONE is 16 hex digits naming the zone by what decides its count (its
//! path prefix, rate, burst and key), so zones never mix and instances with the same zone
//! share it; KEY is 32 hex digits of the key's SHA-256 ([`super::key::fleet_id`]), the same on
//! every instance and never the client's address in clear. Each expires [`KEY_TTL`] after its
//! last increment. One Redis (or a primary), not Redis Cluster: the exchange's pipeline names
//! keys of any slot.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::bucket::{Bucket, TRACKED};

/// How often a zone exchanges its counts with Redis: the limit holds across the fleet to
/// within what the rate admits in this time, per instance.
pub const EXCHANGE_INTERVAL: Duration = Duration::from_millis(100);
/// Connecting to Redis gives up after this.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// An exchange whose reply takes longer than this counts as Redis down.
pub const IO_TIMEOUT: Duration = Duration::from_secs(1);
/// The longest wait between two attempts to reach Redis again.
pub const RETRY_MAX: Duration = Duration::from_secs(2);
/// A key's total in Redis expires this long after its last increment, on any instance.
pub const KEY_TTL: Duration = Duration::from_secs(10);
/// The most keys one zone exchanges (a flood of distinct keys is counted locally beyond it):
/// bounds the round trip to about 20 000 commands.
pub const MAX_TRACKED: usize = 10_000;
/// Buckets waiting to be handed over: more than the exchange can take in one round, so that
/// only a flood of new keys (or an exchange stuck on a slow name lookup) fills it — and then
/// the keys that do not fit count locally, instead of the queue growing without bound.
const HANDOVER_CAP: usize = 2 * MAX_TRACKED;

/// Where a zone's counts are kept: a Redis server, as `redis=` named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisTarget {
    /// What the client connects with (`redis://…`, `unix://…`).
    url: String,
    /// Where, for messages: the address (and database), never the password.
    pub shown: String,
}

impl RedisTarget {
    /// `HOST[:PORT]`, `redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]` or `unix:///PATH[?db=N]`.
    ///
    /// # Errors
    /// A value that names no Redis server, or one over TLS (`rediss://`, not built in).
    pub fn parse(text: &str) -> Result<RedisTarget, String> {
        let text = text.trim();
        let bad = |why: &str| {
            format!(
                "redis={}: {why} (HOST:PORT, redis://[:PASSWORD@]HOST:PORT[/DB] or unix:///PATH)",
                redact(text)
            )
        };
        if text.is_empty() {
            return Err(bad("no address"));
        }
        let url = match text.split_once("://") {
            Some(("rediss" | "valkeys", _)) => return Err(bad(
                "TLS to Redis is not built in; reach it over a private network or a local tunnel",
            )),
            Some(("redis" | "valkey" | "unix" | "redis+unix" | "valkey+unix", _)) => {
                text.to_owned()
            }
            Some((scheme, _)) => return Err(bad(&format!("unknown scheme {scheme}://"))),
            None if text.contains(['/', '@', '?']) => return Err(bad("not an address")),
            None => format!("redis://{text}"),
        };
        // The URL parser's reasons ("invalid port number") first, then the client's own
        // ("Invalid database number - InvalidClientConfig": its kind left out).
        let parsed = url::Url::parse(&url).map_err(|e| bad(&e.to_string()))?;
        let info = redis::IntoConnectionInfo::into_connection_info(parsed).map_err(|e| {
            let reason = e.to_string();
            bad(reason.split(" - ").next().unwrap_or(&reason))
        })?;
        let mut shown = match info.addr() {
            redis::ConnectionAddr::Tcp(host, port) if host.contains(':') => {
                format!("[{host}]:{port}")
            }
            addr => addr.to_string(),
        };
        let db = info.redis_settings().db();
        if db != 0 {
            shown.push_str(&format!(" db {db}"));
        }
        Ok(RedisTarget { url, shown })
    }
}

/// `text` with a URL's user and password (`redis://user:secret@host`) masked, for messages
/// and `/metrics`.
#[must_use]
pub fn redact(text: &str) -> String {
    let Some(at) = text.find("://").map(|i| i + 3) else {
        return text.to_owned();
    };
    let end = text[at..]
        .find(['/', '?', '#', ','])
        .map_or(text.len(), |i| at + i);
    match text[at..end].rfind('@') {
        Some(i) => format!("{}***{}", &text[..at], &text[at + i..]),
        None => text.to_owned(),
    }
}

/// The Redis prefix of a zone's keys: `lowlat:rl:` and 16 hex digits of the SHA-256 of
/// `definition` (what decides the zone's count), then `:`.
#[must_use]
pub(super) fn zone_prefix(definition: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, definition.as_bytes());
    let mut prefix = String::from("lowlat:rl:");
    hex(&digest.as_ref()[..8], &mut prefix);
    prefix.push(':');
    prefix
}

fn hex(bytes: &[u8], out: &mut String) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
}

/// What a zone's exchange shows on `/metrics`.
#[derive(Debug, Default)]
pub struct FleetCounts {
    /// The last exchange (or connection) succeeded.
    pub up: AtomicBool,
    /// Requests this instance admitted and added to Redis.
    pub sent: AtomicU64,
    /// Requests the other instances admitted, as learned from Redis.
    pub learned: AtomicU64,
    /// Keys exchanged now.
    pub keys: AtomicUsize,
}

/// A zone's side of its exchange: what the workers use, and the thread not yet started.
pub(super) struct Fleet {
    /// Buckets that went from no request to one since the exchange last took their count.
    handover: SyncSender<Arc<Bucket>>,
    pub(super) counts: Arc<FleetCounts>,
    pub(super) target: RedisTarget,
    /// Taken by [`Fleet::start`]: a zone that only checks settings starts nothing.
    idle: Mutex<Option<Exchange>>,
}

/// What the exchange thread needs of its zone.
pub(super) struct ZoneClock {
    /// The rate, in thousandths of a request a second.
    pub per_ks: u64,
    /// How long a key with no request here is still followed: as long as its bucket takes to
    /// drain a burst (a client whose requests the balancer spreads comes back before that).
    pub linger: Duration,
}

impl Fleet {
    pub(super) fn new(target: RedisTarget, prefix: String, clock: ZoneClock, zone: &str) -> Fleet {
        let (handover, incoming) = mpsc::sync_channel(HANDOVER_CAP);
        let counts = Arc::new(FleetCounts::default());
        Fleet {
            handover,
            counts: Arc::clone(&counts),
            idle: Mutex::new(Some(Exchange {
                incoming,
                target: target.clone(),
                prefix,
                clock,
                zone: zone.to_owned(),
                counts,
                tracked: HashMap::new(),
            })),
            target,
        }
    }

    /// A worker admitted a request of `bucket`'s key: counted for the next exchange. The
    /// bucket is handed over only when it had nothing pending and is not followed yet.
    #[inline]
    pub(super) fn admitted(&self, bucket: &Arc<Bucket>) {
        if bucket.pending.fetch_add(1, Ordering::Relaxed) == 0 {
            if let Err(TrySendError::Full(_)) = self.handover.try_send(Arc::clone(bucket)) {
                // Counted here only; the key's next request tries again. (Disconnected: the
                // exchange thread ends only after the zone, so not while a worker uses it.)
                bucket.pending.store(0, Ordering::Relaxed);
            }
        }
    }

    /// Starts the exchange thread (once; later calls do nothing). It ends after the zone is
    /// dropped (a reload that removed or changed it).
    pub(super) fn start(&self) {
        let exchange = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(exchange) = exchange {
            let spawned = std::thread::Builder::new()
                .name("lowlat-ratelimit".into())
                .spawn(move || exchange.run());
            if let Err(e) = spawned {
                tracing::error!(
                    "rate limit: cannot start the exchange with Redis ({e}); counting on this instance alone"
                );
            }
        }
    }
}

/// One key followed by the exchange.
struct Tracked {
    bucket: Arc<Bucket>,
    /// Its name in Redis.
    key: String,
    /// Its total in Redis after the last exchange (`None`: not known on this connection).
    seen: Option<i64>,
    /// Requests admitted here, taken for this exchange.
    taken: u64,
    /// Its last request here.
    active: Instant,
}

/// The exchange thread's state.
struct Exchange {
    incoming: Receiver<Arc<Bucket>>,
    target: RedisTarget,
    prefix: String,
    clock: ZoneClock,
    /// The zone as written (for the error log).
    zone: String,
    counts: Arc<FleetCounts>,
    tracked: HashMap<[u8; 16], Tracked>,
}

/// What the error log last said of Redis, so that each change is said once.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Said {
    Nothing,
    Down,
    Up,
}

impl Exchange {
    fn run(mut self) {
        let mut redis = None;
        let mut retry_at = Instant::now();
        let mut backoff = EXCHANGE_INTERVAL;
        let mut said = Said::Nothing;
        loop {
            let round = Instant::now();
            if !self.take_counts(round) {
                return;
            }
            if redis.is_none() && round >= retry_at {
                match self.connect() {
                    Ok(c) => redis = Some(c),
                    Err(e) => {
                        retry_at = round + backoff;
                        backoff = (backoff * 2).min(RETRY_MAX);
                        self.down(&e, &mut said);
                    }
                }
            }
            if redis.is_none() {
                self.forget_counts();
            }
            if let Some(con) = &mut redis {
                match self.exchange(con) {
                    Ok(()) => {
                        backoff = EXCHANGE_INTERVAL;
                        self.counts.up.store(true, Ordering::Relaxed);
                        if said == Said::Down {
                            tracing::info!(
                                "rate limit {}: Redis at {} is back; counting with the fleet again",
                                self.zone,
                                self.target.shown
                            );
                            said = Said::Up;
                        }
                    }
                    Err(e) => {
                        redis = None;
                        self.forget_counts();
                        retry_at = round + backoff;
                        backoff = (backoff * 2).min(RETRY_MAX);
                        self.down(&e, &mut said);
                    }
                }
            }
            std::thread::sleep(EXCHANGE_INTERVAL.saturating_sub(round.elapsed()));
        }
    }

    /// Drops the counts taken for an exchange that will not happen: counted here only, since
    /// sending them later would land on the others as if they had just happened.
    fn forget_counts(&mut self) {
        for t in self.tracked.values_mut() {
            t.taken = 0;
        }
    }

    fn connect(&self) -> redis::RedisResult<redis::Connection> {
        let con = redis::Client::open(self.target.url.as_str())?
            .get_connection_with_timeout(CONNECT_TIMEOUT)?;
        con.set_read_timeout(Some(IO_TIMEOUT))?;
        con.set_write_timeout(Some(IO_TIMEOUT))?;
        Ok(con)
    }

    /// Redis could not be reached: count alone, forget what was seen on the lost connection,
    /// and say so unless the log already does.
    fn down(&mut self, e: &redis::RedisError, said: &mut Said) {
        self.counts.up.store(false, Ordering::Relaxed);
        for t in self.tracked.values_mut() {
            t.seen = None;
        }
        if *said != Said::Down {
            tracing::warn!(
                "rate limit {}: Redis at {} unreachable ({e}); counting on this instance alone until it is back",
                self.zone,
                self.target.shown
            );
            *said = Said::Down;
        }
    }

    /// Follows the buckets the workers handed over, and takes every followed key's count
    /// admitted since the last exchange; stops following keys quiet here for longer than
    /// their linger. `false` when the zone is gone.
    fn take_counts(&mut self, now: Instant) -> bool {
        loop {
            match self.incoming.try_recv() {
                Ok(bucket) => self.follow(bucket, now),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return false,
            }
        }
        let linger = self.clock.linger;
        self.tracked.retain(|_, t| {
            let old = t.bucket.pending.fetch_and(TRACKED, Ordering::Relaxed);
            t.taken += u64::from(old & !TRACKED);
            if t.taken > 0 {
                t.active = now;
                return true;
            }
            // Unfollowed only if no request came meanwhile: a worker that finds 0 hands the
            // bucket over again.
            now.duration_since(t.active) <= linger
                || t.bucket
                    .pending
                    .compare_exchange(TRACKED, 0, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
        });
        self.counts
            .keys
            .store(self.tracked.len(), Ordering::Relaxed);
        true
    }

    fn follow(&mut self, bucket: Arc<Bucket>, now: Instant) {
        let full = self.tracked.len() >= MAX_TRACKED;
        match self.tracked.entry(bucket.id) {
            std::collections::hash_map::Entry::Occupied(mut e) => {
                let t = e.get_mut();
                if !Arc::ptr_eq(&t.bucket, &bucket) {
                    // The zone's table evicted the key's bucket and made a new one: follow the
                    // new one, with what the old one still held.
                    bucket.pending.fetch_or(TRACKED, Ordering::Relaxed);
                    let old = std::mem::replace(&mut t.bucket, bucket);
                    t.taken += u64::from(old.pending.swap(0, Ordering::Relaxed) & !TRACKED);
                }
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                if full {
                    // Counted here only; the next request of the key hands it over again.
                    bucket.pending.store(0, Ordering::Relaxed);
                    return;
                }
                bucket.pending.fetch_or(TRACKED, Ordering::Relaxed);
                let mut key = self.prefix.clone();
                hex(&bucket.id, &mut key);
                e.insert(Tracked {
                    bucket,
                    key,
                    seen: None,
                    taken: 0,
                    active: now,
                });
            }
        }
    }

    /// One round trip: this instance's counts added, every followed key's total read, the
    /// others' share added to the buckets. With nothing to exchange, a `PING` keeps the state
    /// on `/metrics` and in the log true.
    fn exchange(&mut self, con: &mut redis::Connection) -> redis::RedisResult<()> {
        if self.tracked.is_empty() {
            return redis::cmd("PING").query::<()>(con);
        }
        let ttl_ms = KEY_TTL.as_millis() as u64;
        let mut pipe = redis::pipe();
        for t in self.tracked.values() {
            if t.taken > 0 {
                pipe.cmd("INCRBY").arg(&t.key).arg(t.taken);
                pipe.cmd("PEXPIRE").arg(&t.key).arg(ttl_ms).ignore();
            } else {
                // GET, not INCRBY 0: that would make a key without an expiry.
                pipe.cmd("GET").arg(&t.key);
            }
        }
        let result = pipe.query::<Vec<Option<i64>>>(con);
        let totals = match result {
            Ok(totals) if totals.len() == self.tracked.len() => totals,
            Ok(_) => {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "a reply per key",
                )))
            }
            Err(e) => return Err(e),
        };
        let now_ms = crate::clock::millis(Instant::now());
        let (mut sent, mut learned) = (0, 0);
        for (t, total) in self.tracked.values_mut().zip(totals) {
            // No total: nobody counted the key for KEY_TTL, which is a total of 0.
            let others = others(t.seen, total.unwrap_or(0), t.taken);
            t.seen = Some(total.unwrap_or(0));
            if others > 0 {
                t.bucket.inject(others, now_ms, self.clock.per_ks);
            }
            sent += t.taken;
            learned += others;
            t.taken = 0;
        }
        self.counts.sent.fetch_add(sent, Ordering::Relaxed);
        self.counts.learned.fetch_add(learned, Ordering::Relaxed);
        Ok(())
    }
}

/// What the other instances admitted between two exchanges: the total's growth less this
/// instance's `taken`. Unknown before (`seen` is `None`: a key met for the first time, or a
/// new connection) counts as nothing, since the total may be an hour old. A total that went
/// down expired (or Redis lost it): everything in it but this instance's part is new.
fn others(seen: Option<i64>, total: i64, taken: u64) -> u64 {
    let taken = i64::try_from(taken).unwrap_or(i64::MAX);
    match seen {
        None => 0,
        Some(seen) if total >= seen.saturating_add(taken) => (total - seen - taken) as u64,
        Some(_) => total.saturating_sub(taken).max(0) as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        for (text, shown) in [
            ("127.0.0.1:6380", "127.0.0.1:6380"),
            ("redis.internal", "redis.internal:6379"),
            ("[::1]:6379", "[::1]:6379"),
            ("redis://:secret@10.0.0.5:6379/2", "10.0.0.5:6379 db 2"),
            ("redis://app:secret@10.0.0.5", "10.0.0.5:6379"),
            ("unix:///run/redis.sock", "/run/redis.sock"),
        ] {
            let t = RedisTarget::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(t.shown, shown, "{text}");
        }
        for bad in [
            "",
            "rediss://10.0.0.5",
            "http://10.0.0.5",
            "10.0.0.5:99999",
            "10.0.0.5:port",
            "redis://:secret@10.0.0.5/x",
            "0.0.0.0:6379",
            "host/path",
        ] {
            let e = RedisTarget::parse(bad)
                .err()
                .unwrap_or_else(|| panic!("{bad}"));
            assert!(!e.contains("secret"), "{e}");
            assert!(e.starts_with("redis="), "{e}");
        }
    }

    #[test]
    fn passwords_are_masked() {
        assert_eq!(
            redact("100r/s,redis=redis://app:secret@10.0.0.5:6379/2,burst=5"),
            "100r/s,redis=redis://***@10.0.0.5:6379/2,burst=5"
        );
        assert_eq!(redact("redis://10.0.0.5"), "redis://10.0.0.5");
        assert_eq!(redact("10.0.0.5:6379"), "10.0.0.5:6379");
    }

    #[test]
    fn zones_are_named_apart() {
        let a = zone_prefix("/api\n100000\n20\naddr");
        assert_eq!(a.len(), "lowlat:rl:".len() + 16 + 1);
        assert!(a.starts_with("lowlat:rl:") && a.ends_with(':'));
        assert_eq!(a, zone_prefix("/api\n100000\n20\naddr"));
        assert_ne!(a, zone_prefix("/api\n100000\n21\naddr"));
    }

    #[test]
    fn what_the_others_admitted() {
        // First meeting: nothing learned, whatever the total.
        assert_eq!(others(None, 5000, 3), 0);
        // 40 counted before, 5 sent now, total 60: the others admitted 15.
        assert_eq!(others(Some(40), 60, 5), 15);
        // Alone: the total grew by this instance's part only.
        assert_eq!(others(Some(40), 45, 5), 0);
        // Expired and counted anew: 7 now, 2 of them this instance's.
        assert_eq!(others(Some(40), 7, 2), 5);
        assert_eq!(others(Some(40), 1, 2), 0);
    }
}
