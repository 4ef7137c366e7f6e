//! `lowlat serve` behind an L4 balancer that speaks the PROXY protocol: haproxy in TCP mode
//! with `send-proxy` (v1) and `send-proxy-v2` in front of a listener marked `proxy_protocol`,
//! in clear and over TLS. The client connects from 127.0.0.2 so that its address differs from
//! the balancer's (127.0.0.1): the access log and the upstream's `X-Forwarded-For` must show
//! the client's. A header from a network not trusted is not believed; a missing, malformed or
//! late header closes the connection. Sent on to an upstream, the header names what the
//! balancer's named: the client and the address it connected to.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lowlat_testkit::pki::{KeyKind, Pki};

mod support;
use support::{free_port, Served, BIN};

/// The client's own address, distinct from the balancer's 127.0.0.1.
const CLIENT: &str = "127.0.0.2";

/// haproxy in TCP mode: one frontend per `(port, server options)`, each to `backend`.
struct Haproxy {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Haproxy {
    fn start(backend: SocketAddr, fronts: &[(u16, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = String::from(
            "global\n  maxconn 1000\ndefaults\n  mode tcp\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n",
        );
        for (i, (port, opts)) in fronts.iter().enumerate() {
            cfg.push_str(&format!(
                "frontend f{i}\n  bind 127.0.0.1:{port}\n  default_backend b{i}\nbackend b{i}\n  server s {backend} {opts}\n"
            ));
        }
        let path = dir.path().join("haproxy.cfg");
        std::fs::write(&path, cfg).unwrap();
        let child = Command::new("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("haproxy (scripts/test-deps.sh installs it)");
        for (port, _) in fronts {
            wait_listening(*port);
        }
        Self { child, _dir: dir }
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_listening(port: u16) {
    let until = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < until, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An upstream that answers every request with 200 and keeps its heads.
struct Recorder {
    addr: SocketAddr,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&heads);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { return };
                let kept = Arc::clone(&kept);
                std::thread::spawn(move || {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        while let Some(end) = support::find(&buf, b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                            buf.drain(..end + 4);
                            kept.lock().unwrap().push(head);
                            let _ = s
                                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\nupstream");
                        }
                        match s.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                });
            }
        });
        Self { addr, heads }
    }

    fn last_forwarded_for(&self) -> String {
        let heads = self.heads.lock().unwrap();
        let head = heads.last().expect("the upstream got no request");
        support::field(head, "x-forwarded-for")
            .unwrap_or_else(|| panic!("no X-Forwarded-For in {head}"))
            .to_owned()
    }
}

/// A GET of `path` sent from [`CLIENT`] to `port`; the whole answer (the server closes).
fn get_from_client(port: u16, path: &str) -> String {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let from: SocketAddr = format!("{CLIENT}:0").parse().unwrap();
    sock.bind(&from.into()).unwrap();
    let to: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    sock.connect(&to.into()).unwrap();
    let mut s: TcpStream = sock.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// Whether the server closes a connection that sends `bytes` without answering a byte.
fn closed_without_answer(addr: SocketAddr, bytes: &[u8]) -> bool {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(bytes);
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => matches!(
            e.kind(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
        ),
    }
}

fn wait_for_log(path: &Path, needle: &str) -> String {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        if log.contains(needle) || Instant::now() > until {
            return log;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// lowlat behind a balancer ([`serve`]), the upstream it proxies `/up/` to, and its access log;
/// the folder and the CA live as long as the test keeps them.
struct Behind {
    served: Served,
    upstream: Recorder,
    log: std::path::PathBuf,
    /// Where the log is, and the CA of the server's certificate.
    keep: (tempfile::TempDir, Pki),
}

/// [`serve`] trusting `trusted`, with an upstream of its own and a log in a folder of its own.
fn behind(trusted: &str) -> Behind {
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let upstream = Recorder::start();
    let served = serve(trusted, upstream.addr, &log, &pki);
    Behind {
        served,
        upstream,
        log,
        keep: (dir, pki),
    }
}

/// lowlat with one clear and one TLS listener that read PROXY headers from `trusted`, proxying
/// `/up/` to `upstream`, logging `$remote_addr $request_uri` to `log`.
fn serve(trusted: &str, upstream: SocketAddr, log: &Path, pki: &Pki) -> Served {
    let cert = pki.leaf("pp", &["localhost"], KeyKind::EcdsaP256);
    let mut cmd = Command::new(BIN);
    cmd.args([
        "serve",
        "--workers",
        "1",
        "--listen",
        "127.0.0.1:0 proxy_protocol",
        "--tls-listen",
        "127.0.0.1:0 proxy_protocol",
        "--accept-proxy-protocol",
        trusted,
        "--header-timeout",
        "1s",
        "--metrics",
        "127.0.0.1:0",
        "--access-log-format",
        "$remote_addr $request_uri $status",
        "--proxy",
    ])
    .arg(format!("/up/=http://{upstream}"))
    .arg("--access-log")
    .arg(log)
    .arg("--cert")
    .arg(&cert.cert)
    .arg("--key")
    .arg(&cert.key);
    Served::spawn(cmd)
}

/// haproxy's v1 and v2 headers, in clear and before TLS: the client's address is the one
/// logged and forwarded.
#[test]
fn client_address_from_haproxy() {
    let rig = behind("127.0.0.1/32");
    let (served, upstream, log) = (rig.served, rig.upstream, rig.log);
    let tls = served.tls_addr.unwrap();
    let (v1, v2, v1_tls, v2_tls) = (free_port(), free_port(), free_port(), free_port());
    let _clear = Haproxy::start(served.addr, &[(v1, "send-proxy"), (v2, "send-proxy-v2")]);
    let _tls = Haproxy::start(tls, &[(v1_tls, "send-proxy"), (v2_tls, "send-proxy-v2")]);

    for (port, name) in [(v1, "v1"), (v2, "v2")] {
        let answer = get_from_client(port, &format!("/up/{name}"));
        assert!(answer.starts_with("HTTP/1.1 200"), "{name}: {answer}");
        assert!(answer.ends_with("upstream"), "{name}: {answer}");
        assert_eq!(upstream.last_forwarded_for(), CLIENT, "{name}");
        let logged = wait_for_log(&log, &format!("/up/{name}"));
        assert!(
            logged.contains(&format!("{CLIENT} /up/{name} 200")),
            "{name}: {logged}"
        );
    }
    // Over TLS the header comes first, the handshake after it.
    for (port, name) in [(v1_tls, "tls-v1"), (v2_tls, "tls-v2")] {
        let out = Command::new("curl")
            .args(["-sk", "--interface", CLIENT, "--http1.1"])
            .arg(format!("https://localhost:{port}/up/{name}"))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "upstream", "{name}");
        assert_eq!(upstream.last_forwarded_for(), CLIENT, "{name}");
        let logged = wait_for_log(&log, &format!("/up/{name}"));
        assert!(
            logged.contains(&format!("{CLIENT} /up/{name} 200")),
            "{name}: {logged}"
        );
    }
    // HTTP/2 over TLS through the balancer: the same client.
    let out = Command::new("curl")
        .args(["-sk", "--interface", CLIENT, "--http2"])
        .arg(format!("https://localhost:{v2_tls}/up/h2"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "upstream");
    assert_eq!(upstream.last_forwarded_for(), CLIENT);
    served.stop();
}

/// A balancer outside the trusted networks: its header is not believed (it is the start of a
/// bad request, answered 400), and its own address is the one logged.
#[test]
fn header_from_untrusted_network_is_refused() {
    let rig = behind("10.0.0.0/8");
    let (served, upstream, log) = (rig.served, rig.upstream, rig.log);
    let port = free_port();
    let _balancer = Haproxy::start(served.addr, &[(port, "send-proxy")]);
    let answer = get_from_client(port, "/up/spoofed");
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(upstream.heads.lock().unwrap().is_empty());
    // A direct client from outside the networks is served as itself, without a header.
    let direct = support::curl(&["-s", &format!("http://{}/up/direct", served.addr)]);
    assert_eq!(String::from_utf8_lossy(&direct.stdout), "upstream");
    assert_eq!(upstream.last_forwarded_for(), "127.0.0.1");
    let logged = wait_for_log(&log, "/up/direct");
    assert!(!logged.contains(CLIENT), "{logged}");
    served.stop();
}

/// From a trusted network a connection must start with a whole, valid header, in time: anything
/// else is closed without an answer. A header that arrives a byte at a time is read.
#[test]
fn missing_or_garbage_headers_close_the_connection() {
    let rig = behind("127.0.0.0/8");
    let (served, upstream) = (rig.served, rig.upstream);
    let mut v2_bad_version = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    v2_bad_version.extend_from_slice(&[0x31, 0x11, 0, 12]);
    let mut v2_short = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    v2_short.extend_from_slice(&[0x21, 0x21, 0, 12, 1, 2, 3, 4, 5, 6, 7, 8, 0, 80, 0, 81]);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("no header", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        ("tls without header", b"\x16\x03\x01\x00\x05hello".to_vec()),
        (
            "bad v1 family",
            b"PROXY TCP4 ::1 ::1 1 2\r\nGET / HTTP/1.1\r\n\r\n".to_vec(),
        ),
        (
            "bad v1 port",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 99999 2\r\n".to_vec(),
        ),
        (
            "v1 too long",
            [b"PROXY UNKNOWN ".as_slice(), &[b'a'; 200]].concat(),
        ),
        ("binary junk", vec![0xff; 64]),
        ("v2 bad version", v2_bad_version),
        ("v2 short addresses", v2_short),
    ];
    for addr in [served.addr, served.tls_addr.unwrap()] {
        for (name, bytes) in &cases {
            assert!(closed_without_answer(addr, bytes), "{addr} {name}");
        }
    }
    // Half a header, then silence: closed at the header timeout (1 s).
    let started = Instant::now();
    assert!(closed_without_answer(served.addr, b"PROXY TCP4 1.2."));
    let took = started.elapsed();
    assert!(took < Duration::from_secs(4), "{took:?}");
    // A header in one-byte writes, then a request: served as the client it names.
    let mut s = TcpStream::connect(served.addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for b in b"PROXY TCP4 192.0.2.9 127.0.0.1 40000 80\r\n" {
        s.write_all(&[*b]).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    s.write_all(b"GET /up/slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(upstream.last_forwarded_for(), "192.0.2.9");
    // LOCAL (the balancer's own health check): served as the balancer.
    let mut s = TcpStream::connect(served.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00GET /up/local HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(upstream.last_forwarded_for(), "127.0.0.1");
    // A v2 header longer than most (addresses and a 400-byte TLV): read whole.
    let mut long = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    let body_len: u16 = 12 + 3 + 400;
    long.extend_from_slice(&[0x21, 0x11]);
    long.extend_from_slice(&body_len.to_be_bytes());
    long.extend_from_slice(&[192, 0, 2, 77, 127, 0, 0, 1, 0x9c, 0x40, 0, 80]);
    long.extend_from_slice(&[0x04, 0x01, 0x90]); // PP2_TYPE_NOOP, 400 bytes
    long.extend_from_slice(&[0u8; 400]);
    long.extend_from_slice(b"GET /up/tlv HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut s = TcpStream::connect(served.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&long).unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(upstream.last_forwarded_for(), "192.0.2.77");
    // Every refusal counted: 8 cases on two listeners, and the late one.
    let metrics = served.metrics_addr().to_string();
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let out = support::curl(&["-s", &format!("http://{metrics}/metrics")]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.contains("lowlat_proxy_protocol_refused_total 17\n") {
            break;
        }
        assert!(Instant::now() < until, "{text}");
        std::thread::sleep(Duration::from_millis(100));
    }
    served.stop();
}

/// A listener marked proxy_protocol without networks to accept it from is a configuration
/// error, said in one line.
#[test]
fn marked_listener_needs_networks() {
    let out = Command::new(BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0 proxy_protocol",
            "--check-config",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--accept-proxy-protocol"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lowlat.toml");
    std::fs::write(
        &file,
        "listen = [{ address = \"127.0.0.1:0\", proxy_protocol = true }]\naccept_proxy_protocol = [\"10.0.0.0/8\"]\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--check-config", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(
        &file,
        "listen = [{ address = \"127.0.0.1:0\", proxy_protocl = true }]\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--check-config", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("proxy_protocl"));
}

/// Out: a lowlat in front sends v1 or v2 to an upstream that expects it (here another lowlat
/// reading PROXY headers), which then logs the client, not the proxy. v1 by the flag, v2 by an
/// `[[upstream]]` table's key.
#[test]
fn proxy_sends_the_header_to_its_upstream() {
    let rig = behind("127.0.0.1/32");
    let (inner, log, dir) = (rig.served, rig.log, &rig.keep.0);

    let v1 = Served::start([
        "--proxy".to_owned(),
        format!("/up/=http://{}", inner.addr),
        "--proxy-send-proxy-protocol".to_owned(),
        "v1".to_owned(),
    ]);
    let config = dir.path().join("front.toml");
    std::fs::write(
        &config,
        format!(
            "proxy = [\"/up/=inner\"]\n[[upstream]]\nname = \"inner\"\nservers = [\"http://{}\"]\nsend_proxy_protocol = \"v2\"\n",
            inner.addr
        ),
    )
    .unwrap();
    let v2 = Served::start(["--config".to_owned(), config.display().to_string()]);
    for (front, name) in [(&v1, "out-v1"), (&v2, "out-v2")] {
        for i in 0..2 {
            let path = format!("/up/{name}-{i}");
            let answer = get_from_client(front.port(), &path);
            assert!(answer.starts_with("HTTP/1.1 200"), "{name}: {answer}");
            let logged = wait_for_log(&log, &path);
            assert!(
                logged.contains(&format!("{CLIENT} {path} 200")),
                "{name}: {logged}"
            );
        }
    }
    // A bad version is one line at start.
    let out = Command::new(BIN)
        .args([
            "serve",
            "--proxy-send-proxy-protocol",
            "v3",
            "--check-config",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

/// The simple case: `--accept-proxy-protocol` alone makes every TCP listener read the header
/// from that network.
#[test]
fn the_flag_alone_applies_to_every_listener() {
    let served = Served::start(["--accept-proxy-protocol", "127.0.0.0/8"]);
    assert!(closed_without_answer(
        served.addr,
        b"GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n"
    ));
    let mut s = TcpStream::connect(served.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"PROXY TCP6 2001:db8::9 ::1 1234 80\r\nGET /plaintext HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.ends_with("Hello, World!"), "{answer}");
    served.stop();
}

/// A balancer of the test's own: each connection to it is relayed to `to`, with `header` (a
/// PROXY header naming whatever addresses the test chooses) written first.
fn balancer(to: SocketAddr, header: Vec<u8>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let Ok(mut server) = TcpStream::connect(to) else {
                return;
            };
            server.write_all(&header).unwrap();
            let (mut c_in, mut s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c_in, &mut s_out);
                let _ = s_out.shutdown(std::net::Shutdown::Write);
            });
            let (mut s_in, mut c_out) = (server, client);
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut s_in, &mut c_out);
                let _ = c_out.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    addr
}

/// An upstream that expects a PROXY header on each connection: it keeps the header's bytes,
/// then answers the request after it with 200.
struct HeaderReader {
    addr: SocketAddr,
    headers: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl HeaderReader {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let headers = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&headers);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { return };
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let (header_len, head_end) = loop {
                    match s.read(&mut chunk) {
                        Ok(0) | Err(_) => break (0, None),
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                    let len = match lowlat_http::proxy_protocol::parse(&buf) {
                        Ok(lowlat_http::Status::Complete(h)) => h.len,
                        Ok(lowlat_http::Status::Partial) => continue,
                        Err(e) => panic!("the upstream got no PROXY header ({e}): {buf:?}"),
                    };
                    if let Some(end) = support::find(&buf[len..], b"\r\n\r\n") {
                        break (len, Some(end));
                    }
                };
                if head_end.is_none() {
                    continue;
                }
                kept.lock().unwrap().push(buf[..header_len].to_vec());
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 8\r\nconnection: close\r\n\r\nupstream",
                );
            }
        });
        Self { addr, headers }
    }

    /// The header of the last connection, parsed.
    fn last(&self) -> (Vec<u8>, lowlat_http::proxy_protocol::ProxyHeader) {
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(bytes) = self.headers.lock().unwrap().pop() {
                let lowlat_http::Status::Complete(h) =
                    lowlat_http::proxy_protocol::parse(&bytes).unwrap()
                else {
                    panic!("a partial header kept: {bytes:?}");
                };
                return (bytes, h);
            }
            assert!(Instant::now() < until, "the upstream got no connection");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The PROXY header of version `version` naming `source` → `destination`.
fn header(version: u8, source: &str, destination: &str) -> Vec<u8> {
    let addresses = Some(lowlat_http::proxy_protocol::Addresses {
        source: source.parse().unwrap(),
        destination: destination.parse().unwrap(),
    });
    let mut out = Vec::new();
    if version == 1 {
        lowlat_http::proxy_protocol::write_v1(&mut out, addresses);
    } else {
        lowlat_http::proxy_protocol::write_v2(&mut out, addresses);
    }
    out
}

/// Behind a balancer and in front of an upstream that both speak the PROXY protocol, the
/// header lowlat sends names what the balancer's named — the client, and the address the client
/// connected to at the balancer — not lowlat's own listener, as haproxy passes on what it was
/// told. Each version in, each version out, IPv4 and IPv6, HTTP/1.1 and HTTP/2 (h2c) from the
/// client; a balancer's `LOCAL` header (its own health check) is passed on as the connection's
/// own addresses.
#[test]
fn the_header_sent_on_names_the_balancers_destination() {
    let upstream = HeaderReader::start();
    let front = |version: &str| {
        let mut cmd = Command::new(BIN);
        cmd.args([
            "serve",
            "--workers",
            "1",
            "--listen",
            "127.0.0.1:0 proxy_protocol",
            "--accept-proxy-protocol",
            "127.0.0.1/32",
            "--proxy-send-proxy-protocol",
            version,
            "--h2c",
            "--proxy",
        ])
        .arg(format!("/up/=http://{}", upstream.addr));
        Served::spawn(cmd)
    };
    let fronts = [(1u8, front("v1")), (2u8, front("v2"))];
    let cases = [
        ("192.0.2.7:40000", "198.51.100.9:443"),
        ("[2001:db8::7]:40001", "[2001:db8::9]:8443"),
    ];
    for (out_version, served) in &fronts {
        for in_version in [1u8, 2] {
            for (source, destination) in cases {
                let lb = balancer(served.addr, header(in_version, source, destination));
                for proto in ["--http1.1", "--http2-prior-knowledge"] {
                    let what = format!("v{in_version} in, v{out_version} out, {source}, {proto}");
                    let out = Command::new("curl")
                        .args(["-s", proto])
                        .arg(format!("http://{lb}/up/x"))
                        .output()
                        .unwrap();
                    assert_eq!(String::from_utf8_lossy(&out.stdout), "upstream", "{what}");
                    let (bytes, got) = upstream.last();
                    assert_eq!(got.version, *out_version, "{what}");
                    let named = got.addresses.unwrap_or_else(|| panic!("{what}: {bytes:?}"));
                    assert_eq!(named.source, source.parse().unwrap(), "{what}");
                    assert_eq!(named.destination, destination.parse().unwrap(), "{what}");
                    assert_eq!(bytes, header(*out_version, source, destination), "{what}");
                }
            }
        }
        // LOCAL: the balancer speaks for itself; the connection's own addresses are named.
        let mut local = header(2, "127.0.0.1:1", "127.0.0.1:2");
        local[12] = 0x20;
        local[13] = 0;
        local[14..16].copy_from_slice(&[0, 0]);
        local.truncate(16);
        let lb = balancer(served.addr, local);
        let out = Command::new("curl")
            .args(["-s", "--http1.1"])
            .arg(format!("http://{lb}/up/local"))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "upstream");
        let (bytes, got) = upstream.last();
        let named = got.addresses.unwrap_or_else(|| panic!("LOCAL: {bytes:?}"));
        assert_eq!(named.destination, served.addr, "LOCAL");
        assert_eq!(named.source.ip(), served.addr.ip(), "LOCAL");
    }
}
