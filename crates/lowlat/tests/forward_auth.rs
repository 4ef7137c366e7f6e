//! Forward authentication (`--forward-auth`, nginx's `auth_request`) as clients meet it: against
//! oauth2-proxy (an auth service no one here wrote: sign-in with an htpasswd file, then its
//! `/oauth2/auth` answering 202 with `X-Auth-Request-User`, or 401), against an auth service
//! that answers what each step needs (a 2xx whose fields reach the upstream while the client's
//! forged copies do not, a 401 with its `WWW-Authenticate`, a redirect to a login page, another
//! status), over HTTP/1.1, HTTP/2 and HTTP/3, and against one that hangs or is not there (the
//! request fails closed within the timeout); the counts on `/metrics`.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

mod support;
use support::origin::{request_to, Framing, Origin};
use support::upstream::tool;
use support::{curl, Served};

/// The counts of `/metrics` for forward auth, as `outcome=N` lines.
fn auth_counts(metrics: &str) -> Vec<String> {
    let out = curl(&["-s", &format!("http://{metrics}/metrics")]);
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter_map(|l| l.strip_prefix("lowlat_forward_auth_total{"))
        .filter_map(|l| {
            let outcome = l.split("outcome=\"").nth(1)?.split('"').next()?;
            let n = l.rsplit(' ').next()?;
            Some(format!("{outcome}={n}"))
        })
        .collect()
}

/// The decisions of one auth service reach the client, over HTTP/1.1 and HTTP/2: a 2xx lets
/// the request through with the copied fields (a forged client copy dropped), a 401 and a
/// redirect are the client's answer with their fields and body, anything else is a 500.
#[test]
fn the_auth_service_decides_over_http1_and_http2() {
    let app = Origin::start();
    app.set("/app/page", 200, "", b"the app's page");
    let auth = Origin::start();
    let metrics = format!("127.0.0.1:{}", support::free_port());
    let rule = format!(
        "/app/={}/check,copy=X-Auth-Request-User,X-Auth-Request-Email,timeout=2s",
        auth.url()
    );
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let s = Served::start([
        "--access-log",
        log.to_str().unwrap(),
        "--h2c",
        "--proxy",
        &format!("/app/={}", app.url()),
        "--forward-auth",
        &rule,
        "--metrics",
        &metrics,
    ]);

    // Yes: the copied fields reach the upstream, the client's own copy of one does not.
    auth.set(
        "/check",
        202,
        "X-Auth-Request-User: alice\nX-Auth-Request-Email: alice@example.org\nX-Other: no",
        b"",
    );
    let got = request_to(
        s.addr,
        "app.test",
        "GET",
        "/app/page?x=1",
        &[
            "X-Auth-Request-User: mallory",
            "Cookie: session=s1",
            "Authorization: Bearer t0k",
        ],
    );
    assert_eq!(got.status, 200, "{}", got.head);
    assert_eq!(got.body, b"the app's page");
    let asked = auth.last("/check");
    for line in [
        "GET /check HTTP/1.1",
        "X-Forwarded-Method: GET",
        "X-Forwarded-Uri: /app/page?x=1",
        "X-Original-URI: /app/page?x=1",
        "X-Forwarded-Host: app.test",
        "X-Forwarded-Proto: http",
        "Cookie: session=s1",
        "Authorization: Bearer t0k",
    ] {
        assert!(
            asked.contains(line),
            "{line:?} not in the subrequest:\n{asked}"
        );
    }
    let forwarded = app.last("/app/page");
    assert!(
        forwarded.contains("X-Auth-Request-User: alice\r\n")
            && forwarded.contains("X-Auth-Request-Email: alice@example.org\r\n"),
        "{forwarded}"
    );
    assert!(
        !forwarded.contains("mallory") && !forwarded.contains("X-Other"),
        "{forwarded}"
    );

    // No: the 401 is the client's, with its challenge and body, and nothing else of it.
    auth.set(
        "/check",
        401,
        "WWW-Authenticate: Bearer realm=\"app\"\nX-Internal: secret",
        b"sign in first",
    );
    let before = app.count("GET /app/page");
    let got = request_to(s.addr, "app.test", "GET", "/app/page", &[]);
    assert_eq!(got.status, 401, "{}", got.head);
    assert_eq!(got.field("www-authenticate"), Some("Bearer realm=\"app\""));
    assert_eq!(got.field("x-internal"), None, "{}", got.head);
    assert_eq!(got.body, b"sign in first");
    assert_eq!(
        app.count("GET /app/page"),
        before,
        "a refused request reached the app"
    );

    // The login page: a redirect with its cookie.
    auth.set(
        "/check",
        302,
        "Location: https://login.example/?rd=%2Fapp%2Fpage\nSet-Cookie: csrf=abc; HttpOnly",
        b"",
    );
    let got = request_to(s.addr, "app.test", "GET", "/app/page", &[]);
    assert_eq!(got.status, 302, "{}", got.head);
    assert_eq!(
        got.field("location"),
        Some("https://login.example/?rd=%2Fapp%2Fpage")
    );
    assert_eq!(got.field("set-cookie"), Some("csrf=abc; HttpOnly"));

    // Anything else fails closed, as nginx's 500.
    for status in [404, 500] {
        auth.set("/check", status, "", b"oops");
        let got = request_to(s.addr, "app.test", "GET", "/app/page", &[]);
        assert_eq!(got.status, 500, "auth said {status}: {}", got.head);
    }

    // An answer whose body comes a moment after its head is judged whole, on a later read.
    auth.set_framed(
        "/check",
        200,
        "X-Auth-Request-User: dave",
        b"ok",
        Framing::Late,
    );
    let got = request_to(s.addr, "app.test", "GET", "/app/page", &[]);
    assert_eq!(got.status, 200, "{}", got.head);
    assert!(app
        .last("/app/page")
        .contains("X-Auth-Request-User: dave\r\n"));
    auth.set_framed("/check", 403, "", b"not you", Framing::Late);
    let got = request_to(s.addr, "app.test", "GET", "/app/page", &[]);
    assert_eq!(got.status, 403, "{}", got.head);
    assert_eq!(got.body, b"not you");

    // A body too large to come with the head streams to the upstream once the auth service
    // said yes (the subrequest itself carries none), over HTTP/1.1 and HTTP/2.
    auth.set("/check", 200, "X-Auth-Request-User: dave", b"");
    let upload = dir.path().join("upload.bin");
    std::fs::write(&upload, vec![b'x'; 3 << 20]).unwrap();
    let data = format!("@{}", upload.display());
    for h2 in [false, true] {
        let mut args = vec!["-s", "-w", " %{http_code}", "--data-binary", &data];
        if h2 {
            args.push("--http2-prior-knowledge");
        }
        let url = format!("http://{}/app/page", s.addr);
        args.push(&url);
        let out = curl(&args);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "the app's page 200",
            "h2: {h2}"
        );
        let forwarded = app.last("/app/page");
        assert!(forwarded.starts_with("POST /app/page"), "{forwarded}");
        assert!(
            forwarded.contains("X-Auth-Request-User: dave\r\n"),
            "{forwarded}"
        );
        assert!(
            !auth.last("/check").contains("Content-Length"),
            "{}",
            auth.last("/check")
        );
    }

    // HTTP/2: the same decisions.
    let h2 = |extra: &[&str]| {
        let mut args = vec![
            "-s",
            "-D",
            "-",
            "--http2-prior-knowledge",
            "-H",
            "x-auth-request-user: mallory",
        ];
        args.extend_from_slice(extra);
        let url = format!("http://{}/app/page", s.addr);
        args.push(&url);
        String::from_utf8_lossy(&curl(&args).stdout).into_owned()
    };
    auth.set("/check", 200, "X-Auth-Request-User: bob", b"");
    let out = h2(&["-H", "cookie: a=1", "-H", "cookie: b=2"]);
    assert!(out.starts_with("HTTP/2 200"), "{out}");
    assert!(out.ends_with("the app's page"), "{out}");
    let forwarded = app.last("/app/page");
    assert!(
        forwarded.contains("X-Auth-Request-User: bob\r\n"),
        "{forwarded}"
    );
    assert!(!forwarded.contains("mallory"), "{forwarded}");
    assert!(
        auth.last("/check").contains("Cookie: a=1; b=2\r\n"),
        "{}",
        auth.last("/check")
    );
    auth.set("/check", 401, "WWW-Authenticate: Basic realm=\"x\"", b"no");
    let out = h2(&[]);
    assert!(out.starts_with("HTTP/2 401"), "{out}");
    assert!(out.contains("www-authenticate: Basic realm=\"x\""), "{out}");

    let counts = auth_counts(&metrics);
    assert_eq!(counts, ["passed=5", "denied=4", "failed=2"], "{counts:?}");
    // The access log names the user the auth service let through, never the client's claim.
    s.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    let users: Vec<(&str, &str)> = text
        .lines()
        .map(|l| {
            let user = l.split(' ').nth(2).unwrap_or_default();
            let status = l.split("\" ").nth(1).and_then(|r| r.split(' ').next());
            (user, status.unwrap_or_default())
        })
        .collect();
    assert_eq!(
        users,
        [
            ("alice", "200"),
            ("-", "401"),
            ("-", "302"),
            ("-", "500"),
            ("-", "500"),
            ("dave", "200"),
            ("-", "403"),
            ("dave", "200"),
            ("dave", "200"),
            ("bob", "200"),
            ("-", "401"),
        ],
        "{text}"
    );
}

/// HTTP/3 requests meet the same rule: let through with the copied field, or refused.
#[test]
fn the_auth_service_decides_over_http3() {
    let app = Origin::start();
    app.set("/app/page", 200, "", b"the app's page");
    let auth = Origin::start();
    auth.set("/check", 200, "X-Auth-Request-User: carol", b"");
    let (_pki, cert) = support::h3::cert();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::fs::write(root.join("docs/a.txt"), b"a document").unwrap();
    // Sent from the file once let through, a piece at a time as the stream takes it (larger
    // files go over HTTP/1.1 and HTTP/2 in `routes_answered_locally_wait_for_the_verdict`:
    // this client takes seconds a MiB).
    let big: Vec<u8> = (0..2u32 << 20).map(|i| (i % 241) as u8).collect();
    std::fs::write(root.join("docs/big.bin"), &big).unwrap();
    let big_sha = String::from_utf8(
        Command::new("sha256sum")
            .arg(root.join("docs/big.bin"))
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let served = support::h3::serve(
        &cert,
        &[
            "--access-log",
            log.to_str().unwrap(),
            "--access-log-format",
            "$remote_user $status $server_protocol",
            "--root",
            root.to_str().unwrap(),
            "--proxy",
            &format!("/app/={}", app.url()),
            "--forward-auth",
            &format!("/app/={}/check,copy=X-Auth-Request-User", auth.url()),
            "--forward-auth",
            &format!("/docs/={}/check", auth.url()),
        ],
    );
    let spec = r#"{"method":"GET","path":"/app/page","headers":[["x-auth-request-user","mallory"],["cookie","s=3"]]}"#;
    let got = support::h3::client(&served, &["fetch", spec]);
    assert_eq!(got["responses"][0]["status"], 200, "{got}");
    assert_eq!(got["responses"][0]["text"], "the app's page", "{got}");
    let forwarded = app.last("/app/page");
    assert!(
        forwarded.contains("X-Auth-Request-User: carol\r\n"),
        "{forwarded}"
    );
    assert!(!forwarded.contains("mallory"), "{forwarded}");
    let asked = auth.last("/check");
    assert!(asked.contains("X-Forwarded-Proto: https\r\n"), "{asked}");
    assert!(asked.contains("Cookie: s=3\r\n"), "{asked}");
    auth.set("/check", 403, "", b"forbidden here");
    let got = support::h3::client(&served, &["fetch", spec]);
    assert_eq!(got["responses"][0]["status"], 403, "{got}");
    assert_eq!(got["responses"][0]["text"], "forbidden here", "{got}");
    // A file, answered in the worker, waits for the verdict too.
    let file = r#"{"method":"GET","path":"/docs/a.txt"}"#;
    let got = support::h3::client(&served, &["fetch", file]);
    assert_eq!(got["responses"][0]["status"], 403, "{got}");
    assert_eq!(got["responses"][0]["text"], "forbidden here", "{got}");
    auth.set("/check", 200, "", b"");
    let got = support::h3::client(&served, &["fetch", file]);
    assert_eq!(got["responses"][0]["status"], 200, "{got}");
    assert_eq!(got["responses"][0]["text"], "a document", "{got}");
    let got = support::h3::client(
        &served,
        &["fetch", r#"{"method":"GET","path":"/docs/big.bin"}"#],
    );
    let r = &got["responses"][0];
    assert_eq!(r["status"], 200, "{got}");
    assert_eq!(r["length"], big.len(), "{got}");
    let sha = r["sha256"].as_str().unwrap_or_default();
    assert!(
        !sha.is_empty() && big_sha.starts_with(sha),
        "{got} {big_sha}"
    );
    served.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        [
            "carol 200 HTTP/3.0",
            "- 403 HTTP/3.0",
            "- 403 HTTP/3.0",
            "- 200 HTTP/3.0",
            "- 200 HTTP/3.0"
        ],
        "{text}"
    );
}

/// Routes answered in the worker itself under a rule's prefix — files (one small, one sent
/// from disk), a directory's redirect, a HEAD, a cache hit — wait for the auth service's answer
/// as a forwarded request does: let through, the route's own answer goes, pipelined answers in
/// order and over HTTP/2 too, a file of 24 MiB whole (sent from the file, not held in memory);
/// refused, only the refusal.
#[test]
fn routes_answered_locally_wait_for_the_verdict() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("small.html"), b"hello").unwrap();
    let big: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.path().join("big.bin"), &big).unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/index.html"), b"in sub").unwrap();
    let huge: Vec<u8> = (0..24u32 << 20).map(|i| (i % 253) as u8).collect();
    std::fs::write(dir.path().join("huge.bin"), &huge).unwrap();
    let app = Origin::start();
    app.set(
        "/app/page",
        200,
        "Cache-Control: max-age=60",
        b"cached page",
    );
    let auth = Origin::start();
    auth.set("/check", 200, "", b"");
    let s = Served::start([
        "--root",
        dir.path().to_str().unwrap(),
        "--h2c",
        "--proxy",
        &format!("/app/={}", app.url()),
        "--cache",
        "--forward-auth",
        &format!("/={}/check", auth.url()),
    ]);

    let got = request_to(s.addr, "site.test", "GET", "/small.html", &[]);
    assert_eq!(
        (got.status, &got.body[..]),
        (200, &b"hello"[..]),
        "{}",
        got.head
    );
    assert_eq!(got.field("content-length"), Some("5"), "{}", got.head);
    let got = request_to(s.addr, "site.test", "GET", "/big.bin", &[]);
    assert_eq!(got.status, 200, "{}", got.head);
    assert!(got.body == big, "{} bytes", got.body.len());
    let got = request_to(s.addr, "site.test", "HEAD", "/big.bin", &[]);
    assert_eq!(got.status, 200, "{}", got.head);
    assert_eq!(got.field("content-length"), Some("1000000"), "{}", got.head);
    assert!(got.body.is_empty());
    let got = request_to(s.addr, "site.test", "GET", "/sub", &[]);
    assert_eq!(got.status, 301, "{}", got.head);
    assert!(
        got.field("location").is_some_and(|l| l.ends_with("/sub/")),
        "{}",
        got.head
    );
    for _ in 0..2 {
        let got = request_to(s.addr, "site.test", "GET", "/app/page", &[]);
        assert_eq!((got.status, &got.body[..]), (200, &b"cached page"[..]));
    }
    let got = request_to(s.addr, "site.test", "GET", "/app/page", &[]);
    assert!(got.cache_status().contains("hit"), "{}", got.head);
    assert_eq!(
        got.head.matches("Connection: close").count(),
        1,
        "{}",
        got.head
    );
    assert_eq!(
        app.count("GET /app/page"),
        1,
        "the second and third were hits"
    );
    let warm = s.status_kib("VmHWM:");
    let got = request_to(s.addr, "site.test", "GET", "/huge.bin", &[]);
    assert_eq!(got.status, 200, "{}", got.head);
    assert_eq!(
        got.field("content-length"),
        Some("25165824"),
        "{}",
        got.head
    );
    assert!(got.body == huge, "{} bytes", got.body.len());

    // Pipelined: each waits for its own verdict, the answers go in order (the large file's
    // before the requests behind it).
    let mut conn = std::net::TcpStream::connect(s.addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    std::io::Write::write_all(
        &mut conn,
        b"GET /huge.bin HTTP/1.1\r\nHost: a\r\n\r\nGET /small.html HTTP/1.1\r\nHost: a\r\n\
          Connection: close\r\n\r\n",
    )
    .unwrap();
    let mut all = Vec::new();
    std::io::Read::read_to_end(&mut conn, &mut all).unwrap();
    let head_end = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(all.starts_with(b"HTTP/1.1 200"));
    assert!(all[head_end..head_end + huge.len()] == huge[..]);
    let rest = String::from_utf8_lossy(&all[head_end + huge.len()..]);
    assert!(
        rest.starts_with("HTTP/1.1 200") && rest.ends_with("\r\n\r\nhello"),
        "{rest}"
    );

    // Pipelined: each waits for its own verdict, the answers go in order.
    let mut conn = std::net::TcpStream::connect(s.addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    std::io::Write::write_all(
        &mut conn,
        b"GET /small.html HTTP/1.1\r\nHost: a\r\n\r\nGET /sub/ HTTP/1.1\r\nHost: a\r\n\r\n\
          GET /app/page HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let mut all = Vec::new();
    std::io::Read::read_to_end(&mut conn, &mut all).unwrap();
    let text = String::from_utf8_lossy(&all);
    let bodies: Vec<&str> = text
        .split("HTTP/1.1 ")
        .skip(1)
        .map(|r| r.split("\r\n\r\n").nth(1).unwrap_or(""))
        .collect();
    assert_eq!(bodies, ["hello", "in sub", "cached page"], "{text}");

    let h2 = |path: &str| {
        let out = curl(&[
            "-s",
            "--http2-prior-knowledge",
            "-w",
            "\n%{http_code} %{http_version}",
            &format!("http://{}{path}", s.addr),
        ]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(h2("/small.html"), "hello\n200 2");
    assert_eq!(h2("/app/page"), "cached page\n200 2");
    let out = curl(&[
        "-s",
        "--http2-prior-knowledge",
        &format!("http://{}/huge.bin", s.addr),
    ]);
    assert!(out.stdout == huge, "HTTP/2: {} bytes", out.stdout.len());
    // Three times 24 MiB sent, none of it held: the file went out as the clients took it.
    let grew = s.status_kib("VmHWM:").saturating_sub(warm);
    assert!(
        grew < 8 * 1024,
        "the server grew by {grew} KiB sending the large file"
    );

    // Refused: the refusal, and nothing of the route's answer (the hosts above were three
    // keys: three fetches).
    assert_eq!(app.count("GET /app/page"), 3);
    auth.set(
        "/check",
        401,
        "WWW-Authenticate: Basic realm=\"x\"",
        b"sign in",
    );
    for path in ["/small.html", "/big.bin", "/app/page", "/sub"] {
        let got = request_to(s.addr, "site.test", "GET", path, &[]);
        assert_eq!(
            (got.status, &got.body[..]),
            (401, &b"sign in"[..]),
            "{path}: {}",
            got.head
        );
        assert!(got.field("cache-status").is_none(), "{}", got.head);
    }
    assert_eq!(h2("/small.html"), "sign in\n401 2");
    assert_eq!(app.count("GET /app/page"), 3);
}

/// An auth service that accepts and never answers: the request fails closed (504) within the
/// rule's timeout, and the next request too; one not listening at all: 502, for a route
/// answered in the worker (`/plaintext`) as for a forwarded one.
#[test]
fn a_hanging_or_absent_auth_service_fails_closed() {
    let hang = TcpListener::bind("127.0.0.1:0").unwrap();
    let hang_addr = hang.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in hang.incoming() {
            held.push(conn);
        }
    });
    let absent = support::free_port();
    let app = Origin::start();
    app.set("/app/page", 200, "", b"the app's page");
    app.set("/other/page", 200, "", b"the other page");
    let metrics = format!("127.0.0.1:{}", support::free_port());
    let s = Served::start([
        "--proxy",
        &format!("/app/={}", app.url()),
        "--proxy",
        &format!("/other/={}", app.url()),
        "--forward-auth",
        &format!("/app/=http://{hang_addr}/auth,timeout=1s"),
        "--forward-auth",
        &format!("/other/=http://127.0.0.1:{absent}/auth"),
        "--forward-auth",
        &format!("/plaintext=http://127.0.0.1:{absent}/auth"),
        "--metrics",
        &metrics,
    ]);
    for _ in 0..2 {
        let at = Instant::now();
        let got = request_to(s.addr, "app.test", "GET", "/app/page", &[]);
        let took = at.elapsed();
        assert_eq!(got.status, 504, "{}", got.head);
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(4),
            "{took:?}"
        );
    }
    let got = request_to(s.addr, "app.test", "GET", "/other/page", &[]);
    assert_eq!(got.status, 502, "{}", got.head);
    // A route answered in the worker waits for the verdict as well: none, so no answer.
    let got = request_to(s.addr, "app.test", "GET", "/plaintext", &[]);
    assert_eq!(got.status, 502, "{}", got.head);
    assert_eq!(app.count("GET /app/page") + app.count("GET /other/page"), 0);
    let counts = auth_counts(&metrics);
    // One rule failed closed twice; the other two once each.
    assert_eq!(
        counts.iter().filter(|c| c.starts_with("failed=")).count(),
        3,
        "{counts:?}"
    );
    assert!(
        counts.contains(&"failed=2".to_owned())
            && counts.iter().filter(|c| *c == "failed=1").count() == 2,
        "{counts:?}"
    );
}

/// oauth2-proxy, killed when dropped.
struct Oauth2Proxy(Child);

impl Drop for Oauth2Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// oauth2-proxy in front of nothing (`/oauth2/auth` is all it is asked), its users in an
/// htpasswd file, saying who signed in with `X-Auth-Request-*`.
fn oauth2_proxy(dir: &Path, port: u16) -> Oauth2Proxy {
    let users = dir.join("users.htpasswd");
    let made = Command::new("htpasswd")
        .args(["-B", "-b", "-c"])
        .arg(&users)
        .args(["alice", "s3cret"])
        .output()
        .expect("htpasswd (scripts/test-deps.sh installs apache2-utils)");
    assert!(made.status.success(), "{made:?}");
    let child = Command::new(tool("oauth2-proxy"))
        .arg(format!("--http-address=127.0.0.1:{port}"))
        .arg(format!("--htpasswd-file={}", users.display()))
        .args([
            "--provider=oidc",
            "--skip-oidc-discovery",
            "--oidc-issuer-url=http://127.0.0.1:1/",
            "--login-url=http://127.0.0.1:1/authorize",
            "--redeem-url=http://127.0.0.1:1/token",
            "--oidc-jwks-url=http://127.0.0.1:1/jwks",
            "--client-id=lowlat-test",
            "--client-secret=not-used",
            "--cookie-secret=0123456789abcdef0123456789abcdef",
            "--cookie-secure=false",
            "--email-domain=*",
            "--upstream=static://200",
            "--set-xauthrequest",
            "--reverse-proxy",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start oauth2-proxy");
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "oauth2-proxy did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Oauth2Proxy(child)
}

/// oauth2-proxy, as nginx users put it in front of an application: `/oauth2/` forwarded to it
/// (its sign-in page, left unguarded with `off`), everything else behind `--forward-auth` to its
/// `/oauth2/auth`. Without a
/// session the client gets oauth2-proxy's 401; signed in (its cookie), the request reaches the
/// application with the user oauth2-proxy names, over HTTP/1.1 and HTTP/2.
#[test]
fn oauth2_proxy_signs_users_in() {
    let dir = tempfile::tempdir().unwrap();
    let port = support::free_port();
    let _o2p = oauth2_proxy(dir.path(), port);
    let app = Origin::start();
    app.set("/app/page", 200, "", b"the app's page");
    let s = Served::start([
        "--h2c",
        "--proxy",
        &format!("/oauth2/=http://127.0.0.1:{port}"),
        "--proxy",
        &format!("/={}", app.url()),
        "--forward-auth",
        &format!(
            "/=http://127.0.0.1:{port}/oauth2/auth,copy=X-Auth-Request-User,X-Auth-Request-Email"
        ),
        // Its sign-in pages are for everyone (nginx's `auth_request off` in their location).
        "--forward-auth",
        "/oauth2/=off",
    ]);
    let got = request_to(
        s.addr,
        "app.test",
        "GET",
        "/app/page",
        &["X-Auth-Request-User: mallory"],
    );
    assert_eq!(got.status, 401, "{}", got.head);
    assert_eq!(app.count("GET /app/page"), 0);

    // Signing in through lowlat, with the htpasswd user: oauth2-proxy's session cookie.
    let out = curl(&[
        "-s",
        "-D",
        "-",
        "-o",
        "/dev/null",
        "-H",
        "Host: app.test",
        "--data",
        "username=alice&password=s3cret",
        &format!("http://{}/oauth2/sign_in", s.addr),
    ]);
    let head = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(head.starts_with("HTTP/1.1 302"), "{head}");
    let cookie = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(n, _)| n.eq_ignore_ascii_case("set-cookie"))
        .map(|(_, v)| v.trim().split(';').next().unwrap_or_default().to_owned())
        .find(|c| c.starts_with("_oauth2_proxy="))
        .unwrap_or_else(|| panic!("no session cookie in {head}"));
    let with_cookie = format!("Cookie: {cookie}");
    let got = request_to(
        s.addr,
        "app.test",
        "GET",
        "/app/page",
        &[&with_cookie, "X-Auth-Request-User: mallory"],
    );
    assert_eq!(got.status, 200, "{}", got.head);
    assert_eq!(got.body, b"the app's page");
    let forwarded = app.last("/app/page");
    assert!(
        forwarded.contains("X-Auth-Request-User: alice\r\n"),
        "{forwarded}"
    );
    assert!(!forwarded.contains("mallory"), "{forwarded}");

    let out = curl(&[
        "-s",
        "--http2-prior-knowledge",
        "-H",
        &with_cookie,
        "-w",
        " %{http_code}",
        &format!("http://{}/app/page", s.addr),
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "the app's page 200");
    let out = curl(&[
        "-s",
        "-o",
        "/dev/null",
        "--http2-prior-knowledge",
        "-w",
        "%{http_code}",
        &format!("http://{}/app/page", s.addr),
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "401");
}

/// `--check-config` reads the rules as a start does, per site too: one whose auth service does
/// not resolve, or is not HTTP, is named with its file and line; `off` needs no service.
#[test]
fn check_config_names_a_bad_rule_where_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("lowlat.toml");
    let check = |text: &str| {
        std::fs::write(&cfg, text).unwrap();
        let out = Command::new(support::BIN)
            .args(["serve", "--check-config", "--config"])
            .arg(&cfg)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, said) = check(
        "proxy = [\"/=http://127.0.0.1:9\"]\n\
         forward_auth = [\"/=http://127.0.0.1:4180/oauth2/auth,copy=X-Auth-Request-User\", \"/oauth2/=off\"]\n\
         [[site]]\n\
         server_names = [\"a.test\"]\n\
         forward_auth = [\"/=unix:/run/auth.sock,timeout=2s\"]\n",
    );
    assert!(ok, "{said}");
    let (ok, said) = check(
        "[[site]]\n\
         server_names = [\"a.test\"]\n\
         forward_auth = [\"/x/=http://no-such-host.invalid:1/auth\"]\n",
    );
    assert!(!ok);
    assert!(
        said.contains("lowlat.toml:3: site[0].forward_auth:"),
        "{said}"
    );
    assert!(
        said.contains("cannot resolve no-such-host.invalid"),
        "{said}"
    );
    let (ok, said) = check("forward_auth = [\"/=https://auth.example/check\"]\n");
    assert!(!ok);
    assert!(said.contains("lowlat.toml:1: forward_auth:"), "{said}");
}
