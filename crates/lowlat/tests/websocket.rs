//! WebSocket tunnelling through `lowlat serve --proxy`, with real processes at both ends: the
//! `websockets` library's echo server behind the proxy (`tests/upstreams/ws_echo.py`) and its
//! client in front (`tests/upstreams/ws_client.py`), in clear and over TLS; raw sockets where
//! the bytes matter (an unasked `101`, an upgrade to a route that does not proxy).
//!
//! What is checked: messages come back whole both ways (text, binary, 1 MiB); the client's close
//! reaches the server and the server's reaches the client, and both TCP connections are released
//! (no socket left established or in CLOSE-WAIT); an idle tunnel is closed after
//! `--proxy-tunnel-idle-timeout`, a busy one is not; a `101` answering a request that offered no
//! upgrade is 502 and none of its bytes reach the client; hundreds of tunnels at once; and each
//! tunnel's one access-log line.
//!
//! WebSocket over HTTP/2 (RFC 8441) with `h2` and `wsproto` in front (`ws_h2_client.py`): the
//! extended CONNECT answered 200 and tunnelled to the same echo server's HTTP/1.1 handshake, in
//! clear and over TLS, two tunnels and a request multiplexed on one connection, flow control
//! crossed both ways (1 MiB messages); the handshake the upstream sees; a stream reset or a
//! dropped connection ending the upstream side; what must not open a tunnel refused.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lowlat_testkit::pki::{KeyKind, Pki};

mod support;
use support::upstream::{python, upstreams_dir, BadKind, Upstream};
use support::{json_output, BIN};

// A `lowlat serve` with proxy rules on 127.0.0.1 (a free port), one worker unless the arguments
// say otherwise.
use support::Served as Proxy;

/// The `websockets` echo server behind a proxy forwarding `/ws/` to it, with an access log
/// (its directory lives as long as the returned guard) and `extra` flags.
fn logged_proxy(extra: &[&str]) -> (Upstream, tempfile::TempDir, std::path::PathBuf, Proxy) {
    let upstream = Upstream::websocket_echo();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let mut args: Vec<String> = extra.iter().map(|a| (*a).to_owned()).collect();
    args.extend([
        "--proxy".to_owned(),
        format!("/ws/={}/", upstream.url()),
        "--access-log".to_owned(),
        log.display().to_string(),
    ]);
    let proxy = Proxy::start(args);
    (upstream, dir, log, proxy)
}

/// The `websockets` echo server behind a proxy with a TLS listener (a certificate for
/// `localhost` from a fresh CA, returned for the client to trust) forwarding everything to it.
fn tls_proxy() -> (Pki, Upstream, Proxy) {
    let pki = Pki::new();
    let leaf = pki.leaf("proxy", &["localhost"], KeyKind::EcdsaP256);
    let upstream = Upstream::websocket_echo();
    let proxy = Proxy::start([
        "--tls-listen".to_owned(),
        "127.0.0.1:0".to_owned(),
        "--cert".to_owned(),
        leaf.cert.display().to_string(),
        "--key".to_owned(),
        leaf.key.display().to_string(),
        "--proxy".to_owned(),
        format!("/={}", upstream.url()),
    ]);
    (pki, upstream, proxy)
}

/// Runs a `ws_client.py` scenario and returns the JSON object it printed.
fn client(scenario: &str, url: &str, extra: &[&str]) -> serde_json::Value {
    run_client("ws_client.py", scenario, url, extra)
}

/// Runs a `ws_h2_client.py` scenario (WebSocket over HTTP/2, RFC 8441) and returns the JSON
/// object it printed.
fn h2_client(scenario: &str, url: &str, extra: &[&str]) -> serde_json::Value {
    run_client("ws_h2_client.py", scenario, url, extra)
}

fn run_client(script: &str, scenario: &str, url: &str, extra: &[&str]) -> serde_json::Value {
    json_output(
        Command::new(python())
            .arg(upstreams_dir().join(script))
            .args([scenario, url])
            .args(extra),
    )
}

/// TCP sockets in `state` (hex, as /proc/net/tcp writes it: 01 established, 08 close-wait)
/// whose local or remote port is `port`.
fn sockets(port: u16, states: &[&str]) -> usize {
    support::tcp_sockets(port, support::End::Either, states)
}

/// Waits (up to 10 s) until no socket to or from `port` is established or half-closed.
fn assert_released(port: u16, what: &str) {
    let start = Instant::now();
    loop {
        let left = sockets(port, &["01", "08"]);
        if left == 0 {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what}: {left} sockets on port {port} still open"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (up to 10 s) for `needle` in what `text` returns.
fn wait_for(what: &str, needle: &str, text: impl Fn() -> String) -> String {
    let start = Instant::now();
    loop {
        let t = text();
        if t.contains(needle) {
            return t;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what}: no {needle:?} in\n{t}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Text, binary (1 MiB) and a hundred small messages echoed through the tunnel; the client's
/// Close is answered by the server's, the server logs the close, both TCP connections are
/// released; and the access log has the tunnel's one line: 101, the bytes each way, the
/// upstream. Then the server closing (Close 4001) reaches the client.
#[test]
fn messages_cross_both_ways_and_either_side_closes() {
    let (upstream, _dir, log, proxy) = logged_proxy(&[]);
    let base = format!("ws://{}/ws", proxy.addr);

    let r = client("echo", &format!("{base}/chat"), &[]);
    assert_eq!(r["text_ok"], true, "{r}");
    assert_eq!(r["binary_ok"], true, "{r}");
    assert_eq!(r["small_ok"], true, "{r}");
    assert_eq!(r["close_code"], 1000, "{r}");
    assert_eq!(
        r["close_received"], true,
        "the server's Close came back: {r}"
    );
    wait_for("the echo server's log", "closed /chat code 1000", || {
        upstream.log()
    });
    assert_released(upstream.addr().port(), "proxy → upstream");
    assert_released(proxy.addr.port(), "client → proxy");

    // The line is written when the tunnel ends (and flushed within a second).
    let text = wait_for("the access log", "GET /ws/chat", || read_log(&log));
    let line = text.lines().find(|l| l.contains("GET /ws/chat")).unwrap();
    let fields: Vec<&str> = line.split_whitespace().collect();
    let n = fields.len();
    assert_eq!(fields[8], "101", "{line}");
    let sent: u64 = fields[9].parse().unwrap();
    let received: u64 = fields[n - 1].parse().unwrap();
    // 1 MiB each way and then some (frames, a hundred messages, the closes).
    assert!((1 << 20..(1 << 20) + 16_384).contains(&sent), "{line}");
    assert!((1 << 20..(1 << 20) + 16_384).contains(&received), "{line}");
    assert!(
        line.contains(&format!("\"{}\" 101 ", upstream.addr())),
        "{line}"
    );

    let r = client("server-close", &format!("{base}/close/4001"), &[]);
    assert_eq!(r["close_code"], 4001, "{r}");
    assert_eq!(r["close_reason"], "closing as asked", "{r}");
    assert_released(upstream.addr().port(), "after the server's close");
    assert_released(proxy.addr.port(), "after the server's close");
}

/// Over TLS (`--tls-listen`): the same echo and closes through `wss://`, and the tunnel's line
/// in the JSON access log.
#[test]
fn tunnels_work_for_tls_clients() {
    let pki = Pki::new();
    let leaf = pki.leaf("proxy", &["localhost"], KeyKind::EcdsaP256);
    let upstream = Upstream::websocket_echo();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.json");
    let proxy = Proxy::start([
        "--access-log".to_owned(),
        log.display().to_string(),
        "--access-log-format".to_owned(),
        "json".to_owned(),
        "--tls-listen".to_owned(),
        "127.0.0.1:0".to_owned(),
        "--cert".to_owned(),
        leaf.cert.display().to_string(),
        "--key".to_owned(),
        leaf.key.display().to_string(),
        "--proxy".to_owned(),
        format!("/={}", upstream.url()),
    ]);
    let tls = proxy.tls_addr.expect("a TLS listener");
    let ca = pki.ca_path();
    let ca = ca.to_str().unwrap();
    let base = format!("wss://localhost:{}", tls.port());

    let r = client("echo", &format!("{base}/secure"), &["--cafile", ca]);
    assert_eq!(
        (&r["text_ok"], &r["binary_ok"], &r["small_ok"]),
        (&true.into(), &true.into(), &true.into()),
        "{r}"
    );
    assert_eq!(r["close_code"], 1000, "{r}");
    wait_for("the echo server's log", "closed /secure code 1000", || {
        upstream.log()
    });
    let text = wait_for("the access log", "\"/secure\"", || read_log(&log));
    let line: serde_json::Value = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["target"] == "/secure")
        .unwrap();
    assert_eq!(line["status"], 101, "{line}");
    assert_eq!(line["upstream_status"], 101, "{line}");
    for field in ["bytes", "bytes_received"] {
        let n = line[field].as_u64().unwrap();
        assert!(
            (1 << 20..(1 << 20) + 16_384).contains(&n),
            "{field}: {line}"
        );
    }
    let r = client(
        "server-close",
        &format!("{base}/close/4002"),
        &["--cafile", ca],
    );
    assert_eq!(r["close_code"], 4002, "{r}");
    let r = client(
        "many",
        &format!("{base}/m"),
        &["--cafile", ca, "--count", "50"],
    );
    assert_eq!(r["ok"], 50, "{r}");
    assert_released(upstream.addr().port(), "TLS tunnels");
    assert_released(tls.port(), "TLS tunnels");
}

/// A tunnel that carries nothing for `--proxy-tunnel-idle-timeout` is closed (both sides); one
/// that carries a message more often than that stays open past it.
#[test]
fn idle_tunnels_are_closed_after_the_timeout() {
    let upstream = Upstream::websocket_echo();
    let proxy = Proxy::start([
        "--proxy".to_owned(),
        format!("/={}", upstream.url()),
        "--proxy-tunnel-idle-timeout".to_owned(),
        "1s".to_owned(),
    ]);
    let base = format!("ws://{}", proxy.addr);
    let idle = Command::new(python())
        .arg(upstreams_dir().join("ws_client.py"))
        .args(["idle", &format!("{base}/idle")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // While it is open, the tunnel is two established connections (each seen from both ends),
    // seen as soon as the client is up (a loaded machine may take most of a second for that).
    let open = Instant::now();
    while !(sockets(upstream.addr().port(), &["01"]) == 2
        && sockets(proxy.addr.port(), &["01"]) == 2)
    {
        assert!(
            open.elapsed() < Duration::from_secs(5),
            "the tunnel never stood open"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = idle.wait_with_output().unwrap();
    assert!(out.status.success());
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let seconds = r["seconds"].as_f64().unwrap();
    assert!(
        (0.9..5.0).contains(&seconds),
        "closed after {seconds} s: {r}"
    );
    // No Close frame: the proxy cut the TCP connection, as nginx does after proxy_read_timeout.
    assert_eq!(r["close_code"], 1006, "{r}");
    assert_released(upstream.addr().port(), "an idle tunnel");

    let r = client(
        "keep-busy",
        &format!("{base}/busy"),
        &["--every", "0.3", "--for", "2.5"],
    );
    assert_eq!(r["open"], true, "{r}");
    assert!(r["echoed"].as_u64().unwrap() >= 6, "{r}");
}

/// Hundreds of tunnels at once over two workers, each echoing ten messages of up to 3 KB.
#[test]
fn many_tunnels_at_once() {
    let upstream = Upstream::websocket_echo();
    let proxy = Proxy::start([
        "--workers",
        "2",
        "--proxy",
        &format!("/={}", upstream.url()),
    ]);
    let r = client(
        "many",
        &format!("ws://{}/many", proxy.addr),
        &["--count", "300", "--messages", "10"],
    );
    assert_eq!(r["ok"], 300, "{r}");
    assert_released(upstream.addr().port(), "300 tunnels");
    assert_released(proxy.addr.port(), "300 tunnels");
}

fn raw_exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    String::from_utf8_lossy(&got).into_owned()
}

/// An upstream that answers `101` to a request that offered no upgrade gets 502, and none of its
/// bytes — the 101, or the second response behind it — reach the client: taking the 101 for a
/// tunnel would hand the upstream the client's connection (response splitting). The same
/// server's 101 to a real WebSocket handshake is a tunnel, and its bytes are the tunnel's.
#[test]
fn an_unasked_101_is_502() {
    let upstream = Upstream::bad(BadKind::UnaskedSwitch);
    let proxy = Proxy::start(["--proxy".to_owned(), format!("/={}", upstream.url())]);
    let text = raw_exchange(
        proxy.addr,
        b"GET /plain HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n",
    );
    assert!(text.starts_with("HTTP/1.1 502 Bad Gateway\r\n"), "{text}");
    assert!(!text.contains("101"), "{text}");
    assert!(!text.contains("smuggled"), "{text}");

    // An Upgrade without `Connection: upgrade`, or to another protocol, is no offer either.
    for offer in [
        "Upgrade: websocket\r\n",
        "Connection: upgrade\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n",
    ] {
        let text = raw_exchange(
            proxy.addr,
            format!("GET /plain HTTP/1.1\r\nHost: p\r\n{offer}\r\n").as_bytes(),
        );
        assert!(
            text.starts_with("HTTP/1.1 502 Bad Gateway\r\n"),
            "{offer}: {text}"
        );
        assert!(!text.contains("smuggled"), "{offer}: {text}");
    }

    let text = raw_exchange(
        proxy.addr,
        b"GET /ws HTTP/1.1\r\nHost: p\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    );
    assert!(
        text.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
        "{text}"
    );
    assert!(text.contains("\r\nUpgrade: websocket\r\n"), "{text}");
    assert!(text.contains("\r\nConnection: upgrade\r\n"), "{text}");
    assert!(
        text.ends_with("\r\n\r\nsmuggled"),
        "tunnelled as bytes: {text}"
    );
}

/// A WebSocket handshake to a route that does not proxy is an ordinary request: the built-in
/// route answers it, nothing switches.
#[test]
fn an_upgrade_to_a_route_that_does_not_proxy_is_ignored() {
    let upstream = Upstream::websocket_echo();
    let proxy = Proxy::start(["--proxy".to_owned(), format!("/ws/={}", upstream.url())]);
    let text = raw_exchange(
        proxy.addr,
        b"GET /plaintext HTTP/1.1\r\nHost: p\r\nConnection: Upgrade, close\r\nUpgrade: websocket\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    );
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.ends_with("Hello, World!"), "{text}");
}

/// `lowlat load --ws` with `--json`: the report as a value.
fn load_ws(args: &[&str]) -> serde_json::Value {
    json_output(
        Command::new(BIN)
            .args(["load", "--ws", "--json", "-q"])
            .args(args),
    )
}

/// `lowlat load --ws` against the echo server directly, through the proxy in clear, and through
/// it over TLS: every message of a counted run comes back (each an echo of its own length), with
/// no error; in rate mode, the rate is kept; the loader's Close at the end reaches the server.
#[test]
fn load_ws_directly_and_through_the_proxy() {
    let (pki, upstream, proxy) = tls_proxy();
    let tls = proxy.tls_addr.expect("a TLS listener");
    let ca = pki.ca_path();
    let targets = [
        format!("ws://{}/direct", upstream.addr()),
        format!("ws://{}/proxied", proxy.addr),
        format!("wss://localhost:{}/secure", tls.port()),
    ];
    for url in &targets {
        let r = load_ws(&[
            "-c",
            "8",
            "-n",
            "2000",
            "--pipeline",
            "2",
            "--ws-message-size",
            "1k",
            "--cacert",
            ca.to_str().unwrap(),
            url,
        ]);
        assert_eq!(r["responses"], 2000, "{url}: {r}");
        assert_eq!(r["errors"]["total"], 0, "{url}: {r}");
        // Each echo is the 1 KiB payload behind a 4-byte head.
        let read = r["bytes_read"].as_u64().unwrap();
        assert!(read >= 2000 * 1028, "{url}: {read} bytes read");
    }
    wait_for("the echo server's log", "closed /proxied code 1000", || {
        upstream.log()
    });

    // In rate mode over TLS too: the server's session tickets arrive before the 101, and a
    // message due then must still go out once the upgrade is in (it once stayed queued, never
    // written, and every connection stalled until its timeout).
    for url in &targets[1..] {
        let r = load_ws(&[
            "-c",
            "4",
            "-d",
            "2s",
            "-R",
            "400",
            "--cacert",
            ca.to_str().unwrap(),
            url,
        ]);
        let rate = r["requests_per_sec"].as_f64().unwrap();
        assert!((360.0..440.0).contains(&rate), "{url}: {rate}/s: {r}");
        assert_eq!(r["errors"]["total"], 0, "{url}: {r}");
    }
}

/// A server that answers the handshake with anything but a valid 101 is a protocol error per
/// connection, and the loader says what the server answered.
#[test]
fn load_ws_against_a_server_that_does_not_upgrade() {
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--workers", "1"]);
    let (mut child, _stderr, banner) = support::spawn_serve(cmd);
    let addr = support::address(&banner, "http://");
    let out = Command::new(BIN)
        .args(["load", "--ws", "-c", "2", "-d", "500ms"])
        .arg(format!("ws://{addr}/plaintext"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("WebSocket handshake: answered 200 instead of 101 Switching Protocols"),
        "{stderr}"
    );
}

/// A client frame: FIN, `opcode`, masked as RFC 6455 §5.3 requires.
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

/// Reads one unmasked server frame: (first byte, payload).
fn ws_read(s: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut two = [0; 2];
    s.read_exact(&mut two).unwrap();
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

/// The handshake over a raw socket (without permessage-deflate, so frames cross as written);
/// returns the socket after the 101's head.
fn ws_connect(addr: SocketAddr, path: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: proxy\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    assert!(
        head.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"),
        "{head}"
    );
    s
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// A client that sends without reading is held by back-pressure, not by the proxy's memory: 200
/// one-MiB messages offered, the echoes left unread, the writes stop well short of them (every
/// buffer on the way full, the proxy reading neither side) and the proxy grows by a few MiB at
/// most; then every echo, read at last, comes back byte for byte.
#[test]
fn a_client_that_does_not_read_is_held_by_back_pressure() {
    const MESSAGES: usize = 200;
    let upstream = Upstream::websocket_echo();
    let proxy = Proxy::start(["--proxy".to_owned(), format!("/={}", upstream.url())]);
    let pid = proxy.child.id();
    let mut s = ws_connect(proxy.addr, "/pressure");
    let before = rss_kib(pid);
    let frame = ws_frame(0x2, &support::upstream::pattern(0, 1 << 20));
    let written = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writer = {
        let mut s = s.try_clone().unwrap();
        let written = Arc::clone(&written);
        std::thread::spawn(move || {
            for _ in 0..MESSAGES {
                s.write_all(&frame).unwrap();
                written.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        })
    };
    // Until the writer makes no progress for a second: everything on the way is full.
    let mut last = usize::MAX;
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let now = written.load(std::sync::atomic::Ordering::Relaxed);
        if now == last {
            break;
        }
        last = now;
        assert!(
            now < MESSAGES,
            "all {MESSAGES} MiB went out unread: no back-pressure"
        );
    }
    let grown = rss_kib(pid).saturating_sub(before);
    assert!(
        grown < 16 * 1024,
        "the proxy grew by {grown} KiB holding {last} MiB"
    );
    let pattern = support::upstream::pattern(0, 1 << 20);
    for i in 0..MESSAGES {
        let (first, payload) = ws_read(&mut s);
        assert_eq!(first, 0x82, "message {i}");
        assert!(payload == pattern, "message {i} came back changed");
    }
    writer.join().unwrap();
}

/// The client's FIN (a half-close, no Close frame) reaches the server as a FIN after the bytes
/// before it: their echo still comes back, then the server (which sees the connection end)
/// closes, and the client reads the end.
#[test]
fn a_client_half_close_reaches_the_server() {
    let upstream = Upstream::websocket_echo();
    let proxy = Proxy::start(["--proxy".to_owned(), format!("/={}", upstream.url())]);
    let mut s = ws_connect(proxy.addr, "/half");
    s.write_all(&ws_frame(0x1, b"last words")).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(ws_read(&mut s), (0x81, b"last words".to_vec()));
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    wait_for("the echo server's log", "closed /half code 1006", || {
        upstream.log()
    });
    drop(s);
    assert_released(upstream.addr().port(), "after a half-close");
    assert_released(proxy.addr.port(), "after a half-close");
}

/// WebSocket over HTTP/2 (RFC 8441) in clear (`--h2c`): SETTINGS_ENABLE_CONNECT_PROTOCOL, the
/// extended CONNECT answered `200` (without the HTTP/1.1 handshake's own fields), messages both
/// ways past every window, two tunnels and a GET on one connection, the closes, the upstream's
/// handshake (a GET with a fresh key it accepted), and the tunnel's access-log line.
#[test]
fn websockets_cross_http2_streams() {
    let (upstream, _dir, log, proxy) = logged_proxy(&["--h2c"]);
    let base = format!("ws://{}/ws", proxy.addr);

    let r = h2_client("echo", &format!("{base}/h2chat"), &[]);
    assert_eq!(r["connect_protocol"], 1, "{r}");
    assert_eq!(r["status"], 200, "{r}");
    for (name, _) in r["response_headers"].as_object().unwrap() {
        assert!(
            !["sec-websocket-accept", "upgrade", "connection"].contains(&name.as_str()),
            "{name} in an HTTP/2 response: {r}"
        );
    }
    for ok in ["text_ok", "binary_ok", "small_ok", "second_ok"] {
        assert_eq!(r[ok], true, "{ok}: {r}");
    }
    // A plain request beside the tunnels reached the upstream as one (which wants an upgrade).
    assert_eq!(r["get_status"], 426, "{r}");
    assert_eq!(r["close_code"], 1000, "{r}");
    assert_eq!(r["ended"], true, "{r}");
    wait_for("the echo server's log", "closed /h2chat code 1000", || {
        upstream.log()
    });
    assert_released(upstream.addr().port(), "proxy → upstream");

    let text = wait_for(
        "the access log",
        "CONNECT /ws/h2chat HTTP/2.0\" 200",
        || read_log(&log),
    );
    let line = text
        .lines()
        .find(|l| l.contains("CONNECT /ws/h2chat") && l.contains("1000"))
        .unwrap_or_else(|| {
            text.lines()
                .find(|l| l.contains("CONNECT /ws/h2chat"))
                .unwrap()
        });
    assert!(
        line.contains(&format!("\"{}\" 101 ", upstream.addr())),
        "{line}"
    );

    // What the upstream saw: the HTTP/1.1 handshake, with a key of the proxy's making.
    let r = h2_client("headers", &format!("{base}/headers"), &[]);
    assert_eq!(r["status"], 200, "{r}");
    let seen: Vec<(String, String)> = r["upstream"]["headers"]
        .as_array()
        .unwrap_or_else(|| panic!("no handshake echoed: {r}"))
        .iter()
        .map(|p| {
            (
                p[0].as_str().unwrap().to_ascii_lowercase(),
                p[1].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let field = |n: &str| seen.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
    assert_eq!(field("upgrade"), Some("websocket"), "{seen:?}");
    assert_eq!(field("connection"), Some("upgrade"), "{seen:?}");
    assert_eq!(field("sec-websocket-version"), Some("13"), "{seen:?}");
    assert_eq!(
        field("sec-websocket-key").map(str::len),
        Some(24),
        "{seen:?}"
    );
}

/// The same over TLS (ALPN h2): a `wss://` tunnel on an HTTP/2 connection.
#[test]
fn websockets_cross_http2_over_tls() {
    let (pki, upstream, proxy) = tls_proxy();
    let tls = proxy.tls_addr.expect("a TLS listener");
    let ca = pki.ca_path();
    let url = format!("wss://localhost:{}/secure-h2", tls.port());
    let r = h2_client("echo", &url, &["--cafile", ca.to_str().unwrap()]);
    assert_eq!(r["status"], 200, "{r}");
    for ok in ["text_ok", "binary_ok", "small_ok", "second_ok"] {
        assert_eq!(r[ok], true, "{ok}: {r}");
    }
    assert_eq!(r["close_code"], 1000, "{r}");
    wait_for(
        "the echo server's log",
        "closed /secure-h2 code 1000",
        || upstream.log(),
    );
    assert_released(upstream.addr().port(), "TLS HTTP/2 tunnels");
}

/// A tunnel stream reset by the client ends its upstream connection (the connection and its
/// other streams go on), and so does a client that drops the whole connection; each tunnel is
/// logged once.
#[test]
fn a_reset_or_dropped_http2_tunnel_ends_upstream() {
    let (upstream, _dir, log, proxy) = logged_proxy(&["--h2c"]);
    let base = format!("ws://{}/ws", proxy.addr);
    let r = h2_client("reset", &format!("{base}/reset-me"), &[]);
    assert_eq!(r["echo_ok"], true, "{r}");
    assert_eq!(r["get_status"], 426, "the connection goes on: {r}");
    wait_for(
        "the echo server's log",
        "closed /reset-me code 1006",
        || upstream.log(),
    );
    let r = h2_client("drop", &format!("{base}/drop-me"), &[]);
    assert_eq!(r["echo_ok"], true, "{r}");
    wait_for("the echo server's log", "closed /drop-me code 1006", || {
        upstream.log()
    });
    assert_released(upstream.addr().port(), "reset and dropped tunnels");
    assert_released(proxy.addr.port(), "reset and dropped tunnels");
    let text = wait_for("the access log", "CONNECT /ws/reset-me", || read_log(&log));
    assert_eq!(text.matches("CONNECT /ws/reset-me").count(), 1, "{text}");
}

/// What must not open a tunnel does not: an extended CONNECT for another protocol (501), to a
/// route that does not proxy (405 from the built-in route, 404 where nothing is), or through a
/// group of HTTP/2 upstreams (501: the tunnel is to HTTP/1.1 WebSockets); each ends its stream.
#[test]
fn extended_connects_that_cannot_tunnel_are_refused() {
    let upstream = Upstream::websocket_echo();
    let proxy = Proxy::start([
        "--h2c".to_owned(),
        "--proxy".to_owned(),
        format!("/ws/={}/", upstream.url()),
        "--proxy".to_owned(),
        "/h2/=h2c://127.0.0.1:9/".to_owned(),
    ]);
    let base = format!("ws://{}", proxy.addr);
    let cases = [
        ("/ws/x", "connect-udp", 501),
        ("/plaintext", "websocket", 405),
        ("/nothing-here", "websocket", 404),
        ("/h2/x", "websocket", 501),
    ];
    for (path, protocol, status) in cases {
        let r = h2_client(
            "refused",
            &format!("{base}{path}"),
            &["--protocol", protocol],
        );
        assert_eq!(r["status"], status, "{path} {protocol}: {r}");
    }
    assert!(!upstream.log().contains("closed /x"), "{}", upstream.log());
}
