//! A cache hit allocates nothing: a counting global allocator watches the whole process while a
//! warmed-up keep-alive client sends thousands of requests for a cached file — plain, 304, 206,
//! and pipelined — to `lowlat serve --root`.

mod support;

use std::io::{Read, Write};

use support::alloc::{assert_no_allocation_per_request, exchange_exact as exchange};
use support::TestServer;

#[global_allocator]
static GLOBAL: lowlat_testkit::alloc::Counting = lowlat_testkit::alloc::Counting;

/// Sends `request` and reads one whole response (head and Content-Length body): its text.
fn one_reply(stream: &mut std::net::TcpStream, request: &[u8], buf: &mut [u8]) -> String {
    let n = support::alloc::one_reply(stream, request, buf);
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Cached hits (200, 304, 206, pipelined) allocate nothing once warm.
#[test]
fn no_allocation_per_cached_hit() {
    let _alone = lowlat_testkit::alloc::counting_alone();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("100.html"),
        [b"X".repeat(99), b"\n".to_vec()].concat(),
    )
    .unwrap();
    // Revalidation (a few stats once per entry per second) is kept out of the measurement.
    let server = TestServer::from_flags(&[
        "--root",
        dir.path().to_str().unwrap(),
        "--cache-valid",
        "1h",
    ]);
    let mut stream = server.connect();
    let mut buf = vec![0u8; 1 << 20];

    let first = one_reply(&mut stream, &support::get("/100.html"), &mut buf);
    let etag = first
        .lines()
        .find_map(|l| l.strip_prefix("ETag: "))
        .unwrap()
        .to_owned();
    let requests: Vec<Vec<u8>> = [
        "GET /100.html HTTP/1.1\r\nHost: t\r\n\r\n".to_owned(),
        format!("GET /100.html HTTP/1.1\r\nHost: t\r\nIf-None-Match: {etag}\r\n\r\n"),
        "GET /100.html HTTP/1.1\r\nHost: t\r\nRange: bytes=10-19\r\n\r\n".to_owned(),
        "HEAD /100.html HTTP/1.1\r\nHost: t\r\n\r\n".to_owned(),
    ]
    .into_iter()
    .map(String::into_bytes)
    .collect();
    let mut sizes = Vec::new();
    for (i, r) in requests.iter().enumerate() {
        let text = if i == 3 {
            // HEAD: the head only, whatever Content-Length says.
            stream.write_all(r).unwrap();
            let n = stream.read(&mut buf).unwrap();
            String::from_utf8_lossy(&buf[..n]).into_owned()
        } else {
            one_reply(&mut stream, r, &mut buf)
        };
        let want = [
            "HTTP/1.1 200",
            "HTTP/1.1 304",
            "HTTP/1.1 206",
            "HTTP/1.1 200",
        ][i];
        assert!(text.starts_with(want), "{text}");
        sizes.push(text.len());
    }
    // 20,800 requests.
    assert_no_allocation_per_request(&mut stream, &requests, &sizes, &mut buf);
}

/// Hits on files compressed on the fly (gzip and zstd, 200, HEAD and 304) allocate nothing once
/// warm: the compressed bodies come from the worker's cache, the lookup key is a reused buffer.
#[test]
fn no_allocation_per_compressed_hit() {
    let _alone = lowlat_testkit::alloc::counting_alone();
    let dir = tempfile::tempdir().unwrap();
    let page: String = (0..100)
        .map(|i| format!("<li><a href=\"/items/{i}\">Item {i}</a></li>\n"))
        .collect();
    std::fs::write(dir.path().join("page.html"), page).unwrap();
    let server = TestServer::from_flags(&[
        "--root",
        dir.path().to_str().unwrap(),
        "--cache-valid",
        "1h",
        "--compress",
    ]);
    let mut stream = server.connect();
    let mut buf = vec![0u8; 1 << 20];

    let gzip = "GET /page.html HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n";
    let first = one_reply(&mut stream, gzip.as_bytes(), &mut buf);
    assert!(first.contains("Content-Encoding: gzip"), "{first}");
    let etag = first
        .lines()
        .find_map(|l| l.strip_prefix("ETag: "))
        .unwrap()
        .to_owned();
    assert!(etag.ends_with("-gzip\""), "{etag}");
    let requests: Vec<Vec<u8>> = [
        gzip.to_owned(),
        "GET /page.html HTTP/1.1\r\nHost: t\r\nAccept-Encoding: zstd, gzip\r\n\r\n".to_owned(),
        format!(
            "GET /page.html HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\nIf-None-Match: {etag}\r\n\r\n"
        ),
    ]
    .into_iter()
    .map(String::into_bytes)
    .collect();
    let mut sizes = Vec::new();
    for (r, want) in requests.iter().zip(["200", "200", "304"]) {
        let text = one_reply(&mut stream, r, &mut buf);
        assert!(text.starts_with(&format!("HTTP/1.1 {want}")), "{text}");
        // Bytes, not the text: a compressed body is not UTF-8.
        let head = text.find("\r\n\r\n").unwrap() + 4;
        let body: usize = text[..head]
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .filter(|_| want == "200")
            .map_or(0, |v| v.parse().unwrap());
        sizes.push(head + body);
    }
    for _ in 0..100 {
        for (r, &len) in requests.iter().zip(&sizes) {
            exchange(&mut stream, r, len, &mut buf);
        }
    }
    let before = lowlat_testkit::alloc::allocations();
    let started = std::time::Instant::now();
    for _ in 0..2000 {
        for (r, &len) in requests.iter().zip(&sizes) {
            exchange(&mut stream, r, len, &mut buf);
        }
    }
    let allocations = lowlat_testkit::alloc::allocations() - before;
    // 6,000 requests; the Date cache formats once per second (one allocation each).
    assert!(
        allocations <= lowlat_testkit::alloc::allowed_since(started),
        "{allocations} allocations for 6,000 requests"
    );
}
