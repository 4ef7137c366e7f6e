//! No allocation per request once warm: a counting global allocator watches the whole process
//! while a warmed-up keep-alive client (which itself allocates nothing in its loop) sends
//! thousands of requests, single and pipelined, to the built-in endpoints.

mod support;

use std::io::{Read, Write};

#[global_allocator]
static GLOBAL: lowlat_testkit::alloc::Counting = lowlat_testkit::alloc::Counting;

/// Sends `request` and reads exactly `reply_len * count` bytes back, into a fixed buffer.
fn exchange(stream: &mut std::net::TcpStream, request: &[u8], expect: usize, buf: &mut [u8]) {
    stream.write_all(request).unwrap();
    let mut got = 0;
    while got < expect {
        let n = stream.read(&mut buf[got..]).unwrap();
        assert!(n > 0, "closed");
        got += n;
    }
    assert_eq!(got, expect);
}

/// The server allocates nothing per request once warm (plaintext, json, 404, pipelined).
#[test]
fn no_allocation_per_request_once_warm() {
    let server = support::TestServer::builtin(1);
    let mut stream = server.connect();
    let mut buf = vec![0u8; 1 << 20];

    // Learn each response's length (allocates; that is fine before the measurement).
    let requests: Vec<Vec<u8>> = ["/plaintext", "/json", "/missing"]
        .iter()
        .map(|p| support::get(p))
        .collect();
    let mut sizes = Vec::new();
    for r in &requests {
        stream.write_all(r).unwrap();
        // Response heads here are all well under one read; read until the body is complete.
        let mut got = 0;
        loop {
            let n = stream.read(&mut buf[got..]).unwrap();
            got += n;
            let text = String::from_utf8_lossy(&buf[..got]);
            if let Some(end) = text.find("\r\n\r\n") {
                let len: usize = text[..end]
                    .lines()
                    .find_map(|l| l.strip_prefix("Content-Length: "))
                    .unwrap()
                    .parse()
                    .unwrap();
                if got >= end + 4 + len {
                    assert_eq!(got, end + 4 + len);
                    break;
                }
            }
        }
        sizes.push(got);
    }
    let pipelined: Vec<u8> = (0..64).flat_map(|i| requests[i % 3].clone()).collect();
    let pipelined_len: usize = (0..64).map(|i| sizes[i % 3]).sum();

    // Warm up: pools, scratch buffers, the date cache.
    for _ in 0..200 {
        for (r, &len) in requests.iter().zip(&sizes) {
            exchange(&mut stream, r, len, &mut buf);
        }
        exchange(&mut stream, &pipelined, pipelined_len, &mut buf);
    }

    let before = lowlat_testkit::alloc::allocations();

    let started = std::time::Instant::now();
    for _ in 0..2000 {
        for (r, &len) in requests.iter().zip(&sizes) {
            exchange(&mut stream, r, len, &mut buf);
        }
    }
    for _ in 0..200 {
        exchange(&mut stream, &pipelined, pipelined_len, &mut buf);
    }
    let after = lowlat_testkit::alloc::allocations();
    // 18,800 requests. The Date cache formats once per second (one allocation each), so allow a
    // handful for the seconds this takes.
    let allocations = after - before;
    assert!(
        allocations <= lowlat_testkit::alloc::allowed_since(started),
        "{allocations} allocations for 18,800 requests"
    );
}
