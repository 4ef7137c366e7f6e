//! `serve` over TLS with real clients: rustls, curl, Python's `ssl` and `openssl s_client`
//! against a server on 127.0.0.1:0, with certificates made at test time. Protocol versions,
//! SNI, ALPN, resumption, pipelining, static files, the handshake deadline, plain HTTP and
//! garbage on the TLS port, close_notify on shutdown.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Parser;
use lowlat_testkit::pki::{KeyKind, Pki};
use rustls::version::{TLS12, TLS13};
use support::{client_config, read_response_from, tls_config, tls_connect, TestServer};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: lowlat_server::settings::ServeArgs,
}

/// Starts `lowlat serve` from flags, with a TLS listener; `extra` adds flags.
fn start_cli(pki: &Pki, extra: &[&str]) -> TestServer {
    let leaf = pki.leaf("srv", &["localhost", "127.0.0.1"], KeyKind::EcdsaP256);
    let mut argv: Vec<String> = [
        "lowlat",
        "--listen",
        "127.0.0.1:0",
        "--tls-listen",
        "127.0.0.1:0",
        "--workers",
        "1",
        "--cert",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    argv.push(leaf.cert.display().to_string());
    argv.push("--key".into());
    argv.push(leaf.key.display().to_string());
    argv.extend(extra.iter().map(|s| (*s).to_owned()));
    let cli = Cli::try_parse_from(argv).expect("flags parse");
    let service = lowlat_server::settings::service(&cli.serve).expect("service");
    let mut cfg = cli.serve.to_config().expect("config");
    cfg.tls = cli.serve.tls_context().expect("certificates");
    cfg.grace = Duration::from_secs(1);
    TestServer::start(cfg, service)
}

fn builtin_tls(pki: &Pki) -> TestServer {
    let leaf = pki.leaf("srv", &["localhost", "127.0.0.1"], KeyKind::EcdsaP256);
    TestServer::start(tls_config(1, &[&leaf]), lowlat_server::builtin_service())
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").into_bytes()
}

/// TLS 1.3 and TLS 1.2 both complete, agree on http/1.1 by ALPN, and serve requests on one
/// keep-alive connection.
#[test]
fn rustls_client_over_tls13_and_tls12() {
    let pki = Pki::new();
    let server = builtin_tls(&pki);
    let addr = server.tls_addr.unwrap();
    for (version, name) in [(&TLS13, "TLSv1_3"), (&TLS12, "TLSv1_2")] {
        let cfg = client_config(&pki.ca_path(), &[version]);
        let mut c = tls_connect(addr, "localhost", &cfg);
        assert_eq!(
            format!("{:?}", c.conn.protocol_version().unwrap()),
            name,
            "negotiated version"
        );
        assert_eq!(c.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
        for _ in 0..3 {
            c.write_all(&get("/plaintext")).unwrap();
            let (head, body) = read_response_from(&mut c);
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            assert_eq!(body, b"Hello, World!");
        }
    }
}

/// Sixteen requests in one write come back as sixteen responses, in order.
#[test]
fn pipelined_batch_over_tls() {
    let pki = Pki::new();
    let server = builtin_tls(&pki);
    let cfg = client_config(&pki.ca_path(), &[&TLS13]);
    let mut c = tls_connect(server.tls_addr.unwrap(), "localhost", &cfg);
    let mut batch = Vec::new();
    for i in 0..16 {
        batch.extend(get(if i % 2 == 0 { "/plaintext" } else { "/json" }));
    }
    c.write_all(&batch).unwrap();
    for i in 0..16 {
        let (head, body) = read_response_from(&mut c);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        if i % 2 == 0 {
            assert_eq!(body, b"Hello, World!");
        } else {
            assert_eq!(body, br#"{"message":"Hello, World!"}"#);
        }
    }
}

/// The second connection of a client that kept the session resumes it (TLS 1.3 tickets, TLS 1.2
/// tickets), and is a full handshake when the client forgets it.
#[test]
fn sessions_resume() {
    let pki = Pki::new();
    let server = builtin_tls(&pki);
    let addr = server.tls_addr.unwrap();
    for version in [&TLS13, &TLS12] {
        let cfg = client_config(&pki.ca_path(), &[version]);
        let mut first = tls_connect(addr, "localhost", &cfg);
        // A TLS 1.3 ticket arrives after the handshake: a request/response lets it in.
        first.write_all(&get("/plaintext")).unwrap();
        let _ = read_response_from(&mut first);
        assert_eq!(
            first.conn.handshake_kind(),
            Some(rustls::HandshakeKind::Full)
        );
        let mut second = tls_connect(addr, "localhost", &cfg);
        second.write_all(&get("/plaintext")).unwrap();
        let (head, _) = read_response_from(&mut second);
        assert!(head.starts_with("HTTP/1.1 200"));
        assert_eq!(
            second.conn.handshake_kind(),
            Some(rustls::HandshakeKind::Resumed),
            "{version:?}"
        );
        let fresh = client_config(&pki.ca_path(), &[version]);
        let third = tls_connect(addr, "localhost", &fresh);
        assert_eq!(
            third.conn.handshake_kind(),
            Some(rustls::HandshakeKind::Full)
        );
    }
}

/// SNI picks the certificate that lists the name (exact or wildcard); an unknown name and no
/// name at all get the first certificate.
#[test]
fn sni_chooses_the_certificate() {
    let pki = Pki::new();
    let a = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256);
    let b = pki.leaf("b", &["b.test", "*.b.test"], KeyKind::Rsa2048);
    let server = TestServer::start(tls_config(1, &[&a, &b]), lowlat_server::builtin_service());
    let addr = server.tls_addr.unwrap();
    let cfg = client_config(&pki.ca_path(), &[&TLS13, &TLS12]);
    for (name, want) in [("a.test", &a), ("b.test", &b), ("www.b.test", &b)] {
        let c = tls_connect(addr, name, &cfg);
        let presented = c.conn.peer_certificates().unwrap()[0].as_ref().to_vec();
        assert_eq!(presented, want.leaf_der, "certificate for {name}");
    }
    // No SNI (an IP address) and an unknown name: the default, as openssl shows.
    for servername in [None, Some("other.test")] {
        let out = s_client(addr, servername, &[]);
        assert!(
            out.contains("CN=a.test") || out.contains("CN = a.test"),
            "{out}"
        );
    }
}

/// ALPN: http/1.1 is chosen when offered (also beside h2); a client offering only protocols we
/// do not speak is refused in the handshake (RFC 7301 §3.2: no_application_protocol).
#[test]
fn alpn() {
    let pki = Pki::new();
    let server = builtin_tls(&pki);
    let addr = server.tls_addr.unwrap();
    let out = s_client(addr, Some("localhost"), &["-alpn", "h2,http/1.1"]);
    assert!(out.contains("ALPN protocol: http/1.1"), "{out}");
    let out = s_client(addr, Some("localhost"), &["-alpn", "h2"]);
    assert!(
        out.contains("no application protocol") || out.contains("alert number 120"),
        "{out}"
    );
    // Without ALPN at all, HTTP/1.1 is assumed.
    let out = s_client(addr, Some("localhost"), &[]);
    assert!(out.contains("No ALPN negotiated"), "{out}");
}

/// curl over TLS 1.3 and 1.2, verifying against the test CA; and refusing without it.
#[test]
fn curl_verifies_and_fetches() {
    let pki = Pki::new();
    let server = builtin_tls(&pki);
    let port = server.tls_addr.unwrap().port();
    let url = format!("https://localhost:{port}/json");
    for flags in [&["--tlsv1.3"][..], &["--tlsv1.2", "--tls-max", "1.2"][..]] {
        let out = Command::new("curl")
            .args(["-sS", "-v", "--cacert"])
            .arg(pki.ca_path())
            .args(flags)
            .arg(&url)
            .output()
            .expect("curl");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert_eq!(out.stdout, br#"{"message":"Hello, World!"}"#);
        let want = if flags[0] == "--tlsv1.3" {
            "TLSv1.3"
        } else {
            "TLSv1.2"
        };
        assert!(
            err.contains(&format!("SSL connection using {want}")),
            "{err}"
        );
    }
    let out = Command::new("curl")
        .args(["-sS", &url])
        .output()
        .expect("curl");
    assert!(!out.status.success(), "an unknown CA must not verify");
}

/// Python's ssl module, as a browser-like client would use it: default context, SNI, ALPN.
#[test]
fn python_ssl_client() {
    let pki = Pki::new();
    let server = builtin_tls(&pki);
    let port = server.tls_addr.unwrap().port();
    let script = format!(
        r#"
import socket, ssl
ctx = ssl.create_default_context(cafile={ca:?})
ctx.set_alpn_protocols(["http/1.1"])
with socket.create_connection(("127.0.0.1", {port})) as raw:
    with ctx.wrap_socket(raw, server_hostname="localhost") as s:
        s.sendall(b"GET /plaintext HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        print(s.version(), s.selected_alpn_protocol())
        print(data.decode())
"#,
        ca = pki.ca_path().display().to_string()
    );
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("TLSv1.3 http/1.1"), "{stdout}");
    assert!(stdout.contains("HTTP/1.1 200 OK"), "{stdout}");
    assert!(stdout.ends_with("Hello, World!\n"), "{stdout}");
}

/// Plain HTTP to the TLS port gets a 400 in clear and a close, as nginx answers it.
#[test]
fn plain_http_on_the_tls_port_is_400_in_clear() {
    let pki = Pki::new();
    let server = builtin_tls(&pki);
    let mut s = TcpStream::connect(server.tls_addr.unwrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&get("/plaintext")).unwrap();
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).unwrap();
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{reply}");
    assert!(reply.contains("Connection: close"), "{reply}");
}

/// Garbage where a ClientHello should be: an alert and a close, and the server goes on serving.
#[test]
fn garbage_client_hello_is_refused() {
    let pki = Pki::new();
    let server = builtin_tls(&pki);
    let addr = server.tls_addr.unwrap();
    for garbage in [
        // A handshake record whose body is not a ClientHello.
        &[0x16, 0x03, 0x01, 0x00, 0x05, 0xff, 0xff, 0xff, 0xff, 0xff][..],
        // Application data before any handshake.
        &[0x17, 0x03, 0x03, 0x00, 0x01, 0x00][..],
        // A record type that does not exist.
        &[0x01, 0x03, 0x03, 0x00, 0x01, 0x00][..],
        // A record longer than TLS allows.
        &[0x16, 0x03, 0x01, 0xff, 0xff, 0x01][..],
    ] {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(garbage).unwrap();
        let mut reply = Vec::new();
        let started = Instant::now();
        let _ = s.read_to_end(&mut reply);
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "closed promptly"
        );
        // An alert record (content type 21), or a bare close; never HTTP.
        assert!(reply.is_empty() || reply[0] == 0x15, "{reply:?}");
    }
    let cfg = client_config(&pki.ca_path(), &[&TLS13]);
    let mut c = tls_connect(addr, "localhost", &cfg);
    c.write_all(&get("/plaintext")).unwrap();
    assert!(read_response_from(&mut c).0.starts_with("HTTP/1.1 200"));
}

/// A client that opens TCP and never finishes the handshake is cut off at the handshake
/// deadline, silent or trickling.
#[test]
fn handshake_deadline() {
    let pki = Pki::new();
    let leaf = pki.leaf("srv", &["localhost"], KeyKind::EcdsaP256);
    let mut cfg = tls_config(1, &[&leaf]);
    cfg.tls_handshake_timeout = Duration::from_millis(400);
    let server = TestServer::start(cfg, lowlat_server::builtin_service());
    let addr = server.tls_addr.unwrap();
    let silent = TcpStream::connect(addr).unwrap();
    let mut trickle = TcpStream::connect(addr).unwrap();
    // The first bytes of a record header, then a byte every 100 ms.
    trickle.write_all(&[0x16, 0x03]).unwrap();
    let started = Instant::now();
    let mut closed = [false, false];
    while started.elapsed() < Duration::from_secs(5) && !(closed[0] && closed[1]) {
        let _ = trickle.write_all(&[0x01]);
        for (i, s) in [&silent, &trickle].into_iter().enumerate() {
            s.set_nonblocking(true).unwrap();
            let mut b = [0u8; 64];
            match (&*s).read(&mut b) {
                Ok(0) => closed[i] = true,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => closed[i] = true,
                Ok(_) => {}
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = started.elapsed();
    assert!(closed[0] && closed[1], "both closed: {closed:?}");
    assert!(
        took >= Duration::from_millis(300),
        "not before the deadline: {took:?}"
    );
    assert!(
        took < Duration::from_secs(3),
        "soon after the deadline: {took:?}"
    );
}

/// Static files over TLS: a large file (read and encrypted in turns, no sendfile) arrives whole
/// and exact, a range of it too, and a request pipelined behind it is answered.
#[test]
fn large_static_file_over_tls() {
    let pki = Pki::new();
    let root = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..3 * 1024 * 1024 + 7)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(root.path().join("big.bin"), &data).unwrap();
    let root_arg = root.path().display().to_string();
    let server = start_cli(&pki, &["--root", &root_arg]);
    let cfg = client_config(&pki.ca_path(), &[&TLS13]);
    let mut c = tls_connect(server.tls_addr.unwrap(), "localhost", &cfg);
    let mut batch = get("/big.bin");
    batch.extend(
        b"GET /big.bin HTTP/1.1\r\nHost: localhost\r\nRange: bytes=1000000-1000099\r\n\r\n",
    );
    batch.extend(get("/plaintext"));
    c.write_all(&batch).unwrap();
    let (head, body) = read_response_from(&mut c);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(body == data, "the body is the file, byte for byte");
    let (head, body) = read_response_from(&mut c);
    assert!(head.starts_with("HTTP/1.1 206"), "{head}");
    assert_eq!(body, &data[1_000_000..1_000_100]);
    let (head, body) = read_response_from(&mut c);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, b"Hello, World!");
}

/// A graceful shutdown ends idle TLS connections with close_notify (a clean end of stream for
/// the client, not a truncation).
#[test]
fn shutdown_sends_close_notify() {
    let pki = Pki::new();
    let mut server = builtin_tls(&pki);
    let cfg = client_config(&pki.ca_path(), &[&TLS13]);
    let mut c = tls_connect(server.tls_addr.unwrap(), "localhost", &cfg);
    c.write_all(&get("/plaintext")).unwrap();
    let _ = read_response_from(&mut c);
    let running = server.take_running();
    running.shutdown_handle().shutdown();
    let mut rest = Vec::new();
    // rustls returns Ok(0) only after close_notify; a bare TCP close is UnexpectedEof.
    let n = c.read_to_end(&mut rest).expect("clean close_notify");
    assert_eq!(n, 0);
    running.wait().unwrap();
}

/// Runs `openssl s_client` against `addr` and returns its output (stdout and stderr).
fn s_client(addr: std::net::SocketAddr, servername: Option<&str>, extra: &[&str]) -> String {
    let mut cmd = Command::new("openssl");
    cmd.args(["s_client", "-connect", &addr.to_string()]);
    match servername {
        Some(name) => cmd.args(["-servername", name]),
        None => cmd.arg("-noservername"),
    };
    cmd.args(extra);
    let out = cmd
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The limits hold over TLS: an oversized head gets 431, a head that takes too long gets 408,
/// each in TLS and followed by close_notify.
#[test]
fn limits_hold_over_tls() {
    let pki = Pki::new();
    let leaf = pki.leaf("srv", &["localhost"], KeyKind::EcdsaP256);
    let mut cfg = tls_config(1, &[&leaf]);
    cfg.header_timeout = Duration::from_millis(300);
    let server = TestServer::start(cfg, lowlat_server::builtin_service());
    let client = client_config(&pki.ca_path(), &[&TLS13]);

    let mut c = tls_connect(server.tls_addr.unwrap(), "localhost", &client);
    let mut big = b"GET /plaintext HTTP/1.1\r\nHost: localhost\r\nX-Big: ".to_vec();
    big.extend(std::iter::repeat_n(b'a', 20_000));
    big.extend(b"\r\n\r\n");
    c.write_all(&big).unwrap();
    let (head, _) = read_response_from(&mut c);
    assert!(head.starts_with("HTTP/1.1 431"), "{head}");
    let mut rest = Vec::new();
    c.read_to_end(&mut rest)
        .expect("close_notify after the error");

    let mut c = tls_connect(server.tls_addr.unwrap(), "localhost", &client);
    c.write_all(b"GET /plaintext HTTP/1.1\r\nHost: loc")
        .unwrap();
    let started = Instant::now();
    let (head, _) = read_response_from(&mut c);
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

/// Random first flights — bytes of any kind, and TLS record headers with random bodies — never
/// hang a connection or hurt the server: each ends in an alert, a 400 or a close, and the
/// server serves a real client afterwards.
#[test]
fn random_first_flights() {
    let pki = Pki::new();
    let server = builtin_tls(&pki);
    let addr = server.tls_addr.unwrap();
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for round in 0..120 {
        let len = (next() % 600) as usize + 1;
        let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if round % 2 == 0 {
            // A plausible handshake record header, then noise.
            bytes.splice(0..0, [0x16, 0x03, 0x01, (len >> 8) as u8, len as u8, 0x01]);
        }
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let _ = s.write_all(&bytes);
        // Whatever comes back, the server must not keep a connection it cannot use: it closes,
        // or (waiting for the rest of a record) the handshake deadline will.
        let mut reply = [0u8; 4096];
        let _ = s.read(&mut reply);
    }
    let cfg = client_config(&pki.ca_path(), &[&TLS13, &TLS12]);
    let mut c = tls_connect(addr, "localhost", &cfg);
    c.write_all(&get("/plaintext")).unwrap();
    assert!(read_response_from(&mut c).0.starts_with("HTTP/1.1 200"));
}

/// Sixteen pipelined requests are answered by one TLS record in one write, not a record per
/// response: the client reads the raw stream and counts records before decrypting them.
#[test]
fn pipelined_batch_is_one_record() {
    let pki = Pki::new();
    let server = builtin_tls(&pki);
    let cfg = client_config(&pki.ca_path(), &[&TLS13]);
    let mut c = tls_connect(server.tls_addr.unwrap(), "localhost", &cfg);
    // A first exchange lets the session ticket (its own record) arrive before counting.
    c.write_all(&get("/plaintext")).unwrap();
    let _ = read_response_from(&mut c);
    let mut batch = Vec::new();
    for _ in 0..16 {
        batch.extend(get("/plaintext"));
    }
    c.write_all(&batch).unwrap();
    c.flush().unwrap();
    let (mut conn, mut sock) = (c.conn, c.sock);
    let mut raw = Vec::new();
    let mut plain = Vec::new();
    let want = 16 * b"Hello, World!".len();
    let mut records = 0;
    let mut buf = [0u8; 65536];
    while plain.windows(13).filter(|w| *w == b"Hello, World!").count() * 13 < want {
        let n = sock.read(&mut buf).unwrap();
        assert!(n > 0, "closed");
        raw.extend_from_slice(&buf[..n]);
        // Hand rustls whole records only, counting them.
        while raw.len() >= 5 {
            let len = usize::from(u16::from_be_bytes([raw[3], raw[4]]));
            if raw.len() < 5 + len {
                break;
            }
            records += 1;
            let mut record = &raw[..5 + len];
            conn.read_tls(&mut record).unwrap();
            conn.process_new_packets().unwrap();
            raw.drain(..5 + len);
            let mut chunk = [0u8; 65536];
            while let Ok(n) = conn.reader().read(&mut chunk) {
                if n == 0 {
                    break;
                }
                plain.extend_from_slice(&chunk[..n]);
            }
        }
    }
    assert_eq!(records, 1, "16 responses in one record");
}
