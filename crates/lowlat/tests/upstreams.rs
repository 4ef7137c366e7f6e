//! The proxy's upstreams, asked directly for what they promise (support/upstream.rs and
//! tests/upstreams/): raw HTTP/1.1 over std sockets for gunicorn, uvicorn and the bad upstream,
//! a hand-written WebSocket client for the echo server, grpcurl for the gRPC server. The proxy's
//! own tests can then count on these shapes.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::{Duration, Instant};

mod support;
use support::find;
use support::upstream::{
    caddy, grpcurl, grpcurl_echo, haproxy, pattern, sha256_hex, App, BadKind, Bind, GunicornWorker,
    Upstream,
};

/// Generous: a test that waits this long has failed anyway.
const IO_TIMEOUT: Duration = Duration::from_secs(60);

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s
}

/// Writes `request` and reads until the upstream closes.
fn exchange(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut s = connect(addr);
    s.write_all(request).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    out
}

fn get(addr: SocketAddr, target: &str) -> Vec<u8> {
    exchange(
        addr,
        format!("GET {target} HTTP/1.1\r\nHost: upstream\r\nConnection: close\r\n\r\n").as_bytes(),
    )
}

/// The head (as text) and the body of a response.
fn split(response: &[u8]) -> (String, &[u8]) {
    let end = find(response, b"\r\n\r\n").expect("a complete head") + 4;
    (
        String::from_utf8_lossy(&response[..end]).into_owned(),
        &response[end..],
    )
}

/// The value of the first field `name` (case-insensitive) in a head.
fn field<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    fields(head, name).into_iter().next()
}

/// The values of every field `name` (case-insensitive) in a head.
fn fields<'a>(head: &'a str, name: &str) -> Vec<&'a str> {
    head.lines()
        .skip(1)
        .filter_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
        .collect()
}

fn status(head: &str) -> u16 {
    head.split(' ').nth(1).unwrap().parse().unwrap()
}

/// A chunked body's data and trailer section.
fn dechunk(mut body: &[u8]) -> (Vec<u8>, String) {
    let mut data = Vec::new();
    loop {
        let line_end = find(body, b"\r\n").expect("chunk size line");
        let size_text = std::str::from_utf8(&body[..line_end]).unwrap();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap();
        body = &body[line_end + 2..];
        if size == 0 {
            let trailers = String::from_utf8_lossy(body).into_owned();
            assert!(
                trailers.ends_with("\r\n"),
                "unterminated trailers: {trailers:?}"
            );
            return (data, trailers);
        }
        data.extend_from_slice(&body[..size]);
        assert_eq!(&body[size..size + 2], b"\r\n");
        body = &body[size + 2..];
    }
}

fn json(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(body)))
}

/// The echo of both HTTP upstreams: method, target, query, fields, body digest and the client
/// address they saw.
#[test]
fn echo_reports_the_request_as_each_server_saw_it() {
    for upstream in [Upstream::gunicorn(), Upstream::uvicorn()] {
        let mut s = connect(upstream.addr());
        let body = b"hello, upstream";
        write!(
            s,
            "POST /echo/more?a=1&b=%20 HTTP/1.1\r\nHost: upstream\r\nX-Twice: 1\r\nX-Twice: 2\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .unwrap();
        s.write_all(body).unwrap();
        let mut response = Vec::new();
        s.read_to_end(&mut response).unwrap();
        let (head, body_out) = split(&response);
        assert_eq!(status(&head), 200, "{upstream}: {head}");
        let echo = json(body_out);
        let server = echo["server"].as_str().unwrap();
        assert_eq!(echo["method"], "POST");
        assert_eq!(echo["path"], "/echo/more");
        assert_eq!(echo["target"], "/echo/more?a=1&b=%20");
        assert_eq!(echo["query"], "a=1&b=%20");
        assert_eq!(echo["http_version"], "1.1");
        assert_eq!(echo["body_length"], body.len());
        assert_eq!(echo["body_sha256"], sha256_hex(body));
        assert_eq!(echo["client"], s.local_addr().unwrap().to_string());
        let headers: Vec<(String, String)> = echo["headers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| (h[0].as_str().unwrap().into(), h[1].as_str().unwrap().into()))
            .collect();
        let twice: Vec<&str> = headers
            .iter()
            .filter(|(n, _)| n == "x-twice")
            .map(|(_, v)| v.as_str())
            .collect();
        match server {
            // WSGI joins repeated fields.
            "gunicorn" => assert_eq!(twice, ["1,2"], "{headers:?}"),
            // ASGI passes each as it came, in order.
            "uvicorn" => {
                assert_eq!(twice, ["1", "2"], "{headers:?}");
                assert_eq!(headers[0], ("host".into(), "upstream".into()));
            }
            other => panic!("echo from {other}"),
        }
    }
}

/// A gibibyte at /bytes/N, checked byte for byte, while the upstream's memory stays flat: the
/// body is produced as it is sent.
#[test]
fn a_gibibyte_streams_through_little_memory() {
    const N: u64 = 1 << 30;
    for upstream in [Upstream::gunicorn(), Upstream::uvicorn()] {
        // The first answer brings gunicorn's worker up, so that its start is in the baseline.
        get(upstream.addr(), "/status/200");
        let before = upstream.peak_rss_kib();
        let mut s = connect(upstream.addr());
        write!(
            s,
            "GET /bytes/{N} HTTP/1.1\r\nHost: upstream\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        // One period longer than any read, so every read is compared with one slice.
        let expected = pattern(0, 256 * 1024 + 251);
        let mut buf = vec![0; 256 * 1024];
        let mut head = Vec::new();
        let mut offset = 0u64;
        loop {
            let n = s.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            let mut chunk = &buf[..n];
            if head.is_empty() || !head.ends_with(b"\r\n\r\n") {
                let end = match find(chunk, b"\r\n\r\n") {
                    Some(i) if head.is_empty() => i + 4,
                    _ => panic!("the head arrives in the first read"),
                };
                head.extend_from_slice(&chunk[..end]);
                chunk = &chunk[end..];
            }
            let start = (offset % 251) as usize;
            assert!(
                chunk == &expected[start..start + chunk.len()],
                "{upstream}: wrong bytes after {offset}"
            );
            offset += chunk.len() as u64;
        }
        let head = String::from_utf8(head).unwrap();
        assert_eq!(field(&head, "content-length"), Some("1073741824"), "{head}");
        assert_eq!(offset, N, "{upstream}");
        let grew_kib = upstream.peak_rss_kib().saturating_sub(before);
        assert!(
            grew_kib < 16 * 1024,
            "{upstream}: peak memory grew by {grew_kib} KiB"
        );
    }
}

/// /chunked/N: the same pattern, framed by the server's chunked coding.
#[test]
fn chunked_downloads_are_chunked() {
    for upstream in [Upstream::gunicorn(), Upstream::uvicorn()] {
        let n = 200_000;
        let (head, body) = {
            let response = get(upstream.addr(), &format!("/chunked/{n}"));
            let (head, body) = split(&response);
            (head, body.to_vec())
        };
        assert_eq!(field(&head, "transfer-encoding"), Some("chunked"), "{head}");
        assert_eq!(field(&head, "content-length"), None, "{head}");
        let (data, trailers) = dechunk(&body);
        assert_eq!(data, pattern(0, n), "{upstream}");
        assert_eq!(trailers, "\r\n");
    }
}

/// Uploads of 256 MiB, one with Content-Length and one chunked, digested as they arrive: the
/// length and SHA-256 come back right and the upstream's memory stays flat.
#[test]
fn uploads_are_digested_without_being_held() {
    const N: usize = 256 << 20;
    let body = pattern(7, N);
    let sha = sha256_hex(&body);
    for upstream in [Upstream::gunicorn(), Upstream::uvicorn()] {
        get(upstream.addr(), "/status/200");
        let before = upstream.peak_rss_kib();
        for chunked in [false, true] {
            let mut s = connect(upstream.addr());
            let framing = if chunked {
                "Transfer-Encoding: chunked".to_owned()
            } else {
                format!("Content-Length: {N}")
            };
            write!(
                s,
                "PUT /upload HTTP/1.1\r\nHost: upstream\r\n{framing}\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
            for piece in body.chunks(1 << 20) {
                if chunked {
                    write!(s, "{:x}\r\n", piece.len()).unwrap();
                    s.write_all(piece).unwrap();
                    s.write_all(b"\r\n").unwrap();
                } else {
                    s.write_all(piece).unwrap();
                }
            }
            if chunked {
                s.write_all(b"0\r\n\r\n").unwrap();
            }
            let mut response = Vec::new();
            s.read_to_end(&mut response).unwrap();
            let (head, reply) = split(&response);
            assert_eq!(status(&head), 200, "{upstream}: {head}");
            let digest = json(reply);
            assert_eq!(digest["length"], N, "{upstream}, chunked: {chunked}");
            assert_eq!(digest["sha256"], sha, "{upstream}, chunked: {chunked}");
        }
        let grew_kib = upstream.peak_rss_kib().saturating_sub(before);
        assert!(
            grew_kib < 16 * 1024,
            "{upstream}: peak memory grew by {grew_kib} KiB"
        );
    }
}

/// /status/CODE, /slow/MS and /cached's 304.
#[test]
fn status_slow_and_not_modified() {
    for upstream in [Upstream::gunicorn(), Upstream::uvicorn()] {
        for code in [200, 201, 404, 418, 502, 503] {
            let response = get(upstream.addr(), &format!("/status/{code}"));
            let (head, body) = split(&response);
            assert_eq!(status(&head), code, "{upstream}: {head}");
            assert_eq!(body, format!("{code}\n").as_bytes());
        }
        for code in [204, 304] {
            let response = get(upstream.addr(), &format!("/status/{code}"));
            let (head, body) = split(&response);
            assert_eq!(status(&head), code, "{upstream}: {head}");
            assert!(body.is_empty(), "{upstream}: {code} with a body");
        }

        let start = Instant::now();
        let response = get(upstream.addr(), "/slow/300");
        assert!(start.elapsed() >= Duration::from_millis(300));
        assert_eq!(split(&response).1, b"slept 300 ms\n");

        let (head, body) = {
            let r = get(upstream.addr(), "/cached");
            let (h, b) = split(&r);
            (h, b.to_vec())
        };
        assert_eq!(status(&head), 200);
        assert_eq!(field(&head, "etag"), Some("\"v1\""));
        assert_eq!(body, b"cached\n");
        for tag in ["\"v1\"", "\"v0\", \"v1\"", "*"] {
            let response = exchange(
                upstream.addr(),
                format!(
                    "GET /cached HTTP/1.1\r\nHost: upstream\r\nIf-None-Match: {tag}\r\n\
                     Connection: close\r\n\r\n"
                )
                .as_bytes(),
            );
            let (head, body) = split(&response);
            assert_eq!(status(&head), 304, "{upstream}, {tag}: {head}");
            assert_eq!(field(&head, "etag"), Some("\"v1\""));
            assert!(body.is_empty());
        }
        let response = exchange(
            upstream.addr(),
            b"GET /cached HTTP/1.1\r\nHost: upstream\r\nIf-None-Match: \"v2\"\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(status(&split(&response).0), 200);
    }
}

/// /headers sets response fields; uvicorn sends hop-by-hop ones as asked, gunicorn drops them
/// (WSGI forbids them); a CR LF in a value never reaches the wire as a field of its own.
#[test]
fn headers_route_sets_fields_and_refuses_injection() {
    let target = "/headers?X-Hop=1&Connection=X-Hop&Keep-Alive=timeout%3D5&X-Kept=yes";
    let uvicorn = Upstream::uvicorn();
    let response = get(uvicorn.addr(), target);
    let (head, _) = split(&response);
    assert_eq!(field(&head, "x-kept"), Some("yes"), "{head}");
    assert_eq!(field(&head, "x-hop"), Some("1"), "{head}");
    // h11 writes the app's Connection lower-cased, beside its own `close` (asked for here).
    assert!(fields(&head, "connection").contains(&"x-hop"), "{head}");
    assert_eq!(field(&head, "keep-alive"), Some("timeout=5"), "{head}");

    let gunicorn = Upstream::gunicorn();
    let response = get(gunicorn.addr(), target);
    let (head, _) = split(&response);
    assert_eq!(field(&head, "x-kept"), Some("yes"), "{head}");
    assert_eq!(field(&head, "keep-alive"), None, "{head}");
    assert_eq!(fields(&head, "connection"), ["close"], "{head}");

    for upstream in [&gunicorn, &uvicorn] {
        let response = get(
            upstream.addr(),
            "/headers?X-Evil=a%0D%0ASet-Cookie:%20injected=1",
        );
        let text = String::from_utf8_lossy(&response);
        assert!(!text.contains("injected"), "{upstream}: {text}");
    }
    // gunicorn answers 500; uvicorn (h11) closes without a response.
    assert!(get(gunicorn.addr(), "/headers?X-Evil=a%0D%0Ab").starts_with(b"HTTP/1.1 500 "));
    assert!(get(uvicorn.addr(), "/headers?X-Evil=a%0D%0Ab").is_empty());
}

/// Reads a head and `body_len` body bytes (the head must come in whole before the body).
fn read_head_and(s: &mut TcpStream, body_len: usize) -> (String, Vec<u8>) {
    let mut got = Vec::new();
    let mut buf = [0; 4096];
    loop {
        if let Some(end) = find(&got, b"\r\n\r\n") {
            if got.len() >= end + 4 + body_len {
                let head = String::from_utf8_lossy(&got[..end + 4]).into_owned();
                return (head, got[end + 4..].to_vec());
            }
        }
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed after {} bytes", got.len());
        got.extend_from_slice(&buf[..n]);
    }
}

/// /stall: 512 of a declared 1024 bytes, then nothing; /die: the same, then a reset.
#[test]
fn stall_hangs_and_die_resets() {
    for upstream in [Upstream::gunicorn(), Upstream::uvicorn()] {
        let mut s = connect(upstream.addr());
        s.write_all(b"GET /stall HTTP/1.1\r\nHost: upstream\r\n\r\n")
            .unwrap();
        let (head, body) = read_head_and(&mut s, 512);
        assert_eq!(field(&head, "content-length"), Some("1024"), "{head}");
        assert_eq!(body, pattern(0, 512));
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let err = s.read(&mut [0; 16]).unwrap_err();
        assert!(
            matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "{upstream}: {err}"
        );

        let mut s = connect(upstream.addr());
        s.write_all(b"GET /die HTTP/1.1\r\nHost: upstream\r\n\r\n")
            .unwrap();
        let (head, body) = read_head_and(&mut s, 512);
        assert_eq!(field(&head, "content-length"), Some("1024"), "{head}");
        assert_eq!(body, pattern(0, 512));
        let err = s.read_to_end(&mut Vec::new()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{upstream}");
    }
}

/// Trailers: not from WSGI, not from uvicorn over HTTP/1.1 (each says so); the bad upstream's
/// chunked-trailers shape has them.
#[test]
fn trailers_say_where_they_are_unsupported() {
    for upstream in [Upstream::gunicorn(), Upstream::uvicorn()] {
        let response = get(upstream.addr(), "/trailers");
        let (head, _) = split(&response);
        assert_eq!(field(&head, "x-trailers"), Some("unsupported"), "{head}");
    }
}

/// gthread keeps a connection for the next request; sync closes it after each response.
#[test]
fn gunicorn_workers_differ_on_keep_alive() {
    let gthread = Upstream::gunicorn();
    let mut s = connect(gthread.addr());
    for _ in 0..3 {
        s.write_all(b"GET /status/200 HTTP/1.1\r\nHost: upstream\r\n\r\n")
            .unwrap();
        let (head, body) = read_head_and(&mut s, 4);
        assert_eq!(field(&head, "connection"), Some("keep-alive"), "{head}");
        assert_eq!(body, b"200\n");
    }

    let sync = Upstream::gunicorn_sync();
    let mut s = connect(sync.addr());
    s.write_all(b"GET /status/200 HTTP/1.1\r\nHost: upstream\r\n\r\n")
        .unwrap();
    let mut response = Vec::new();
    s.read_to_end(&mut response).unwrap();
    let (head, body) = split(&response);
    assert_eq!(field(&head, "connection"), Some("close"), "{head}");
    assert_eq!(body, b"200\n");
}

/// Each HTTP upstream on a unix socket, and on a port asked for.
#[test]
fn http_upstreams_listen_on_unix_sockets_and_given_ports() {
    let dir = tempfile::tempdir().unwrap();
    for app in [App::Gunicorn(GunicornWorker::Gthread), App::Uvicorn] {
        let path = dir.path().join("upstream.sock");
        let upstream = Upstream::start(app, Bind::Unix(path.clone()), &[]);
        assert_eq!(upstream.unix_path(), Some(path.as_path()));
        assert_eq!(upstream.url(), format!("unix:{}", path.display()));
        let mut s = UnixStream::connect(&path).unwrap();
        s.write_all(b"GET /echo HTTP/1.1\r\nHost: upstream\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut response = Vec::new();
        s.read_to_end(&mut response).unwrap();
        let (head, body) = split(&response);
        assert_eq!(status(&head), 200, "{upstream}: {head}");
        assert_eq!(json(body)["method"], "GET");
        drop(upstream);
        assert!(!path.exists(), "the socket file is removed");
    }

    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let upstream = Upstream::start(App::Uvicorn, Bind::Port(port), &[]);
    assert_eq!(upstream.addr(), SocketAddr::from(([127, 0, 0, 1], port)));
    assert_eq!(upstream.url(), format!("http://127.0.0.1:{port}"));
}

/// Dropping an upstream ends its whole process group (gunicorn's master and workers), and
/// frees its port.
#[test]
fn drop_ends_every_process_of_the_upstream() {
    let upstream = Upstream::start(App::Gunicorn(GunicornWorker::Sync), Bind::Ephemeral, &[]);
    // Sync workers are 4 processes besides the master; wait until they are up.
    let deadline = Instant::now() + IO_TIMEOUT;
    while upstream.group_pids().len() < 5 {
        assert!(Instant::now() < deadline, "{:?}", upstream.group_pids());
        std::thread::sleep(Duration::from_millis(20));
    }
    let pids = upstream.group_pids();
    let addr = upstream.addr();
    let start = Instant::now();
    drop(upstream);
    // Well under the 5 s after which Drop kills the master alone: the watchdog ended the group.
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "{:?}",
        start.elapsed()
    );
    std::thread::sleep(Duration::from_millis(100));
    for pid in pids {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Gone, or a zombie about to be reaped by init.
        assert!(
            stat.is_empty() || stat.contains(") Z "),
            "{pid} lives: {stat}"
        );
    }
    assert!(TcpStream::connect(addr).is_err(), "{addr} still accepts");
}

/// A WebSocket frame from the client: FIN, `opcode`, masked as RFC 6455 §5.3 requires.
fn ws_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    let mut frame = vec![0x80 | opcode];
    match payload.len() {
        n @ 0..=125 => frame.push(0x80 | n as u8),
        n @ 126..=65535 => {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            frame.push(0x80 | 127);
            frame.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    frame
}

/// Reads one unmasked frame from the server: (first byte, payload).
fn ws_read(s: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut two = [0; 2];
    s.read_exact(&mut two).unwrap();
    assert_eq!(two[1] & 0x80, 0, "server frames are not masked");
    let len = match two[1] & 0x7f {
        126 => {
            let mut b = [0; 2];
            s.read_exact(&mut b).unwrap();
            u64::from(u16::from_be_bytes(b))
        }
        127 => {
            let mut b = [0; 8];
            s.read_exact(&mut b).unwrap();
            u64::from_be_bytes(b)
        }
        n => u64::from(n),
    };
    let mut payload = vec![0; usize::try_from(len).unwrap()];
    s.read_exact(&mut payload).unwrap();
    (two[0], payload)
}

fn ws_connect(addr: SocketAddr, path: &str) -> TcpStream {
    let mut s = connect(addr);
    // The key and accept value are RFC 6455 §1.3's example.
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: upstream\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .unwrap();
    // Byte by byte: the server may send its first frame right behind the 101 (/headers and
    // /close/CODE do), and that frame is ws_read's to read.
    let mut head = Vec::new();
    let mut byte = [0; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    assert_eq!(
        field(&head, "sec-websocket-accept"),
        Some("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
    );
    s
}

/// Text and binary messages come back as they went (small and 100 KB), and the close handshake
/// is answered with the client's code; /close/CODE closes from the server's side.
#[test]
fn websocket_echo_echoes_and_closes() {
    let upstream = Upstream::websocket_echo();
    let mut s = ws_connect(upstream.addr(), "/");
    s.write_all(&ws_frame(0x1, b"hello")).unwrap();
    assert_eq!(ws_read(&mut s), (0x81, b"hello".to_vec()));
    let big = pattern(0, 100_000);
    s.write_all(&ws_frame(0x2, &big)).unwrap();
    assert_eq!(ws_read(&mut s), (0x82, big));
    s.write_all(&ws_frame(0x8, &1000u16.to_be_bytes())).unwrap();
    assert_eq!(ws_read(&mut s), (0x88, 1000u16.to_be_bytes().to_vec()));
    assert_eq!(
        s.read(&mut [0; 1]).unwrap(),
        0,
        "closed after the handshake"
    );

    let mut s = ws_connect(upstream.addr(), "/headers");
    let (opcode, text) = ws_read(&mut s);
    assert_eq!(opcode, 0x81);
    let seen = json(&text);
    assert_eq!(seen["path"], "/headers");
    assert_eq!(seen["headers"][0], serde_json::json!(["Host", "upstream"]));

    let mut s = ws_connect(upstream.addr(), "/close/4001");
    let (opcode, payload) = ws_read(&mut s);
    assert_eq!(opcode, 0x88);
    assert_eq!(&payload[..2], &4001u16.to_be_bytes());
    assert_eq!(&payload[2..], b"closing as asked");
}

/// grpcurl calls the unary method and sees the initial and trailing metadata; the streaming
/// method sends `count` replies, then the status asked for, with its trailer.
#[test]
fn grpc_server_answers_grpcurl_with_trailers_and_status() {
    let upstream = Upstream::grpc();
    let addr = upstream.addr().to_string();
    let out = grpcurl_echo()
        .args(["-plaintext", "-v", "-H", "x-test: 1"])
        .args(["-d", r#"{"message":"hi"}"#, &addr, "lowlat.test.Echo/Unary"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("x-lowlat-initial: unary"), "{stdout}");
    assert!(stdout.contains("\"message\": \"hi\""), "{stdout}");
    assert!(stdout.contains("\"x-test\": \"1\""), "{stdout}");
    let trailers = stdout.split("Response trailers received:").nth(1);
    assert!(
        trailers.is_some_and(|t| t.contains("x-lowlat-trailer: unary")),
        "{stdout}"
    );

    let out = grpcurl_echo()
        .args(["-plaintext", "-v", "-d"])
        .arg(r#"{"message":"s","count":3,"fail_code":9,"fail_message":"nope"}"#)
        .args([&addr, "lowlat.test.Echo/ServerStream"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // grpcurl exits with 64 + the status code (FAILED_PRECONDITION = 9).
    assert_eq!(out.status.code(), Some(64 + 9), "{stdout}{stderr}");
    assert!(
        stderr.contains("FailedPrecondition") && stderr.contains("nope"),
        "{stderr}"
    );
    assert!(stdout.contains("\"index\": 2"), "{stdout}");
    assert!(stdout.contains("x-lowlat-trailer: stream"), "{stdout}");
}

/// The gRPC server on a unix socket, which grpcurl reaches with -unix.
#[test]
fn grpc_server_listens_on_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("grpc.sock");
    let _upstream = Upstream::start(App::Grpc, Bind::Unix(path.clone()), &[]);
    let out = grpcurl_echo()
        .args(["-plaintext", "-unix", "-d", r#"{"message":"unix"}"#])
        .arg(&path)
        .arg("lowlat.test.Echo/Unary")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("\"message\": \"unix\""), "{stdout}");
}

/// Each shape of the bad upstream, byte for byte, with how the connection ends.
#[test]
fn bad_upstream_sends_each_shape_byte_for_byte() {
    let upstreams: Vec<(BadKind, Upstream)> = BadKind::ALL
        .iter()
        .map(|&k| (k, Upstream::bad(k)))
        .collect();
    let request = b"GET /anything HTTP/1.1\r\nHost: upstream\r\n\r\n";
    for (kind, upstream) in &upstreams {
        let expected = kind.response();
        let mut s = connect(upstream.addr());
        s.write_all(request).unwrap();
        let mut got = Vec::new();
        match kind {
            BadKind::NeverAnswers => {
                s.set_read_timeout(Some(Duration::from_millis(500)))
                    .unwrap();
                let err = s.read(&mut [0; 16]).unwrap_err();
                assert!(matches!(
                    err.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut
                ));
            }
            BadKind::ResetMidBody => {
                let err = s.read_to_end(&mut got).unwrap_err();
                assert_eq!(err.kind(), ErrorKind::ConnectionReset);
                assert_eq!(got, expected);
            }
            BadKind::ChunkedTrailers => {
                // Kept alive: the same response again on the same connection.
                for _ in 0..2 {
                    let mut one = vec![0; expected.len()];
                    s.read_exact(&mut one).unwrap();
                    assert_eq!(one, expected);
                    s.write_all(request).unwrap();
                }
                let (data, trailers) = dechunk(split(&expected).1);
                assert_eq!(data, b"hello");
                assert_eq!(trailers, "X-Checksum: 5d41402a\r\n\r\n");
            }
            _ => {
                // Everything else ends with FIN after its bytes (none for close-before-response).
                s.read_to_end(&mut got).unwrap();
                assert!(
                    got == expected,
                    "{upstream}: got {} bytes {:?}…",
                    got.len(),
                    String::from_utf8_lossy(&got[..got.len().min(200)])
                );
            }
        }
    }
    assert!(BadKind::OversizedHead.response().len() > 1 << 20);
}

/// grpcurl, HAProxy and Caddy are there, and run.
#[test]
fn outside_programs_are_installed() {
    for (program, arg, says) in [
        (grpcurl(), "-version", "grpcurl v1.8.9"),
        (haproxy(), "-v", "HAProxy version"),
        (caddy(), "version", "2."),
    ] {
        let out = Command::new(&program).arg(arg).output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains(says), "{}: {text}", program.display());
    }
}
