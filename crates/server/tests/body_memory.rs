//! Request bodies cost memory only as their bytes arrive: a head that declares a huge body, or
//! many of them, must not make the server allocate ahead, and a body sent in tiny chunks needs
//! no more room than the same body sent whole. Its own test binary, so that the process's RSS
//! is the server's and this test's alone.

mod support;

use std::io::Write;
use std::time::Duration;

use lowlat_http::request::Method;
use lowlat_server::{Req, Response, Router};
use support::{config, service, Reader, TestServer};

fn echo_router() -> Router {
    let mut r = Router::new();
    lowlat_server::builtin::mount(&mut r).unwrap();
    r.route(
        "/echo",
        &[Method::Post],
        |req: &Req<'_, '_, '_>, res: &mut Response<'_>| {
            res.send(200, b"application/octet-stream", req.body);
        },
    )
    .unwrap();
    r
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn declared_bodies_cost_no_memory_before_they_arrive() {
    // A limit far beyond this machine's memory: the declared length alone must not be
    // allocated (it used to be, and a failed allocation aborts the process).
    let mut cfg = config(1);
    cfg.max_body_bytes = 10_000_000_000_000;
    let server = TestServer::start(cfg, service(echo_router));
    let mut huge = server.connect();
    huge.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 9999999999999\r\n\r\nabc")
        .unwrap();

    // 100 connections each declaring a 1 MiB body and sending 3 bytes of it.
    let before = rss_kib();
    let held: Vec<_> = (0..100)
        .map(|_| {
            let mut s = server.connect();
            s.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\nabc")
                .unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let grown = rss_kib().saturating_sub(before);
    assert!(
        grown < 20 * 1024,
        "RSS grew by {grown} KiB for 100 declared 1 MiB bodies"
    );

    // Everyone else is still served.
    let mut r = Reader::new(server.connect());
    r.send(b"GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.reply().unwrap().body, b"Hello, World!");
    drop(held);
    drop(huge);
}

fn chunked(body: &[u8], chunk: usize) -> Vec<u8> {
    let mut req = b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for c in body.chunks(chunk) {
        req.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
        req.extend_from_slice(c);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    req
}

#[test]
fn tiny_chunks_decode_within_the_body_limit() {
    let mut cfg = config(1);
    cfg.max_body_bytes = 1 << 20;
    let server = TestServer::start(cfg, service(echo_router));
    // 400 KB in 1-byte chunks is 2.4 MB on the wire, well over the body limit.
    let body: Vec<u8> = (0..400_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let mut r = Reader::new(server.connect());
    r.send(&chunked(&body, 1));
    let reply = r.reply().unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body, body);
    // The connection goes on.
    r.send(b"GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.reply().unwrap().body, b"Hello, World!");

    // Over the limit in tiny chunks: 413, whatever the framing.
    let big = vec![b'z'; (1 << 20) + 1];
    let mut r = Reader::new(server.connect());
    r.send(&chunked(&big, 7));
    assert_eq!(r.reply().unwrap().status, 413);
}
