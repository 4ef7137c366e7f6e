//! `lowlat serve` as a real process: `return` rules (redirects and fixed answers) and their
//! precedence against proxy rules and files, the HTTPS redirect beside a TLS listener,
//! `try_files` for single-page apps, `log_format` lines byte for byte, and refused HTTP/2
//! requests in the access log. Clients: raw HTTP/1.1 over std sockets where the bytes matter,
//! curl for HTTP/2 (h2c with prior knowledge) and TLS.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use lowlat_testkit::pki::{KeyKind, Pki};

mod support;
use support::{curl, free_port, Served, BIN};

/// `lowlat serve` with `args` (its listeners among them); stopped with [`Served::stop`] to
/// flush the access log, killed when dropped.
fn serve(args: &[&str]) -> Served {
    let mut cmd = Command::new(BIN);
    cmd.arg("serve").args(args);
    Served::spawn(cmd)
}

/// One HTTP/1.1 exchange on its own connection: (status, head, body).
fn raw(addr: SocketAddr, request: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no head in {text:?} for {request:?}"));
    let status = head[9..12].parse().unwrap();
    (status, head.to_owned(), body.to_owned())
}

/// `GET target` with `Host: host`, closing after.
fn get(addr: SocketAddr, host: &str, target: &str) -> (u16, String, String) {
    raw(
        addr,
        &format!("GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
    )
}

/// The value of `name` in a response head (case-insensitive), or "".
fn field(head: &str, name: &str) -> String {
    support::field(head, name).unwrap_or_default().to_owned()
}

/// `curl -i` over HTTP/2 with prior knowledge: (status, head, body).
fn h2c(url: &str, extra: &[&str]) -> (u16, String, String) {
    let out = curl(&[&["-i", "--http2-prior-knowledge"], extra, &[url]].concat());
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("curl {url}: {text:?} {:?}", out.stderr));
    assert!(head.starts_with("HTTP/2 "), "{head}");
    (
        head[7..10].parse().unwrap(),
        head.to_owned(),
        body.to_owned(),
    )
}

/// `GET target` (`Host: x`) of each case gets its status and body.
fn assert_gets(addr: SocketAddr, cases: &[(&str, u16, &str)]) {
    for &(target, status, body) in cases {
        let (s, _, b) = get(addr, "x", target);
        assert_eq!((s, b.as_str()), (status, body), "GET {target}");
    }
}

fn write(dir: &Path, rel: &str, body: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, body).unwrap();
}

/// Each shape of `return` over HTTP/1.1 and HTTP/2, its variables, and the longest prefix
/// winning among returns, proxy rules, the built-in routes and files.
#[test]
fn returns_redirect_and_answer_by_longest_prefix() {
    let root = tempfile::tempdir().unwrap();
    write(root.path(), "old/x.html", "old file");
    write(root.path(), "index.html", "home");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let server = serve(&[
        "--listen",
        &listen,
        "--workers",
        "1",
        "--h2c",
        "--root",
        root.path().to_str().unwrap(),
        // Nothing listens on port 1: a request the proxy takes is answered 502.
        "--proxy",
        "/app/=http://127.0.0.1:1",
        "--return",
        "/app/legacy/=410 gone: $uri",
        "--return",
        "/old/=301 https://$host$request_uri",
        "--return",
        "/go=302 $scheme://$host:$server_port/new?$args",
        "--return",
        "/see=303 /other",
        "--return",
        "/tmp=307 /t",
        "--return",
        "/perm=308 https://example.net/p$uri",
        "--return",
        "/private/=403",
        "--return",
        "/hello=200 hi $uri ($query_string)",
        "--return",
        "/plaintext=404",
    ]);
    let addr = server.addr;
    let host = "Example.COM:8080";
    // (target, status, Location, body)
    let cases: &[(&str, u16, &str, &str)] = &[
        (
            "/old/page?q=1&r",
            301,
            "https://example.com/old/page?q=1&r",
            "301 Moved Permanently\n",
        ),
        // The return wins over the file under its prefix.
        (
            "/old/x.html",
            301,
            "https://example.com/old/x.html",
            "301 Moved Permanently\n",
        ),
        (
            "/go?a=b",
            302,
            &format!("http://example.com:{port}/new?a=b"),
            "302 Found\n",
        ),
        (
            "/go/deeper",
            302,
            &format!("http://example.com:{port}/new?"),
            "302 Found\n",
        ),
        ("/see", 303, "/other", "303 See Other\n"),
        ("/tmp/x", 307, "/t", "307 Temporary Redirect\n"),
        (
            "/perm/a%20b",
            308,
            "https://example.net/p/perm/a%20b",
            "308 Permanent Redirect\n",
        ),
        ("/private/key", 403, "", "403 Forbidden\n"),
        ("/private", 403, "", "403 Forbidden\n"),
        ("/hello/x?y=1", 200, "", "hi /hello/x (y=1)"),
        // Longest prefix: the return under the proxy's prefix, the proxy elsewhere under it.
        ("/app/legacy/v1", 410, "", "gone: /app/legacy/v1"),
        ("/app/current", 502, "", "502 Bad Gateway\n"),
        // A return takes a built-in route's path, as a proxy rule does.
        ("/plaintext", 404, "", "404 Not Found\n"),
        // No rule: files.
        ("/", 200, "", "home"),
        // A prefix is whole segments: /older is not under /old/.
        ("/older", 404, "", "404 Not Found\n"),
    ];
    for &(target, status, location, body) in cases {
        let (s, head, b) = get(addr, host, target);
        assert_eq!(
            (s, field(&head, "location").as_str(), b.as_str()),
            (status, location, body),
            "GET {target}: {head}"
        );
        let (s, head, b) = h2c(
            &format!("http://127.0.0.1:{port}{target}"),
            &["-H", &format!("Host: {host}")],
        );
        assert_eq!(
            (s, field(&head, "location").as_str(), b.as_str()),
            (status, location, body),
            "HTTP/2 GET {target}: {head}"
        );
    }
    // Every method; HEAD without the body.
    let (s, head, _) = raw(
        addr,
        "POST /old/form HTTP/1.1\r\nHost: a.example\r\nContent-Length: 3\r\nConnection: close\r\n\r\nx=1",
    );
    assert_eq!(
        (s, field(&head, "location")),
        (301, "https://a.example/old/form".into())
    );
    let (s, _, body) = raw(
        addr,
        "HEAD /hello HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert_eq!((s, body.as_str()), (200, ""));
    // No Host to put in $host (HTTP/1.0, no site name): 400, not a URL without a host.
    let (s, _, _) = raw(addr, "GET /old/x HTTP/1.0\r\n\r\n");
    assert_eq!(s, 400);
    // A Host that is not a host name never reaches Location.
    let (s, _, _) = get(addr, "evil.example/x", "/old/x");
    assert_eq!(s, 400);
}

/// `--https-redirect`: clear-text requests (HTTP/1.1 and h2c) get 308 to the TLS listener's
/// port, path and query kept, Host's port dropped; ACME challenges stay in clear; requests over
/// TLS are served.
/// A `return` rule covers every spelling of the paths under it — percent-encoded, with empty
/// or dot segments — which the file handler would otherwise normalise and serve: another
/// spelling is redirected to the rule's.
#[test]
fn returns_cover_every_spelling_of_their_prefix() {
    let root = tempfile::tempdir().unwrap();
    write(root.path(), "admin/secret.txt", "secret\n");
    write(root.path(), "open.txt", "open\n");
    let listen = format!("127.0.0.1:{}", free_port());
    let s = serve(&[
        "--listen",
        &listen,
        "--workers",
        "1",
        "--root",
        root.path().to_str().unwrap(),
        "--return",
        "/admin/=403",
    ]);
    assert_eq!(get(s.addr, "t", "/admin/secret.txt").0, 403);
    // Another spelling is sent to the one the rule is written in (which it then answers).
    for alias in [
        "/%61dmin/secret.txt",
        "//admin/secret.txt",
        "/./admin/secret.txt",
        "/open.txt/../admin/secret.txt",
        "/x/%2e%2e/admin/secret.txt",
    ] {
        let (status, head, _) = get(s.addr, "t", alias);
        assert_eq!(status, 308, "{alias}");
        assert_eq!(field(&head, "location"), "/admin/secret.txt", "{alias}");
    }
    let (status, head, _) = get(s.addr, "t", "/%61dmin/?a=1");
    assert_eq!(
        (status, field(&head, "location").as_str()),
        (308, "/admin/?a=1")
    );
    // A spelling the routes read as its normal form is served as it was.
    assert_eq!(get(s.addr, "t", "/%6fpen.txt").2, "open\n");
    assert_eq!(get(s.addr, "t", "/../admin/secret.txt").0, 400);
}

#[test]
fn https_redirect_to_the_tls_port_sparing_acme_challenges() {
    let pki = Pki::new();
    let leaf = pki.leaf("site", &["localhost"], KeyKind::EcdsaP256);
    let (clear, tls) = (free_port(), free_port());
    let server = serve(&[
        "--listen",
        &format!("127.0.0.1:{clear}"),
        "--tls-listen",
        &format!("127.0.0.1:{tls}"),
        "--cert",
        leaf.cert.to_str().unwrap(),
        "--key",
        leaf.key.to_str().unwrap(),
        "--workers",
        "1",
        "--h2c",
        "--https-redirect",
        "--return",
        "/.well-known/acme-challenge/=200 token-for-$uri",
    ]);
    let addr = server.addr;
    let (s, head, body) = get(addr, &format!("LocalHost:{clear}"), "/a/b?x=1&y=%20");
    assert_eq!(
        (s, field(&head, "location").as_str(), body.as_str()),
        (
            308,
            format!("https://localhost:{tls}/a/b?x=1&y=%20").as_str(),
            "308 Permanent Redirect\n"
        )
    );
    let (s, head, _) = raw(
        addr,
        "POST /form HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\nConnection: close\r\n\r\nab",
    );
    assert_eq!(
        (s, field(&head, "location")),
        (308, format!("https://localhost:{tls}/form"))
    );
    let (s, head, _) = h2c(
        &format!("http://127.0.0.1:{clear}/h2?q"),
        &["-H", "Host: localhost"],
    );
    assert_eq!(
        (s, field(&head, "location")),
        (308, format!("https://localhost:{tls}/h2?q"))
    );
    let (s, _, body) = get(addr, "localhost", "/.well-known/acme-challenge/tok");
    assert_eq!(
        (s, body.as_str()),
        (200, "token-for-/.well-known/acme-challenge/tok")
    );
    // Over TLS: served, not redirected (the built-in site's front page).
    let out = support::curl_https(
        tls,
        &pki.ca_path(),
        "localhost",
        "/plaintext",
        &["-o", "/dev/null", "-w", "%{http_code} %{http_version}"],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200 2");
}

/// `https_redirect` and `return` per `[[site]]` in a config file: one site redirects, the other
/// does not; the top-level rule applies to a site that sets none.
#[test]
fn per_site_returns_and_https_redirect_from_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("lowlat.toml");
    std::fs::write(
        &config,
        r#"listen = ["127.0.0.1:0"]
workers = 1
return = ["/moved=301 /new"]

[[site]]
server_names = ["secure.test"]
https_redirect = true

[[site]]
server_names = ["plain.test"]
return = ["/old/=302 http://$host/new$uri", "/teapot=418 short and stout"]
"#,
    )
    .unwrap();
    let server = serve(&["--config", config.to_str().unwrap()]);
    let addr = server.addr;
    let (s, head, _) = get(addr, "secure.test", "/x?1");
    assert_eq!(
        (s, field(&head, "location").as_str()),
        (308, "https://secure.test/x?1")
    );
    let (s, head, _) = get(addr, "plain.test:99", "/old/x");
    assert_eq!(
        (s, field(&head, "location").as_str()),
        (302, "http://plain.test/new/old/x")
    );
    let (s, _, body) = get(addr, "plain.test", "/teapot");
    assert_eq!((s, body.as_str()), (418, "short and stout"));
    let (s, _, _) = get(addr, "plain.test", "/plaintext");
    assert_eq!(s, 200);
}

/// `try_files` for a single-page app: files as they are, directories by their index, every
/// other path the app's index.html; `=404` as the last entry; nothing outside the root.
#[test]
fn try_files_falls_back_inside_the_root_only() {
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "secret.txt", "secret");
    let root = tempfile::tempdir().unwrap();
    write(root.path(), "index.html", "spa");
    write(root.path(), "assets/app.js", "js");
    write(root.path(), "docs/index.html", "docs");
    write(root.path(), ".env", "dot");
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), root.path().join("leak"))
        .unwrap();
    let root_arg = root.path().to_str().unwrap();
    let spa = serve(&[
        "--listen",
        "127.0.0.1:0",
        "--workers",
        "1",
        "--h2c",
        "--root",
        root_arg,
        "--try-files",
        "$uri",
        "--try-files",
        "$uri/",
        "--try-files",
        "/index.html",
    ]);
    let addr = spa.addr;
    // (target, status, body)
    let cases: &[(&str, u16, &str)] = &[
        ("/assets/app.js", 200, "js"),
        ("/", 200, "spa"),
        ("/some/deep/route?tab=2", 200, "spa"),
        ("/some/deep/route", 200, "spa"),
        ("/docs", 200, "docs"),
        ("/docs/", 200, "docs"),
        ("/assets/missing.js", 200, "spa"),
        // A symlink out of the root is no file of the app's: the fallback.
        ("/leak", 200, "spa"),
        // Refused before any entry is tried, as without try_files.
        ("/../etc/passwd", 400, "400 Bad Request\n"),
        ("/%2e%2e/%2e%2e/etc/passwd", 400, "400 Bad Request\n"),
        ("/a/..%2f..%2fetc", 400, "400 Bad Request\n"),
        ("/.env", 404, "404 Not Found\n"),
    ];
    assert_gets(addr, cases);
    let (s, _, b) = h2c(&format!("http://{addr}/deep/link"), &[]);
    assert_eq!((s, b.as_str()), (200, "spa"));
    // A path found missing is remembered for --cache-valid (1 s), as a found file is: a file
    // that appears is served once that has passed.
    assert_eq!(get(addr, "x", "/late.js").2, "spa");
    write(root.path(), "late.js", "late");
    assert_eq!(get(addr, "x", "/late.js").2, "spa");
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(get(addr, "x", "/late.js").2, "late");
    drop(spa);

    let strict = serve(&[
        "--listen",
        "127.0.0.1:0",
        "--workers",
        "1",
        "--root",
        root_arg,
        "--try-files",
        "$uri",
        "--try-files",
        "${uri}index.html",
        "--try-files",
        "=404",
    ]);
    let addr = strict.addr;
    let cases: &[(&str, u16, &str)] = &[
        ("/assets/app.js", 200, "js"),
        ("/docs/", 200, "docs"),
        ("/", 200, "spa"),
        ("/missing", 404, "404 Not Found\n"),
        ("/docs", 404, "404 Not Found\n"),
    ];
    assert_gets(addr, cases);
}

/// A `[log_format]` picked by `access_log_format`: each line byte for byte (the time fields by
/// their shape), over HTTP/1.1 and HTTP/2; `$request_id` passed on or made.
#[test]
fn log_format_lines_are_exact() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let config = dir.path().join("lowlat.toml");
    std::fs::write(
        &config,
        format!(
            r#"listen = ["127.0.0.1:0"]
workers = 1
h2c = true
access_log = "{}"
access_log_format = "main"

[log_format]
main = '$remote_addr - $remote_user "$request" $status $body_bytes_sent $bytes_sent "$http_user_agent" host=$host site=$site/$server_name $request_method $request_uri $uri $args $scheme $server_protocol id=$request_id up=$upstream_addr/$upstream_status/$upstream_response_time x=$http_x_custom t=$request_time'
times = '[$time_local] $time_iso8601 $msec'

[[site]]
server_names = ["a.test"]

[[site]]
server_names = ["b.test", "*.b.test"]
return = ["/r=200 ok"]
"#,
            log.display()
        ),
    )
    .unwrap();
    let server = serve(&["--config", config.to_str().unwrap()]);
    let addr = server.addr;
    let (s, head, body) = raw(
        addr,
        "GET /r?k=v HTTP/1.1\r\nHost: B.test:1234\r\nUser-Agent: ua \"q\"\r\nAuthorization: Basic YWxpY2U6c2VjcmV0\r\nX-Request-Id: rid-1\r\nX-Custom: c\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(s, 200);
    // $bytes_sent: every byte the client received.
    let sent = head.len() + 4 + body.len();
    let (s, _, _) = raw(addr, "GET /plaintext HTTP/1.0\r\n\r\n");
    assert_eq!(s, 200);
    let (s, _, _) = h2c(
        &format!("http://{addr}/r"),
        &["-H", "Host: b.test", "-A", "curl-h2"],
    );
    assert_eq!(s, 200);
    server.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    let time = regex::Regex::new(r" t=\d+\.\d{3}$").unwrap();
    let strip = |l: &str| time.replace(l, "").into_owned();
    assert!(lines.iter().all(|l| time.is_match(l)), "{text}");
    assert_eq!(
        strip(lines[0]),
        format!("127.0.0.1 - alice \"GET /r?k=v HTTP/1.1\" 200 2 {sent} \"ua \\x22q\\x22\" host=b.test site=b.test/b.test GET /r?k=v /r k=v http HTTP/1.1 id=rid-1 up=-/-/- x=c")
    );
    let made = regex::Regex::new(
        r#"^127\.0\.0\.1 - - "GET /plaintext HTTP/1\.0" 200 13 (\d+) "-" host=a\.test site=a\.test/a\.test GET /plaintext /plaintext - http HTTP/1\.0 id=([0-9a-f]{32}) up=-/-/- x=-$"#,
    )
    .unwrap();
    let second = strip(lines[1]);
    let caps = made
        .captures(&second)
        .unwrap_or_else(|| panic!("{}", lines[1]));
    assert!(caps[1].parse::<u64>().unwrap() > 13);
    let h2_line = regex::Regex::new(
        r#"^127\.0\.0\.1 - - "GET /r HTTP/2\.0" 200 2 (\d+) "curl-h2" host=b\.test site=b\.test/b\.test GET /r /r - http HTTP/2\.0 id=[0-9a-f]{32} up=-/-/- x=-$"#,
    )
    .unwrap();
    assert!(h2_line.is_match(&strip(lines[2])), "{}", lines[2]);

    // The time variables, and the format given inline on the command line.
    let inline = dir.path().join("inline.log");
    let server = serve(&[
        "--listen",
        "127.0.0.1:0",
        "--workers",
        "1",
        "--access-log",
        inline.to_str().unwrap(),
        "--access-log-format",
        "[$time_local] $time_iso8601 $msec $status $worker",
    ]);
    get(server.addr, "x", "/nothing-here");
    server.stop();
    let line = std::fs::read_to_string(&inline).unwrap();
    let shape = regex::Regex::new(
        r"^\[\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d \+0000\] \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00 \d{10}\.\d{3} 404 0\n$",
    )
    .unwrap();
    assert!(shape.is_match(&line), "{line:?}");
}

/// A proxied request's line: the upstream's address, status and time, and the request's fields
/// kept while the upstream answered (over HTTP/1.1 and HTTP/2).
#[test]
fn log_format_of_proxied_requests() {
    // An upstream that answers every request on its connections with "up".
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let up = upstream.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in upstream.incoming() {
            let Ok(mut conn) = conn else { return };
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Ok(n) = conn.read(&mut chunk) else { return };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let _ =
                            conn.write_all(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nup");
                    }
                }
            });
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let server = serve(&[
        "--listen", "127.0.0.1:0", "--workers", "1", "--h2c",
        "--proxy", &format!("/api/=http://{up}"),
        "--access-log", log.to_str().unwrap(),
        "--access-log-format",
        "\"$request\" $status $body_bytes_sent $upstream_addr $upstream_status $upstream_response_time x=$http_x_custom id=$request_id host=$host",
    ]);
    let (s, _, body) = raw(
        server.addr,
        "GET /api/a?b HTTP/1.1\r\nHost: h.test\r\nX-Custom: kept\r\nX-Request-Id: r-9\r\nConnection: close\r\n\r\n",
    );
    assert_eq!((s, body.as_str()), (201, "up"));
    let (s, _, body) = h2c(
        &format!("http://{}/api/b", server.addr),
        &["-H", "X-Custom: h2", "-H", "Host: h2.test"],
    );
    assert_eq!((s, body.as_str()), (201, "up"));
    server.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    let want = [
        format!(
            r#"^"GET /api/a\?b HTTP/1\.1" 201 2 {up} 201 \d+\.\d{{3}} x=kept id=r-9 host=h\.test$"#
        ),
        format!(
            r#"^"GET /api/b HTTP/2\.0" 201 2 {up} 201 \d+\.\d{{3}} x=h2 id=[0-9a-f]{{32}} host=h2\.test$"#
        ),
    ];
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    for (line, want) in lines.iter().zip(&want) {
        assert!(
            regex::Regex::new(want).unwrap().is_match(line),
            "{line} !~ {want}"
        );
    }
}

/// The built-in formats: `combined` unchanged, the JSON line gains its site.
#[test]
fn json_lines_name_their_site() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let config = dir.path().join("lowlat.toml");
    std::fs::write(
        &config,
        format!(
            "listen = [\"127.0.0.1:0\"]\nworkers = 1\naccess_log = \"{}\"\naccess_log_format = \"json\"\n[[site]]\nserver_names = [\"a.test\"]\n[[site]]\nserver_names = [\"b.test\"]\n",
            log.display()
        ),
    )
    .unwrap();
    let server = serve(&["--config", config.to_str().unwrap()]);
    get(server.addr, "b.test", "/plaintext");
    get(server.addr, "nobody.test", "/plaintext");
    server.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    let sites: Vec<String> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["site"].to_string())
        .collect();
    assert_eq!(sites, ["\"b.test\"", "\"a.test\""], "{text}");
}

/// `--check-config` refuses an unknown variable in a `log_format`, a `return` or a `try_files`
/// entry, and a format name that is not defined — each with its file and line.
#[test]
fn check_config_names_unknown_variables_with_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.toml");
    std::fs::write(
        &config,
        r#"listen = ["127.0.0.1:0"]
access_log = "/dev/null"
access_log_format = "nosuch"
return = ["/x=301 https://$hots/"]
try_files = ["$ur1", "=404"]

[log_format]
ok = "$status"
main = "$remote_addr $remote_adr"
"#,
    )
    .unwrap();
    let out = Command::new(BIN)
        .args([
            "serve",
            "--check-config",
            "--config",
            config.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let shown = config.display();
    for want in [
        format!("{shown}:4: return: "),
        format!("{shown}:5: try_files: "),
        format!("{shown}:9: log_format.main: unknown variable $remote_adr"),
    ] {
        assert!(err.contains(&want), "{want} in {err}");
    }
    assert!(err.contains("unknown variable $hots"), "{err}");
    assert!(err.contains("unknown variable $ur1"), "{err}");
    // Alone, the undefined format name is said too (with its line).
    std::fs::write(
        &config,
        "listen = [\"127.0.0.1:0\"]\naccess_log = \"/dev/null\"\naccess_log_format = \"nosuch\"\n[log_format]\nmain = \"$status\"\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args([
            "serve",
            "--check-config",
            "--config",
            config.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "{shown}:3: access_log_format: --access-log-format nosuch: no [log_format]"
        )),
        "{err}"
    );
    // A rule on a prefix another rule has.
    let out = Command::new(BIN)
        .args([
            "serve",
            "--check-config",
            "--return",
            "/a/=403",
            "--proxy",
            "/a=http://127.0.0.1:1",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("another rule"), "{err}");
}

/// HTTP/2 requests refused before routing (413 by Content-Length, 431) are logged and counted
/// by kind, as HTTP/1.1 ones are.
#[test]
fn refused_http2_requests_are_logged() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let metrics = format!("127.0.0.1:{}", free_port());
    let server = serve(&[
        "--listen",
        "127.0.0.1:0",
        "--workers",
        "1",
        "--h2c",
        "--metrics",
        &metrics,
        "--max-body",
        "16",
        "--h2-max-header-list",
        "1k",
        "--access-log",
        log.to_str().unwrap(),
    ]);
    let url = format!("http://{}/upload", server.addr);
    let big = "x".repeat(100);
    let (s, _, _) = h2c(&url, &["-d", &big]);
    assert_eq!(s, 413);
    let (s, _, _) = h2c(&url, &["-H", &format!("X-Big: {}", "y".repeat(2000))]);
    assert_eq!(s, 431);
    let (s, _, _) = raw(
        server.addr,
        "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n",
    );
    assert_eq!(s, 413);
    // Counters are published as the worker's loop turns: asked until they show (5 s at most).
    let wants = [
        "lowlat_parse_errors_total{kind=\"body_too_large\"} 2\n",
        "lowlat_parse_errors_total{kind=\"head_too_large\"} 1\n",
        "lowlat_responses_total{site=\"default\",class=\"4xx\"} 3\n",
    ];
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let scrape = loop {
        let (_, _, scrape) = get(metrics.parse().unwrap(), "m", "/metrics");
        if wants.iter().all(|w| scrape.contains(w)) || std::time::Instant::now() > deadline {
            break scrape;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    for want in wants {
        assert!(scrape.contains(want), "{want} in {scrape}");
    }
    server.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    let statuses: Vec<(&str, &str)> = text
        .lines()
        .map(|l| {
            let request = l.split('"').nth(1).unwrap_or("");
            let status = l
                .split('"')
                .nth(2)
                .unwrap_or("")
                .split_whitespace()
                .next()
                .unwrap_or("");
            (request, status)
        })
        .collect();
    assert_eq!(
        statuses,
        [
            ("POST /upload HTTP/2.0", "413"),
            // What was decoded before the list passed its limit: the pseudo-fields come first.
            ("GET /upload HTTP/2.0", "431"),
            ("POST /upload HTTP/1.1", "413"),
        ],
        "{text}"
    );
}
