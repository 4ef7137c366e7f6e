//! The dynamic app allocates nothing per request once warm: a counting global allocator watches
//! the whole process while a warmed-up keep-alive client, which allocates nothing in its loop,
//! sends thousands of random, prefix and negotiated requests, single and pipelined.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use clap::Parser;
use lowlat_server::settings::ServeArgs;

#[global_allocator]
static GLOBAL: lowlat_testkit::alloc::Counting = lowlat_testkit::alloc::Counting;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

/// Sends `request` (holding `count` requests) and reads until `count` complete responses have
/// arrived, parsing heads in place with a fixed header array: no allocation.
fn exchange(stream: &mut TcpStream, request: &[u8], count: usize, buf: &mut [u8]) {
    stream.write_all(request).unwrap();
    let (mut filled, mut start, mut done) = (0, 0, 0);
    while done < count {
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut response = httparse::Response::new(&mut headers);
        if let Ok(httparse::Status::Complete(head)) = response.parse(&buf[start..filled]) {
            assert_eq!(response.code, Some(200));
            let length: usize = response
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| std::str::from_utf8(h.value).ok()?.parse().ok())
                .expect("Content-Length");
            if filled - start >= head + length {
                start += head + length;
                done += 1;
                continue;
            }
        }
        if start == filled {
            (start, filled) = (0, 0);
        }
        assert!(filled < buf.len(), "responses larger than the buffer");
        let n = stream.read(&mut buf[filled..]).unwrap();
        assert!(n > 0, "closed");
        filled += n;
    }
    assert_eq!(start, filled, "no extra bytes");
}

/// The app's routes allocate nothing per request once warm.
#[test]
fn app_requests_do_not_allocate_once_warm() {
    let cli = Cli::try_parse_from([
        "serve",
        "--workers",
        "1",
        "--listen",
        "127.0.0.1:0",
        "--seed",
        "3",
    ])
    .unwrap();
    let service = lowlat_server::settings::service(&cli.serve).unwrap();
    let cfg = cli.serve.to_config().unwrap();
    let server = lowlat_server::Server::bind(cfg, service).unwrap();
    let running = server.start().unwrap();
    let mut stream = TcpStream::connect(running.local_addrs()[0]).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.set_nodelay(true).unwrap();
    let mut buf = vec![0u8; 1 << 20];

    let requests: Vec<Vec<u8>> = [
        ("/app/", ""),
        ("/app/", "Accept: application/json\r\n"),
        ("/app/b", "Accept: text/html;q=0.5, application/json\r\n"),
        (
            "/app/c",
            "Accept: text/html,application/xhtml+xml,*/*;q=0.8\r\n",
        ),
    ]
    .iter()
    .map(|(path, accept)| format!("GET {path} HTTP/1.1\r\nHost: t\r\n{accept}\r\n").into_bytes())
    .collect();
    let pipelined: Vec<u8> = (0..64).flat_map(|i| requests[i % 4].clone()).collect();

    // Warm up: buffers, the scratch buffer, the date cache.
    for _ in 0..200 {
        for r in &requests {
            exchange(&mut stream, r, 1, &mut buf);
        }
        exchange(&mut stream, &pipelined, 64, &mut buf);
    }

    let before = lowlat_testkit::alloc::allocations();

    let started = std::time::Instant::now();
    for _ in 0..2000 {
        for r in &requests {
            exchange(&mut stream, r, 1, &mut buf);
        }
    }
    for _ in 0..200 {
        exchange(&mut stream, &pipelined, 64, &mut buf);
    }
    let allocations = lowlat_testkit::alloc::allocations() - before;
    // 20,800 requests. The Date cache formats once per second (one allocation each), so allow a
    // handful for the seconds this takes.
    assert!(
        allocations <= lowlat_testkit::alloc::allowed_since(started),
        "{allocations} allocations for 20,800 requests"
    );
    running.shutdown_handle().shutdown();
    running.wait().unwrap();
}
