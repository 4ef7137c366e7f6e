//! Return rules, the HTTPS redirect, a `try_files` fallback and a `log_format` line allocate
//! nothing per request once warm: a counting global allocator watches the whole process while a
//! keep-alive client sends thousands of such requests to `lowlat serve`.

mod support;

use support::alloc::one_reply;
use support::TestServer;

#[global_allocator]
static GLOBAL: lowlat_testkit::alloc::Counting = lowlat_testkit::alloc::Counting;

/// Redirects, fixed answers, the SPA fallback (a cache hit) and their log lines: no allocation
/// per request once warm.
#[test]
fn no_allocation_per_return_fallback_or_log_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("index.html"), "spa").unwrap();
    let log = dir.path().join("access.log");
    let server = TestServer::from_flags(&[
        "--root",
        dir.path().to_str().unwrap(),
        "--cache-valid",
        "1h",
        "--try-files",
        "$uri",
        "--try-files",
        "/index.html",
        "--return",
        "/old/=301 https://$host$request_uri",
        "--return",
        "/hello=200 hi $uri $args",
        "--access-log",
        log.to_str().unwrap(),
        "--access-log-format",
        "$remote_addr - $remote_user [$time_local] $time_iso8601 \"$request\" $status $body_bytes_sent $bytes_sent \"$http_user_agent\" $host $site $request_time $request_id $upstream_addr $msec",
    ]);
    let mut stream = server.connect();
    let mut buf = vec![0u8; 1 << 16];
    // (request, the status line it gets)
    let requests: [(&[u8], &[u8]); 4] = [
        (
            b"GET /old/page?q=1 HTTP/1.1\r\nHost: Example.com:8080\r\nUser-Agent: t\r\n\r\n",
            b"HTTP/1.1 301",
        ),
        (
            b"GET /hello/x?y HTTP/1.1\r\nHost: a\r\nAuthorization: Basic YWxpY2U6c2VjcmV0\r\n\r\n",
            b"HTTP/1.1 200",
        ),
        (
            b"GET /deep/app/route HTTP/1.1\r\nHost: a\r\nX-Request-Id: abc\r\n\r\n",
            b"HTTP/1.1 200",
        ),
        (
            b"GET /index.html HTTP/1.1\r\nHost: a\r\n\r\n",
            b"HTTP/1.1 200",
        ),
    ];
    for (r, status) in requests {
        for _ in 0..200 {
            let n = one_reply(&mut stream, r, &mut buf);
            assert!(
                buf[..n].starts_with(status),
                "{}",
                String::from_utf8_lossy(&buf[..n])
            );
        }
        let before = lowlat_testkit::alloc::allocations();
        let started = std::time::Instant::now();
        for _ in 0..2000 {
            one_reply(&mut stream, r, &mut buf);
        }
        let after = lowlat_testkit::alloc::allocations();
        // The Date cache and the log's time fields format once per second each.
        let allocations = after - before;
        assert!(
            allocations <= lowlat_testkit::alloc::allowed_since(started),
            "{allocations} allocations for 2,000 of {}",
            String::from_utf8_lossy(r).lines().next().unwrap_or("")
        );
    }
}
