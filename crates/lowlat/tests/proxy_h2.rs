//! `lowlat serve --proxy` to HTTP/2 upstreams (`h2c://`, `--proxy-protocol h2`): another
//! `lowlat serve --h2c` and grpcio (tests/upstreams/grpc_server.py), driven by `lowlat load`
//! and grpcurl.
//!
//! Many client requests share few upstream connections (counted in /proc/net/tcp), within the
//! upstream's SETTINGS_MAX_CONCURRENT_STREAMS; an upstream stopping gracefully (GOAWAY) under
//! load costs the clients nothing; gRPC calls cross whole — unary and server-streaming, status
//! and metadata in trailers, an error status, a deadline — for HTTP/2 clients in clear and over
//! TLS; client-streaming and bidirectional calls (grpcio on both ends,
//! tests/upstreams/grpc_client.py).
//!
//! Request bodies stream to an HTTP/2 upstream (tests/upstreams/h2_recorder.py, which hashes what
//! it gets and records resets): hundreds of MiB from HTTP/1.1 clients (a length, chunks) and an
//! HTTP/2 client through a proxy whose memory does not grow; an upstream reading nothing holds
//! the client back; a client leaving mid-body resets its stream only; a broken or over-long body
//! is 400 / 413 with the upstream stream reset.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use lowlat_testkit::pki::{KeyKind, Pki};

mod support;
use support::upstream::{
    curl_h2_upload, grpcurl_echo, pattern, pattern_sha256, python, send_pattern, upload_held_back,
    upstreams_dir, Upstream,
};
use support::{connections_to, json_output, BIN};

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

/// `lowlat load` against `url` with `args`: the JSON report.
fn load(url: &str, args: &[&str]) -> serde_json::Value {
    json_output(
        Command::new(BIN)
            .args(["load", "--json", "-q"])
            .args(args)
            .arg(url),
    )
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
            // The log is read on a thread: the line may come a moment after the answer.
            let start = Instant::now();
            while !proxy.log().contains("no protocol in common (ALPN)") {
                assert!(start.elapsed() < Duration::from_secs(10), "{}", proxy.log());
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// An HTTP/1.1 exchange on a fresh connection (`Connection: close` in `head`): the status and
/// the body, read to the end. `body` follows the head, written by `send` from another thread.
fn exchange(
    addr: SocketAddr,
    head: &str,
    send: impl FnOnce(&mut TcpStream) -> std::io::Result<()> + Send + 'static,
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    // The answer comes after the last byte: as long as the upload takes on a busy machine.
    s.set_read_timeout(Some(Duration::from_secs(600))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || send(&mut w));
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let _ = writer.join();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// What the recorder saw (`/stats`, through the proxy): connections, resets, streams.
fn recorder_stats(proxy: SocketAddr) -> serde_json::Value {
    let (status, body) = exchange(
        proxy,
        "GET /stats HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        |_| Ok(()),
    );
    assert_eq!(status, 200, "{body}");
    json(&body)
}

/// Waits (10 s at most) until the recorder behind `proxy` has seen exactly the stream resets
/// `resets`.
fn await_resets(proxy: SocketAddr, resets: &serde_json::Value) {
    let start = Instant::now();
    while recorder_stats(proxy)["resets"] != *resets {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{}",
            recorder_stats(proxy)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// [`curl_h2_upload`] to its end: what curl printed.
fn curl_h2_upload_all(url: &str, len: u64) -> Output {
    let (child, writer) = curl_h2_upload(url, len);
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    out
}

/// 256 MiB with a Content-Length and 64 MiB chunked from HTTP/1.1 clients, and 256 MiB from
/// curl over HTTP/2, reach an HTTP/2 upstream whole (its SHA-256 of what arrived) while the
/// proxy's peak memory stays within 8 MiB of what it was before. First, an upstream reading
/// nothing (never giving back its window) holds the client back, not the proxy's memory — an
/// HTTP/1.1 client and an HTTP/2 one, whose leaving resets its upstream stream.
#[test]
fn uploads_stream_to_an_http2_upstream_in_bounded_memory() {
    const N: u64 = 256 << 20;
    const CHUNKED: u64 = 64 << 20;
    let upstream = Upstream::h2_recorder();
    let proxy = serve(&[
        "--proxy",
        &format!("/=h2c://127.0.0.1:{}", upstream.addr().port()),
    ]);
    assert_eq!(recorder_stats(proxy.addr)["connections"], 1);
    let warm_kib = proxy.status_kib("VmHWM:");

    let s = TcpStream::connect(proxy.addr).unwrap();
    let head = format!("PUT /sink HTTP/1.1\r\nHost: t\r\nContent-Length: {N}\r\n\r\n");
    let writer = upload_held_back(&proxy, &s, &head, N, warm_kib);
    assert!(!writer.is_finished(), "the client was not held back");
    let _ = s.shutdown(Shutdown::Both);
    let _ = writer.join();

    // The same for an HTTP/2 client (its stream's window is what holds it); when it goes, its
    // upstream stream is reset.
    let mut curl = Command::new("curl")
        .args(["-sS", "--http2-prior-knowledge", "-T", "-"])
        .arg(format!("http://{}/sink", proxy.addr))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = curl.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        let block = pattern(0, 251 * 4096);
        while stdin.write_all(&block).is_ok() {}
    });
    proxy.assert_held_back(warm_kib, "an HTTP/2 client");
    let _ = curl.kill();
    let _ = curl.wait();
    let _ = feeder.join();
    await_resets(proxy.addr, &serde_json::json!([8]));

    for (framing, len) in [("length", N), ("chunked", CHUNKED)] {
        let started = Instant::now();
        let head = if framing == "length" {
            format!("PUT /digest HTTP/1.1\r\nHost: t\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n")
        } else {
            "PUT /digest HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                .to_owned()
        };
        let chunk = if framing == "length" { 0 } else { 100_000 };
        let (status, body) = exchange(proxy.addr, &head, move |w| send_pattern(w, len, chunk));
        assert_eq!(status, 200, "{framing}: {body}");
        let digest = json(&body);
        assert_eq!(digest["length"], len, "{framing}");
        assert_eq!(digest["sha256"], pattern_sha256(len), "{framing}");
        let declared = &digest["fields"]["content-length"];
        if framing == "length" {
            assert_eq!(declared, &len.to_string(), "{framing}: {body}");
        } else {
            assert!(declared.is_null(), "{framing}: {body}");
            assert!(digest["fields"]["transfer-encoding"].is_null(), "{body}");
        }
        eprintln!("HTTP/1.1 {framing}: {len} bytes in {:?}", started.elapsed());
    }

    let started = Instant::now();
    let out = curl_h2_upload_all(&format!("http://{}/digest", proxy.addr), N);
    assert!(out.status.success(), "{out:?}");
    let digest: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(digest["length"], N);
    assert_eq!(digest["sha256"], pattern_sha256(N));
    eprintln!("HTTP/2: {N} bytes in {:?}", started.elapsed());

    let hwm_kib = proxy.status_kib("VmHWM:");
    assert!(
        hwm_kib.saturating_sub(warm_kib) < 8 * 1024,
        "the proxy's peak RSS grew by {} KiB during the uploads",
        hwm_kib.saturating_sub(warm_kib)
    );
    // Every exchange took a stream on the one upstream connection.
    assert_eq!(recorder_stats(proxy.addr)["connections"], 1);
}

/// Two clients upload to the same upstream connection; one leaves in the middle of its body:
/// its stream alone is reset (CANCEL), and the other's upload completes on that connection. A
/// malformed chunk is 400 to its client, a body over --proxy-max-body 413, each with its
/// upstream stream reset and the connection serving on.
#[test]
fn a_client_leaving_or_a_broken_body_resets_only_its_stream() {
    let upstream = Upstream::h2_recorder();
    let proxy = serve(&[
        "--proxy",
        &format!("/=h2c://127.0.0.1:{}", upstream.addr().port()),
        "--proxy-max-body",
        "1m",
    ]);
    assert_eq!(recorder_stats(proxy.addr)["connections"], 1);
    const LEN: u64 = 600_000;
    let (go_on_tx, go_on_rx) = std::sync::mpsc::channel::<()>();
    let stays = std::thread::spawn({
        let addr = proxy.addr;
        move || {
            exchange(
                addr,
                &format!("PUT /digest HTTP/1.1\r\nHost: t\r\nContent-Length: {LEN}\r\nConnection: close\r\n\r\n"),
                move |w| {
                    let body = pattern(0, LEN as usize);
                    w.write_all(&body[..100_000])?;
                    let _ = go_on_rx.recv_timeout(Duration::from_secs(60));
                    w.write_all(&body[100_000..])
                },
            )
        }
    });
    let mut leaves = TcpStream::connect(proxy.addr).unwrap();
    leaves
        .write_all(b"PUT /digest HTTP/1.1\r\nHost: t\r\nContent-Length: 900000\r\n\r\n")
        .unwrap();
    leaves.write_all(&pattern(0, 300_000)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(leaves);
    await_resets(proxy.addr, &serde_json::json!([8]));
    go_on_tx.send(()).unwrap();
    let (status, body) = stays.join().unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["length"], LEN);
    assert_eq!(json(&body)["sha256"], pattern_sha256(LEN));

    let chunked = "PUT /digest HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    let (status, body) = exchange(proxy.addr, chunked, |w| {
        w.write_all(b"5\r\nhello\r\n")?;
        std::thread::sleep(Duration::from_millis(200));
        w.write_all(b"zz\r\nbroken\r\n0\r\n\r\n")
    });
    assert_eq!(status, 400, "{body}");
    let (status, body) = exchange(proxy.addr, chunked, |w| {
        let mut left = 2 << 20;
        while left > 0 {
            w.write_all(b"10000\r\n")?;
            w.write_all(&[b'x'; 0x10000])?;
            w.write_all(b"\r\n")?;
            left -= 0x10000;
        }
        w.write_all(b"0\r\n\r\n")
    });
    assert_eq!(status, 413, "{body}");
    let start = Instant::now();
    loop {
        let stats = recorder_stats(proxy.addr);
        if stats["resets"] == serde_json::json!([8, 8, 8]) {
            assert_eq!(stats["connections"], 1, "{stats}");
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{stats}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The proxy's HTTP/2 connections to the upstream, as `/metrics` at `metrics` reports them:
/// (with streams open, without).
fn h2_pool(metrics: SocketAddr) -> (u64, u64) {
    let mut s = TcpStream::connect(metrics).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let value = |state: &str| -> u64 {
        text.lines()
            .filter(|l| {
                l.starts_with("lowlat_upstream_connections{")
                    && l.contains(&format!("state=\"{state}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    (value("active"), value("idle"))
}

/// A client that leaves mid-exchange has its stream reset, and the upstream connection it
/// used is reported idle again at once — not "active" until its next exchange (the gauge of a
/// cancelled exchange's connection was left as it was, and a soak found one still "active"
/// long after the load stopped).
#[test]
fn a_cancelled_exchange_leaves_its_connection_counted_idle() {
    let upstream = Upstream::h2_recorder();
    let proxy = serve(&[
        "--metrics",
        "127.0.0.1:0",
        "--proxy",
        &format!("/=h2c://127.0.0.1:{}", upstream.addr().port()),
    ]);
    let metrics = proxy.metrics_addr();
    assert_eq!(recorder_stats(proxy.addr)["connections"], 1);
    for round in 1..=3 {
        let mut leaves = TcpStream::connect(proxy.addr).unwrap();
        leaves
            .write_all(b"PUT /digest HTTP/1.1\r\nHost: t\r\nContent-Length: 900000\r\n\r\n")
            .unwrap();
        leaves.write_all(&pattern(0, 100_000)).unwrap();
        // The exchange is open upstream: the connection carries a stream.
        let start = Instant::now();
        while h2_pool(metrics) != (1, 0) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "round {round}: {:?} while the upload is open",
                h2_pool(metrics)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(leaves);
        // Nothing else crosses the proxy meanwhile: no other exchange on that connection
        // refreshes its gauges. Metrics are published once a sweep: within a second or two.
        let start = Instant::now();
        while h2_pool(metrics) != (0, 1) {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "round {round}: {:?} after the client left",
                h2_pool(metrics)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        await_resets(proxy.addr, &serde_json::json!(vec![8; round]));
    }
}

/// An HTTP/2 upstream that answers before the body ended (413 at the head, then RST_STREAM
/// NO_ERROR): the answer reaches the HTTP/1.1 client while it is still sending, with
/// `Connection: close` (the rest of its body is not read), and the upstream connection serves on.
#[test]
fn an_early_answer_from_an_http2_upstream_is_relayed() {
    let upstream = Upstream::h2_recorder();
    let proxy = serve(&[
        "--proxy",
        &format!("/=h2c://127.0.0.1:{}", upstream.addr().port()),
    ]);
    let mut s = TcpStream::connect(proxy.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"PUT /early HTTP/1.1\r\nHost: t\r\nContent-Length: 10000000\r\n\r\n")
        .unwrap();
    s.write_all(&pattern(0, 100_000)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains(r#"{"early": true}"#) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "{}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );
    drop(s);
    let (status, body) = exchange(
        proxy.addr,
        "PUT /digest HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
        |_| Ok(()),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(recorder_stats(proxy.addr)["connections"], 1);
}

/// `tests/upstreams/grpc_client.py` through the proxy: `args` after the proxy's address; its
/// JSON output.
fn grpc_client(proxy: SocketAddr, args: &[&str]) -> serde_json::Value {
    json_output(
        Command::new(python())
            .arg(upstreams_dir().join("grpc_client.py"))
            .arg(proxy.to_string())
            .args(args)
            .current_dir(upstreams_dir()),
    )
}

/// gRPC calls whose requests stream, grpcio on both ends: a client-streaming call of 200
/// messages of 64 KiB (12.5 MiB: past every window on the way) arrives whole, and a
/// bidirectional call in lock-step — each message sent only after the previous one's reply came
/// back — completes, which it can only if replies cross while the request stream is open.
#[test]
fn grpc_client_and_bidirectional_streaming_cross_the_proxy() {
    let upstream = Upstream::grpc();
    let proxy = serve(&[
        "--proxy",
        &format!("/=h2c://127.0.0.1:{}", upstream.addr().port()),
    ]);
    let out = grpc_client(proxy.addr, &["client-stream", "200", "65536"]);
    assert_eq!(out["count"], 200, "{out}");
    assert_eq!(out["payload_bytes"], 200 * 65536, "{out}");
    assert_eq!(out["payload_sha256"], out["sent_sha256"], "{out}");
    let names: Vec<String> = (0..200).map(|i| format!("m{i}")).collect();
    assert_eq!(out["message"], names.join(","));

    let out = grpc_client(proxy.addr, &["bidi", "50"]);
    let replies = out["replies"].as_array().unwrap();
    assert_eq!(replies.len(), 50, "{out}");
    for (i, r) in replies.iter().enumerate() {
        assert_eq!(r["message"], format!("b{i}"), "{out}");
        assert_eq!(r["index"], i, "{out}");
    }
}

/// One request on a new connection to `addr`: the response's head and body.
fn get_once(addr: SocketAddr, target: &str) -> (String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {target} HTTP/1.1\r\nHost: cache.test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let end = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    (
        String::from_utf8_lossy(&all[..end]).into_owned(),
        all[end..].to_vec(),
    )
}

/// The cache in front of an HTTP/2 upstream: the first response is stored while it is relayed
/// (the upstream's access log has one request), the next ones are hits with the same body and
/// the standard reason phrase HTTP/2 does not carry.
#[test]
fn the_cache_stores_what_an_http2_upstream_answers() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("www");
    std::fs::create_dir(&root).unwrap();
    let body: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(root.join("big.bin"), &body).unwrap();
    let log = dir.path().join("upstream.log");
    let upstream = serve(&[
        "--root",
        root.to_str().unwrap(),
        "--cache-control",
        "max-age=60",
        "--access-log",
        log.to_str().unwrap(),
        "--access-log-format",
        "$request_uri",
    ]);
    let port = upstream.addr.port();
    let proxy = serve(&["--proxy", &format!("/=h2c://127.0.0.1:{port}"), "--cache"]);
    let (head, got) = get_once(proxy.addr, "/big.bin");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(
        head.contains("fwd=uri-miss") && head.contains("stored"),
        "{head}"
    );
    assert_eq!(got, body);
    for _ in 0..3 {
        let (head, got) = get_once(proxy.addr, "/big.bin");
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains("Cache-Status: lowlat; hit"), "{head}");
        assert_eq!(got, body);
    }
    proxy.stop();
    upstream.stop();
    let lines = std::fs::read_to_string(&log).unwrap();
    assert_eq!(lines.lines().collect::<Vec<_>>(), ["/big.bin"], "{lines}");
}
