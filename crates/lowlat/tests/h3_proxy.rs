//! Forwarding over HTTP/3: `lowlat serve --h3-listen` with `--proxy` rules, asked by a real
//! HTTP/3 client (aioquic, `tests/quic/client.py`) and answered by real upstreams (uvicorn over
//! HTTP/1.1, grpcio and the `h2` recorder over h2c): requests with and without bodies, large
//! and chunked responses relayed byte for byte, trailers both ways, request bodies streamed in
//! bounded memory and refused over the limit, gateway errors, abandoned requests cancelling
//! their upstream exchange, `Early-Data: 1` on what came as 0-RTT, the access log.

use std::time::{Duration, Instant};

mod support;
use lowlat_testkit::pki::CertFiles;
use support::h3::{cert, client, serve};
use support::upstream::{pattern_sha256, Upstream};
use support::Served;

/// `lowlat serve` over HTTP/3 forwarding each (prefix, upstream URL) of `rules`, with `extra`.
fn proxy(cert: &CertFiles, rules: &[(&str, String)], extra: &[&str]) -> Served {
    let rules: Vec<String> = rules.iter().map(|(p, to)| format!("{p}={to}")).collect();
    let mut args: Vec<&str> = Vec::new();
    for r in &rules {
        args.extend(["--proxy", r]);
    }
    args.extend(extra);
    serve(cert, &args)
}

/// The `h2` recorder's address as an h2c upstream URL.
fn h2c(recorder: &Upstream) -> String {
    format!("h2c://127.0.0.1:{}/", recorder.addr().port())
}

/// An HTTP/1.1 upstream's URL, its root as the rule's target.
fn app(upstream: &Upstream) -> String {
    format!("{}/", upstream.url())
}

/// A proxy of `/up/` to `upstream` writing its access log in `format` to a file of its own:
/// the folder (kept for the test's length), the file, the server.
fn logged_proxy(
    cert: &CertFiles,
    upstream: &Upstream,
    format: &str,
) -> (tempfile::TempDir, std::path::PathBuf, Served) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let served = proxy(
        cert,
        &[("/up/", app(upstream))],
        &[
            "--access-log",
            log.to_str().unwrap(),
            "--access-log-format",
            format,
        ],
    );
    (dir, log, served)
}

fn spec(method: &str, path: &str) -> String {
    serde_json::json!({"method": method, "path": path}).to_string()
}

/// The fields the upstream saw, from its echo (lower-case names).
fn echoed_field<'a>(echo: &'a serde_json::Value, name: &str) -> Option<&'a str> {
    echo["headers"]
        .as_array()?
        .iter()
        .find(|h| h[0].as_str() == Some(name))
        .and_then(|h| h[1].as_str())
}

/// Requests over HTTP/3 forwarded to uvicorn: a GET and a POST echoed (what the upstream saw), a
/// 3 MB response with a length and a 200 kB chunked one relayed byte for byte (the stream's
/// back-pressure holds the upstream), a 204, all at once on one connection; the access log
/// names the upstream on HTTP/3 lines.
#[test]
fn http3_requests_cross_the_proxy() {
    let (_pki, cert) = cert();
    let upstream = Upstream::uvicorn();
    let (_dir, log, served) = logged_proxy(&cert, &upstream, "json");
    let post = serde_json::json!({"method": "POST", "path": "/up/echo?q=1", "body_size": 100_000,
        "headers": [["content-type", "application/octet-stream"], ["cookie", "a=1"], ["cookie", "b=2"]]});
    let got = client(
        &served,
        &[
            "fetch",
            &spec("GET", "/up/echo"),
            &post.to_string(),
            &spec("GET", "/up/bytes/3000000"),
            &spec("GET", "/up/chunked/200000"),
            &spec("GET", "/up/status/204"),
        ],
    );
    let r = &got["responses"];
    assert_eq!(r[0]["status"], 200, "{got}");
    let echo = &r[0]["json"];
    assert_eq!(echo["method"], "GET", "{echo}");
    assert_eq!(echo["path"], "/echo", "{echo}");
    let port = served.log();
    let port = support::address(&port, "h3://").port();
    assert_eq!(
        echoed_field(echo, "host"),
        Some(format!("localhost:{port}").as_str())
    );
    assert_eq!(echoed_field(echo, "x-forwarded-proto"), Some("https"));
    assert_eq!(echoed_field(echo, "x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(echoed_field(echo, "early-data"), None, "not 0-RTT: {echo}");

    assert_eq!(r[1]["status"], 200, "{got}");
    let echo = &r[1]["json"];
    assert_eq!(echo["method"], "POST");
    assert_eq!(echo["target"], "/echo?q=1");
    assert_eq!(echo["body_length"], 100_000, "{echo}");
    // HTTP/3 may split Cookie; HTTP/1.1 wants one line.
    assert_eq!(echoed_field(echo, "cookie"), Some("a=1; b=2"), "{echo}");

    assert_eq!(r[2]["status"], 200);
    assert_eq!(r[2]["length"], 3_000_000);
    assert_eq!(r[2]["sha256"], pattern_sha256(3_000_000));
    assert_eq!(r[2]["headers"]["content-length"], "3000000");
    assert_eq!(r[3]["status"], 200);
    assert_eq!(r[3]["length"], 200_000);
    assert_eq!(r[3]["sha256"], pattern_sha256(200_000));
    assert!(r[3]["headers"].get("transfer-encoding").is_none(), "{got}");
    assert_eq!(r[4]["status"], 204);
    assert_eq!(r[4]["length"], 0);

    let deadline = Instant::now() + Duration::from_secs(5);
    let lines = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.lines().count() >= 5 {
            break text;
        }
        assert!(Instant::now() < deadline, "not 5 lines in {text:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let addr = upstream.addr().to_string();
    for line in lines.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["protocol"], "HTTP/3.0", "{line}");
        assert_eq!(v["upstream_addr"], addr.as_str(), "{line}");
    }
    assert!(lines.contains("/up/bytes/3000000"), "{lines}");
}

/// gRPC over HTTP/3 through an h2c upstream (grpcio): the response's trailers (`grpc-status`,
/// the server's trailing metadata) reach the HTTP/3 client as a trailing HEADERS frame.
#[test]
fn trailers_from_an_http2_upstream_reach_http3_clients() {
    let (_pki, cert) = cert();
    let upstream = Upstream::grpc();
    let served = proxy(&cert, &[("/", h2c(&upstream))], &[]);
    // EchoRequest { message: "hi" } in a gRPC message frame (uncompressed, 4 bytes).
    let call = serde_json::json!({
        "method": "POST",
        "path": "/lowlat.test.Echo/Unary",
        "headers": [["content-type", "application/grpc"], ["te", "trailers"]],
        "body_hex": "00000000040a026869",
    });
    let got = client(&served, &["fetch", &call.to_string()]);
    let r = &got["responses"][0];
    assert_eq!(r["status"], 200, "{got}");
    assert_eq!(r["headers"]["content-type"], "application/grpc", "{got}");
    let trailers: Vec<(String, String)> =
        serde_json::from_value(r["trailers"].clone()).unwrap_or_default();
    let trailer = |name: &str| {
        trailers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(trailer("grpc-status"), Some("0"), "{got}");
    assert_eq!(trailer("x-lowlat-trailer"), Some("unary"), "{got}");
    assert!(r["length"].as_u64().unwrap() > 5, "a reply message: {got}");
}

/// No upstream to be had: 502 when nothing listens, 504 when the upstream never answers
/// within `--proxy-first-byte-timeout`; each logged, and the connection serves on.
#[test]
fn gateway_errors_over_http3() {
    let (_pki, cert) = cert();
    let recorder = Upstream::h2_recorder();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    let served = proxy(
        &cert,
        &[
            ("/none/", format!("http://127.0.0.1:{closed_port}/")),
            ("/rec/", h2c(&recorder)),
        ],
        &["--proxy-first-byte-timeout", "1s"],
    );
    let got = client(
        &served,
        &[
            "fetch",
            &spec("GET", "/none/x"),
            &spec("GET", "/rec/sink"),
            &spec("GET", "/plaintext"),
        ],
    );
    let r = &got["responses"];
    assert_eq!(r[0]["status"], 502, "{got}");
    assert_eq!(r[1]["status"], 504, "{got}");
    assert_eq!(r[2]["status"], 200, "{got}");
}

/// A request abandoned while its upstream has not answered — its stream reset, or its whole
/// connection closed — cancels the upstream exchange: the HTTP/2 upstream sees RST_STREAM
/// (CANCEL) for each.
#[test]
fn abandoned_requests_cancel_their_upstream_exchange() {
    let (_pki, cert) = cert();
    let recorder = Upstream::h2_recorder();
    let served = proxy(&cert, &[("/rec/", h2c(&recorder))], &[]);
    let reset = client(&served, &["cancel", "reset", "/rec/sink", "/rec/stats"]);
    let stats = &reset["then"]["json"];
    assert_eq!(stats["resets"], serde_json::json!([8]), "{reset}");
    let closed = client(&served, &["cancel", "close", "/rec/sink", "/rec/stats"]);
    let stats = &closed["then"]["json"];
    assert_eq!(stats["resets"], serde_json::json!([8, 8]), "{closed}");
}

/// A GET sent as 0-RTT data and forwarded reaches the upstream with `Early-Data: 1` (RFC 8470
/// §5.1), so that it can refuse what must not be replayed.
#[test]
fn early_data_is_forwarded_with_early_data_1() {
    let (_pki, cert) = cert();
    let upstream = Upstream::uvicorn();
    let served = proxy(&cert, &[("/up/", app(&upstream))], &[]);
    // Whether the request is read before the handshake completes depends on timing: tried
    // until one is (the 0-RTT test of the server does the same).
    let mut seen = None;
    for _ in 0..6 {
        let r = client(&served, &["zerortt", "GET:/up/echo"]);
        assert_eq!(r["resumed"], true, "{r}");
        let echo = &r["responses"][0]["json"];
        assert_eq!(r["responses"][0]["status"], 200, "{r}");
        if let Some(v) = echoed_field(echo, "early-data") {
            seen = Some(v.to_owned());
            break;
        }
    }
    assert_eq!(
        seen.as_deref(),
        Some("1"),
        "no forwarded request came as 0-RTT data in 6 tries"
    );
}

/// Request bodies over HTTP/3 stream to the upstream as they arrive: a 24 MB upload with a
/// length reaches uvicorn byte for byte while the proxy's peak memory grows by far less than
/// the body (the stream's flow control holds the client back while the upload is full); a body
/// of unknown length with trailers reaches an HTTP/2 upstream with its trailers.
#[test]
fn request_bodies_stream_to_the_upstream() {
    let (_pki, cert) = cert();
    let upstream = Upstream::uvicorn();
    let recorder = Upstream::h2_recorder();
    let served = proxy(
        &cert,
        &[("/up/", app(&upstream)), ("/rec/", h2c(&recorder))],
        &[],
    );
    const LEN: u64 = 24_000_000;
    let before = served.status_kib("VmHWM:");
    let upload = serde_json::json!({"method": "POST", "path": "/up/upload",
        "body_pattern": LEN, "headers": [["content-length", LEN.to_string()]]});
    let got = client(&served, &["fetch", &upload.to_string()]);
    let r = &got["responses"][0];
    assert_eq!(r["status"], 200, "{got}");
    assert_eq!(r["json"]["length"], LEN, "{got}");
    assert_eq!(r["json"]["sha256"], pattern_sha256(LEN), "{got}");
    let grown = served.status_kib("VmHWM:").saturating_sub(before);
    assert!(
        grown < 16 * 1024,
        "peak memory grew by {grown} KiB for a {LEN}-byte upload"
    );

    let chunked = serde_json::json!({"method": "POST", "path": "/rec/digest",
        "body_pattern": 300_000, "trailers": [["x-checksum", "abc"], ["authorization", "secret"]]});
    let got = client(&served, &["fetch", &chunked.to_string()]);
    let r = &got["responses"][0];
    assert_eq!(r["status"], 200, "{got}");
    let digest = &r["json"];
    assert_eq!(digest["length"], 300_000, "{got}");
    assert_eq!(digest["sha256"], pattern_sha256(300_000), "{got}");
    assert_eq!(
        digest["trailers"],
        serde_json::json!({"x-checksum": "abc"}),
        "only trailers that may pass: {got}"
    );
}

/// A streaming body over the group's `--proxy-max-body` is refused 413 — before it is read when
/// its length says so, midway when it has none — and the connection serves on.
#[test]
fn streaming_bodies_over_the_limit_are_refused() {
    let (_pki, cert) = cert();
    let upstream = Upstream::uvicorn();
    let served = proxy(
        &cert,
        &[("/up/", app(&upstream))],
        &["--proxy-max-body", "1m"],
    );
    let declared = serde_json::json!({"method": "POST", "path": "/up/upload",
        "body_size": 2_000_000, "headers": [["content-length", "2000000"]]});
    let unknown =
        serde_json::json!({"method": "POST", "path": "/up/upload", "body_size": 2_000_000});
    let got = client(
        &served,
        &[
            "fetch",
            &declared.to_string(),
            &unknown.to_string(),
            &spec("GET", "/plaintext"),
        ],
    );
    let r = &got["responses"];
    assert_eq!(r[0]["status"], 413, "{got}");
    assert_eq!(r[1]["status"], 413, "{got}");
    assert_eq!(r[2]["status"], 200, "{got}");
}

/// A body streaming to the upstream that stops arriving is cut after `--body-timeout`: the
/// client's stream is reset and the upstream exchange cancelled (RST_STREAM CANCEL upstream),
/// so a stalled client holds no upstream connection.
#[test]
fn a_stalled_streaming_body_is_cut_and_cancelled_upstream() {
    let (_pki, cert) = cert();
    let recorder = Upstream::h2_recorder();
    let served = proxy(
        &cert,
        &[("/rec/", h2c(&recorder))],
        &["--body-timeout", "1s"],
    );
    let stalls = "headers-open::method=POST,:scheme=https,:authority=localhost,:path=/rec/digest,content-length=1000000";
    let r = client(&served, &["raw", "uni:000400", stalls]);
    assert_eq!(r["resets"]["0"], 0x10c, "H3_REQUEST_CANCELLED: {r}");
    assert_eq!(r["stopped"]["0"], 0x10d, "H3_REQUEST_INCOMPLETE: {r}");
    let got = client(&served, &["fetch", &spec("GET", "/rec/stats")]);
    assert_eq!(
        got["responses"][0]["json"]["resets"],
        serde_json::json!([8]),
        "{got}"
    );
}

/// The lines a site adds to every response reach proxied responses too, over every protocol:
/// `--add-header` and the `Alt-Svc` that advertises HTTP/3 (without which a browser in front of
/// a proxied site would never find it), each unless the upstream's response sets that field
/// itself.
#[test]
fn added_lines_and_alt_svc_reach_proxied_responses() {
    let (_pki, cert) = cert();
    let upstream = Upstream::uvicorn();
    let served = proxy(
        &cert,
        &[("/up/", app(&upstream))],
        &["--add-header", "X-Frame-Options: DENY"],
    );
    let h3_port = support::address(&served.log(), "h3://").port();
    let alt_svc = format!("h3=\":{h3_port}\"; ma=86400");
    let got = client(&served, &["fetch", &spec("GET", "/up/echo")]);
    let r = &got["responses"][0];
    assert_eq!(r["status"], 200, "{got}");
    assert_eq!(r["headers"]["alt-svc"], alt_svc.as_str(), "{got}");
    assert_eq!(r["headers"]["x-frame-options"], "DENY", "{got}");

    let curl = |args: &[&str]| {
        let out = std::process::Command::new("curl")
            .args(["-s", "-k", "-o", "/dev/null", "-D", "-"])
            .args(args)
            .output()
            .expect("run curl");
        String::from_utf8_lossy(&out.stdout).to_ascii_lowercase()
    };
    let tls = served.tls_addr.unwrap().port();
    for (proto, url) in [
        ("--http1.1", format!("http://{}/up/echo", served.addr)),
        ("--http2", format!("https://localhost:{tls}/up/echo")),
    ] {
        let head = curl(&[proto, &url]);
        assert!(
            head.contains(&format!("alt-svc: {}", alt_svc.to_ascii_lowercase())),
            "{proto}: {head}"
        );
        assert_eq!(
            head.matches("x-frame-options: deny").count(),
            1,
            "{proto}: {head}"
        );
    }
    // The upstream's own field is kept, not doubled.
    let head = curl(&[
        "--http1.1",
        &format!(
            "http://{}/up/headers?X-Frame-Options=SAMEORIGIN",
            served.addr
        ),
    ]);
    assert_eq!(head.matches("x-frame-options:").count(), 1, "{head}");
    assert!(head.contains("x-frame-options: sameorigin"), "{head}");
}

/// A client that gives up on a forwarded request before its answer — resets its stream, or
/// closes the connection — is logged 499, as nginx logs it and HTTP/1.1 and HTTP/2 do here;
/// the requests after it are logged as usual.
#[test]
fn a_client_that_leaves_is_logged_499() {
    let (_pki, cert) = cert();
    let upstream = Upstream::uvicorn();
    let (_dir, log, served) = logged_proxy(&cert, &upstream, "$request_uri $status");
    let reset = client(
        &served,
        &["cancel", "reset", "/up/slow/3000", "/up/bytes/10"],
    );
    assert_eq!(reset["then"]["status"], 200, "{reset}");
    let closed = client(
        &served,
        &["cancel", "close", "/up/slow/2900", "/up/bytes/20"],
    );
    assert_eq!(closed["then"]["status"], 200, "{closed}");
    assert_eq!(
        support::lines_of(&log, 4),
        [
            "/up/slow/3000 499",
            "/up/bytes/10 200",
            "/up/slow/2900 499",
            "/up/bytes/20 200"
        ]
    );
}
