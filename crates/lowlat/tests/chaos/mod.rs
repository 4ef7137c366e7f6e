//! What the chaos tests share: a proxy with a healthy route (`/ok/`) beside the misbehaving one
//! (`/bad/`) and its metrics listener ([`Rig`]); a client that reads a response as far as the
//! proxy sends it and says how it ended ([`Outcome`]); a loop of requests on the healthy route
//! that runs while the bad upstream misbehaves ([`HealthyLoop`]); and the accounting of what
//! the proxy holds (descriptors, pool entries, half-closed sockets). The misbehaving upstreams
//! speak HTTP/1.1 (`upstream`) or HTTP/2 (`h2_upstream`), and listen alike (`listen`).

// Each test file that includes these uses some of them.
#![allow(dead_code)]

pub mod h2_upstream;
pub mod listen;
pub mod upstream;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::support::{field, find, tcp_sockets, End, Served};
use upstream::{body_for, Chaos};

/// A test that waits this long for one response has failed anyway.
pub const IO_TIMEOUT: Duration = Duration::from_secs(15);

/// How long the proxy may take to give back what an exchange held.
const SETTLE: Duration = Duration::from_secs(5);

/// How a response read by [`read_outcome`] ended.
#[derive(Debug)]
pub enum Outcome {
    /// A whole response, framed by its Content-Length or its last chunk.
    Complete {
        status: u16,
        head: String,
        body: Vec<u8>,
    },
    /// A head, then a body the connection's close cut short of its framing.
    Cut {
        status: u16,
        head: String,
        got: Vec<u8>,
    },
    /// The connection closed before a whole head.
    Closed,
}

impl Outcome {
    pub fn status(&self) -> Option<u16> {
        match self {
            Outcome::Complete { status, .. } | Outcome::Cut { status, .. } => Some(*status),
            Outcome::Closed => None,
        }
    }
}

/// Reads more of `s` into `buf`: false at end of file (or a reset).
fn fill(s: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0; 64 * 1024];
    match s.read(&mut chunk) {
        Ok(0) => false,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => false,
        Err(e) => panic!(
            "reading a response: {e} after {:?}",
            String::from_utf8_lossy(buf)
        ),
    }
}

/// Reads one response from `s` as far as it goes, `pending` holding bytes already read (and
/// keeping those after the response). A response framed wrongly by the proxy panics: the
/// client must always be able to tell a whole response from a cut one.
pub fn read_outcome(s: &mut TcpStream, pending: &mut Vec<u8>) -> Outcome {
    read_outcome_of(s, pending, false)
}

/// [`read_outcome`] for a request that was `HEAD` (`head_request`) or not: the answer to a
/// `HEAD` has no body, whatever its Content-Length says.
pub fn read_outcome_of(s: &mut TcpStream, pending: &mut Vec<u8>, head_request: bool) -> Outcome {
    let end = loop {
        if let Some(i) = find(pending, b"\r\n\r\n") {
            break i + 4;
        }
        if !fill(s, pending) {
            return Outcome::Closed;
        }
    };
    let head = String::from_utf8_lossy(&pending[..end]).into_owned();
    pending.drain(..end);
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not a status line: {head}"));
    if head_request {
        return Outcome::Complete {
            status,
            head,
            body: Vec::new(),
        };
    }
    if field(&head, "transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(i) = find(pending, b"\r\n") {
                    break i;
                }
                if !fill(s, pending) {
                    return Outcome::Cut {
                        status,
                        head,
                        got: body,
                    };
                }
            };
            let text = String::from_utf8_lossy(&pending[..line_end]).into_owned();
            let size = usize::from_str_radix(text.split(';').next().unwrap().trim(), 16)
                .unwrap_or_else(|_| panic!("the proxy sent a bad chunk size {text:?}"));
            pending.drain(..line_end + 2);
            if size == 0 {
                loop {
                    let i = loop {
                        if let Some(i) = find(pending, b"\r\n") {
                            break i;
                        }
                        if !fill(s, pending) {
                            return Outcome::Cut {
                                status,
                                head,
                                got: body,
                            };
                        }
                    };
                    pending.drain(..i + 2);
                    if i == 0 {
                        return Outcome::Complete { status, head, body };
                    }
                }
            }
            while pending.len() < size + 2 {
                if !fill(s, pending) {
                    body.extend_from_slice(&pending[..pending.len().min(size)]);
                    return Outcome::Cut {
                        status,
                        head,
                        got: body,
                    };
                }
            }
            body.extend_from_slice(&pending[..size]);
            assert_eq!(
                &pending[size..size + 2],
                b"\r\n",
                "the proxy ended a chunk badly"
            );
            pending.drain(..size + 2);
        }
    }
    let len: usize = field(&head, "content-length").map_or(0, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("bad Content-Length: {head}"))
    });
    while pending.len() < len {
        if !fill(s, pending) {
            return Outcome::Cut {
                status,
                head,
                got: std::mem::take(pending),
            };
        }
    }
    let body = pending.drain(..len).collect();
    Outcome::Complete { status, head, body }
}

/// A new connection to `addr`, with the tests' read timeout.
pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s
}

/// `GET target` on a new connection (closed after the response).
pub fn get(addr: SocketAddr, target: &str) -> Outcome {
    let mut s = connect(addr);
    write!(
        s,
        "GET {target} HTTP/1.1\r\nHost: chaos.test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    read_outcome(&mut s, &mut Vec::new())
}

/// Sends `GET /bad/{i}` for each `i` in `ids` from threads of their own, at once; returns each
/// outcome with its target and how long it took.
pub fn concurrent_gets(rig: &Rig, ids: std::ops::Range<usize>) -> Vec<(String, Outcome, Duration)> {
    let addr = rig.addr();
    let threads: Vec<_> = ids
        .map(|i| {
            std::thread::spawn(move || {
                let target = format!("/bad/{i}");
                let start = Instant::now();
                let o = get(addr, &target);
                (target, o, start.elapsed())
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// Asserts that `o` is a whole response with `status` (and, for 200, the body that belongs to
/// `target`).
#[track_caller]
pub fn assert_answer(o: &Outcome, status: u16, target: &str) {
    match o {
        Outcome::Complete {
            status: s, body, ..
        } if *s == status => {
            if status == 200 {
                assert_eq!(
                    String::from_utf8_lossy(body),
                    String::from_utf8_lossy(&body_for(target)),
                    "{target}: another request's body"
                );
            }
        }
        other => panic!("{target}: expected a whole {status}, got {other:?}"),
    }
}

/// Asserts that `o` is a `200` cut short: a proper prefix of `target`'s body, then the close.
#[track_caller]
pub fn assert_cut(o: &Outcome, target: &str) {
    assert_cut_of(o, &body_for(target), target);
}

/// Asserts that `o` is a `200` cut short of `want`: no more than a proper prefix of it, then
/// the close.
#[track_caller]
pub fn assert_cut_of(o: &Outcome, want: &[u8], target: &str) {
    match o {
        Outcome::Cut {
            status: 200, got, ..
        } => assert!(
            got.len() <= want.len() && want.starts_with(got),
            "{target}: cut response with other bytes: {:?}",
            String::from_utf8_lossy(got)
        ),
        other => panic!("{target}: expected a cut 200, got {other:?}"),
    }
}

/// A `lowlat serve` with `/ok/` forwarded to a healthy upstream and `/bad/` to `bad` (a URL, or
/// several comma-separated), its metrics on a listener of their own.
pub struct Rig {
    pub proxy: Served,
    pub metrics: SocketAddr,
    pub healthy: Chaos,
    /// Descriptors the proxy held once warm (listeners, epoll, one pooled healthy connection).
    pub baseline_fds: usize,
    /// Idle pooled connections once warm (the healthy one).
    pub baseline_pooled: u64,
}

impl Rig {
    /// Starts the proxy with `extra` flags, sends one healthy request (so that its pool holds
    /// the connection the healthy loop will reuse), and takes the descriptor baseline.
    pub fn start(bad: &str, extra: &[String]) -> Rig {
        let healthy = Chaos::start(upstream::Act::Echo);
        let mut args = vec![
            "--metrics".to_owned(),
            "127.0.0.1:0".to_owned(),
            "--proxy".to_owned(),
            format!("/ok/={}", healthy.url()),
            "--proxy".to_owned(),
            format!("/bad/={bad}"),
        ];
        args.extend_from_slice(extra);
        let proxy = Served::start(args);
        let metrics = proxy.metrics_addr();
        let mut rig = Rig {
            proxy,
            metrics,
            healthy,
            baseline_fds: 0,
            baseline_pooled: 0,
        };
        assert_answer(&get(rig.addr(), "/ok/warm"), 200, "/ok/warm");
        // The metrics listener's own connection comes and goes with each scrape.
        // The warm-up's connection enters the pool just after its response went.
        let deadline = Instant::now() + SETTLE;
        while rig.pool("").1 == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        rig.baseline_pooled = rig.pool("").1;
        rig.baseline_fds = rig.settled_fds();
        rig
    }

    pub fn addr(&self) -> SocketAddr {
        self.proxy.addr
    }

    /// Descriptors the proxy holds now.
    pub fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.proxy.pid()))
            .unwrap()
            .count()
    }

    /// The descriptor count once the warm-up's have gone: the smallest of a few samples (a
    /// scrape's connection closes within a few ms).
    fn settled_fds(&self) -> usize {
        (0..5)
            .map(|_| {
                std::thread::sleep(Duration::from_millis(40));
                self.fds()
            })
            .min()
            .unwrap()
    }

    /// `/metrics` as text.
    pub fn scrape(&self) -> String {
        let mut s = connect(self.metrics);
        write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        match read_outcome(&mut s, &mut Vec::new()) {
            Outcome::Complete {
                status: 200, body, ..
            } => String::from_utf8(body).unwrap(),
            other => panic!("metrics: {other:?}"),
        }
    }

    /// The proxy's connections to the servers whose label `server` matches (`127.0.0.1:PORT`,
    /// or `""` for all): (in an exchange, idle in a pool), as `/metrics` reports them.
    pub fn pool(&self, server: &str) -> (u64, u64) {
        let text = self.scrape();
        let label = format!("server=\"{server}");
        let value = |state: &str| -> u64 {
            text.lines()
                .filter(|l| {
                    l.starts_with("lowlat_upstream_connections{")
                        && l.contains(&label)
                        && l.contains(&format!("state=\"{state}\""))
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                .sum()
        };
        (value("active"), value("idle"))
    }

    /// Asserts that the proxy gave back everything the exchanges with the server on `port` held:
    /// no connection to it in an exchange, at most `max_idle` in its pool, none half-closed
    /// (CLOSE-WAIT: the server closed, the proxy never noticed), and its descriptors back to the
    /// baseline plus the connections its pools gained since.
    #[track_caller]
    pub fn assert_freed(&self, port: u16, max_idle: u64) {
        let deadline = Instant::now() + SETTLE;
        let server = format!("127.0.0.1:{port}\"");
        loop {
            let (active, idle) = self.pool(&server);
            let (_, pooled) = self.pool("");
            let fds = self.fds();
            let close_wait = tcp_sockets(port, End::Remote, &["08"]);
            let allowed = self.baseline_fds
                + usize::try_from(pooled.saturating_sub(self.baseline_pooled)).unwrap();
            if active == 0 && idle <= max_idle && close_wait == 0 && fds <= allowed {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "upstream :{port} not freed: {active} active, {idle} idle (at most {max_idle}), \
                 {close_wait} in CLOSE-WAIT, {fds} descriptors (at most {allowed}: {} once \
                 warm, {pooled} pooled connections against {})",
                self.baseline_fds,
                self.baseline_pooled
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Requests on the healthy route, one after the other on one kept-alive connection, while the
/// bad upstream misbehaves: each must be a whole `200` with its own body.
pub struct HealthyLoop {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<HealthyReport>,
}

/// What a [`HealthyLoop`] saw.
#[derive(Debug)]
pub struct HealthyReport {
    pub ok: usize,
    pub errors: Vec<String>,
    pub slowest: Duration,
}

impl HealthyLoop {
    pub fn start(addr: SocketAddr) -> HealthyLoop {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut report = HealthyReport {
                ok: 0,
                errors: Vec::new(),
                slowest: Duration::ZERO,
            };
            let mut s = connect(addr);
            let mut pending = Vec::new();
            let mut i = 0;
            while !flag.load(Ordering::Relaxed) {
                let target = format!("/ok/{i}");
                i += 1;
                let start = Instant::now();
                if let Err(e) = write!(s, "GET {target} HTTP/1.1\r\nHost: chaos.test\r\n\r\n") {
                    // The proxy is gone (a failing test dropped it): nothing more to learn.
                    report.errors.push(format!("{target}: {e}"));
                    break;
                }
                let o = read_outcome(&mut s, &mut pending);
                report.slowest = report.slowest.max(start.elapsed());
                match &o {
                    Outcome::Complete {
                        status: 200, body, ..
                    } if *body == body_for(&target) => report.ok += 1,
                    other => {
                        report.errors.push(format!("{target}: {other:?}"));
                        s = connect(addr);
                        pending.clear();
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            report
        });
        HealthyLoop { stop, thread }
    }

    /// Stops the loop and asserts it saw no error.
    #[track_caller]
    pub fn finish(self) -> HealthyReport {
        self.stop.store(true, Ordering::Relaxed);
        let report = self.thread.join().unwrap();
        assert!(
            report.errors.is_empty() && report.ok > 0,
            "the healthy route suffered: {report:?}"
        );
        report
    }
}
