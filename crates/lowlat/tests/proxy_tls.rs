//! `lowlat serve --proxy` to `https://` upstreams, each a real process: another `lowlat serve`
//! with a TLS listener and certificates made by the test's own CA.
//!
//! The upstream's certificate is checked against a CA file (a certificate from another CA is a
//! 502 and one error-log line naming the reason), for the URL's host or a configured name —
//! which is also the SNI the upstream chooses its certificate by; checking can be turned off,
//! loudly; pooled connections are reused and new ones resume the TLS session; active health
//! checks go through TLS too.

use std::io::{BufRead, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lowlat_testkit::pki::{KeyKind, Pki};

mod support;
use support::upstream::{App, Bind, GunicornWorker, Upstream};
use support::BIN;

/// A `lowlat serve` process (the proxy's debug lines on) whose stderr is collected on a thread (printed if a test fails).
struct Serve {
    child: Child,
    addr: SocketAddr,
    log: Arc<Mutex<String>>,
}

impl Serve {
    /// `lowlat serve` with one worker and `args`; `scheme` picks the address of its banner
    /// that [`Serve::addr`] holds.
    fn start(args: &[&str], scheme: &str) -> Serve {
        let mut cmd = Command::new(BIN);
        cmd.args(["serve", "--workers", "1"]).args(args);
        // The proxy's debug lines say which handshakes resumed a session.
        cmd.env("RUST_LOG", "info,lowlat_server::proxy=debug");
        let (child, mut stderr, banner) = support::spawn_serve(cmd);
        let addr = support::address(&banner, scheme);
        let log = Arc::new(Mutex::new(banner));
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            let mut line = String::new();
            while stderr.read_line(&mut line).is_ok_and(|n| n > 0) {
                sink.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        Serve { child, addr, log }
    }

    /// A TLS upstream presenting each of `certs` (chosen by SNI).
    fn upstream(certs: &[&lowlat_testkit::pki::CertFiles]) -> Serve {
        Serve::upstream_with(certs, &[])
    }

    /// [`Serve::upstream`] with more arguments.
    fn upstream_with(certs: &[&lowlat_testkit::pki::CertFiles], more: &[&str]) -> Serve {
        let mut args = vec!["--tls-listen".to_owned(), "127.0.0.1:0".to_owned()];
        for c in certs {
            args.push("--cert".into());
            args.push(c.cert.display().to_string());
            args.push("--key".into());
            args.push(c.key.display().to_string());
        }
        args.extend(more.iter().map(|a| (*a).to_owned()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Serve::start(&args, "https://")
    }

    /// A proxy in clear forwarding `/` by `args` (`--proxy …` and the rest).
    fn proxy(args: &[&str]) -> Serve {
        let mut all = vec!["--listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        Serve::start(&all, "http://")
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits up to 10 s for the log to contain `text`.
    fn wait_log(&self, text: &str) -> String {
        let start = Instant::now();
        loop {
            let log = self.log();
            if log.contains(text) {
                return log;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no {text:?} in the log"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- log of lowlat serve ---\n{}", self.log());
        }
    }
}

/// `GET target` on a new connection: the status and the body (the proxy answers with a length).
fn get(addr: SocketAddr, target: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {target} HTTP/1.1\r\nHost: proxied.test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not a response: {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// The upstream at `upstream`, as `https://localhost:PORT` (the name its certificate has).
fn localhost(upstream: &Serve) -> String {
    format!("/=https://localhost:{}", upstream.addr.port())
}

/// An https upstream whose certificate the CA file vouches for is reached: responses relayed,
/// connections pooled (one handshake for many requests).
#[test]
fn an_https_upstream_checked_against_a_ca_file() {
    let pki = Pki::new();
    let leaf = pki.leaf("up", &["localhost"], KeyKind::EcdsaP256);
    let upstream = Serve::upstream(&[&leaf]);
    let ca = pki.ca_path().display().to_string();
    let proxy = Serve::proxy(&["--proxy", &localhost(&upstream), "--proxy-tls-ca", &ca]);
    for _ in 0..20 {
        let (status, body) = get(proxy.addr, "/plaintext");
        assert_eq!((status, body.as_str()), (200, "Hello, World!"));
    }
    let log = proxy.log();
    assert_eq!(
        log.matches("upstream TLS handshake done").count(),
        1,
        "pooled connection not reused: {log}"
    );
}

/// Without a pool, each request's connection resumes the first one's session: the certificate
/// is sent and checked once.
#[test]
fn reconnects_resume_the_tls_session() {
    let pki = Pki::new();
    let leaf = pki.leaf("up", &["localhost"], KeyKind::EcdsaP256);
    let upstream = Serve::upstream(&[&leaf]);
    let ca = pki.ca_path().display().to_string();
    let proxy = Serve::proxy(&[
        "--proxy",
        &localhost(&upstream),
        "--proxy-tls-ca",
        &ca,
        "--proxy-keepalive",
        "0",
    ]);
    for _ in 0..4 {
        assert_eq!(get(proxy.addr, "/plaintext").0, 200);
    }
    // The log line of the last handshake may trail its response.
    let start = Instant::now();
    while proxy.log().matches("upstream TLS handshake done").count() < 4 {
        assert!(start.elapsed() < Duration::from_secs(10), "{}", proxy.log());
        std::thread::sleep(Duration::from_millis(10));
    }
    let log = proxy.log();
    let done: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("upstream TLS handshake done"))
        .collect();
    assert_eq!(done.len(), 4, "{log}");
    assert!(done[0].contains("resumed=false"), "{}", done[0]);
    assert!(
        done[1..].iter().all(|l| l.contains("resumed=true")),
        "{done:#?}"
    );
}

/// A certificate no trusted CA signed: 502 to the client, and one error-log line
/// that says why in words.
#[test]
fn an_unknown_ca_is_a_502_with_the_reason_logged() {
    let pki = Pki::new();
    let leaf = pki.self_signed("up", &["localhost"], KeyKind::EcdsaP256);
    let upstream = Serve::upstream(&[&leaf]);
    let ca = pki.ca_path().display().to_string();
    let proxy = Serve::proxy(&["--proxy", &localhost(&upstream), "--proxy-tls-ca", &ca]);
    assert_eq!(get(proxy.addr, "/plaintext").0, 502);
    let log = proxy.wait_log("upstream TLS handshake failed");
    let line = log
        .lines()
        .find(|l| l.contains("upstream TLS handshake failed"))
        .unwrap();
    assert!(line.contains("ERROR"), "{line}");
    assert!(
        line.contains("certificate signed by an unknown authority"),
        "{line}"
    );
    assert!(
        line.contains(&format!("localhost:{}", upstream.addr.port())),
        "{line}"
    );
}

/// The name checked is `--proxy-tls-server-name` and goes as SNI: the upstream, holding
/// certificates for two names, presents the one asked for; a name neither has is refused.
#[test]
fn the_server_name_is_sent_as_sni_and_checked() {
    let pki = Pki::new();
    let a = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256);
    let b = pki.leaf("b", &["b.test"], KeyKind::EcdsaP256);
    let upstream = Serve::upstream(&[&a, &b]);
    let ca = pki.ca_path().display().to_string();
    let target = format!("/=https://127.0.0.1:{}", upstream.addr.port());
    for (name, want) in [("b.test", 200), ("a.test", 200), ("c.test", 502)] {
        let proxy = Serve::proxy(&[
            "--proxy",
            &target,
            "--proxy-tls-ca",
            &ca,
            "--proxy-tls-server-name",
            name,
        ]);
        assert_eq!(get(proxy.addr, "/plaintext").0, want, "{name}");
        if want == 502 {
            let log = proxy.wait_log("upstream TLS handshake failed");
            assert!(log.contains("certificate not valid for"), "{log}");
        }
    }
}

/// Skipping verification reaches a self-signed upstream — and is warned about by
/// `--check-config` and at start.
#[test]
fn skipping_verification_works_and_is_warned_about() {
    let pki = Pki::new();
    let leaf = pki.self_signed("self", &["localhost"], KeyKind::EcdsaP256);
    let upstream = Serve::upstream(&[&leaf]);
    let rule = localhost(&upstream);
    let proxy = Serve::proxy(&["--proxy", &rule]);
    assert_eq!(get(proxy.addr, "/plaintext").0, 502);
    drop(proxy);
    let proxy = Serve::proxy(&["--proxy", &rule, "--proxy-tls-insecure-skip-verify"]);
    assert_eq!(get(proxy.addr, "/plaintext").0, 200);
    assert!(proxy.log().contains("WARN"), "{}", proxy.log());
    assert!(proxy.log().contains("are not checked"), "{}", proxy.log());

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("lowlat.toml");
    std::fs::write(
        &config,
        format!(
            "[[upstream]]\nname = \"app\"\nservers = [\"https://localhost:{}\"]\ntls_insecure_skip_verify = true\n\n[[site]]\nserver_names = [\"x\"]\nproxy = [\"/=app\"]\n",
            upstream.addr.port()
        ),
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--check-config", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: upstream app: tls_insecure_skip_verify"),
        "{stderr}"
    );
}

/// A CA file that is not one is refused at start with a line naming it.
#[test]
fn a_bad_ca_file_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("ca.pem");
    std::fs::write(&bad, "not a certificate\n").unwrap();
    let out = Command::new(BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--proxy",
            "/=https://localhost:1",
            "--proxy-tls-ca",
        ])
        .arg(&bad)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("ca.pem") && stderr.contains("no certificate"),
        "{stderr}"
    );
}

/// The active health check speaks TLS and checks the certificate: a server with a certificate
/// from an unknown CA is reported down, the good one up.
#[test]
fn active_health_checks_go_through_tls() {
    let pki = Pki::new();
    let other = Pki::new();
    let good = Serve::upstream(&[&pki.leaf("good", &["localhost"], KeyKind::EcdsaP256)]);
    let bad = Serve::upstream(&[&other.leaf("bad", &["localhost"], KeyKind::EcdsaP256)]);
    let ca = pki.ca_path().display().to_string();
    let rule = format!(
        "/=https://localhost:{},https://localhost:{}",
        good.addr.port(),
        bad.addr.port()
    );
    let proxy = Serve::proxy(&[
        "--proxy",
        &rule,
        "--proxy-tls-ca",
        &ca,
        "--proxy-max-fails",
        "0",
        "--proxy-health-check",
        "/plaintext",
        "--proxy-health-interval",
        "100ms",
    ]);
    proxy.wait_log("health check: down");
    let log = proxy.log();
    let down: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("health check: down"))
        .collect();
    assert!(
        down.iter()
            .all(|l| l.contains(&format!("localhost:{}", bad.addr.port()))),
        "{down:#?}"
    );
    // With the bad server out, every request reaches the good one.
    for _ in 0..6 {
        assert_eq!(get(proxy.addr, "/plaintext").0, 200);
    }
}

/// A response far larger than the buffers crosses TLS byte-exact, under back-pressure (a
/// socket read that rustls turns into less plaintext than it was offered must not stall the
/// relay), and a request near 1 MiB goes the other way.
#[test]
fn large_bodies_cross_tls_intact() {
    let pki = Pki::new();
    let leaf = pki.leaf("up", &["localhost"], KeyKind::EcdsaP256);
    let dir = tempfile::tempdir().unwrap();
    let body: Vec<u8> = (0..5_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    std::fs::write(dir.path().join("big.bin"), &body).unwrap();
    let root = dir.path().display().to_string();
    let mut args = vec!["--tls-listen", "127.0.0.1:0", "--root", &root];
    let (cert, key) = (
        leaf.cert.display().to_string(),
        leaf.key.display().to_string(),
    );
    args.extend(["--cert", &cert, "--key", &key]);
    let upstream = Serve::start(&args, "https://");
    let ca = pki.ca_path().display().to_string();
    let proxy = Serve::proxy(&["--proxy", &localhost(&upstream), "--proxy-tls-ca", &ca]);
    for _ in 0..2 {
        let mut s = TcpStream::connect(proxy.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            s,
            "GET /big.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        let at = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        assert!(out.starts_with(b"HTTP/1.1 200"), "{:?}", &out[..at]);
        assert!(
            out[at..] == body[..],
            "body differs ({} bytes)",
            out.len() - at
        );
    }
}

/// A Python upstream (gunicorn with TLS) gets a request body of 900 KB whole through TLS (its
/// length and SHA-256 as it read them), and sees the client's Host.
#[test]
fn a_request_body_reaches_a_python_tls_upstream() {
    let pki = Pki::new();
    let leaf = pki.leaf("up", &["localhost"], KeyKind::EcdsaP256);
    let (cert, key) = (
        leaf.cert.display().to_string(),
        leaf.key.display().to_string(),
    );
    let upstream = Upstream::start(
        App::Gunicorn(GunicornWorker::Gthread),
        Bind::Ephemeral,
        &["--certfile", &cert, "--keyfile", &key],
    );
    let ca = pki.ca_path().display().to_string();
    let rule = format!("/=https://localhost:{}", upstream.addr().port());
    let proxy = Serve::proxy(&["--proxy", &rule, "--proxy-tls-ca", &ca]);
    let payload: Vec<u8> = (0..900_000u32).map(|i| (i % 251) as u8).collect();
    let mut s = TcpStream::connect(proxy.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        payload.len()
    )
    .unwrap();
    s.write_all(&payload).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(text.split_once("\r\n\r\n").unwrap().1).unwrap();
    assert_eq!(json["length"], 900_000, "{json}");
    let sha = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().unwrap().write_all(&payload)?;
            c.wait_with_output()
        })
        .unwrap();
    let want = String::from_utf8_lossy(&sha.stdout);
    assert_eq!(
        json["sha256"].as_str(),
        want.split_whitespace().next(),
        "{json}"
    );
    let (status, body) = get(proxy.addr, "/echo");
    assert_eq!(status, 200);
    let echo: serde_json::Value = serde_json::from_str(&body).unwrap();
    let host = echo["headers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|pair| pair[0] == "host")
        .map(|pair| pair[1].clone());
    assert_eq!(host, Some("proxied.test".into()), "{echo}");
}

/// An `https://` auth service (`--forward-auth`) decides over TLS, its certificate checked as an
/// upstream's: a 2xx lets the request through, a 401 is the client's answer; against a CA file
/// that does not vouch for it the request fails closed (502) and never reaches the upstream.
#[test]
fn an_https_auth_service_decides() {
    let pki = Pki::new();
    let leaf = pki.leaf("auth", &["localhost"], KeyKind::EcdsaP256);
    let auth = Serve::upstream_with(
        &[&leaf],
        &[
            "--return",
            "/yes=200 come in",
            "--return",
            "/no=401 who are you",
        ],
    );
    let app = Serve::proxy(&[]);
    let port = auth.addr.port();
    let proxy_args = |ca: &str| {
        [
            "--proxy".to_owned(),
            format!("/=http://{}", app.addr),
            "--forward-auth".to_owned(),
            format!("/=https://localhost:{port}/yes"),
            "--forward-auth".to_owned(),
            format!("/closed/=https://localhost:{port}/no"),
            "--proxy-tls-ca".to_owned(),
            ca.to_owned(),
        ]
    };
    let ca = pki.ca_path().display().to_string();
    let args = proxy_args(&ca);
    let proxy = Serve::proxy(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(
        get(proxy.addr, "/plaintext"),
        (200, "Hello, World!".to_owned())
    );
    assert_eq!(get(proxy.addr, "/closed/plaintext").0, 401);

    let other = Pki::new();
    let ca = other.ca_path().display().to_string();
    let args = proxy_args(&ca);
    let proxy = Serve::proxy(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(get(proxy.addr, "/plaintext").0, 502);
}
