//! `lowlat load --h3` against a real HTTP/3 server nobody here wrote: aioquic's `H3Connection`
//! (tests/h3/server.py, QPACK with a dynamic table by pylsqpack), run from the test
//! environment `scripts/test-deps.sh` makes. Exact counts, status codes and bytes; `-m`
//! concurrency as the server saw it; `-R` pacing; 0-RTT on reconnections after GOAWAY; a
//! server that refuses the handshake, one that does not offer h3, and a certificate not
//! trusted — each a clear error, the CLI exiting non-zero. Also exact counts against caddy and
//! against `lowlat serve --h3-listen` in process.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use lowlat_load::{LoadConfig, Report, Target, TlsOptions};
use lowlat_testkit::pki::{KeyKind, Pki};

/// The test environment's Python (`$LOWLAT_TEST_VENV`, else the one scripts/test-deps.sh
/// makes in the cache directory).
fn python() -> PathBuf {
    let venv = std::env::var_os("LOWLAT_TEST_VENV").map_or_else(
        || {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .filter(|d| !d.is_empty())
                .map_or_else(
                    || PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache"),
                    PathBuf::from,
                );
            cache.join("lowlat-test-venv")
        },
        PathBuf::from,
    );
    let python = venv.join("bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run scripts/test-deps.sh",
        python.display()
    );
    python
}

/// aioquic's HTTP/3 server on 127.0.0.1, stopped (and its counts read) by [`Aioquic::stop`].
struct Aioquic {
    child: Child,
    port: u16,
    stats: PathBuf,
    _dir: tempfile::TempDir,
}

impl Aioquic {
    fn start(pki: &Pki, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let leaf = pki.leaf("h3", &["localhost", "127.0.0.1"], KeyKind::EcdsaP256);
        // A free UDP port (the server binds it again at once).
        let port = std::net::UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let stats = dir.path().join("stats.json");
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/h3/server.py");
        let mut child = Command::new(python())
            .arg(script)
            .arg("--port")
            .arg(port.to_string())
            .arg("--cert")
            .arg(&leaf.cert)
            .arg("--key")
            .arg(&leaf.key)
            .arg("--stats")
            .arg(&stats)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "the aioquic server did not start");
        Self {
            child,
            port,
            stats,
            _dir: dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.port)
    }

    /// Stops the server; what it counted.
    fn stop(mut self) -> serde_json::Value {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let started = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            assert!(started.elapsed() < Duration::from_secs(10), "server hangs");
            std::thread::sleep(Duration::from_millis(20));
        }
        serde_json::from_slice(&std::fs::read(&self.stats).unwrap()).unwrap()
    }
}

impl Drop for Aioquic {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn trusting(pki: &Pki) -> TlsOptions {
    TlsOptions {
        cacert: Some(pki.ca_path()),
        ..TlsOptions::default()
    }
}

/// `n` requests over HTTP/3, `streams` per connection on each of `connections`.
fn h3(url: &str, n: u64, connections: usize, streams: u32, tls: TlsOptions) -> LoadConfig {
    LoadConfig {
        targets: vec![Target::new(url)],
        threads: 1,
        connections,
        requests: Some(n),
        duration: None,
        pipeline: streams,
        h3: true,
        tls,
        timeout: Duration::from_secs(5),
        ..LoadConfig::default()
    }
}

fn run(cfg: &LoadConfig) -> Report {
    lowlat_load::run(cfg, &std::sync::atomic::AtomicBool::new(false)).expect("run")
}

/// The CLI's exit code for these arguments (after `lowlat load`).
fn cli(args: &[&str]) -> ExitCode {
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: lowlat_load::cli::LoadArgs,
    }
    let mut argv = vec!["load"];
    argv.extend_from_slice(args);
    lowlat_load::cli::run(Cli::parse_from(argv).args)
}

#[test]
fn exact_counts_statuses_and_bytes() {
    let pki = Pki::new();
    let server = Aioquic::start(&pki, &[]);
    let mut expected = 0;
    let schema: serde_json::Value = serde_json::from_str(lowlat_load::json::SCHEMA).unwrap();
    for streams in [1, 10] {
        let cfg = h3(&server.url("/plaintext"), 1000, 2, streams, trusting(&pki));
        let r = run(&cfg);
        // The JSON report: valid against its schema, with the HTTP/3 fields.
        let v = lowlat_load::json::to_json(&r, &cfg);
        assert!(jsonschema::is_valid(&schema, &v), "{v:#}");
        assert_eq!(v["config"]["h3_streams"], streams);
        assert_eq!(v["h3"]["handshakes"], 2);
        assert_eq!(v["h3"]["packets_lost"], r.h3.as_ref().unwrap().packets_lost);
        let text = lowlat_load::text::render(&r, false);
        assert!(
            text.contains("HTTP/3: 2 handshakes, 0-RTT 0 accepted"),
            "{text}"
        );
        let banner = lowlat_load::text::banner(&cfg);
        assert!(
            banner.contains(&format!("HTTP/3, {streams} stream")),
            "{banner}"
        );
        assert_eq!(r.responses, 1000, "-m {streams}");
        assert_eq!(r.requests, 1000);
        assert_eq!(r.status.success, 1000);
        assert_eq!(r.errors.total(), 0, "{:?} {:?}", r.errors, r.tls_error);
        assert!(r.bytes_read > 1000 * 13, "{}", r.bytes_read);
        let h = r.h3.expect("an HTTP/3 summary");
        assert_eq!(h.handshakes, 2, "{h:?}");
        assert!(h.packets_sent > 0);
        expected += 1000;
    }
    // Bodies counted: 100 responses of 20000 bytes each.
    let r = run(&h3(&server.url("/bytes/20000"), 100, 1, 4, trusting(&pki)));
    assert_eq!(r.responses, 100);
    assert!(r.bytes_read >= 100 * 20_000, "{}", r.bytes_read);
    assert!(r.bytes_read < 100 * 21_000, "{}", r.bytes_read);
    expected += 100;
    // Status codes as the server sent them.
    let r = run(&h3(&server.url("/status/404"), 50, 1, 5, trusting(&pki)));
    assert_eq!(r.responses, 50);
    assert_eq!(r.status.client_error, 50);
    assert_eq!(r.status_codes.get(404), 50);
    expected += 50;
    let stats = server.stop();
    assert_eq!(stats["requests"], expected, "{stats}");
    // The server's encoder used the dynamic table the client announced, and the client's
    // decoder stream acknowledged what it decoded.
    assert!(
        stats["encoder_stream_bytes"].as_u64().unwrap() > 0,
        "{stats}"
    );
    assert!(
        stats["decoder_stream_bytes"].as_u64().unwrap() > 0,
        "{stats}"
    );
}

#[test]
fn streams_in_flight_as_the_server_sees_them() {
    let pki = Pki::new();
    let server = Aioquic::start(&pki, &[]);
    // Each response waits 200 ms, so every connection's 8 streams are open at once.
    let r = run(&h3(&server.url("/delay/200"), 64, 2, 8, trusting(&pki)));
    assert_eq!(r.responses, 64, "{:?}", r.errors);
    let stats = server.stop();
    assert_eq!(stats["max_open_per_connection"], 8, "{stats}");
    assert_eq!(stats["max_open"], 16, "{stats}");
    assert_eq!(stats["connections"], 2, "{stats}");
}

#[test]
fn constant_rate_is_paced() {
    let pki = Pki::new();
    let server = Aioquic::start(&pki, &[]);
    let cfg = LoadConfig {
        requests: None,
        duration: Some(Duration::from_secs(2)),
        rate: Some(200.0),
        ..h3(&server.url("/plaintext"), 0, 4, 4, trusting(&pki))
    };
    let r = run(&cfg);
    // 200/s for 2 s: 400, within what the last turn of the loop may add or leave.
    assert!(
        (380..=420).contains(&r.responses),
        "{} responses",
        r.responses
    );
    assert_eq!(r.errors.total(), 0, "{:?}", r.errors);
    // Latency is from the scheduled send: far below the interval at this light load.
    assert!(r.latency.value_at_quantile(0.5) < 50_000);
    server.stop();
}

#[test]
fn goaway_moves_requests_to_a_new_connection_that_resumes_with_0rtt() {
    let pki = Pki::new();
    let server = Aioquic::start(&pki, &["--goaway-after", "50"]);
    let r = run(&h3(&server.url("/plaintext"), 500, 1, 4, trusting(&pki)));
    assert_eq!(r.responses, 500, "{:?} {:?}", r.errors, r.ws_error);
    assert_eq!(r.errors.total(), 0, "{:?}", r.errors);
    let h = r.h3.expect("an HTTP/3 summary");
    assert!(h.goaways >= 9, "{h:?}");
    assert!(h.handshakes >= 10, "{h:?}");
    // Every connection after the first resumes and sends its first requests as 0-RTT.
    assert!(h.zero_rtt_accepted >= 9, "{h:?}");
    let stats = server.stop();
    assert!(
        stats["early_data_accepted"].as_u64().unwrap() >= 9,
        "{stats}"
    );
    // Requests refused by GOAWAY were sent again, never counted twice.
    assert!(stats["requests"].as_u64().unwrap() >= 500, "{stats}");
}

#[test]
fn post_bodies_are_sent_and_never_as_0rtt() {
    let pki = Pki::new();
    let server = Aioquic::start(&pki, &["--goaway-after", "20"]);
    let cfg = LoadConfig {
        method: "POST".into(),
        body: Some(b"0123456789".to_vec()),
        ..h3(&server.url("/plaintext"), 100, 1, 4, trusting(&pki))
    };
    let r = run(&cfg);
    assert_eq!(r.responses, 100, "{:?}", r.errors);
    let h = r.h3.expect("an HTTP/3 summary");
    assert!(h.handshakes >= 5, "{h:?}");
    // POST is not safe to replay: reconnections resume, but wait for the handshake.
    assert_eq!(h.zero_rtt_accepted + h.zero_rtt_rejected, 0, "{h:?}");
    let stats = server.stop();
    assert_eq!(stats["early_data_accepted"], 0, "{stats}");
    assert_eq!(
        stats["body_bytes"],
        stats["requests"].as_u64().unwrap() * 10,
        "{stats}"
    );
}

#[test]
fn a_refused_handshake_is_one_clear_error() {
    let pki = Pki::new();
    let server = Aioquic::start(&pki, &["--refuse"]);
    let r = run(&h3(&server.url("/plaintext"), 20, 1, 1, trusting(&pki)));
    assert_eq!(r.responses, 0);
    assert_eq!(r.errors.tls, 20, "{:?}", r.errors);
    let why = r.tls_error.expect("a reason");
    assert!(why.contains("QUIC handshake with localhost"), "{why}");
    assert!(why.contains("refused"), "{why}");
    let ca = pki.ca_path();
    let code = cli(&[
        "--h3",
        "-n",
        "5",
        "-c",
        "1",
        "--cacert",
        ca.to_str().unwrap(),
        &server.url("/"),
    ]);
    assert_ne!(code, ExitCode::SUCCESS);
}

#[test]
fn a_server_without_h3_or_an_untrusted_certificate_is_refused() {
    let pki = Pki::new();
    let server = Aioquic::start(&pki, &["--alpn", "h3-29"]);
    let r = run(&h3(&server.url("/plaintext"), 5, 1, 1, trusting(&pki)));
    assert_eq!(r.responses, 0);
    assert_eq!(r.errors.tls, 5);
    let why = r.tls_error.expect("a reason");
    assert!(why.contains("does not offer HTTP/3 (ALPN h3)"), "{why}");
    server.stop();

    let server = Aioquic::start(&pki, &[]);
    let r = run(&h3(
        &server.url("/plaintext"),
        5,
        1,
        1,
        TlsOptions::default(),
    ));
    assert_eq!(r.responses, 0);
    let why = r.tls_error.expect("a reason");
    assert!(why.contains("certificate"), "{why}");
    assert!(why.contains("--cacert"), "{why}");
    server.stop();
}

#[test]
fn h3_needs_https() {
    let code = cli(&["--h3", "-n", "1", "http://127.0.0.1:9/"]);
    assert_eq!(code, ExitCode::from(2));
    let code = cli(&["-m", "4", "-n", "1", "http://127.0.0.1:9/"]);
    assert_eq!(code, ExitCode::from(2));
}

/// Caddy (Debian's package) serving HTTP/3 on an https site, as it does by default; killed
/// when dropped.
struct Caddy {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Caddy {
    fn start(pki: &Pki) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let leaf = pki.leaf("caddy", &["localhost"], KeyKind::EcdsaP256);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = dir.path().join("Caddyfile");
        std::fs::write(
            &config,
            format!(
                "{{\n\tadmin off\n\tauto_https off\n\tservers {{\n\t\tprotocols h1 h2 h3\n\t}}\n}}\n\
                 https://localhost:{port} {{\n\tbind 127.0.0.1\n\ttls {} {}\n\
                 \trespond /plaintext \"Hello, World!\" 200\n\
                 \trespond /missing \"no\" 404\n}}\n",
                leaf.cert.display(),
                leaf.key.display()
            ),
        )
        .unwrap();
        let bin = ["/usr/bin/caddy", "/usr/local/bin/caddy"]
            .into_iter()
            .find(|p| std::path::Path::new(p).is_file())
            .expect("caddy is not installed: run scripts/test-deps.sh");
        let child = Command::new(bin)
            .args(["run", "--adapter", "caddyfile", "--config"])
            .arg(&config)
            // Its storage and autosaved configuration stay in the test's directory.
            .env("HOME", dir.path())
            .env("XDG_DATA_HOME", dir.path())
            .env("XDG_CONFIG_HOME", dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("caddy");
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "caddy did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            child,
            port,
            _dir: dir,
        }
    }
}

impl Drop for Caddy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn exact_counts_against_caddy() {
    let pki = Pki::new();
    let caddy = Caddy::start(&pki);
    let url = format!("https://localhost:{}/plaintext", caddy.port);
    for streams in [1, 16] {
        let r = run(&h3(&url, 5000, 4, streams, trusting(&pki)));
        assert_eq!(r.responses, 5000, "-m {streams}");
        assert_eq!(r.status.success, 5000);
        assert_eq!(r.errors.total(), 0, "{:?} {:?}", r.errors, r.tls_error);
        assert_eq!(r.h3.expect("an HTTP/3 summary").handshakes, 4);
    }
    let url = format!("https://localhost:{}/missing", caddy.port);
    let r = run(&h3(&url, 100, 1, 10, trusting(&pki)));
    assert_eq!(r.status_codes.get(404), 100);
}

/// A UDP relay on 127.0.0.1 in front of `server` for one client, dropping every `nth`
/// datagram the client sends; stops when dropped.
struct LossyRelay {
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl LossyRelay {
    fn start(server: u16, nth: u64) -> Self {
        use std::net::UdpSocket;
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Mutex};
        let front = UdpSocket::bind("127.0.0.1:0").unwrap();
        let back = UdpSocket::bind("127.0.0.1:0").unwrap();
        back.connect(("127.0.0.1", server)).unwrap();
        for s in [&front, &back] {
            s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        }
        let port = front.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let client = Arc::new(Mutex::new(None));
        let (front2, back2) = (front.try_clone().unwrap(), back.try_clone().unwrap());
        let (stop1, stop2, client1, client2) = (stop.clone(), stop.clone(), client.clone(), client);
        let up = std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            let mut n = 0u64;
            while !stop1.load(Ordering::Relaxed) {
                if let Ok((len, from)) = front.recv_from(&mut buf) {
                    *client1.lock().unwrap() = Some(from);
                    n += 1;
                    if !n.is_multiple_of(nth) {
                        let _ = back.send(&buf[..len]);
                    }
                }
            }
        });
        let down = std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while !stop2.load(Ordering::Relaxed) {
                if let Ok(len) = back2.recv(&mut buf) {
                    if let Some(to) = *client2.lock().unwrap() {
                        let _ = front2.send_to(&buf[..len], to);
                    }
                }
            }
        });
        Self {
            port,
            stop,
            threads: vec![up, down],
        }
    }
}

impl Drop for LossyRelay {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[test]
fn lost_packets_are_counted_and_every_request_still_answered() {
    let pki = Pki::new();
    let server = Aioquic::start(&pki, &[]);
    // Every 10th datagram from the client is dropped on its way.
    let relay = LossyRelay::start(server.port, 10);
    let url = format!("https://localhost:{}/plaintext", relay.port);
    let r = run(&h3(&url, 2000, 1, 8, trusting(&pki)));
    assert_eq!(r.responses, 2000, "{:?} {:?}", r.errors, r.tls_error);
    assert_eq!(r.errors.total(), 0, "{:?}", r.errors);
    let h = r.h3.expect("an HTTP/3 summary");
    // The client sent at least a few hundred datagrams; a tenth of them never arrived, and
    // quinn-proto declared (most of) them lost and sent their frames again.
    assert!(h.packets_sent > 200, "{h:?}");
    assert!(h.packets_lost > h.packets_sent / 40, "{h:?}");
    assert!(h.packets_lost <= h.packets_sent / 5, "{h:?}");
    drop(relay);
    let stats = server.stop();
    assert_eq!(stats["requests"], 2000, "{stats}");
}

#[test]
fn exact_counts_against_lowlat_serve() {
    use lowlat_server::tls::{CertPaths, CryptoBackend, TlsContext, ALPN_H2_HTTP1};
    use lowlat_server::{builtin_service, Server, ServerConfig};
    let pki = Pki::new();
    let leaf = pki.leaf("srv", &["localhost"], KeyKind::EcdsaP256);
    let tls = TlsContext::new(
        &[CertPaths {
            cert: leaf.cert,
            key: leaf.key,
        }],
        CryptoBackend::default(),
        ALPN_H2_HTTP1,
    )
    .unwrap();
    let cfg = ServerConfig {
        tls_listen: vec!["127.0.0.1:0".parse().unwrap()],
        tls: Some(std::sync::Arc::new(tls)),
        quic: Some(lowlat_server::quic::config::QuicConfig::new(
            "127.0.0.1:0".parse().unwrap(),
        )),
        workers: 1,
        grace: Duration::from_secs(1),
        ..ServerConfig::default()
    };
    let server = Server::bind(cfg, builtin_service()).unwrap();
    let port = server.h3_addr().expect("HTTP/3 bound").port();
    let running = server.start().unwrap();
    let url = format!("https://localhost:{port}/plaintext");
    for streams in [1, 10, 100] {
        let r = run(&h3(&url, 20_000, 2, streams, trusting(&pki)));
        assert_eq!(r.responses, 20_000, "-m {streams}");
        assert_eq!(r.status.success, 20_000);
        assert_eq!(r.errors.total(), 0, "{:?} {:?}", r.errors, r.tls_error);
    }
    running.shutdown_handle().shutdown();
    running.wait().unwrap();
}
