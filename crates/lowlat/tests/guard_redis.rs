//! Rate-limit zones kept in Redis (`--rate-limit …,redis=`), against a real `redis-server`
//! started on a free port in a folder of its own: a limit of 100 r/s with a burst of 20 holds
//! within 10% against one client at 5,000 r/s for 10 s while a second client at 50 r/s is never
//! refused — on one instance, and on two instances sharing the zone (the pair admits the limit,
//! not twice it); with Redis killed, both go on answering, each holding the limit alone, and
//! each says so once in its error log, then once again when Redis is back. Redis unreachable
//! from the start is the same; `--check-config` checks `redis=` without connecting.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::{curl, Served, BIN};

/// A `redis-server` of the test's own, without persistence, killed when dropped.
struct Redis {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Redis {
    fn start() -> Redis {
        let dir = tempfile::tempdir().unwrap();
        let port = support::free_port();
        let child = Redis::spawn(port, dir.path());
        Redis { child, port, dir }
    }

    fn spawn(port: u16, dir: &std::path::Path) -> Child {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("run redis-server (scripts/test-deps.sh installs it)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !Redis::pong(port) {
            assert!(
                Instant::now() < deadline,
                "redis-server never answered on {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        child
    }

    /// Whether a Redis answers `PING` on `port`.
    fn pong(port: u16) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        let mut reply = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok()
            && s.read_exact(&mut reply).is_ok()
            && &reply == b"+PONG\r\n"
    }

    /// `redis=` for a zone kept here.
    fn zone(&self) -> String {
        format!("100r/s,burst=20,nodelay,redis=127.0.0.1:{}", self.port)
    }

    /// SIGKILL: gone at once, as a crash leaves it.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Anew on the same port (empty: nothing was saved).
    fn restart(&mut self) {
        self.child = Redis::spawn(self.port, self.dir.path());
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `lowlat serve` with a Redis zone, behind a trusted proxy (so each load names its client in
/// `X-Forwarded-For`), with metrics.
fn serve(redis: &Redis) -> (Served, String) {
    let metrics = format!("127.0.0.1:{}", support::free_port());
    let zone = redis.zone();
    let s = Served::start([
        "--rate-limit",
        &zone,
        "--proxy-trusted",
        "127.0.0.1",
        "--metrics",
        &metrics,
    ]);
    (s, metrics)
}

/// A `lowlat load -R` run under way: one client (its address in `X-Forwarded-For`).
fn load(served: &Served, rate: u32, seconds: u32, client: &str) -> Child {
    Command::new(BIN)
        .args(["load", "-t1", "-c4", "--json"])
        .args(["-R", &rate.to_string(), "-d", &format!("{seconds}s")])
        .args(["-H", &format!("X-Forwarded-For: {client}")])
        .arg(format!("http://{}/plaintext", served.addr))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// What a run got: requests passed (2xx) and refused (429); anything else (another status, a
/// failed request) fails the test.
fn tally(run: Child) -> (u64, u64) {
    let out = run.wait_with_output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let passed = report["status"]["2xx"].as_u64().unwrap();
    let refused = report["status_codes"]["429"].as_u64().unwrap_or(0);
    assert_eq!(
        report["responses"].as_u64().unwrap(),
        passed + refused,
        "only 200 and 429: {report}"
    );
    assert_eq!(report["errors"]["total"], 0, "{report}");
    (passed, refused)
}

/// The value of the first `/metrics` series named `series` (`name{`), with the label `label`
/// if given (`name{label`).
fn metric(addr: &str, series: &str) -> u64 {
    let out = curl(&[&format!("http://{addr}/metrics")]);
    let text = String::from_utf8_lossy(&out.stdout);
    let (name, label) = series.split_once('{').unwrap();
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with('{') && l.contains(label))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in {text}"))
}

/// `expected` within 10%.
fn near(got: u64, expected: f64) -> bool {
    (got as f64 - expected).abs() <= expected * 0.1
}

/// Lines of `served`'s error log containing `needle`.
fn said(served: &Served, needle: &str) -> usize {
    served.log().lines().filter(|l| l.contains(needle)).count()
}

/// The error log's line when Redis goes, and when it comes back.
const DOWN: &str = "unreachable (";
const BACK: &str = "is back; counting with the fleet";

/// One instance with its zone in Redis: 100 r/s, burst 20, against one client at 5,000 r/s for
/// 10 s: the rate times the time plus the burst pass, within 10%, and a second client at
/// 50 r/s meanwhile is never refused.
#[test]
fn one_instance_holds_the_limit_with_its_zone_in_redis() {
    let redis = Redis::start();
    let (s, metrics) = serve(&redis);
    let quiet = load(&s, 50, 10, "10.0.0.2");
    let heavy = load(&s, 5000, 10, "10.0.0.1");
    let (passed, refused) = tally(heavy);
    let (quiet_passed, quiet_refused) = tally(quiet);
    let expected = 100.0 * 10.0 + 20.0;
    assert!(
        near(passed, expected),
        "{passed} passed, {refused} refused; {expected} expected"
    );
    assert!(refused > 30_000, "far over the limit: {refused}");
    assert_eq!(quiet_refused, 0, "{quiet_passed} passed");
    assert!(quiet_passed >= 450, "{quiet_passed}");
    assert_eq!(metric(&metrics, "lowlat_rate_limit_redis_up{"), 1);
    assert_eq!(said(&s, DOWN), 0, "{}", s.log());
}

/// Two instances sharing one zone in Redis, the same client sending 2,500 r/s to each (5,000
/// r/s in all) for 10 s, and the quiet client 25 r/s to each: the pair admits the limit within
/// 10%, not twice it, and never refuses the quiet client. Then Redis is killed: both go on
/// answering, each holding the limit alone (the pair admits about twice it), and each says so
/// in one line of its error log; Redis started again, each says once that it is back.
#[test]
fn two_instances_share_one_limit_and_hold_it_alone_without_redis() {
    let mut redis = Redis::start();
    let (a, metrics_a) = serve(&redis);
    let (b, metrics_b) = serve(&redis);

    let quiet = [load(&a, 25, 10, "10.0.0.2"), load(&b, 25, 10, "10.0.0.2")];
    let heavy = [
        load(&a, 2500, 10, "10.0.0.1"),
        load(&b, 2500, 10, "10.0.0.1"),
    ];
    let [(pa, ra), (pb, rb)] = heavy.map(tally);
    let [(qa, qra), (qb, qrb)] = quiet.map(tally);
    let expected = 100.0 * 10.0 + 20.0;
    assert!(
        near(pa + pb, expected),
        "the pair passed {pa} + {pb} (refused {ra} + {rb}); {expected} expected"
    );
    assert!(pa > 200 && pb > 200, "each its share: {pa} and {pb}");
    assert_eq!((qra, qrb), (0, 0), "the quiet client: {qa} + {qb} passed");
    assert!(qa + qb >= 450, "{qa} + {qb}");
    for m in [&metrics_a, &metrics_b] {
        assert_eq!(metric(m, "lowlat_rate_limit_redis_up{"), 1);
        // Each learned of a good part of what the other admitted.
        let others = metric(m, "lowlat_rate_limit_fleet_requests_total{by=\"others\"");
        assert!(others > 300, "{others}");
    }

    // Redis killed 1 s into a 4 s run: every request is answered all the same, and from then
    // on each instance holds the limit alone — it admits its 100 r/s, the pair twice that.
    let heavy = [load(&a, 2500, 4, "10.0.0.1"), load(&b, 2500, 4, "10.0.0.1")];
    std::thread::sleep(Duration::from_secs(1));
    redis.kill();
    let [(pa, ra), (pb, rb)] = heavy.map(tally);
    // Alone for 3 s at least: 300 each; at most 4 s and a burst each.
    let alone = 100 * 3;
    assert!(
        pa >= alone * 9 / 10 && pb >= alone * 9 / 10 && pa + pb <= 2 * (400 + 20) * 11 / 10,
        "each instance its own limit once Redis is gone: {pa} and {pb} passed, {ra} and {rb} refused"
    );
    for (s, m) in [(&a, &metrics_a), (&b, &metrics_b)] {
        assert_eq!(said(s, DOWN), 1, "{}", s.log());
        assert_eq!(metric(m, "lowlat_rate_limit_redis_up{"), 0);
    }

    // Back: said once, counted with the fleet again.
    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(5);
    while [&a, &b].iter().any(|s| said(s, BACK) == 0) {
        assert!(Instant::now() < deadline, "{}\n{}", a.log(), b.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    for (s, m) in [(&a, &metrics_a), (&b, &metrics_b)] {
        assert_eq!((said(s, DOWN), said(s, BACK)), (1, 1), "{}", s.log());
        assert_eq!(metric(m, "lowlat_rate_limit_redis_up{"), 1);
    }
}

/// In a config file, `rate_limit` takes `redis=` as the flag does. `--check-config` checks the
/// address's syntax and reaches out to nothing (a listener standing in for Redis is never
/// called); a bad address is one line naming the file, its line and the key, the password
/// masked.
#[test]
fn check_config_reads_redis_zones_without_connecting() {
    let dir = tempfile::tempdir().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        format!("rate_limit = [\"100r/s,burst=20,redis=redis://:secret@127.0.0.1:{port}/1\"]\n"),
    )
    .unwrap();
    let out = support::check_config(Some(&good), &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "--check-config connected to Redis"
    );
    let out = support::check_config_text(
        dir.path(),
        "bad.toml",
        "workers = 1\nrate_limit = [\"100r/s,redis=rediss://:secret@127.0.0.1:6379\"]\n",
    );
    let text = out.stderr;
    assert_eq!(out.code, Some(1), "{text}");
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(text.contains("bad.toml:2: rate_limit:"), "{text}");
    assert!(text.contains("TLS to Redis"), "{text}");
    assert!(!text.contains("secret"), "{text}");
}

/// Redis unreachable from the start: the zone limits on this instance alone (a burst of 5 and
/// no more, at once), answers every request, and its error log says so in one line however
/// often it tries again.
#[test]
fn unreachable_from_the_start_the_zone_counts_alone() {
    let nobody = support::free_port();
    let zone = format!("10r/s,burst=5,nodelay,redis=127.0.0.1:{nobody}");
    let s = Served::start(["--rate-limit", &zone]);
    // 20 requests at once, pipelined on one connection.
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut batch = "GET /plaintext HTTP/1.1\r\nHost: g\r\n\r\n".repeat(19);
    batch.push_str("GET /plaintext HTTP/1.1\r\nHost: g\r\nConnection: close\r\n\r\n");
    c.write_all(batch.as_bytes()).unwrap();
    let mut replies = String::new();
    c.read_to_string(&mut replies).unwrap();
    let passed = replies.matches("HTTP/1.1 200 ").count();
    let refused = replies.matches("HTTP/1.1 429 ").count();
    assert_eq!(passed + refused, 20, "{replies}");
    // The first and the burst; another may drain meanwhile (one each 100 ms).
    assert!((6..=7).contains(&passed), "{passed} passed");
    // Tries again after 0.1, 0.2, 0.4, 0.8 s…: still one line.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(said(&s, DOWN), 1, "{}", s.log());
    assert_eq!(said(&s, BACK), 0, "{}", s.log());
}
