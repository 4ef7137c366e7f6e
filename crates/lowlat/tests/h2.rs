//! HTTP/2 in `lowlat serve` as a real process: h2spec's conformance suite over TLS, real clients
//! (curl, nghttp, h2load) over TLS and h2c, and each attack of the HTTP/2 era as a raw-frame
//! client — cut off within a bound on the server's CPU time and memory, while another client is
//! still served.

use std::io::{BufRead, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use lowlat_http::h2::frame::{self, flag, kind, ErrorCode, FrameHeader, HEADER_LEN};
use lowlat_testkit::pki::{KeyKind, Pki};

mod support;
use support::upstream::tool;

/// `lowlat serve` with a clear-text (h2c) and a TLS listener on ephemeral ports.
struct Serve {
    child: Child,
    http: SocketAddr,
    https: SocketAddr,
    _pki: Pki,
    root: tempfile::TempDir,
}

impl Serve {
    fn start(extra: &[&str]) -> Self {
        let pki = Pki::new();
        let leaf = pki.leaf("server", &["localhost", "127.0.0.1"], KeyKind::EcdsaP256);
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("100.html"), [b'X'; 100]).unwrap();
        let big: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
        std::fs::write(root.path().join("1m.bin"), big).unwrap();
        let mut cmd = support::tls_serve_command(&leaf);
        cmd.args(["--workers", "1", "--h2c"])
            .arg("--root")
            .arg(root.path())
            .args(extra);
        let (child, mut stderr, banner) = support::spawn_serve(cmd);
        // Keep draining stderr so the server never blocks on it.
        std::thread::spawn(move || {
            let mut sink = String::new();
            while stderr.read_line(&mut sink).unwrap_or(0) > 0 {
                sink.clear();
            }
        });
        let addr = |scheme| support::address(&banner, scheme);
        Self {
            http: addr("http://"),
            https: addr("https://"),
            child,
            _pki: pki,
            root,
        }
    }

    /// The server's CPU time (user + system) so far.
    fn cpu(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        let after = stat.rsplit_once(") ").unwrap().1;
        let f: Vec<u64> = after
            .split_whitespace()
            .skip(11)
            .take(2)
            .map(|v| v.parse().unwrap())
            .collect();
        // Clock ticks are 100 Hz on Linux.
        Duration::from_millis((f[0] + f[1]) * 10)
    }

    /// The server's resident memory, in KiB.
    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap()
    }

    /// A plain GET over a fresh h2c connection still works.
    fn still_serves(&self) {
        let mut c = Raw::connect(self.http);
        c.get(1, "/100.html", true);
        let (status, body) = c.response(1);
        assert_eq!((status, body.len()), (200, 100));
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A raw HTTP/2 client over h2c: frames written by hand, so it can misbehave.
struct Raw {
    s: TcpStream,
    buf: Vec<u8>,
    /// The connection's HPACK decoder (the server's encoder indexes across responses).
    dec: lowlat_http::h2::Decoder,
}

/// One received frame.
struct Frame {
    h: FrameHeader,
    payload: Vec<u8>,
}

impl Raw {
    fn connect(addr: SocketAddr) -> Self {
        Self::connect_with(addr, &[])
    }

    fn connect_with(addr: SocketAddr, settings: &[(u16, u32)]) -> Self {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut c = Self {
            s,
            buf: Vec::new(),
            dec: lowlat_http::h2::Decoder::default(),
        };
        let mut out = frame::PREFACE.to_vec();
        frame::write_settings(&mut out, settings);
        c.send(&out);
        c
    }

    fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).unwrap();
    }

    /// A request's header block: literals without indexing, not Huffman-coded.
    fn block(path: &str) -> Vec<u8> {
        let mut b = Vec::new();
        for (n, v) in [
            (":method", "GET"),
            (":scheme", "http"),
            (":path", path),
            (":authority", "localhost"),
        ] {
            b.push(0);
            for s in [n, v] {
                b.push(s.len() as u8);
                b.extend_from_slice(s.as_bytes());
            }
        }
        b
    }

    fn get(&mut self, stream: u32, path: &str, end_stream: bool) {
        let mut out = Vec::new();
        frame::write_headers(&mut out, stream, &Self::block(path), end_stream, 16_384);
        self.send(&out);
    }

    /// The next frame, or `None` when the server closed the connection.
    fn next(&mut self) -> Option<Frame> {
        loop {
            if let Some(h) = FrameHeader::parse(&self.buf) {
                let end = HEADER_LEN + h.len as usize;
                if self.buf.len() >= end {
                    let payload = self.buf[HEADER_LEN..end].to_vec();
                    self.buf.drain(..end);
                    return Some(Frame { h, payload });
                }
            }
            let mut chunk = [0u8; 65536];
            match self.s.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Reads until the response on `stream` is complete: its status and body. Headers are
    /// decoded with the codec's decoder.
    fn response(&mut self, stream: u32) -> (u16, Vec<u8>) {
        let (mut status, mut body) = (0u16, Vec::new());
        while let Some(f) = self.next() {
            if f.h.kind == kind::SETTINGS && !f.h.has(flag::ACK) {
                let mut ack = Vec::new();
                frame::write_settings_ack(&mut ack);
                self.send(&ack);
            }
            if f.h.stream != stream {
                continue;
            }
            match f.h.kind {
                kind::HEADERS => {
                    self.dec
                        .decode(&f.payload, |n, v| {
                            if n == b":status" {
                                status = std::str::from_utf8(v).unwrap().parse().unwrap();
                            }
                        })
                        .unwrap();
                }
                kind::DATA => {
                    body.extend_from_slice(&f.payload);
                    let mut wu = Vec::new();
                    frame::write_window_update(&mut wu, 0, f.payload.len().max(1) as u32);
                    frame::write_window_update(&mut wu, stream, f.payload.len().max(1) as u32);
                    self.send(&wu);
                }
                kind::RST_STREAM => panic!("stream {stream} reset"),
                _ => {}
            }
            if f.h.has(flag::END_STREAM) {
                return (status, body);
            }
        }
        panic!("connection closed before stream {stream} ended");
    }

    /// Reads until GOAWAY (its error code) or the close; `None` if closed without GOAWAY.
    /// Panics when nothing ends the connection within `limit`.
    fn until_goaway(&mut self, limit: Duration) -> Option<u32> {
        self.s.set_read_timeout(Some(limit)).unwrap();
        let start = Instant::now();
        let mut code = None;
        while let Some(f) = self.next() {
            if f.h.kind == kind::GOAWAY {
                code = Some(u32::from_be_bytes(f.payload[4..8].try_into().unwrap()));
            }
            assert!(start.elapsed() < limit, "not cut off within {limit:?}");
        }
        assert!(start.elapsed() < limit, "not cut off within {limit:?}");
        code
    }
}

#[test]
fn h2spec_passes_over_tls() {
    let h2spec = tool("h2spec");
    let server = Serve::start(&[]);
    let out = Command::new(h2spec)
        .args(["-h", "127.0.0.1", "-p"])
        .arg(server.https.port().to_string())
        .args(["-t", "-k", "-o", "5"])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    let summary = report.lines().last().unwrap_or_default().to_owned();
    assert!(
        out.status.success() && summary.contains(" 0 failed"),
        "{summary}\n{report}"
    );
    assert!(summary.contains("145 tests"), "{summary}");
    // h2spec has closed every connection: none may linger half-closed on the server (several
    // of its cases leave a stream waiting for a window that a closed client never opens).
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        support::close_wait_on(server.https.port()),
        0,
        "CLOSE-WAIT after h2spec"
    );
}

/// A client that closes while a response waits for a window it never opened: the server
/// releases the connection at once (a closed peer sends no WINDOW_UPDATE), not after the write
/// timeout; then SIGTERM with nothing in flight exits at once.
#[test]
fn a_closed_client_is_released_at_once() {
    let mut server = Serve::start(&["--write-timeout", "60s", "--grace", "10s"]);
    for _ in 0..5 {
        let mut c = Raw::connect_with(server.http, &[(frame::setting::INITIAL_WINDOW_SIZE, 0)]);
        c.get(1, "/1m.bin", true);
        // The head arrives; the body waits for a window.
        while let Some(f) = c.next() {
            if f.h.kind == kind::HEADERS {
                break;
            }
        }
        // A request whose body never finishes, on a second stream.
        let mut out = Vec::new();
        frame::write_headers(&mut out, 3, &Raw::block("/100.html"), false, 16_384);
        c.send(&out);
    }
    // The same over HTTP/1.1: a large response not read, a request body never finished.
    for request in [
        &b"GET /1m.bin HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        b"POST /100.html HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc",
    ] {
        let mut h1 = TcpStream::connect(server.http).unwrap();
        h1.write_all(request).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    let start = Instant::now();
    while support::close_wait_on(server.http.port()) > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "connections left in CLOSE-WAIT"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // An idle HTTP/2 connection and an idle HTTP/1.1 keep-alive one stay open.
    let mut idle = Raw::connect(server.http);
    idle.get(1, "/100.html", true);
    assert_eq!(idle.response(1).0, 200);
    let mut h1 = TcpStream::connect(server.http).unwrap();
    h1.write_all(b"GET /100.html HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut head = [0u8; 12];
    h1.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    std::thread::sleep(Duration::from_millis(100));
    let took = support::stop_and_time(&mut server.child, Duration::from_secs(5));
    assert!(
        took < Duration::from_millis(100),
        "SIGTERM with nothing in flight took {took:?}"
    );
}

#[test]
fn curl_nghttp_and_h2load_are_served() {
    let server = Serve::start(&[]);
    let https = format!("https://127.0.0.1:{}", server.https.port());
    let http = format!("http://127.0.0.1:{}", server.http.port());
    let curl = |args: &[&str]| -> String {
        let out = Command::new("curl")
            .args(["-sk", "--max-time", "10"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "curl {args:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // ALPN chooses h2; h2c with prior knowledge; curl reports the version it used.
    let v = curl(&[
        "--http2",
        "-o",
        "/dev/null",
        "-w",
        "%{http_version} %{http_code}",
        &format!("{https}/plaintext"),
    ]);
    assert_eq!(v, "2 200");
    let v = curl(&[
        "--http2-prior-knowledge",
        "-w",
        " %{http_version}",
        &format!("{http}/plaintext"),
    ]);
    assert_eq!(v, "Hello, World! 2");
    // Static files: ranges, conditional requests, HEAD, the same as over HTTP/1.1.
    let head = curl(&[
        "--http2",
        "-D",
        "-",
        "-o",
        "/dev/null",
        "-r",
        "10-19",
        &format!("{https}/1m.bin"),
    ]);
    assert!(head.starts_with("HTTP/2 206"), "{head}");
    assert!(
        head.contains("content-range: bytes 10-19/1048576"),
        "{head}"
    );
    let etag = head
        .lines()
        .find_map(|l| l.strip_prefix("etag: "))
        .unwrap()
        .trim()
        .to_owned();
    let code = curl(&[
        "--http2",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-H",
        &format!("If-None-Match: {etag}"),
        &format!("{https}/1m.bin"),
    ]);
    assert_eq!(code, "304");
    let head = curl(&["--http2", "-I", &format!("{https}/100.html")]);
    assert!(head.contains("content-length: 100"), "{head}");
    // A large file over flow control, whole and intact.
    let out = Command::new("curl")
        .args(["-sk", "--http2", "--max-time", "20"])
        .arg(format!("{https}/1m.bin"))
        .output()
        .unwrap();
    assert_eq!(
        out.stdout,
        std::fs::read(server.root.path().join("1m.bin")).unwrap()
    );
    // nghttp: several streams at once on one connection.
    let out = Command::new(tool("nghttp"))
        .args(["-ns", "-m", "20"])
        .arg(format!("{https}/100.html"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // h2load: many streams per connection, every response 2xx.
    let out = Command::new(tool("h2load"))
        .args(["-n", "20000", "-c", "8", "-m", "50"])
        .arg(format!("{https}/100.html"))
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("20000 succeeded, 0 failed, 0 errored"),
        "{report}"
    );
    assert!(report.contains("20000 2xx"), "{report}");
}

/// CVE-2023-44487: streams opened and reset at once, in a loop, never waiting for answers.
#[test]
fn rapid_reset_is_cut_off() {
    let server = Serve::start(&[]);
    let cpu0 = server.cpu();
    let mut c = Raw::connect(server.http);
    let mut out = Vec::new();
    let block = Raw::block("/100.html");
    let mut stream = 1;
    let mut writer = c.s.try_clone().unwrap();
    writer
        .set_write_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let sender = std::thread::spawn(move || {
        for _ in 0..2000 {
            out.clear();
            for _ in 0..50 {
                frame::write_headers(&mut out, stream, &block, true, 16_384);
                frame::write_rst_stream(&mut out, stream, ErrorCode::Cancel);
                stream += 2;
            }
            if writer.write_all(&out).is_err() {
                return;
            }
        }
    });
    let code = c.until_goaway(Duration::from_secs(10));
    assert_eq!(code, Some(ErrorCode::EnhanceYourCalm as u32));
    let _ = sender.join();
    assert!(
        server.cpu() - cpu0 < Duration::from_secs(2),
        "{:?}",
        server.cpu() - cpu0
    );
    server.still_serves();
}

/// CVE-2025-8671 ("MadeYouReset"): a client that makes the server reset its streams — here a
/// WINDOW_UPDATE of 0 on each stream it opens, a stream error — instead of resetting them
/// itself is cut off by the same budget as rapid reset.
#[test]
fn provoked_resets_count_as_resets() {
    let server = Serve::start(&[]);
    let cpu0 = server.cpu();
    let mut c = Raw::connect(server.http);
    let mut out = Vec::new();
    let block = Raw::block("/100.html");
    let mut stream = 1;
    let mut writer = c.s.try_clone().unwrap();
    writer
        .set_write_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let sender = std::thread::spawn(move || {
        for _ in 0..2000 {
            out.clear();
            for _ in 0..50 {
                // Open (no END_STREAM: a body may follow), then the malformed frame.
                frame::write_headers(&mut out, stream, &block, false, 16_384);
                frame::write_window_update(&mut out, stream, 0);
                stream += 2;
            }
            if writer.write_all(&out).is_err() {
                return;
            }
        }
    });
    let code = c.until_goaway(Duration::from_secs(10));
    assert_eq!(code, Some(ErrorCode::EnhanceYourCalm as u32));
    let _ = sender.join();
    assert!(
        server.cpu() - cpu0 < Duration::from_secs(2),
        "{:?}",
        server.cpu() - cpu0
    );
    server.still_serves();
}

/// CVE-2024-27316: a header block continued without end.
#[test]
fn continuation_flood_is_cut_off() {
    let server = Serve::start(&[]);
    let rss0 = server.rss_kib();
    let mut c = Raw::connect(server.http);
    let mut out = Vec::new();
    frame::write_header(&mut out, 0, kind::HEADERS, 0, 1);
    c.send(&out);
    let mut writer = c.s.try_clone().unwrap();
    writer
        .set_write_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let sender = std::thread::spawn(move || {
        let mut f = Vec::new();
        frame::write_header(&mut f, 16_384, kind::CONTINUATION, 0, 1);
        f.extend(std::iter::repeat_n(0x40u8, 16_384));
        for _ in 0..10_000 {
            if writer.write_all(&f).is_err() {
                return;
            }
        }
    });
    let code = c.until_goaway(Duration::from_secs(10));
    assert_eq!(code, Some(ErrorCode::EnhanceYourCalm as u32));
    let _ = sender.join();
    assert!(
        server.rss_kib() < rss0 + 16 * 1024,
        "{} KiB",
        server.rss_kib()
    );
    server.still_serves();
}

/// A small block that expands to megabytes through the dynamic table: 431, nothing stored.
#[test]
fn hpack_bomb_is_refused() {
    let server = Serve::start(&[]);
    let rss0 = server.rss_kib();
    let mut c = Raw::connect(server.http);
    for stream in (1..40).step_by(2) {
        let mut block = Raw::block("/100.html");
        // A 4000-byte field into the dynamic table, then referenced 4000 times (16 MB decoded).
        block.extend_from_slice(&[0x40, 4]);
        block.extend_from_slice(b"bomb");
        block.extend_from_slice(&[0x7f, 0x80 | (3873 % 128) as u8, (3873 / 128) as u8]);
        block.extend(std::iter::repeat_n(b'y', 4000));
        block.extend(std::iter::repeat_n(0x80 | 62, 4000));
        let mut out = Vec::new();
        frame::write_headers(&mut out, stream, &block, true, 16_384);
        c.send(&out);
        let (status, _) = c.response(stream);
        assert_eq!(status, 431);
    }
    assert!(
        server.rss_kib() < rss0 + 16 * 1024,
        "{} KiB",
        server.rss_kib()
    );
    // The connection is still usable: the tables stayed in step.
    c.get(41, "/100.html", true);
    assert_eq!(c.response(41).0, 200);
}

/// PING and SETTINGS floods: a client that makes the server answer without asking anything.
#[test]
fn ping_and_settings_floods_are_cut_off() {
    let server = Serve::start(&[]);
    for flood_kind in [kind::PING, kind::SETTINGS] {
        let cpu0 = server.cpu();
        let mut c = Raw::connect(server.http);
        let mut writer = c.s.try_clone().unwrap();
        writer
            .set_write_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let sender = std::thread::spawn(move || {
            let mut out = Vec::new();
            for _ in 0..1000 {
                if flood_kind == kind::PING {
                    frame::write_ping(&mut out, false, b"12345678");
                } else {
                    frame::write_settings(
                        &mut out,
                        &[(frame::setting::MAX_CONCURRENT_STREAMS, 100)],
                    );
                }
            }
            for _ in 0..1000 {
                if writer.write_all(&out).is_err() {
                    return;
                }
            }
        });
        let code = c.until_goaway(Duration::from_secs(10));
        assert_eq!(code, Some(ErrorCode::EnhanceYourCalm as u32));
        let _ = sender.join();
        assert!(server.cpu() - cpu0 < Duration::from_secs(2));
    }
    server.still_serves();
}

/// A slow reader: a stream window of zero, held forever, on a large response.
#[test]
fn zero_window_is_bounded_by_the_write_timeout() {
    let server = Serve::start(&["--write-timeout", "1s"]);
    let mut c = Raw::connect_with(server.http, &[(frame::setting::INITIAL_WINDOW_SIZE, 0)]);
    c.get(1, "/1m.bin", true);
    let start = Instant::now();
    // Headers arrive, no DATA; then the server gives up on the connection.
    let code = c.until_goaway(Duration::from_secs(5));
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "{:?}",
        start.elapsed()
    );
    assert!(code.is_some());
    server.still_serves();
}

/// Streams opened and never finished: the stream limit refuses more, the body timeout ends
/// the connection.
#[test]
fn idle_streams_are_bounded() {
    let server = Serve::start(&["--h2-max-streams", "16", "--body-timeout", "1s"]);
    let mut c = Raw::connect(server.http);
    for i in 0..17 {
        c.get(1 + 2 * i, "/100.html", false);
    }
    let mut refused = None;
    c.s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    while let Some(f) = c.next() {
        if f.h.kind == kind::RST_STREAM {
            refused = Some((
                f.h.stream,
                u32::from_be_bytes(f.payload[..4].try_into().unwrap()),
            ));
            break;
        }
    }
    assert_eq!(refused, Some((33, ErrorCode::RefusedStream as u32)));
    let start = Instant::now();
    c.until_goaway(Duration::from_secs(5));
    assert!(
        start.elapsed() >= Duration::from_millis(500),
        "{:?}",
        start.elapsed()
    );
    server.still_serves();
}

/// A request body over several DATA frames reaches the handler whole; one over the limit is
/// answered 413.
#[test]
fn request_bodies() {
    let server = Serve::start(&["--max-body", "64k"]);
    let mut c = Raw::connect(server.http);
    let mut out = Vec::new();
    let block = Raw::block("/100.html");
    frame::write_headers(&mut out, 1, &block, false, 16_384);
    for last in [false, true] {
        frame::write_data_header(&mut out, 1, 1000, last);
        out.extend(std::iter::repeat_n(b'b', 1000));
    }
    c.send(&out);
    assert_eq!(c.response(1).0, 200);
    out.clear();
    frame::write_headers(&mut out, 3, &block, false, 16_384);
    for _ in 0..5 {
        frame::write_data_header(&mut out, 3, 16_000, false);
        out.extend(std::iter::repeat_n(b'b', 16_000));
    }
    c.send(&out);
    assert_eq!(c.response(3).0, 413);
}

/// SIGTERM while a large response is in flight: GOAWAY (NO_ERROR, naming that stream) comes
/// first, the response still completes, then the connection closes.
#[test]
fn graceful_shutdown_finishes_streams_in_flight() {
    let server = Serve::start(&["--grace", "10s"]);
    let mut c = Raw::connect_with(
        server.http,
        &[(frame::setting::INITIAL_WINDOW_SIZE, 65_535)],
    );
    c.get(1, "/1m.bin", true);
    // The head and the first window's worth of DATA; the rest waits for WINDOW_UPDATEs.
    let mut got = 0usize;
    while got < 65_535 {
        let f = c.next().expect("the response starts");
        if f.h.kind == kind::DATA {
            got += f.payload.len();
        }
    }
    let ok = Command::new("kill")
        .arg("-TERM")
        .arg(server.child.id().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    std::thread::sleep(Duration::from_millis(300));
    // Open the windows: the rest of the body must still come, after a GOAWAY for stream 1.
    let mut wu = Vec::new();
    frame::write_window_update(&mut wu, 0, 1 << 30);
    frame::write_window_update(&mut wu, 1, 1 << 30);
    c.send(&wu);
    let mut goaway = None;
    let mut ended = false;
    while let Some(f) = c.next() {
        match f.h.kind {
            kind::GOAWAY => {
                goaway = Some((
                    u32::from_be_bytes(f.payload[..4].try_into().unwrap()),
                    u32::from_be_bytes(f.payload[4..8].try_into().unwrap()),
                ));
            }
            kind::DATA => {
                got += f.payload.len();
                ended |= f.h.has(flag::END_STREAM);
            }
            _ => {}
        }
    }
    assert_eq!(goaway, Some((1, ErrorCode::NoError as u32)));
    assert!(ended, "the stream in flight was not finished");
    assert_eq!(got, 1 << 20);
}

/// A client that never acknowledges our SETTINGS: GOAWAY SETTINGS_TIMEOUT after
/// `--h2-settings-timeout`.
#[test]
fn settings_never_acknowledged() {
    let server = Serve::start(&["--h2-settings-timeout", "1s"]);
    let mut c = Raw::connect(server.http);
    let start = Instant::now();
    // `until_goaway` reads frames without answering SETTINGS.
    let code = c.until_goaway(Duration::from_secs(5));
    assert_eq!(code, Some(ErrorCode::SettingsTimeout as u32));
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "{:?}",
        start.elapsed()
    );
    server.still_serves();
}

/// Two large files on one connection share it: their DATA frames interleave, neither waits for
/// the other to finish; a small response asked for after them is not held behind them.
#[test]
fn large_bodies_share_the_connection() {
    let server = Serve::start(&[]);
    let mut c = Raw::connect_with(
        server.http,
        &[(frame::setting::INITIAL_WINDOW_SIZE, 1 << 30)],
    );
    let mut wu = Vec::new();
    frame::write_window_update(&mut wu, 0, 1 << 30);
    c.send(&wu);
    c.get(1, "/1m.bin", true);
    c.get(3, "/1m.bin", true);
    c.get(5, "/100.html", true);
    let mut order = Vec::new(); // (stream, end) of each DATA frame
    let mut ended = 0;
    while ended < 3 {
        let Some(f) = c.next() else {
            panic!("closed or stalled after {order:?}")
        };
        if f.h.kind == kind::DATA {
            let end = f.h.has(flag::END_STREAM);
            order.push((f.h.stream, end));
            ended += usize::from(end);
        }
    }
    let first_end = order.iter().position(|&(_, end)| end).unwrap();
    assert_eq!(
        order[first_end].0, 5,
        "the small response ends first: {order:?}"
    );
    let end_of = |s| order.iter().position(|&(st, e)| st == s && e).unwrap();
    let first_of = |s| order.iter().position(|&(st, _)| st == s).unwrap();
    assert!(
        first_of(3) < end_of(1) && first_of(1) < end_of(3),
        "not interleaved: {order:?}"
    );
}

/// A client that sends its requests and closes its side at once, more than one read buffer
/// (16 KiB) of them arriving with the FIN in one segment: every request is answered and the
/// connection ends as soon as they are. The FIN was seen while the connection still spoke
/// HTTP/1.1 (before the preface was recognised); the HTTP/2 side must know it, since no event
/// will say so again and a short read no longer means everything was read.
#[test]
fn a_half_closed_client_with_more_than_a_buffer_is_answered_at_once() {
    use std::os::fd::AsRawFd;
    let server = Serve::start(&["--keepalive-timeout", "30s", "--header-timeout", "30s"]);
    for round in 0..5 {
        let mut out = frame::PREFACE.to_vec();
        frame::write_settings(&mut out, &[]);
        frame::write_settings_ack(&mut out);
        // A first request made large by a long field, so that the second lies past the first
        // 16 KiB read.
        let long = vec![b'a'; 30_000];
        let mut block = Vec::new();
        lowlat_http::h2::Encoder::default().encode_fields(
            [
                (&b":method"[..], &b"GET"[..]),
                (b":scheme", b"http"),
                (b":path", b"/100.html"),
                (b":authority", b"localhost"),
                (b"x-long", &long[..]),
            ],
            &mut block,
        );
        frame::write_headers(&mut out, 1, &block, true, 16_384);
        frame::write_headers(&mut out, 3, &Raw::block("/100.html"), true, 16_384);
        assert!(out.len() > 16 * 1024);
        let mut s = TcpStream::connect(server.http).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        // Corked, the data and the FIN leave as one segment and arrive as one event.
        let on: libc::c_int = 1;
        // SAFETY: setsockopt on a socket this test owns, with a pointer to a live c_int.
        let rc = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_CORK,
                (&raw const on).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0);
        let start = Instant::now();
        s.write_all(&out).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut c = Raw {
            s,
            buf: Vec::new(),
            dec: lowlat_http::h2::Decoder::default(),
        };
        let mut ended = Vec::new();
        while let Some(f) = c.next() {
            if f.h.kind == kind::DATA && f.h.has(flag::END_STREAM) {
                ended.push(f.h.stream);
            }
        }
        let took = start.elapsed();
        assert_eq!(ended, [1, 3], "round {round}: answers");
        assert!(
            took < Duration::from_secs(2),
            "round {round}: the connection ended after {took:?}"
        );
    }
}
