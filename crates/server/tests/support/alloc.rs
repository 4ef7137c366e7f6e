//! What the allocation tests share: a client that allocates nothing in its loop (fixed buffers,
//! heads found in place), and the measured loop itself — warm up, then count the whole process's
//! allocations (the test binary's counting global allocator) over thousands of requests.

use std::io::{Read, Write};
use std::net::TcpStream;

/// Sends `request` and reads exactly `expect` bytes back into `buf`: no allocation, for the
/// measured loops of the allocation tests.
pub fn exchange_exact(stream: &mut TcpStream, request: &[u8], expect: usize, buf: &mut [u8]) {
    stream.write_all(request).unwrap();
    let mut got = 0;
    while got < expect {
        let n = stream.read(&mut buf[got..]).unwrap();
        assert!(n > 0, "closed");
        got += n;
    }
    assert_eq!(got, expect);
}

/// Sends `request` and reads one whole response into `buf` (its head, and its Content-Length
/// body unless it is a 304); returns its length. Allocates nothing.
pub fn one_reply(stream: &mut TcpStream, request: &[u8], buf: &mut [u8]) -> usize {
    stream.write_all(request).unwrap();
    let mut got = 0;
    loop {
        let n = stream.read(&mut buf[got..]).unwrap();
        assert!(n > 0, "closed");
        got += n;
        if let Some(end) = buf[..got].windows(4).position(|w| w == b"\r\n\r\n") {
            let head = std::str::from_utf8(&buf[..end]).unwrap();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .filter(|_| !head.starts_with("HTTP/1.1 304"))
                .map_or(0, |v| v.parse().unwrap());
            if got >= end + 4 + len {
                assert_eq!(got, end + 4 + len);
                return got;
            }
        }
    }
}

/// Warms up with 200 rounds of `requests` (each answered by `sizes` bytes) and of the 64 of them
/// pipelined in one write, then asserts that 2,000 rounds and 200 pipelined batches allocate no
/// more than the Date cache may (it formats once per second, one allocation each).
pub fn assert_no_allocation_per_request(
    stream: &mut TcpStream,
    requests: &[Vec<u8>],
    sizes: &[usize],
    buf: &mut [u8],
) {
    let n = requests.len();
    let pipelined: Vec<u8> = (0..64).flat_map(|i| requests[i % n].clone()).collect();
    let pipelined_len: usize = (0..64).map(|i| sizes[i % n]).sum();
    // Warm up: pools, scratch buffers, the date cache.
    for _ in 0..200 {
        for (r, &len) in requests.iter().zip(sizes) {
            exchange_exact(stream, r, len, buf);
        }
        exchange_exact(stream, &pipelined, pipelined_len, buf);
    }

    let before = lowlat_testkit::alloc::allocations();
    let started = std::time::Instant::now();
    for _ in 0..2000 {
        for (r, &len) in requests.iter().zip(sizes) {
            exchange_exact(stream, r, len, buf);
        }
    }
    for _ in 0..200 {
        exchange_exact(stream, &pipelined, pipelined_len, buf);
    }
    let allocations = lowlat_testkit::alloc::allocations() - before;
    assert!(
        allocations <= lowlat_testkit::alloc::allowed_since(started),
        "{allocations} allocations for {} requests",
        2000 * n + 200 * 64
    );
}
