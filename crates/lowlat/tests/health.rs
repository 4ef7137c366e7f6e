//! The health endpoint (`--health`): `200 ok` while serving, `503 draining` from SIGTERM on —
//! while `--shutdown-delay` keeps the server accepting, so that a balancer that probes stops
//! sending before connections are refused. A USR2 upgrade is not a shutdown: it stays ok.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

mod support;
use support::{Served, BIN};

fn get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

fn health_addr(served: &Served) -> SocketAddr {
    let log = served.log();
    let line = log
        .lines()
        .find(|l| l.contains("health on"))
        .expect("a health line");
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("http://"))
        .and_then(|w| w.strip_suffix("/health"))
        .unwrap()
        .parse()
        .unwrap()
}

/// ok, then draining for the shutdown delay while requests are still served, then gone.
#[test]
fn draining_before_the_listeners_close() {
    let served = Served::start([
        "--health",
        "127.0.0.1:0",
        "--shutdown-delay",
        "1500ms",
        "--metrics",
        "127.0.0.1:0",
    ]);
    let health = health_addr(&served);
    let metrics: SocketAddr = served.metrics_addr();
    assert!(get(metrics, "/health").ends_with("ok\n"));
    let ok = get(health, "/health");
    assert!(
        ok.starts_with("HTTP/1.1 200") && ok.ends_with("ok\n"),
        "{ok}"
    );
    assert!(get(health, "/metrics").starts_with("HTTP/1.1 404"));
    let started = Instant::now();
    served.signal("TERM");
    let until = started + Duration::from_secs(1);
    loop {
        let probe = get(health, "/health");
        if probe.starts_with("HTTP/1.1 503") {
            assert!(probe.ends_with("draining\n"), "{probe}");
            assert!(get(metrics, "/health").ends_with("draining\n"));
            break;
        }
        assert!(Instant::now() < until, "still {probe}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Still accepting during the delay.
    assert!(get(served.addr, "/plaintext").ends_with("Hello, World!"));
    let mut served = served;
    let status = served.child.wait().unwrap();
    assert!(status.success());
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(1400), "{took:?}");
}

/// A bad --health address is one line at start.
#[test]
fn health_address_checked() {
    let out = Command::new(BIN)
        .args(["serve", "--health", "nowhere", "--check-config"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
