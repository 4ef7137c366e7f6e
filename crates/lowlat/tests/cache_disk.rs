//! The cache's disk tier (`--cache-disk`) with `lowlat serve` as a real process in front of the
//! counting origin: what is stored is found again after the process is killed and started
//! again, more than memory holds is served from disk, objects larger than memory takes are kept
//! on disk alone, purges reach the files, the budget holds, and a folder that cannot be used is
//! one line at start. A hit is a response the origin did not see.

use std::path::Path;
use std::time::{Duration, Instant};

mod support;
use support::origin::{get, request, Origin};
use support::{metric, Served};

/// `lowlat serve --proxy /=ORIGIN --cache --cache-disk DIR --metrics ADDR` and `more`.
fn proxy(origin: &Origin, dir: &Path, more: &[&str]) -> (Served, String) {
    let metrics = format!("127.0.0.1:{}", support::free_port());
    let rule = format!("/={}", origin.url());
    let dir = dir.display().to_string();
    let mut args = vec![
        "--proxy",
        &rule,
        "--cache",
        "--cache-disk",
        &dir,
        "--metrics",
        &metrics,
    ];
    args.extend_from_slice(more);
    let served = Served::start(args);
    (served, metrics)
}

/// Waits until `metric` reaches `at_least` (the writer and the loader work in the background).
fn wait_for(addr: &str, name: &str, at_least: u64) {
    let start = Instant::now();
    while metric(addr, name) < at_least {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{name} stayed below {at_least}: {}",
            metric(addr, name)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The bytes of the tier's files (the folders `00`..`ff`).
fn bytes_on_disk(dir: &Path) -> u64 {
    (0..=0xff)
        .filter_map(|i| std::fs::read_dir(dir.join(format!("{i:02x}"))).ok())
        .flat_map(|d| d.flatten())
        .map(|e| e.metadata().map_or(0, |m| m.len()))
        .sum()
}

/// Killed (no shutdown of any kind) and started again over the same folder: what was stored
/// is a hit, with its head, body and age, and a `Vary`'d URL's variants are found through their
/// marker.
#[test]
fn found_again_after_a_restart() {
    let origin = Origin::start();
    origin.set(
        "/a",
        200,
        "Cache-Control: max-age=600\nContent-Type: text/plain\nETag: \"a1\"",
        b"alpha",
    );
    origin.set(
        "/v",
        200,
        "Cache-Control: max-age=600\nVary: Accept-Language",
        b"varied",
    );
    let dir = tempfile::tempdir().unwrap();
    {
        let (p, metrics) = proxy(&origin, dir.path(), &[]);
        assert!(get(p.addr, "/a").cache_status().contains("fwd=uri-miss"));
        for lang in ["en", "fr"] {
            let lines = [format!("Accept-Language: {lang}")];
            let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
            request(p.addr, "GET", "/v", &lines);
        }
        // /a, the marker of /v and its two variants.
        wait_for(&metrics, "lowlat_cache_disk_writes_total", 4);
        let mut p = p;
        p.child.kill().unwrap();
        p.child.wait().unwrap();
    }
    let (p, metrics) = proxy(&origin, dir.path(), &[]);
    wait_for(&metrics, "lowlat_cache_disk_loaded", 1);
    assert_eq!(metric(&metrics, "lowlat_cache_disk_objects"), 4);
    let got = get(p.addr, "/a");
    assert_eq!(got.status, 200);
    assert_eq!(got.body, b"alpha");
    assert!(got.cache_status().contains("hit"), "{}", got.head);
    assert_eq!(got.field("etag"), Some("\"a1\""));
    assert_eq!(got.field("content-type"), Some("text/plain"));
    assert!(got.field("age").is_some());
    for lang in ["en", "fr"] {
        let lines = [format!("Accept-Language: {lang}")];
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let got = request(p.addr, "GET", "/v", &lines);
        assert!(got.cache_status().contains("hit"), "{lang}: {}", got.head);
    }
    // A language never asked for is a miss of its own.
    request(p.addr, "GET", "/v", &["Accept-Language: de"]);
    assert_eq!(origin.count("GET /a"), 1);
    assert_eq!(origin.count("GET /v"), 3);
    assert!(metric(&metrics, "lowlat_cache_disk_reads_total") >= 3);
}

/// A working set four times the memory budget: on a second pass every response is still a
/// hit, the evicted ones read back from disk; an object larger than memory takes is stored on
/// disk alone and served whole from there.
#[test]
fn more_than_memory_holds_is_served_from_disk() {
    let origin = Origin::start();
    let body: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    for i in 0..400 {
        origin.set(&format!("/o/{i}"), 200, "Cache-Control: max-age=600", &body);
    }
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    origin.set("/big", 200, "Cache-Control: max-age=600", &big);
    let dir = tempfile::tempdir().unwrap();
    let (p, metrics) = proxy(
        &origin,
        dir.path(),
        &["--cache-size", "1m", "--cache-disk-max-object", "8m"],
    );
    for i in 0..400 {
        get(p.addr, &format!("/o/{i}"));
    }
    assert_eq!(get(p.addr, "/big").body.len(), big.len());
    wait_for(&metrics, "lowlat_cache_disk_writes_total", 401);
    assert!(metric(&metrics, "lowlat_cache_evictions_total") > 200);
    for i in 0..400 {
        let got = get(p.addr, &format!("/o/{i}"));
        assert!(got.cache_status().contains("hit"), "/o/{i}: {}", got.head);
        assert_eq!(got.body, body);
    }
    let got = get(p.addr, "/big");
    assert!(got.cache_status().contains("hit"), "{}", got.head);
    assert!(
        got.body == big,
        "the large object changed on its way through the disk"
    );
    for i in 0..400 {
        assert_eq!(origin.count(&format!("GET /o/{i}")), 1, "/o/{i}");
    }
    assert_eq!(origin.count("GET /big"), 1);
    assert!(metric(&metrics, "lowlat_cache_disk_reads_total") >= 300);
}

/// `PURGE` by URL, prefix and tag removes the files too: after a restart nothing purged comes
/// back, and what was not purged does.
#[test]
fn purges_reach_the_disk() {
    let origin = Origin::start();
    for path in ["/p/1", "/p/2", "/keep"] {
        origin.set(path, 200, "Cache-Control: max-age=600", path.as_bytes());
    }
    origin.set(
        "/t",
        200,
        "Cache-Control: max-age=600\nCache-Tag: red",
        b"t",
    );
    origin.set("/u", 200, "Cache-Control: max-age=600", b"u");
    let dir = tempfile::tempdir().unwrap();
    {
        let (p, metrics) = proxy(&origin, dir.path(), &[]);
        for path in ["/p/1", "/p/2", "/keep", "/t", "/u"] {
            get(p.addr, path);
        }
        wait_for(&metrics, "lowlat_cache_disk_objects", 5);
        let got = request(p.addr, "PURGE", "/p/*", &[]);
        assert_eq!(got.body, b"{\"purged\": 2}\n");
        let got = request(p.addr, "PURGE", "/", &["Cache-Tag: red"]);
        assert_eq!(got.body, b"{\"purged\": 1}\n");
        let got = request(p.addr, "PURGE", "/u", &[]);
        assert_eq!(got.body, b"{\"purged\": 1}\n");
        assert_eq!(metric(&metrics, "lowlat_cache_disk_objects"), 1);
    }
    let (p, metrics) = proxy(&origin, dir.path(), &[]);
    wait_for(&metrics, "lowlat_cache_disk_loaded", 1);
    assert!(get(p.addr, "/keep").cache_status().contains("hit"));
    for path in ["/p/1", "/p/2", "/t", "/u"] {
        let got = get(p.addr, path);
        assert!(
            got.cache_status().contains("fwd=uri-miss"),
            "{path}: {}",
            got.head
        );
        assert_eq!(origin.count(&format!("GET {path}")), 2, "{path}");
    }
}

/// Two hundred objects of 50 KB through a 1 MiB disk budget: the files stay within it, and
/// the ones evicted are misses again.
#[test]
fn the_disk_budget_holds() {
    let origin = Origin::start();
    let body = vec![b'z'; 50_000];
    for i in 0..200 {
        origin.set(&format!("/b/{i}"), 200, "Cache-Control: max-age=600", &body);
    }
    let dir = tempfile::tempdir().unwrap();
    let (p, metrics) = proxy(
        &origin,
        dir.path(),
        &["--cache-size", "1m", "--cache-disk-size", "1m"],
    );
    for i in 0..200 {
        get(p.addr, &format!("/b/{i}"));
    }
    wait_for(&metrics, "lowlat_cache_disk_writes_total", 200);
    assert!(metric(&metrics, "lowlat_cache_disk_evictions_total") >= 150);
    assert!(metric(&metrics, "lowlat_cache_disk_bytes") <= 1 << 20);
    let on_disk = bytes_on_disk(dir.path());
    assert!(on_disk <= 1 << 20, "{on_disk} bytes of files");
    assert!(on_disk >= 500_000, "{on_disk} bytes of files");
    // The first ones went first.
    assert!(get(p.addr, "/b/0").cache_status().contains("fwd=uri-miss"));
}

/// A folder that cannot be used (a file is in the way) is one line and exit 1, at start and
/// from `--check-config`.
#[test]
fn an_unusable_folder_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"not a folder").unwrap();
    for check in [false, true] {
        let mut cmd = std::process::Command::new(support::BIN);
        cmd.args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--proxy",
            "/=http://127.0.0.1:9",
        ])
        .args(["--cache", "--cache-disk"])
        .arg(&file);
        if check {
            cmd.arg("--check-config");
        }
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("--cache-disk: cannot use"), "{err}");
    }
}
