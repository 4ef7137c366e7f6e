//! The engine end to end over real sockets: pipelining, keep-alive, HTTP/1.0, HEAD, bodies,
//! every limit and timeout, every request-smuggling shape, the Date header, shutdown, and
//! concurrent clients across workers.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use lowlat_http::request::Method;
use lowlat_server::{Req, Response, Router, ServerConfig};
use support::{config, get, roundtrip, service, Reader, TestServer};

/// A router with the built-ins plus `/echo`, which answers a POST with its body.
fn echo_router() -> Router {
    let mut r = Router::new();
    lowlat_server::builtin::mount(&mut r).unwrap();
    r.route(
        "/echo",
        &[Method::Post, Method::Put],
        |req: &Req<'_, '_, '_>, res: &mut Response<'_>| {
            res.send(200, b"application/octet-stream", req.body);
        },
    )
    .unwrap();
    r
}

fn echo_server(cfg: ServerConfig) -> TestServer {
    TestServer::start(cfg, service(echo_router))
}

/// Pipelined batches of 1 to 128 requests, all in one write, are answered in order.
#[test]
fn pipelined_batches_answered_in_order() {
    let server = TestServer::builtin(1);
    let mut r = Reader::new(server.connect());
    for n in [1usize, 2, 3, 16, 64, 128] {
        let mut batch = Vec::new();
        let paths: Vec<&str> = (0..n)
            .map(|i| ["/plaintext", "/json", "/missing"][i % 3])
            .collect();
        for p in &paths {
            batch.extend_from_slice(&get(p));
        }
        r.send(&batch);
        for p in &paths {
            let reply = r.reply().expect("reply");
            match *p {
                "/plaintext" => assert_eq!(reply.body, b"Hello, World!"),
                "/json" => assert_eq!(reply.body, br#"{"message":"Hello, World!"}"#),
                _ => assert_eq!(reply.status, 404),
            }
        }
    }
}

/// A pipelined batch split at odd places over many writes, read back in small pieces.
#[test]
fn pipelined_batch_spanning_reads_and_writes() {
    let server = TestServer::builtin(1);
    let mut stream = server.connect();
    let mut batch = Vec::new();
    for i in 0..128 {
        batch.extend_from_slice(&get(if i % 2 == 0 { "/plaintext" } else { "/json" }));
    }
    for chunk in batch.chunks(97) {
        stream.write_all(chunk).unwrap();
        std::thread::sleep(Duration::from_micros(200));
    }
    // Read everything back in 7-byte reads, then parse.
    let mut all = Vec::new();
    let mut piece = [0u8; 7];
    let reader = Reader::new(stream.try_clone().unwrap());
    let expected = 128;
    let mut seen = 0;
    while seen < expected {
        let n = stream.read(&mut piece).unwrap();
        assert!(n > 0, "server closed early");
        all.extend_from_slice(&piece[..n]);
        seen = count_responses(&all);
    }
    reader.stream.shutdown(std::net::Shutdown::Both).ok();
    assert_eq!(count_responses(&all), expected);
}

fn count_responses(bytes: &[u8]) -> usize {
    let text = String::from_utf8_lossy(bytes);
    let mut count = 0;
    let mut rest: &str = &text;
    while let Some(i) = rest.find("HTTP/1.1 200 OK\r\n") {
        let after = &rest[i..];
        let Some(head_end) = after.find("\r\n\r\n") else {
            break;
        };
        let len: usize = after[..head_end]
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap()
            .parse()
            .unwrap();
        if after.len() < head_end + 4 + len {
            break;
        }
        count += 1;
        rest = &after[head_end + 4 + len..];
    }
    count
}

/// A request delivered one byte at a time is answered.
#[test]
fn request_one_byte_at_a_time() {
    let server = TestServer::builtin(1);
    let mut r = Reader::new(server.connect());
    for b in b"GET /plaintext HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n" {
        r.send(&[*b]);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(r.reply().unwrap().body, b"Hello, World!");
}

/// One connection carries many requests one after another.
#[test]
fn keep_alive_reuse() {
    let server = TestServer::builtin(1);
    let mut r = Reader::new(server.connect());
    for _ in 0..100 {
        r.send(&get("/plaintext"));
        let reply = r.reply().unwrap();
        assert_eq!(reply.status, 200);
        assert_eq!(reply.header("connection"), None);
    }
}

/// HTTP/1.0 closes unless asked to keep alive; then it says so.
#[test]
fn http10_keep_alive_rules() {
    let server = TestServer::builtin(1);
    let mut r = Reader::new(server.connect());
    r.send(b"GET /plaintext HTTP/1.0\r\n\r\n");
    let reply = r.reply().unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("connection"), Some("close"));
    assert!(r.closed(), "HTTP/1.0 without keep-alive closes");

    let mut r = Reader::new(server.connect());
    for _ in 0..3 {
        r.send(b"GET /plaintext HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
        let reply = r.reply().unwrap();
        assert_eq!(reply.header("connection"), Some("keep-alive"));
    }
}

/// `Connection: close` is honoured, even in the middle of a pipelined batch.
#[test]
fn connection_close_honoured() {
    let server = TestServer::builtin(1);
    let mut r = Reader::new(server.connect());
    let mut batch = get("/plaintext");
    batch.extend_from_slice(b"GET /json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    batch.extend_from_slice(&get("/plaintext"));
    r.send(&batch);
    assert_eq!(r.reply().unwrap().status, 200);
    let second = r.reply().unwrap();
    assert_eq!(second.header("connection"), Some("close"));
    assert!(r.closed(), "nothing is answered after Connection: close");
}

/// HEAD gets the headers, with the length of the body it does not get.
#[test]
fn head_has_no_body() {
    let server = TestServer::builtin(1);
    let mut r = Reader::new(server.connect());
    r.send(b"HEAD /plaintext HTTP/1.1\r\nHost: x\r\n\r\n");
    let reply = r.reply_to("HEAD").unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-length"), Some("13"));
    // The next response starts right after the head: no stray body bytes.
    r.send(&get("/json"));
    assert_eq!(r.reply().unwrap().body, br#"{"message":"Hello, World!"}"#);
}

/// Every response has Server, Date (an IMF-fixdate near now) and Content-Length.
#[test]
fn standard_headers() {
    let server = TestServer::builtin(1);
    for path in ["/plaintext", "/json", "/nope"] {
        let reply = roundtrip(server.addr, &get(path)).unwrap();
        assert_eq!(reply.header("server"), Some("lowlat"));
        assert!(reply.header("content-length").is_some());
        let date = reply.header("date").expect("Date");
        assert_eq!(date.len(), 29);
        assert!(date.ends_with(" GMT"));
        let when = httpdate::parse_http_date(date).expect("IMF-fixdate");
        let skew = when
            .duration_since(std::time::SystemTime::now() - Duration::from_secs(5))
            .expect("not in the past");
        assert!(skew < Duration::from_secs(10));
    }
}

/// A route answers other methods with 405 and the methods it allows.
#[test]
fn method_not_allowed() {
    let server = TestServer::builtin(1);
    let reply = roundtrip(
        server.addr,
        b"DELETE /plaintext HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .unwrap();
    assert_eq!(reply.status, 405);
    assert_eq!(reply.header("allow"), Some("GET, HEAD"));
}

/// Content-Length and chunked bodies are read; Expect: 100-continue is answered.
#[test]
fn request_bodies() {
    let server = echo_server(config(1));
    let mut r = Reader::new(server.connect());
    r.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
    assert_eq!(r.reply().unwrap().body, b"hello");
    r.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: t\r\n\r\n");
    assert_eq!(r.reply().unwrap().body, b"hello world");
    // A body split over several writes.
    r.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n01234");
    std::thread::sleep(Duration::from_millis(20));
    r.send(b"56789");
    assert_eq!(r.reply().unwrap().body, b"0123456789");
    // A body for a route that takes none is read and dropped; the connection goes on.
    r.send(b"GET /plaintext HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcGET /json HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.reply().unwrap().body, b"Hello, World!");
    assert_eq!(r.reply().unwrap().body, br#"{"message":"Hello, World!"}"#);
    // Expect: 100-continue gets a 100 before the body is sent.
    r.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n");
    let interim = r.reply().unwrap();
    assert_eq!(interim.status, 100);
    r.send(b"data");
    assert_eq!(r.reply().unwrap().body, b"data");
    // A body larger than one read buffer.
    let big = vec![b'z'; 200_000];
    let mut req = format!(
        "PUT /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        big.len()
    )
    .into_bytes();
    req.extend_from_slice(&big);
    r.send(&req);
    assert_eq!(r.reply().unwrap().body, big);
}

/// Refused requests get their status, then the connection is closed.
fn assert_refused(server: &TestServer, request: &[u8], status: u16) {
    let mut r = Reader::new(server.connect());
    r.send(request);
    let reply = r
        .reply()
        .unwrap_or_else(|| panic!("no reply to {:?}", String::from_utf8_lossy(request)));
    assert_eq!(
        reply.status,
        status,
        "{:?}",
        String::from_utf8_lossy(request)
    );
    assert_eq!(reply.header("connection"), Some("close"));
    assert!(r.closed(), "connection closed after {status}");
}

/// Each request-smuggling shape of RFC 9112 §6.3 gets 400 and a closed connection.
#[test]
fn smuggling_shapes_refused() {
    let server = echo_server(config(1));
    let shapes: &[&[u8]] = &[
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST /echo HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\nhello",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1e3\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length : 5\r\n\r\nhello",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
        b"GET /plaintext HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n b\r\n\r\n",
        b"GET /plaintext HTTP/1.1\r\nHost: x\r\nX-Bare: a\rb\r\n\r\n",
        b"GET /plaintext HTTP/1.1\r\nHost: x\rX: y\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX\r\n0\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n",
        b"GET /plaintext HTTP/1.1\r\n\r\n",
        b"GET /plaintext HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    ];
    for shape in shapes {
        assert_refused(&server, shape, 400);
    }
    // Other malformed requests.
    assert_refused(&server, b"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n", 400);
    assert_refused(&server, b"G@T / HTTP/1.1\r\nHost: x\r\n\r\n", 400);
    assert_refused(&server, b"\x00\x01\x02 garbage\r\n\r\n", 400);
    assert_refused(&server, b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505);
    assert_refused(&server, b"GET / HTTP/1.7\r\nHost: x\r\n\r\n", 505);
}

/// Size limits: URI 414, head 431, header count 431, body 413 (declared and chunked).
#[test]
fn size_limits() {
    let mut cfg = config(1);
    cfg.head.max_uri_bytes = 1000;
    cfg.head.max_head_bytes = 4000;
    cfg.head.max_headers = 20;
    cfg.max_body_bytes = 10_000;
    let server = echo_server(cfg);
    let long_uri = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(1500));
    assert_refused(&server, long_uri.as_bytes(), 414);
    let endless_uri = format!("GET /{}", "a".repeat(5000));
    assert_refused(&server, endless_uri.as_bytes(), 414);
    let big_head = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "b".repeat(5000)
    );
    assert_refused(&server, big_head.as_bytes(), 431);
    let mut many = String::from("GET / HTTP/1.1\r\nHost: x\r\n");
    for i in 0..25 {
        many.push_str(&format!("X-{i}: v\r\n"));
    }
    many.push_str("\r\n");
    assert_refused(&server, many.as_bytes(), 431);
    assert_refused(
        &server,
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10001\r\n\r\n",
        413,
    );
    let mut chunked =
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..11 {
        chunked.extend_from_slice(b"3e8\r\n");
        chunked.extend_from_slice(&[b'c'; 1000]);
        chunked.extend_from_slice(b"\r\n");
    }
    assert_refused(&server, &chunked, 413);
    // Just under the limits is fine.
    let ok_uri = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(900));
    assert_eq!(
        roundtrip(server.addr, ok_uri.as_bytes()).unwrap().status,
        404
    );
}

/// An idle keep-alive connection is closed after the keep-alive timeout.
#[test]
fn keepalive_timeout_closes_idle() {
    let mut cfg = config(1);
    cfg.keepalive_timeout = Duration::from_millis(300);
    let server = TestServer::start(cfg, lowlat_server::builtin_service());
    let mut r = Reader::new(server.connect());
    r.send(&get("/plaintext"));
    assert_eq!(r.reply().unwrap().status, 200);
    let start = Instant::now();
    assert!(r.closed());
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(250),
        "closed too early: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(3),
        "closed too late: {waited:?}"
    );
}

/// Slowloris: a head dribbled one byte every 100 ms is cut off by the header timeout with a 408,
/// and other clients are served meanwhile.
#[test]
fn header_timeout_stops_slowloris() {
    let mut cfg = config(1);
    cfg.header_timeout = Duration::from_millis(500);
    let server = TestServer::start(cfg, lowlat_server::builtin_service());
    let mut slow = server.connect();
    let start = Instant::now();
    let request =
        b"GET /plaintext HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let mut cut = false;
    for b in request {
        if slow.write_all(&[*b]).is_err() {
            cut = true;
            break;
        }
        // The others are not held up.
        assert_eq!(
            roundtrip(server.addr, &get("/plaintext")).unwrap().status,
            200
        );
        std::thread::sleep(Duration::from_millis(100));
        if start.elapsed() > Duration::from_secs(3) {
            break;
        }
    }
    let mut r = Reader::new(slow);
    let reply = r.reply();
    let elapsed = start.elapsed();
    if let Some(reply) = reply {
        assert_eq!(reply.status, 408);
    } else {
        assert!(cut, "neither a 408 nor a closed connection");
    }
    assert!(
        elapsed < Duration::from_secs(3),
        "cut off after {elapsed:?}"
    );
}

/// A body that stops arriving gets a 408 after the body timeout.
#[test]
fn body_timeout() {
    let mut cfg = config(1);
    cfg.body_timeout = Duration::from_millis(300);
    let server = echo_server(cfg);
    let mut r = Reader::new(server.connect());
    let start = Instant::now();
    r.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\npartial");
    let reply = r.reply().expect("a 408");
    assert_eq!(reply.status, 408);
    assert!(start.elapsed() < Duration::from_secs(3));
    assert!(r.closed());
}

/// A client that pipelines without reading is cut off by the write timeout, and does not hold
/// up other clients.
#[test]
fn write_timeout_cuts_non_reading_client() {
    let mut cfg = config(1);
    cfg.write_timeout = Duration::from_millis(300);
    let server = TestServer::start(cfg, lowlat_server::builtin_service());
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    sock.connect(&server.addr.into()).unwrap();
    let stuck: TcpStream = sock.into();
    stuck
        .set_write_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let writer = {
        let mut stuck = stuck.try_clone().unwrap();
        std::thread::spawn(move || {
            let batch: Vec<u8> = (0..1000).flat_map(|_| get("/json")).collect();
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(8) {
                if stuck.write_all(&batch).is_err() {
                    return true; // the server closed on us
                }
            }
            false
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    for _ in 0..5 {
        assert_eq!(
            roundtrip(server.addr, &get("/plaintext")).unwrap().status,
            200
        );
    }
    assert!(
        writer.join().unwrap(),
        "the server never cut off the non-reading client"
    );
}

/// The connection limit makes extra clients wait in the backlog; the open ones keep working, and
/// the waiting one is served once a slot frees up.
#[test]
fn connection_limit_never_starves_open_connections() {
    let mut cfg = config(1);
    cfg.max_conns_per_worker = 2;
    let server = TestServer::start(cfg, lowlat_server::builtin_service());
    let mut a = Reader::new(server.connect());
    let mut b = Reader::new(server.connect());
    a.send(&get("/plaintext"));
    assert_eq!(a.reply().unwrap().status, 200);
    b.send(&get("/plaintext"));
    assert_eq!(b.reply().unwrap().status, 200);
    let waiting = server.connect();
    waiting
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut c = Reader::new(waiting);
    c.send(&get("/plaintext"));
    assert!(
        c.reply().is_none(),
        "a third connection is not served while two are open"
    );
    for _ in 0..10 {
        a.send(&get("/plaintext"));
        assert_eq!(a.reply().unwrap().status, 200);
    }
    drop(b);
    c.stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert_eq!(c.reply().expect("served after a slot freed").status, 200);
}

/// Clients on several threads, several workers: every request answered.
#[test]
fn concurrent_clients_on_several_workers() {
    let server = TestServer::builtin(2);
    let addr = server.addr;
    let threads: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(move || {
                let s = TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut r = Reader::new(s);
                for _ in 0..50 {
                    let mut batch = Vec::new();
                    for _ in 0..10 {
                        batch.extend_from_slice(&get("/plaintext"));
                    }
                    r.send(&batch);
                    for _ in 0..10 {
                        assert_eq!(r.reply().unwrap().body, b"Hello, World!");
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// IPv6 loopback works like IPv4.
#[test]
fn ipv6_listen() {
    let mut cfg = config(1);
    cfg.listen = vec!["[::1]:0".parse().unwrap()];
    let server = lowlat_server::Server::bind(cfg, lowlat_server::builtin_service());
    let Ok(server) = server else {
        eprintln!("no IPv6 loopback here");
        return;
    };
    let addr = server.local_addrs()[0];
    assert!(addr.is_ipv6());
    let running = server.start().unwrap();
    assert_eq!(
        roundtrip(addr, &get("/plaintext")).unwrap().body,
        b"Hello, World!"
    );
    running.shutdown_handle().shutdown();
    running.wait().unwrap();
}

/// A real HTTP client library gets the built-in endpoints.
#[test]
fn real_client() {
    let server = TestServer::builtin(2);
    let agent = ureq::AgentBuilder::new().build();
    for _ in 0..3 {
        let text = agent
            .get(&format!("http://{}/plaintext", server.addr))
            .call()
            .unwrap()
            .into_string()
            .unwrap();
        assert_eq!(text, "Hello, World!");
        let resp = agent
            .get(&format!("http://{}/json", server.addr))
            .call()
            .unwrap();
        assert_eq!(resp.content_type(), "application/json");
        assert_eq!(
            resp.into_string().unwrap(),
            r#"{"message":"Hello, World!"}"#
        );
    }
    let err = agent
        .get(&format!("http://{}/nope", server.addr))
        .call()
        .unwrap_err();
    assert!(matches!(err, ureq::Error::Status(404, _)));
}

/// Graceful shutdown: idle connections are closed, a request in flight finishes (with
/// `Connection: close`), new connections are refused, and the workers exit.
#[test]
fn graceful_shutdown_with_request_in_flight() {
    let mut server = echo_server(config(1));
    let addr = server.addr;
    let mut idle = Reader::new(server.connect());
    idle.send(&get("/plaintext"));
    assert_eq!(idle.reply().unwrap().status, 200);
    let mut busy = Reader::new(server.connect());
    busy.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n01234");
    std::thread::sleep(Duration::from_millis(50));
    let running = server.take_running();
    running.shutdown_handle().shutdown();
    std::thread::sleep(Duration::from_millis(100));
    assert!(idle.closed(), "idle connection closed at shutdown");
    busy.send(b"56789");
    let reply = busy.reply().expect("the request in flight is answered");
    assert_eq!(reply.body, b"0123456789");
    assert_eq!(reply.header("connection"), Some("close"));
    running.wait().expect("workers exit cleanly");
    assert!(TcpStream::connect(addr).is_err(), "no longer accepting");
}

/// A client that sends a pipelined batch and half-closes still gets every answer, then EOF.
#[test]
fn half_close_after_pipelined_batch() {
    let server = TestServer::builtin(1);
    for n in [1usize, 3, 50] {
        let mut r = Reader::new(server.connect());
        let batch: Vec<u8> = (0..n).flat_map(|_| get("/plaintext")).collect();
        r.send(&batch);
        r.stream.shutdown(std::net::Shutdown::Write).unwrap();
        for _ in 0..n {
            assert_eq!(
                r.reply().expect("answered after FIN").body,
                b"Hello, World!"
            );
        }
        assert!(r.closed());
    }
}
