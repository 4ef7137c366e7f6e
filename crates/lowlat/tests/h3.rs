//! `lowlat serve --h3-listen` as a real process, driven by real QUIC clients: oha built with
//! HTTP/3, and aioquic from the test environment `scripts/test-deps.sh` makes
//! (`tests/quic/client.py` has one scenario per subcommand). HTTP/3 requests (files,
//! /plaintext, /json, 404) through aioquic's HTTP/3 client and oha, and HEAD written by hand;
//! handshakes and streams over the transport alone (its echo protocol), many connections over
//! several workers, clients whose address changes mid-connection (steering), Retry forced and
//! automatic, a flood of Initials answered statelessly, clients breaking QUIC's stream and
//! flow-control rules, the idle timeout, the connection limit, stalled requests timed out, a
//! client's GOAWAY, and the settings' checks; HTTP/3 written by hand (malformed frames, streams
//! and field sections) answered with the RFC's errors; a download through a relay that loses a
//! tenth of the datagrams; `Alt-Svc` and the access log.

use std::process::Command;
use std::time::Duration;

mod support;
use support::h3::{cert, client, client_script, python, serve};
use support::{Served, BIN};

/// Stops `served` gracefully and returns its whole log (the workers' QUIC counts are last).
fn stop(mut served: Served) -> String {
    served.signal("TERM");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        if served.child.try_wait().unwrap().is_some() {
            std::thread::sleep(Duration::from_millis(100)); // the log thread's last lines
            return served.log();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no exit within 10 s of SIGTERM:\n{}", served.log());
}

/// The sum over the workers of one count in their exit lines ("N clients sent a Retry").
fn count(log: &str, what: &str) -> u64 {
    log.lines()
        .filter(|l| l.contains("quic: ") && l.contains(what))
        .filter_map(|l| {
            let before = &l[..l.find(what)?];
            before.split_whitespace().last()?.parse::<u64>().ok()
        })
        .sum()
}

/// oha built with HTTP/3 (a second client no one here wrote, on the h3 and quinn crates)
/// against `lowlat serve`: every one of a fixed count of requests, over several connections, for
/// a file and for /plaintext, is answered 200.
#[test]
fn oha_over_http3_is_answered_every_time() {
    let (_pki, cert) = cert();
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("100.html"), "x".repeat(100)).unwrap();
    let served = serve(&cert, &["--root", root.path().to_str().unwrap()]);
    let port = support::address(&served.log(), "h3://").port();
    for path in ["/100.html", "/plaintext"] {
        let out = Command::new(support::upstream::oha())
            .args(["--http-version", "3", "--insecure", "--no-tui"])
            .args(["--output-format", "json", "-n", "400", "-c", "4"])
            .arg(format!("https://localhost:{port}{path}"))
            .output()
            .expect("run oha");
        let text = String::from_utf8_lossy(&out.stdout);
        let report: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| {
            panic!(
                "oha {path}: {e}: {text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        assert_eq!(
            report["statusCodeDistribution"],
            serde_json::json!({"200": 400}),
            "{path}: {report}"
        );
        assert_eq!(report["summary"]["successRate"], 1.0, "{path}: {report}");
    }
}

/// Requests over HTTP/3, all at once on one connection: a file of 1 MB (byte for byte, its
/// validators), a small one, the built-in /plaintext and /json, a missing file (404), and the
/// small file again (its request and response heads the same bytes as the first time: the
/// server decodes and encodes them once, and the copy must be exact). (HEAD is
/// not among them: aioquic's client checks a HEAD response's empty body against its
/// `content-length`.)
#[test]
fn http3_gets_files_and_builtins() {
    let (_pki, cert) = cert();
    let root = tempfile::tempdir().unwrap();
    let big: Vec<u8> = (0..1_000_000u32).map(|i| (i * 31 % 253) as u8).collect();
    std::fs::write(root.path().join("big.bin"), &big).unwrap();
    std::fs::write(root.path().join("index.html"), "<p>hello over h3</p>\n").unwrap();
    let served = serve(&cert, &["--root", root.path().to_str().unwrap()]);
    let got = client(
        &served,
        &[
            "get",
            "GET",
            "/big.bin",
            "/index.html",
            "/plaintext",
            "/json",
            "/missing",
            "/index.html",
        ],
    );
    let r = &got["responses"];
    let sha = |bytes: &[u8]| {
        use std::fmt::Write;
        let digest = sha256(bytes);
        digest.iter().fold(String::new(), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
    };
    assert_eq!(r[0]["status"], 200, "{got}");
    assert_eq!(r[0]["length"], 1_000_000, "{got}");
    assert_eq!(r[0]["sha256"].as_str(), Some(sha(&big).as_str()), "{got}");
    assert_eq!(r[0]["headers"]["content-length"], "1000000", "{got}");
    assert!(r[0]["headers"]["etag"].is_string(), "{got}");
    assert_eq!(r[1]["status"], 200, "{got}");
    assert_eq!(r[1]["text"], "<p>hello over h3</p>\n", "{got}");
    assert_eq!(
        r[1]["headers"]["content-type"], "text/html; charset=utf-8",
        "{got}"
    );
    assert_eq!(
        (r[2]["status"].as_u64(), r[2]["text"].as_str()),
        (Some(200), Some("Hello, World!")),
        "{got}"
    );
    assert_eq!(r[3]["status"], 200, "{got}");
    assert_eq!(r[3]["text"], "{\"message\":\"Hello, World!\"}", "{got}");
    assert_eq!(r[4]["status"], 404, "{got}");
    assert_eq!(r[5]["status"], 200, "{got}");
    assert_eq!(r[5]["text"], r[1]["text"], "{got}");
    // All but `date` (the two may straddle a second).
    for name in [
        "content-type",
        "content-length",
        "etag",
        "last-modified",
        "server",
    ] {
        assert!(r[1]["headers"][name].is_string(), "{name}: {got}");
        assert_eq!(
            r[5]["headers"][name], r[1]["headers"][name],
            "{name}: {got}"
        );
    }
}

/// Request bodies over HTTP/3: one within `--max-body` reaches the router (405: the built-in
/// /plaintext takes GET only), one past it is answered 413 and its stream stopped, and the
/// connection goes on serving.
#[test]
fn http3_request_bodies_are_bounded() {
    let (_pki, cert) = cert();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let served = serve(
        &cert,
        &["--max-body", "1k", "--access-log", log.to_str().unwrap()],
    );
    let got = client(&served, &["post", "/plaintext", "500", "5000", "10"]);
    let status: Vec<u64> = got["responses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(status, [405, 413, 405], "{got}");
    // The refusal has its line too, as over HTTP/1.1 and HTTP/2.
    let text = stop(served);
    let lines = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        lines.matches("\"POST /plaintext HTTP/3.0\" 405").count(),
        2,
        "{lines}\n{text}"
    );
    assert_eq!(
        lines.matches("\"POST /plaintext HTTP/3.0\" 413").count(),
        1,
        "{lines}\n{text}"
    );
}

/// SHA-256 through the TLS stack's provider (no hashing crate of its own for one test).
fn sha256(bytes: &[u8]) -> Vec<u8> {
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    let suite = provider
        .cipher_suites
        .iter()
        .find_map(|s| match s {
            rustls::SupportedCipherSuite::Tls13(t)
                if t.common.hash_provider.algorithm()
                    == rustls::crypto::hash::HashAlgorithm::SHA256 =>
            {
                Some(t.common.hash_provider)
            }
            _ => None,
        })
        .unwrap();
    suite.hash(bytes).as_ref().to_vec()
}

/// A handshake, then four streams of 1 MB each on one connection, echoed back byte for byte:
/// flow control and back-pressure both ways (the windows are 1 MB per stream).
#[test]
fn streams_echo_over_one_connection() {
    let (_pki, cert) = cert();
    let served = serve(&cert, &[]);
    let got = client(&served, &["echo", "1000000", "4"]);
    assert_eq!(got["ok"], 4, "{got}");
    assert_eq!(got["bytes"], 4_000_000, "{got}");
}

/// Many connections at once over two workers all complete, and both workers took some.
#[test]
fn many_connections_over_two_workers_all_complete() {
    let (_pki, cert) = cert();
    let served = serve(&cert, &["--workers", "2"]);
    let got = client(&served, &["many", "60"]);
    assert_eq!(got["ok"], 60, "{got}");
    let log = stop(served);
    let per_worker: Vec<u64> = log
        .lines()
        .filter(|l| l.contains("connections accepted"))
        .map(|l| count(l, " connections accepted"))
        .collect();
    assert_eq!(per_worker.len(), 2, "{log}");
    assert_eq!(per_worker.iter().sum::<u64>(), 60, "{log}");
    assert!(
        per_worker.iter().all(|&n| n > 0),
        "one worker took all: {log}"
    );
}

/// Clients whose source port changes after the handshake (a NAT rebinding, through a relay)
/// keep their connections over four workers: their packets carry connection IDs that name the
/// worker, and the steering program delivers them there. Without steering the kernel's hash of
/// the new address sends about three in four to a worker that does not know the connection.
#[test]
fn rebound_clients_keep_their_connection_on_its_worker() {
    let (_pki, cert) = cert();
    let served = serve(&cert, &["--workers", "4"]);
    assert!(
        served.log().contains("steering by connection ID on"),
        "{}",
        served.log()
    );
    let got = client(&served, &["rebind", "12"]);
    assert_eq!(got["ok"], 12, "{got}");
}

/// One series of `/metrics` (`--metrics` is on `served`), once the worker has published it.
fn metric(served: &Served, series: &str) -> u64 {
    let addr = served.metrics_addr().to_string();
    // Published at the worker's sweep, at most a second behind.
    std::thread::sleep(Duration::from_millis(1300));
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    std::io::Write::write_all(
        &mut conn,
        format!("GET /metrics HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut conn, &mut text).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no {series} in {text}"))
}

/// `--h3-retry`: a new client is asked to prove its address first, then served (and counted
/// on /metrics); without it, no Retry.
#[test]
fn retry_when_forced_and_not_otherwise() {
    let (_pki, cert) = cert();
    let served = serve(&cert, &["--h3-retry", "--metrics", "127.0.0.1:0"]);
    let got = client(&served, &["retry"]);
    assert_eq!(metric(&served, "lowlat_quic_retries_total "), 1);
    assert_eq!(
        metric(&served, "lowlat_quic_connections_accepted_total "),
        1
    );
    assert_eq!(
        (got["retried"].as_bool(), got["ok"].as_bool()),
        (Some(true), Some(true)),
        "{got}"
    );
    let log = stop(served);
    assert_eq!(count(&log, " clients sent a Retry"), 1, "{log}");

    let served = serve(&cert, &[]);
    let got = client(&served, &["retry"]);
    assert_eq!(
        (got["retried"].as_bool(), got["ok"].as_bool()),
        (Some(false), Some(true)),
        "{got}"
    );
}

/// Above `--h3-retry-above` handshakes in progress, new clients get a Retry (and still
/// complete); the first did not.
#[test]
fn retry_is_automatic_above_the_handshakes_in_progress() {
    let (_pki, cert) = cert();
    let served = serve(&cert, &["--h3-retry-above", "2"]);
    let got = client(&served, &["many", "30"]);
    assert_eq!(got["ok"], 30, "{got}");
    let log = stop(served);
    let retries = count(&log, " clients sent a Retry");
    assert!((1..30).contains(&retries), "{retries} retries: {log}");
}

/// A flood of Initial packets from 400 client addresses that never go on with the handshake
/// (a real ClientHello, replayed) costs the server no per-client state when it asks for
/// address validation (`--h3-retry`; above `--h3-retry-above` handshakes it does by itself): each gets a stateless Retry, no connection is made, peak memory grows by
/// little, and a real client is served after.
#[test]
fn a_flood_of_initials_gets_stateless_retries() {
    let (_pki, cert) = cert();
    let served = serve(&cert, &["--h3-retry"]);
    let before = served.status_kib("VmHWM:");
    let got = client(&served, &["flood", "400", "5"]);
    assert_eq!(got["sent"], 2000, "{got}");
    let retries = got["retries"].as_u64().unwrap();
    assert!(
        retries >= 1000,
        "most Initials answered with a Retry: {got}"
    );
    assert_eq!(got["replies"], got["retries"], "only Retry packets: {got}");
    let grown = served.status_kib("VmHWM:").saturating_sub(before);
    assert!(grown < 8 * 1024, "peak memory grew by {grown} KiB: {got}");
    let r = client(&served, &["get", "GET", "/plaintext"]);
    assert_eq!(r["responses"][0]["status"], 200, "{r}");
    let log = stop(served);
    assert_eq!(
        count(&log, " connections accepted"),
        1,
        "only the real client: {log}"
    );
}

/// A connection with no packet for `--h3-idle-timeout` is closed: the client learns the
/// server's shorter timeout from the handshake, and the server drops the connection itself.
#[test]
fn idle_timeout_closes_the_connection() {
    let (_pki, cert) = cert();
    let served = serve(&cert, &["--h3-idle-timeout", "1s", "--log-level", "debug"]);
    let got = client(&served, &["idle", "1"]);
    let after = got["closed_after"].as_f64().unwrap_or(f64::NAN);
    assert!((0.8..4.0).contains(&after), "{got}");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !served.log().contains("lost: timed out") && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(served.log().contains("lost: timed out"), "{}", served.log());
}

/// Past `--h3-max-conns` a new client is refused (CONNECTION_REFUSED), not queued.
#[test]
fn connections_past_the_limit_are_refused() {
    let (_pki, cert) = cert();
    let served = serve(&cert, &["--h3-max-conns", "2", "--h3-idle-timeout", "5s"]);
    let got = client(&served, &["many", "12"]);
    let ok = got["ok"].as_u64().unwrap_or(0);
    assert!((2..12).contains(&ok), "{got}");
    let log = stop(served);
    assert!(count(&log, " refused") >= 1, "{log}");
}

/// `--check-config` answers a bad `--h3-*` setting with one line, and passes a good one.
#[test]
fn check_config_checks_the_h3_settings() {
    let (_pki, cert) = cert();
    let check = |args: &[&str]| {
        let out = Command::new(BIN)
            .args(["serve", "--check-config"])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let tls: Vec<&str> = vec![
        "--tls-listen",
        "127.0.0.1:8443",
        "--cert",
        cert.cert.to_str().unwrap(),
        "--key",
        cert.key.to_str().unwrap(),
    ];
    let with = |more: &[&str]| -> Vec<String> {
        tls.iter().chain(more).map(|s| (*s).to_owned()).collect()
    };
    let run = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        check(&args)
    };
    let (code, err) = run(with(&["--h3-listen", "127.0.0.1"]));
    assert_eq!(code, Some(0), "{err}");
    let (code, err) = check(&["--h3-listen", "127.0.0.1:8443"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--h3-listen needs TLS"), "{err}");
    let (code, err) = run(with(&[
        "--h3-listen",
        "127.0.0.1:8443",
        "--h3-stream-window",
        "4m",
        "--h3-conn-window",
        "1m",
    ]));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--h3-stream-window"), "{err}");
    let (code, err) = run(with(&[
        "--h3-listen",
        "127.0.0.1:8443",
        "--h3-max-udp-payload",
        "1000",
    ]));
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains("1200"), "{err}");
}

/// SIGTERM while a response is in flight: HTTP/3's GOAWAY, the response completes (the
/// connection closes only once the client acknowledged its last bytes), then the server exits.
#[test]
fn shutdown_lets_a_response_in_flight_finish() {
    let (_pki, cert) = cert();
    let root = tempfile::tempdir().unwrap();
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(root.path().join("big.bin"), &big).unwrap();
    let served = serve(&cert, &["--root", root.path().to_str().unwrap()]);
    let addr = support::address(&served.log(), "h3://");
    let mut download = Command::new(python())
        .arg(client_script())
        .args([
            "get",
            &addr.ip().to_string(),
            &addr.port().to_string(),
            "GET",
            "/big.bin",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Under way: the response's head has arrived (the client says so on stderr), its 3 MB of
    // body take seconds more (checked below).
    let mut stderr = std::io::BufReader::new(download.stderr.take().unwrap());
    let mut line = String::new();
    while std::io::BufRead::read_line(&mut stderr, &mut line).unwrap() > 0
        && line.trim() != "headers"
    {
        line.clear();
    }
    assert!(
        download.try_wait().unwrap().is_none(),
        "the download ended before the signal"
    );
    let log = stop(served);
    let out = download.wait_with_output().unwrap();
    let got: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {log}"));
    let r = &got["responses"][0];
    assert_eq!(
        (r["status"].as_u64(), r["length"].as_u64()),
        (Some(200), Some(3_000_000)),
        "{got}\n{log}"
    );
}

/// HTTP/3 is advertised on the TCP side (`Alt-Svc: h3=":PORT"`, the port QUIC bound), except
/// where a site's own `--add-header` sets `Alt-Svc`; and HTTP/3 requests have their access-log
/// lines (`HTTP/3.0`).
#[test]
fn http3_is_advertised_and_logged() {
    let (_pki, cert) = cert();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let served = serve(&cert, &["--access-log", log.to_str().unwrap()]);
    let h3 = support::address(&served.log(), "h3://");
    let tls = served.tls_addr.expect("a TLS listener");
    let curl = |args: &[&str]| {
        let out = Command::new("curl")
            .args(["-sk", "-D", "-", "-o", "/dev/null"])
            .args(args)
            .output()
            .expect("run curl");
        String::from_utf8_lossy(&out.stdout).to_ascii_lowercase()
    };
    let head = curl(&[
        &format!("https://localhost:{}/plaintext", tls.port()),
        "--resolve",
        &format!("localhost:{}:127.0.0.1", tls.port()),
    ]);
    let want = format!("alt-svc: h3=\":{}\"; ma=86400", h3.port());
    assert!(head.contains(&want), "{want} in {head}");
    let head = curl(&[
        "--http2",
        &format!("https://localhost:{}/plaintext", tls.port()),
        "--resolve",
        &format!("localhost:{}:127.0.0.1", tls.port()),
    ]);
    assert!(head.contains(&want), "over HTTP/2: {want} in {head}");

    let got = client(&served, &["get", "GET", "/plaintext"]);
    assert_eq!(got["responses"][0]["status"], 200, "{got}");
    let text = stop(served);
    let lines = std::fs::read_to_string(&log).unwrap();
    assert!(
        lines.contains("\"GET /plaintext HTTP/3.0\" 200 13"),
        "{lines}\n{text}"
    );

    // A site's own Alt-Svc wins (and is not doubled).
    let served = serve(&cert, &["--add-header", "Alt-Svc: clear"]);
    let tls = served.tls_addr.expect("a TLS listener");
    let head = curl(&[
        &format!("https://localhost:{}/plaintext", tls.port()),
        "--resolve",
        &format!("localhost:{}:127.0.0.1", tls.port()),
    ]);
    assert_eq!(head.matches("alt-svc:").count(), 1, "{head}");
    assert!(head.contains("alt-svc: clear"), "{head}");
}

/// HTTP/3 written by hand (aioquic's QUIC, frames and QPACK by the test): every malformed shape
/// is answered with its RFC 9114 / RFC 9204 error, at the connection or the stream as the RFC
/// says, and a well-formed request written the same way is answered.
#[test]
fn malformed_http3_gets_the_right_errors() {
    const SETTINGS: &str = "uni:000400"; // a control stream with an empty SETTINGS frame
    let (_pki, cert) = cert();
    let served = serve(&cert, &[]);
    let closes = [
        // DATA before HEADERS on a request stream.
        (
            vec![SETTINGS, "bidi:000161:fin"],
            0x105,
            "H3_FRAME_UNEXPECTED",
        ),
        // A control stream whose first frame is not SETTINGS.
        (vec!["uni:00070100"], 0x10a, "H3_MISSING_SETTINGS"),
        // Two control streams.
        (vec![SETTINGS, SETTINGS], 0x103, "H3_STREAM_CREATION_ERROR"),
        // A push stream from a client.
        (vec!["uni:01"], 0x103, "H3_STREAM_CREATION_ERROR"),
        // The control stream closed.
        (
            "uni:000400:fin".split(' ').collect(),
            0x104,
            "H3_CLOSED_CRITICAL_STREAM",
        ),
        // HTTP/2's frame types: PRIORITY on the control stream, WINDOW_UPDATE on a request.
        (vec!["uni:0004000201ff"], 0x105, "H3_FRAME_UNEXPECTED"),
        (
            vec![SETTINGS, "bidi:0800:fin"],
            0x105,
            "H3_FRAME_UNEXPECTED",
        ),
        // A field section QPACK cannot decode.
        (
            vec![SETTINGS, "bidi:0103ffffff:fin"],
            0x200,
            "QPACK_DECOMPRESSION_FAILED",
        ),
    ];
    for (streams, code, name) in closes {
        let mut args = vec!["raw"];
        args.extend(&streams);
        let r = client(&served, &args);
        assert_eq!(r["close_code"], code, "{name} for {streams:?}: {r}");
    }
    // Malformed requests reset their stream (H3_MESSAGE_ERROR), the connection lives.
    let base = "headers::method=GET,:scheme=https,:authority=localhost";
    for extra in [
        "",
        ",:path=/plaintext,Upper=x",
        ",:path=/plaintext,connection=close",
    ] {
        let spec = format!("{base}{extra}");
        let r = client(&served, &["raw", SETTINGS, &spec]);
        assert_eq!(r["close_code"], serde_json::Value::Null, "{spec}: {r}");
        assert_eq!(r["resets"]["0"], 0x10e, "{spec}: {r}");
    }
    let spec = format!("{base},:path=/plaintext");
    let r = client(&served, &["raw", SETTINGS, &spec]);
    assert_eq!(r["answered"][0], 0, "{spec}: {r}");
    assert_eq!(
        frame_types(&r["received"]["0"]),
        [0x01, 0x00],
        "HEADERS, DATA: {r}"
    );
    // HEAD: the response's HEADERS and the stream's end, no DATA.
    let spec = "headers::method=HEAD,:scheme=https,:authority=localhost,:path=/plaintext";
    let r = client(&served, &["raw", SETTINGS, spec]);
    assert_eq!(r["answered"][0], 0, "{spec}: {r}");
    assert_eq!(frame_types(&r["received"]["0"]), [0x01], "HEAD: {r}");
}

/// Requests that stop arriving meet the same time limits as over HTTP/1.1: a head not complete
/// within `--header-timeout` and a body stalled past `--body-timeout` are answered 408, and the
/// connection serves on.
#[test]
fn stalled_requests_are_timed_out() {
    const SETTINGS: &str = "uni:000400";
    let (_pki, cert) = cert();
    let served = serve(&cert, &["--header-timeout", "1s", "--body-timeout", "1s"]);
    // A HEADERS frame that announces 100 bytes, of which 3 come.
    let r = client(&served, &["raw", SETTINGS, "bidi:0164000102"]);
    assert_eq!(r["status"]["0"], 408, "a head that stopped: {r}");
    // A head, then 100 bytes of the 1000 its content-length announces.
    let spec = "headers-open::method=POST,:scheme=https,:authority=localhost,:path=/plaintext,content-length=1000";
    let r = client(&served, &["raw", SETTINGS, spec]);
    assert_eq!(r["status"]["0"], 408, "a body that stopped: {r}");
    assert_eq!(r["close_code"], serde_json::Value::Null, "{r}");
    let spec = "headers::method=GET,:scheme=https,:authority=localhost,:path=/plaintext";
    let r = client(&served, &["raw", SETTINGS, spec]);
    assert_eq!(r["status"]["0"], 200, "{r}");
}

/// A client that breaks QUIC's own rules (aioquic with its checks overridden) loses its
/// connection with the transport's error for it (RFC 9000 §20.1): more request streams than the
/// server allowed (STREAM_LIMIT_ERROR), bytes past a stream's window (FLOW_CONTROL_ERROR),
/// data on a stream only the server may open (STREAM_STATE_ERROR); the server serves on.
#[test]
fn quic_rule_breakers_get_the_transport_errors() {
    let (_pki, cert) = cert();
    let served = serve(&cert, &["--h3-max-streams", "50"]);
    for (kind, code, name) in [
        ("streams", 0x04, "STREAM_LIMIT_ERROR"),
        ("flow", 0x03, "FLOW_CONTROL_ERROR"),
        ("streamid", 0x05, "STREAM_STATE_ERROR"),
    ] {
        let r = client(&served, &["abuse", kind]);
        assert_eq!(r["close_code"], code, "{name} for {kind}: {r}");
    }
    let r = client(&served, &["get", "GET", "/plaintext"]);
    assert_eq!(r["responses"][0]["status"], 200, "{r}");
}

/// A client that sends GOAWAY (it is shutting the connection down, as oha's HTTP/3 client does
/// when it is done) has its connection closed with H3_NO_ERROR once its requests are answered,
/// rather than left to the idle timeout, which such a client would sit out.
#[test]
fn a_client_goaway_closes_the_connection_when_idle() {
    let (_pki, cert) = cert();
    let served = serve(&cert, &[]);
    // The control stream: SETTINGS, then GOAWAY(0); a request answered first.
    let request = "headers::method=GET,:scheme=https,:authority=localhost,:path=/plaintext";
    let r = client(
        &served,
        &["raw", request, "uni:000400070100", "until-closed"],
    );
    assert_eq!(r["status"]["0"], 200, "{r}");
    assert_eq!(r["close_code"], 0x100, "H3_NO_ERROR: {r}");
}

/// The frame types in a stream's bytes (hex, as the client reports them).
fn frame_types(hex: &serde_json::Value) -> Vec<u64> {
    let hex = hex.as_str().unwrap_or_default();
    let bytes: Vec<u8> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let varint = |at: &mut usize| -> u64 {
        let first = bytes[*at];
        let len = 1usize << (first >> 6);
        let mut v = u64::from(first & 0x3f);
        for b in &bytes[*at + 1..*at + len] {
            v = (v << 8) | u64::from(*b);
        }
        *at += len;
        v
    };
    let mut at = 0;
    let mut types = Vec::new();
    while at < bytes.len() {
        types.push(varint(&mut at));
        let len = varint(&mut at);
        at += usize::try_from(len).unwrap();
    }
    types
}

/// Loss: a 3 MB HTTP/3 download through a relay that drops 10% of the datagrams each way (the
/// same drops every run; `tc netem` needs a kernel module this test cannot count on) arrives
/// whole, byte for byte.
#[test]
fn a_download_completes_through_loss() {
    let (_pki, cert) = cert();
    let root = tempfile::tempdir().unwrap();
    let body: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(root.path().join("3m.bin"), &body).unwrap();
    let served = serve(&cert, &["--root", root.path().to_str().unwrap()]);
    let r = client(&served, &["lossy", "10", "/3m.bin"]);
    assert_eq!(r["status"], 200, "{r}");
    assert_eq!(r["length"], 3_000_000, "{r}");
    let want: String = sha256(&body).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(r["sha256"].as_str(), Some(want.as_str()), "{r}");
    assert!(
        r["dropped"].as_u64().unwrap() > 100,
        "the relay lost datagrams: {r}"
    );
}

/// A path narrower than loopback: a relay drops every datagram longer than 1472 bytes (an
/// Ethernet MTU's worth). The server's path MTU discovery (up to 65527 by default) probes larger
/// and its probes are lost; the download still arrives whole.
#[test]
fn a_download_completes_over_a_narrow_path() {
    let (_pki, cert) = cert();
    let root = tempfile::tempdir().unwrap();
    let body: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    std::fs::write(root.path().join("3m.bin"), &body).unwrap();
    let served = serve(&cert, &["--root", root.path().to_str().unwrap()]);
    let r = client(&served, &["narrow", "1472", "/3m.bin"]);
    assert_eq!(r["status"], 200, "{r}");
    assert_eq!(r["length"], 3_000_000, "{r}");
    let want: String = sha256(&body).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(r["sha256"].as_str(), Some(want.as_str()), "{r}");
    assert!(
        r["dropped"].as_u64().unwrap() > 0,
        "the server probed past the path: {r}"
    );
}

/// 0-RTT: a resumed connection's requests sent before the handshake completes are answered —
/// safe ones (GET) as usual, an unsafe one (POST) `425 Too Early` (RFC 8470) when it is still
/// 0-RTT data when read. Whether the handshake completes first is a race on loopback, so the
/// POST may also meet the handshake done (then the built-in route's 405); a few tries show the
/// 425.
#[test]
fn zero_rtt_answers_safe_methods_only() {
    let (_pki, cert) = cert();
    let served = serve(&cert, &[]);
    let mut too_early = 0;
    for _ in 0..6 {
        let r = client(&served, &["zerortt", "GET", "POST", "GET"]);
        assert_eq!(r["early_data"], true, "the ticket allows 0-RTT: {r}");
        assert_eq!(r["resumed"], true, "{r}");
        let statuses: Vec<u64> = r["responses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["status"].as_u64().unwrap())
            .collect();
        assert_eq!((statuses[0], statuses[2]), (200, 200), "{r}");
        assert!([425, 405].contains(&statuses[1]), "{r}");
        too_early += usize::from(statuses[1] == 425);
        if too_early > 0 {
            break;
        }
    }
    assert!(
        too_early > 0,
        "a POST sent as 0-RTT data was never answered 425"
    );
}

/// A request held back by a rate limit's delay whose client gives up on it (resets its
/// stream) is logged 499 DELAYED, as over HTTP/1.1 and HTTP/2; the zone goes on.
#[test]
fn a_held_request_whose_client_leaves_is_logged_499() {
    let (_pki, cert) = cert();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let served = serve(
        &cert,
        &[
            "--rate-limit",
            "/100.html=1r/m,burst=5",
            "--access-log",
            log.to_str().unwrap(),
            "--access-log-format",
            "$request_uri $status $limit_req_status",
        ],
    );
    let first = client(&served, &["get", "GET", "/100.html"]);
    assert_eq!(first["responses"][0]["status"], 200, "{first}");
    // Held back a minute; its client resets it after half a second, then asks for a page
    // outside the zone.
    let left = client(&served, &["cancel", "reset", "/100.html", "/plaintext"]);
    assert_eq!(left["then"]["status"], 200, "{left}");
    assert_eq!(
        support::lines_of(&log, 3),
        [
            "/100.html 200 PASSED",
            "/100.html 499 DELAYED",
            "/plaintext 200 -"
        ]
    );
}
