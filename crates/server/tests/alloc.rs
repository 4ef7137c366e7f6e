//! No allocation per request once warm: a counting global allocator watches the whole process
//! while a warmed-up keep-alive client (which itself allocates nothing in its loop) sends
//! thousands of requests, single and pipelined, to the built-in endpoints.

mod support;

use support::alloc::{assert_no_allocation_per_request, one_reply};

#[global_allocator]
static GLOBAL: lowlat_testkit::alloc::Counting = lowlat_testkit::alloc::Counting;

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
    let sizes: Vec<usize> = requests
        .iter()
        .map(|r| one_reply(&mut stream, r, &mut buf))
        .collect();
    // 18,800 requests.
    assert_no_allocation_per_request(&mut stream, &requests, &sizes, &mut buf);
}
