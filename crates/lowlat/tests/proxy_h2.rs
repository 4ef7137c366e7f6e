//! `lowlat serve --proxy` to HTTP/2 upstreams (`h2c://`, `--proxy-protocol h2`): another
//! `lowlat serve --h2c` and grpcio (tests/upstreams/grpc_server.py), driven by `lowlat load`
//! and grpcurl.
//!
//! Many client requests share few upstream connections (counted in /proc/net/tcp), within the
//! upstream's SETTINGS_MAX_CONCURRENT_STREAMS; an upstream stopping gracefully (GOAWAY) under
//! load costs the clients nothing; gRPC calls cross whole — unary and server-streaming, status
//! and metadata in trailers, an error status, a deadline — for HTTP/2 clients in clear and over
//! TLS.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use lowlat_testkit::pki::{KeyKind, Pki};

mod support;
use support::upstream::{grpcurl_echo, Upstream};
use support::BIN;

use support::Served as Serve;

/// A `lowlat serve` (one worker, `--h2c`) with `args`, the proxy's decisions logged.
fn serve(args: &[&str]) -> Serve {
    let mut cmd = Command::new(BIN);
    cmd.args([
        "serve",
        "--workers",
        "1",
        "--listen",
        "127.0.0.1:0",
        "--h2c",
    ])
    .args(args)
    .env("RUST_LOG", "info,lowlat_server::proxy=debug");
    Serve::spawn(cmd)
}

/// Established TCP connections whose remote port is `port` (the proxy's, to an upstream).
fn connections_to(port: u16) -> usize {
    let mut n = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let remote = cols
                .get(2)
                .and_then(|a| a.rsplit_once(':'))
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if remote == Some(port) && cols.get(3) == Some(&"01") {
                n += 1;
            }
        }
    }
    n
}

/// `lowlat load` against `url` with `args`: the JSON report.
fn load(url: &str, args: &[&str]) -> serde_json::Value {
    let out = Command::new(BIN)
        .args(["load", "--json", "-q"])
        .args(args)
        .arg(url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Asserts that a load report has responses, all 2xx, and no error.
fn all_ok(report: &serde_json::Value) {
    assert_eq!(report["errors"]["total"], 0, "{report}");
    let responses = report["responses"].as_u64().unwrap();
    assert!(responses > 100, "{report}");
    let codes = report["status_codes"].as_object().unwrap();
    let ok = codes
        .get("200")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
    assert_eq!(ok, responses, "{report}");
}

/// Sixty-four clients at once, each on its own connection to the proxy, share one upstream
/// connection (the upstream allows 128 streams).
#[test]
fn many_clients_share_one_upstream_connection() {
    let upstream = serve(&[]);
    let port = upstream.addr.port();
    let proxy = serve(&["--proxy", &format!("/=h2c://127.0.0.1:{port}")]);
    let url = format!("http://{}/plaintext", proxy.addr);
    let sampler = std::thread::spawn(move || {
        let start = Instant::now();
        let mut most = 0;
        while start.elapsed() < Duration::from_millis(1500) {
            most = most.max(connections_to(port));
            std::thread::sleep(Duration::from_millis(20));
        }
        most
    });
    let report = load(&url, &["-c", "64", "-t", "1", "-d", "2s"]);
    all_ok(&report);
    let most = sampler.join().unwrap();
    assert_eq!(most, 1, "upstream connections during the load");
    assert_eq!(
        connections_to(port),
        1,
        "the connection is kept for the next requests"
    );
}

/// An upstream allowing 4 streams at once gets more connections, never more than 4 streams on
/// one (it refuses the fifth, which would be an error here).
#[test]
fn the_upstreams_stream_limit_opens_more_connections() {
    let upstream = serve(&["--h2-max-streams", "4"]);
    let port = upstream.addr.port();
    let proxy = serve(&["--proxy", &format!("/=h2c://127.0.0.1:{port}")]);
    let url = format!("http://{}/plaintext", proxy.addr);
    let report = load(&url, &["-c", "32", "-t", "1", "-d", "2s"]);
    all_ok(&report);
    let n = connections_to(port);
    assert!((2..=32).contains(&n), "{n} upstream connections");
}

/// Two upstreams; one is stopped gracefully (SIGTERM: GOAWAY, its streams in flight finish)
/// in the middle of the load: no client sees an error.
#[test]
fn an_upstream_going_away_under_load_costs_no_request() {
    let a = serve(&[]);
    let b = serve(&[]);
    let rule = format!(
        "/=h2c://127.0.0.1:{},h2c://127.0.0.1:{}",
        a.addr.port(),
        b.addr.port()
    );
    let proxy = serve(&["--proxy", &rule]);
    let url = format!("http://{}/plaintext", proxy.addr);
    let pid = a.child.id();
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(700));
        let ok = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    });
    let report = load(&url, &["-c", "32", "-t", "1", "-d", "2s"]);
    stopper.join().unwrap();
    all_ok(&report);
    assert!(a.log().contains("shutting down"), "{}", a.log());
}

/// grpcurl through the proxy to grpcio, `extra` naming how to reach the proxy.
fn grpcurl(target: &str, extra: &[&str], method: &str, data: &str) -> Output {
    grpcurl_echo()
        .args(extra)
        .args(["-v", "-d", data, target])
        .arg(format!("lowlat.test.Echo/{method}"))
        .output()
        .expect("run grpcurl (scripts/test-deps.sh installs it)")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// gRPC through the proxy, for a client in clear and one over TLS: a unary call (the reply,
/// the server's initial and trailing metadata), a server-streaming call, an error status with
/// its message, a deadline that runs out; a client that goes away resets its upstream stream.
#[test]
fn grpc_calls_cross_the_proxy() {
    let pki = Pki::new();
    let leaf = pki.leaf("proxy", &["localhost"], KeyKind::EcdsaP256);
    let upstream = Upstream::grpc();
    let (cert, key) = (
        leaf.cert.display().to_string(),
        leaf.key.display().to_string(),
    );
    let proxy = serve(&[
        "--tls-listen",
        "127.0.0.1:0",
        "--cert",
        &cert,
        "--key",
        &key,
        "--proxy",
        &format!("/=h2c://127.0.0.1:{}", upstream.addr().port()),
    ]);
    let clear = proxy.addr.to_string();
    let tls = format!("localhost:{}", proxy.tls_addr.unwrap().port());
    let ca = pki.ca_path().display().to_string();
    for (target, extra) in [
        (clear.as_str(), vec!["-plaintext"]),
        (tls.as_str(), vec!["-cacert", ca.as_str()]),
    ] {
        let out = grpcurl(target, &extra, "Unary", r#"{"message":"hi"}"#);
        let t = text(&out);
        assert!(out.status.success(), "{t}");
        assert!(t.contains(r#""message": "hi""#), "{t}");
        assert!(t.contains("x-lowlat-initial: unary"), "{t}");
        let trailers = t.split("Response trailers received:").nth(1).unwrap_or("");
        assert!(trailers.contains("x-lowlat-trailer: unary"), "{t}");

        let out = grpcurl(
            target,
            &extra,
            "ServerStream",
            r#"{"message":"s","count":3,"interval_ms":50}"#,
        );
        let t = text(&out);
        assert!(out.status.success(), "{t}");
        assert_eq!(t.matches(r#""message": "s""#).count(), 3, "{t}");
        assert!(t.contains("x-lowlat-trailer: stream"), "{t}");

        let out = grpcurl(
            target,
            &extra,
            "Unary",
            r#"{"message":"x","fail_code":5,"fail_message":"no such thing"}"#,
        );
        let t = text(&out);
        assert!(!out.status.success());
        assert!(
            t.contains("Code: NotFound") && t.contains("Message: no such thing"),
            "{t}"
        );

        let mut with_deadline = extra.clone();
        with_deadline.extend(["-max-time", "0.3"]);
        let out = grpcurl(
            target,
            &with_deadline,
            "ServerStream",
            r#"{"message":"slow","count":20,"interval_ms":100}"#,
        );
        let t = text(&out);
        assert!(!out.status.success());
        assert!(t.contains("DeadlineExceeded"), "{t}");
    }
    // A client that goes away mid-stream: its upstream stream is reset (grpcio stops).
    let cancels = || {
        proxy
            .log()
            .matches("upstream stream reset (CANCEL)")
            .count()
    };
    let before = cancels();
    let mut client = grpcurl_echo()
        .args([
            "-plaintext",
            "-d",
            r#"{"message":"gone","count":50,"interval_ms":100}"#,
        ])
        .arg(&clear)
        .arg("lowlat.test.Echo/ServerStream")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(600));
    let _ = client.kill();
    let _ = client.wait();
    let start = Instant::now();
    while cancels() <= before {
        assert!(start.elapsed() < Duration::from_secs(10), "{}", proxy.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    // The proxy is still serving after the cancelled call.
    let out = grpcurl(&clear, &["-plaintext"], "Unary", r#"{"message":"after"}"#);
    assert!(out.status.success(), "{}", text(&out));
}

/// HTTP/2 over TLS (`--proxy-protocol h2`, ALPN h2): one connection carries the load; an
/// upstream that does not offer h2 fails the handshake, with the reason in the error log.
#[test]
fn http2_over_tls_by_alpn() {
    let pki = Pki::new();
    let leaf = pki.leaf("up", &["localhost"], KeyKind::EcdsaP256);
    let (cert, key) = (
        leaf.cert.display().to_string(),
        leaf.key.display().to_string(),
    );
    let ca = pki.ca_path().display().to_string();
    for offers_h2 in [true, false] {
        let mut args = vec![
            "--tls-listen",
            "127.0.0.1:0",
            "--cert",
            &cert,
            "--key",
            &key,
        ];
        if !offers_h2 {
            args.push("--no-h2");
        }
        let upstream = serve(&args);
        let port = upstream.tls_addr.unwrap().port();
        let proxy = serve(&[
            "--proxy",
            &format!("/=https://localhost:{port}"),
            "--proxy-protocol",
            "h2",
            "--proxy-tls-ca",
            &ca,
        ]);
        let url = format!("http://{}/plaintext", proxy.addr);
        if offers_h2 {
            all_ok(&load(&url, &["-c", "16", "-t", "1", "-d", "1s"]));
            assert_eq!(connections_to(port), 1);
        } else {
            let report = load(&url, &["-c", "1", "-t", "1", "-n", "1"]);
            assert_eq!(report["status_codes"]["502"], 1, "{report}");
            let log = proxy.log();
            assert!(log.contains("no protocol in common (ALPN)"), "{log}");
        }
    }
}
