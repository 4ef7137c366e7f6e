//! The proxy cache's store as the processes around it see it: one store shared by every worker,
//! kept across a reload, used by HTTP/3 clients as by HTTP/1.1 ones, held within its memory
//! budget by a flood of distinct URLs, and bypassed by a response too large to keep (a gigabyte
//! streams through without being held).
//!
//! The origin is a second `lowlat serve` answering files with `Cache-Control: max-age=600`, so
//! every response is storable; its `/metrics` counts the requests that reached it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

mod support;
use support::origin::get;
use support::{curl, field, Served};

/// An origin: `lowlat serve` on `root` with cacheable answers and a metrics listener.
struct Origin {
    served: Served,
    metrics: String,
}

impl Origin {
    fn start(root: &Path) -> Origin {
        let metrics = format!("127.0.0.1:{}", support::free_port());
        let served = Served::start([
            "--root".as_ref(),
            root.as_os_str(),
            "--cache-control".as_ref(),
            "max-age=600".as_ref(),
            "--metrics".as_ref(),
            metrics.as_ref(),
        ]);
        Origin { served, metrics }
    }

    fn url(&self) -> String {
        format!("http://{}", self.served.addr)
    }

    /// Requests it has answered.
    fn requests(&self) -> u64 {
        metric(&self.metrics, "lowlat_request_duration_seconds_count")
    }
}

/// `name`'s value on the `/metrics` of `addr`, once it has settled: workers publish their
/// counts at most a second apart, so two scrapes over a second apart that agree are current.
fn metric(addr: &str, name: &str) -> u64 {
    let read = || support::metric(addr, name);
    let mut last = read();
    loop {
        std::thread::sleep(Duration::from_millis(1100));
        let now = read();
        if now == last {
            return now;
        }
        last = now;
    }
}

/// A keep-alive connection reading responses by their `Content-Length`.
struct KeepAlive {
    reader: BufReader<TcpStream>,
}

impl KeepAlive {
    fn connect(addr: SocketAddr) -> KeepAlive {
        let s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        KeepAlive {
            reader: BufReader::new(s),
        }
    }

    /// `GET target`: the status and the body's length (the body read and dropped).
    fn get(&mut self, target: &str) -> (u16, u64) {
        // One write: a request in pieces would wait on the peer's delayed ACK (Nagle).
        let request = format!("GET {target} HTTP/1.1\r\nHost: cache.test\r\n\r\n");
        self.reader.get_mut().write_all(request.as_bytes()).unwrap();
        let mut head = String::new();
        loop {
            let mut line = String::new();
            assert!(self.reader.read_line(&mut line).unwrap() > 0, "{head}");
            head.push_str(&line);
            if line == "\r\n" {
                break;
            }
        }
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        let length: u64 = field(&head, "content-length")
            .expect("a Content-Length")
            .parse()
            .unwrap();
        let copied =
            std::io::copy(&mut (&mut self.reader).take(length), &mut std::io::sink()).unwrap();
        assert_eq!(copied, length, "{head}");
        (status, length)
    }
}

fn root_with(files: &[(&str, usize)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, len) in files {
        std::fs::write(dir.path().join(name), vec![b'c'; *len]).unwrap();
    }
    dir
}

/// A response stored by one worker is a hit on the other: connections spread over two
/// workers (the access log names the worker of each request), and the origin answers once.
#[test]
fn workers_share_one_store() {
    let root = root_with(&[("a.txt", 300)]);
    let origin = Origin::start(root.path());
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let rule = format!("/={}", origin.url());
    let proxy = Served::start([
        "--workers".as_ref(),
        "2".as_ref(),
        "--proxy".as_ref(),
        rule.as_ref(),
        "--cache".as_ref(),
        "--access-log".as_ref(),
        log.as_os_str(),
        "--access-log-format".as_ref(),
        "$worker $upstream_status".as_ref(),
    ]);
    let first = get(proxy.addr, "/a.txt");
    assert!(first.cache_status().contains("miss"), "{}", first.head);
    for _ in 0..40 {
        let got = get(proxy.addr, "/a.txt");
        assert!(got.cache_status().contains("hit"), "{}", got.head);
        assert_eq!(got.body, vec![b'c'; 300]);
    }
    assert_eq!(origin.requests(), 1);
    proxy.stop();
    let lines = std::fs::read_to_string(&log).unwrap();
    let workers: std::collections::BTreeSet<&str> =
        lines.lines().filter_map(|l| l.split(' ').next()).collect();
    assert_eq!(workers.len(), 2, "every request on one worker: {lines}");
}

/// SIGHUP re-reads the config file and keeps the stored responses: a response stored before
/// the reload is a hit after it, while the reload's own change (a return rule's text) shows.
#[test]
fn stored_responses_survive_a_reload() {
    let root = root_with(&[("a.txt", 100)]);
    let origin = Origin::start(root.path());
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("lowlat.toml");
    let write = |generation: &str| {
        std::fs::write(
            &cfg,
            format!(
                "workers = 1\nproxy = [\"/={}\"]\ncache = true\nreturn = [\"/generation=200 {generation}\"]\n",
                origin.url()
            ),
        )
        .unwrap();
    };
    write("one");
    let config = cfg.display().to_string();
    let proxy = Served::start(["--config", &config]);
    assert!(get(proxy.addr, "/a.txt").cache_status().contains("miss"));
    assert!(get(proxy.addr, "/a.txt").cache_status().contains("hit"));
    write("two");
    proxy.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(proxy.addr, "/generation").body != b"two" {
        assert!(Instant::now() < deadline, "the reload did not apply");
        std::thread::sleep(Duration::from_millis(50));
    }
    let after = get(proxy.addr, "/a.txt");
    assert!(after.cache_status().contains("hit"), "{}", after.head);
    assert_eq!(after.body, vec![b'c'; 100]);
    assert_eq!(origin.requests(), 1);
}

/// HTTP/3 clients go through the same lookup and fill: a miss over HTTP/3 is stored, and the
/// next HTTP/3 and HTTP/1.1 requests are hits.
#[test]
fn http3_clients_are_served_from_the_store() {
    let root = root_with(&[("h3.txt", 5000)]);
    let origin = Origin::start(root.path());
    let (_pki, cert) = support::h3::cert();
    let rule = format!("/={}", origin.url());
    let served = support::h3::serve(&cert, &["--proxy", &rule, "--cache"]);
    let first = support::h3::client(&served, &["get", "GET", "/h3.txt"]);
    let first = &first["responses"][0];
    assert_eq!(first["status"], 200, "{first}");
    assert_eq!(first["length"], 5000, "{first}");
    let status = first["headers"]["cache-status"]
        .as_str()
        .unwrap_or_default();
    assert!(
        status.contains("miss") && status.contains("stored"),
        "{first}"
    );
    let again = support::h3::client(&served, &["get", "GET", "/h3.txt", "/h3.txt"]);
    for r in again["responses"].as_array().unwrap() {
        assert_eq!(r["length"], 5000, "{r}");
        let status = r["headers"]["cache-status"].as_str().unwrap_or_default();
        assert!(status.contains("hit"), "{r}");
    }
    // The same key over HTTP/1.1 and TLS (the scheme is in the key): the authority the
    // HTTP/3 client sent as Host.
    let authority = format!(
        "Host: localhost:{}",
        support::address(&served.log(), "h3://").port()
    );
    let url = format!(
        "https://{}/h3.txt",
        served.tls_addr.expect("a TLS listener")
    );
    let out = curl(&["-sik", "--http1.1", "-H", &authority, &url]);
    let h1 = String::from_utf8_lossy(&out.stdout);
    assert!(h1.contains("Cache-Status: lowlat; hit"), "{h1}");
    assert_eq!(origin.requests(), 1);
}

/// A flood of distinct URLs, ten times the memory budget, keeps the store within it: the
/// stored bytes stay under `--cache-size` and the process grows by little more than it.
#[test]
fn a_flood_of_distinct_urls_stays_within_the_budget() {
    const BUDGET_MIB: u64 = 4;
    const BODY: usize = 4096;
    const URLS: u64 = 10_000; // 40 MB of responses
    let root = root_with(&[("f.bin", BODY)]);
    let origin = Origin::start(root.path());
    let metrics = format!("127.0.0.1:{}", support::free_port());
    let rule = format!("/={}", origin.url());
    let budget = format!("{BUDGET_MIB}m");
    let proxy = Served::start([
        "--proxy",
        &rule,
        "--cache",
        "--cache-size",
        &budget,
        "--metrics",
        &metrics,
    ]);
    let mut conn = KeepAlive::connect(proxy.addr);
    // Warm: the worker's buffers and pools, before the baseline.
    for i in 0..200 {
        assert_eq!(conn.get(&format!("/f.bin?warm={i}")), (200, BODY as u64));
    }
    let base = proxy.status_kib("VmRSS:");
    for i in 0..URLS {
        assert_eq!(conn.get(&format!("/f.bin?n={i}")), (200, BODY as u64));
    }
    let stored = metric(&metrics, "lowlat_cache_bytes");
    assert!(
        stored <= BUDGET_MIB << 20,
        "{stored} bytes stored, over the budget"
    );
    assert!(metric(&metrics, "lowlat_cache_objects") < URLS / 5);
    let grown = proxy.status_kib("VmRSS:").saturating_sub(base);
    assert!(
        grown < (BUDGET_MIB + 8) * 1024,
        "RSS grew by {grown} KiB for a {BUDGET_MIB} MiB budget"
    );
    // The latest are still there: the store evicts, it does not stop storing.
    let last = get(proxy.addr, &format!("/f.bin?n={}", URLS - 1));
    assert!(last.cache_status().contains("hit"), "{}", last.head);
}

/// A gigabyte response, cacheable but over `--cache-max-object`, streams to the client whole
/// while the proxy holds only its buffers, and is not stored.
#[test]
fn a_gigabyte_streams_through_without_being_held() {
    const GIB: u64 = 1 << 30;
    let root = tempfile::tempdir().unwrap();
    // Sparse: a gigabyte of zeros that takes no disk.
    std::fs::File::create(root.path().join("big.bin"))
        .unwrap()
        .set_len(GIB)
        .unwrap();
    let origin = Origin::start(root.path());
    let rule = format!("/={}", origin.url());
    let proxy = Served::start(["--proxy", &rule, "--cache"]);
    let mut conn = KeepAlive::connect(proxy.addr);
    // Warm (a small response through the same path) before the baseline.
    std::fs::write(root.path().join("small.txt"), "small").unwrap();
    conn.get("/small.txt");
    let base = proxy.status_kib("VmHWM:");
    assert_eq!(conn.get("/big.bin"), (200, GIB));
    let peak = proxy.status_kib("VmHWM:");
    assert!(
        peak < base + 32 * 1024,
        "peak RSS {peak} KiB from {base} KiB: the response was held"
    );
    let again = get(proxy.addr, "/small.txt");
    assert!(again.cache_status().contains("hit"), "{}", again.head);
    // Not stored: the next request goes to the origin again.
    let mut conn = KeepAlive::connect(proxy.addr);
    assert_eq!(conn.get("/big.bin"), (200, GIB));
    assert_eq!(origin.requests(), 3);
}
