//! Metrics scraped for real: a known number of requests of each kind over sockets, then
//! `GET /metrics` on the metrics listener, parsed as Prometheus text and checked against them.

mod support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lowlat_server::metrics::Registry;
use support::{roundtrip, TestServer};

fn scrape(addr: SocketAddr, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: m\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    (head.to_owned(), body.to_owned())
}

/// `name{labels} value` lines into a map; comments must be HELP or TYPE lines.
fn parse(text: &str) -> HashMap<String, f64> {
    let mut out = HashMap::new();
    for line in text.lines() {
        if let Some(c) = line.strip_prefix("# ") {
            assert!(c.starts_with("HELP ") || c.starts_with("TYPE "), "{line}");
            continue;
        }
        let (name, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line}"));
        out.insert(
            name.to_owned(),
            value.parse().unwrap_or_else(|_| panic!("{line}")),
        );
    }
    out
}

#[test]
fn counts_match_the_requests_made() {
    let registry = Arc::new(Registry::new(2));
    let cfg = lowlat_server::ServerConfig {
        metrics: Some(Arc::clone(&registry)),
        // A short timeout makes the workers publish often (at every sweep).
        keepalive_timeout: Duration::from_millis(400),
        ..support::config(2)
    };
    let server = TestServer::start(cfg, lowlat_server::builtin_service());
    let metrics = lowlat_server::metrics::serve("127.0.0.1:0".parse().unwrap(), registry).unwrap();
    for _ in 0..30 {
        roundtrip(
            server.addr,
            b"GET /plaintext HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
    }
    for _ in 0..7 {
        roundtrip(
            server.addr,
            b"GET /nope HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
    }
    // A malformed request.
    let mut bad = TcpStream::connect(server.addr).unwrap();
    bad.write_all(b"GET / HTTP/1.1\r\nBad Header\r\n\r\n")
        .unwrap();
    let mut sink = Vec::new();
    let _ = bad.read_to_end(&mut sink);
    drop(bad);
    // One connection left open and idle.
    let idle = TcpStream::connect(server.addr).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let m = loop {
        let (head, body) = scrape(metrics, "/metrics");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(head.contains("text/plain; version=0.0.4"), "{head}");
        let m = parse(&body);
        if m["lowlat_connections_accepted_total"] >= 39.0
            && m["lowlat_connections_closed_total"] >= 38.0
            || Instant::now() > deadline
        {
            break m;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        m["lowlat_responses_total{site=\"default\",class=\"2xx\"}"], 30.0,
        "{m:?}"
    );
    // Seven 404s and the malformed request's 400: a refused request is a response too.
    assert_eq!(
        m["lowlat_responses_total{site=\"default\",class=\"4xx\"}"], 8.0,
        "{m:?}"
    );
    assert_eq!(
        m["lowlat_parse_errors_total{kind=\"malformed\"}"], 1.0,
        "{m:?}"
    );
    assert_eq!(m["lowlat_connections_accepted_total"], 39.0, "{m:?}");
    assert_eq!(
        m["lowlat_response_body_bytes_total"],
        30.0 * 13.0 + 7.0 * 14.0,
        "{m:?}"
    );
    assert_eq!(m["lowlat_connections_open"], 1.0, "{m:?}");
    assert_eq!(m["lowlat_connections_idle"], 1.0, "{m:?}");
    // The process's own families, as Prometheus's client libraries name them.
    // In clock ticks (10 ms): a short test may not have used one yet.
    assert!(m["process_cpu_seconds_total"] >= 0.0, "{m:?}");
    assert!(m["process_resident_memory_bytes"] > 1e6, "{m:?}");
    assert!(m["process_open_fds"] >= 3.0, "{m:?}");
    assert!(m["process_max_fds"] >= m["process_open_fds"], "{m:?}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let started = m["process_start_time_seconds"];
    assert!(
        started <= now + 1.0 && started > now - 3600.0,
        "{started} vs {now}"
    );
    assert_eq!(
        m[&format!(
            "lowlat_build_info{{version=\"{}\"}}",
            env!("CARGO_PKG_VERSION")
        )],
        1.0
    );
    assert_eq!(m["lowlat_request_duration_seconds_count"], 38.0, "{m:?}");
    // Requests answered within one loop turn still take time: the sum is not zero.
    assert!(m["lowlat_request_duration_seconds_sum"] > 0.0, "{m:?}");
    assert_eq!(
        m["lowlat_request_duration_seconds_bucket{le=\"+Inf\"}"],
        38.0
    );
    // The keep-alive timeout closes the idle connection: counted as timed out.
    let t = Instant::now();
    let timed_out = loop {
        let m = parse(&scrape(metrics, "/metrics").1);
        let n = m["lowlat_connections_timed_out_total"];
        if n >= 1.0 || t.elapsed() > Duration::from_secs(5) {
            break n;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(timed_out, 1.0);
    drop(idle);
    let (head, _) = scrape(metrics, "/");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    server.stop();
}

/// The static-file cache in the metrics: a first request misses, the next ones hit, and the
/// cache holds the file's bytes.
#[test]
fn file_cache_lookups() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: lowlat_server::settings::ServeArgs,
    }
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("f.txt"), "x".repeat(1000)).unwrap();
    let cli = Cli::try_parse_from([
        "serve",
        "--workers",
        "1",
        "--root",
        root.path().to_str().unwrap(),
    ])
    .unwrap();
    let registry = Arc::new(Registry::new(1));
    let cfg = lowlat_server::ServerConfig {
        metrics: Some(Arc::clone(&registry)),
        keepalive_timeout: Duration::from_millis(400),
        ..support::config(1)
    };
    let server = TestServer::start(cfg, lowlat_server::settings::service(&cli.serve).unwrap());
    let metrics = lowlat_server::metrics::serve("127.0.0.1:0".parse().unwrap(), registry).unwrap();
    for _ in 0..3 {
        roundtrip(
            server.addr,
            b"GET /f.txt HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let m = loop {
        let m = parse(&scrape(metrics, "/metrics").1);
        if m["lowlat_file_cache_lookups_total{result=\"hit\"}"] >= 2.0 || Instant::now() > deadline
        {
            break m;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        m["lowlat_file_cache_lookups_total{result=\"miss\"}"], 1.0,
        "{m:?}"
    );
    assert_eq!(
        m["lowlat_file_cache_lookups_total{result=\"hit\"}"], 2.0,
        "{m:?}"
    );
    assert!(m["lowlat_file_cache_bytes"] >= 1000.0, "{m:?}");
    server.stop();
}
