//! `lowlat serve --proxy` as a real process in front of real upstreams (gunicorn, uvicorn, the
//! bad upstream of `tests/upstreams/`, and a recording one written here), driven by real
//! clients: curl, `lowlat load`, and raw HTTP/1.1 over std sockets where the bytes matter.
//!
//! What a client sends arrives as the upstream's `/echo` reports it (path, query, fields, the
//! forwarding fields set, hop-by-hop ones gone); bodies cross whole and byte-exact in both
//! directions, a gibibyte in bounded memory; an upstream that fails answers 502 or 504, or cuts
//! the response short, never with the upstream's bad bytes; balancing, passive and active health,
//! consistent hashing; request smuggling stopped at the proxy; a reload that swaps the upstream
//! under load; a client that leaves early; a unix-socket upstream; HTTP/2 and TLS clients; and
//! what the proxy rewrites in a request (Host, the target's form, forwarding lists).
//!
//! Each proxy runs one worker unless a test asks for more, on 127.0.0.1:0, so tests run side by
//! side; the whole file takes about 25 s.

use std::ffi::OsString;
use std::io::{BufRead, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lowlat_testkit::pki::{KeyKind, Pki};

mod support;
use support::upstream::{
    curl_h2_upload, pattern, pattern_sha256, send_pattern, sha256_hex, upload_held_back, App,
    BadKind, Bind, GunicornWorker, Upstream,
};
use support::{curl, field, find, free_port as dead_port, BIN};

/// Generous: a test that waits this long has failed anyway.
const IO_TIMEOUT: Duration = Duration::from_secs(30);

// A `lowlat serve` with proxy rules, in clear on 127.0.0.1 (a free port), one worker unless the
// arguments say otherwise.
use support::Served as Proxy;

/// A response as the client got it: status, head (as text) and body (decoded from chunked).
#[derive(Debug)]
struct Response {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Response {
    /// The value of the first field `name` (case-insensitive).
    fn field(&self, name: &str) -> Option<&str> {
        field(&self.head, name)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}{}", self.head, self.text()))
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s
}

/// Reads more of `s` into `buf`; panics at end of file (`what` says what was awaited).
fn fill(s: &mut impl Read, buf: &mut Vec<u8>, what: &str) {
    let mut chunk = [0; 64 * 1024];
    let n = s
        .read(&mut chunk)
        .unwrap_or_else(|e| panic!("reading {what}: {e}"));
    assert!(
        n > 0,
        "closed while reading {what} after {:?}",
        String::from_utf8_lossy(&buf[..buf.len().min(300)])
    );
    buf.extend_from_slice(&chunk[..n]);
}

/// Reads one response from `s`, `pending` holding bytes already read (and keeping those that
/// follow the response). `head_request`: the response to a HEAD has no body.
fn read_response(s: &mut impl Read, pending: &mut Vec<u8>, head_request: bool) -> Response {
    let end = loop {
        if let Some(i) = find(pending, b"\r\n\r\n") {
            break i + 4;
        }
        fill(s, pending, "a response head");
    };
    let head = String::from_utf8_lossy(&pending[..end]).into_owned();
    pending.drain(..end);
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not a status line: {head}"));
    let bodiless = head_request || status == 204 || status == 304 || status < 200;
    let body = if bodiless {
        Vec::new()
    } else if field(&head, "transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(i) = find(pending, b"\r\n") {
                    break i;
                }
                fill(s, pending, "a chunk size");
            };
            let size_text = String::from_utf8_lossy(&pending[..line_end]).into_owned();
            let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16)
                .unwrap_or_else(|_| panic!("bad chunk size {size_text:?}"));
            pending.drain(..line_end + 2);
            if size == 0 {
                // Trailer fields, up to the empty line.
                loop {
                    let i = loop {
                        if let Some(i) = find(pending, b"\r\n") {
                            break i;
                        }
                        fill(s, pending, "the trailer section");
                    };
                    pending.drain(..i + 2);
                    if i == 0 {
                        break;
                    }
                }
                break body;
            }
            while pending.len() < size + 2 {
                fill(s, pending, "a chunk");
            }
            body.extend_from_slice(&pending[..size]);
            assert_eq!(&pending[size..size + 2], b"\r\n", "chunk not ended by CRLF");
            pending.drain(..size + 2);
        }
    } else if let Some(len) = field(&head, "content-length") {
        let len: usize = len.parse().unwrap();
        while pending.len() < len {
            fill(s, pending, "a body");
        }
        pending.drain(..len).collect()
    } else {
        // Delimited by the close.
        s.read_to_end(pending).unwrap();
        std::mem::take(pending)
    };
    Response { status, head, body }
}

/// Sends `request` on a new connection and reads one response.
fn exchange(addr: SocketAddr, request: &[u8]) -> Response {
    let mut s = connect(addr);
    s.write_all(request).unwrap();
    let head_request = request.starts_with(b"HEAD ");
    read_response(&mut s, &mut Vec::new(), head_request)
}

/// `GET target` on a new connection, `extra` fields added (each ending in CRLF).
fn get_with(addr: SocketAddr, target: &str, extra: &str) -> Response {
    exchange(
        addr,
        format!("GET {target} HTTP/1.1\r\nHost: proxied.test\r\n{extra}Connection: close\r\n\r\n")
            .as_bytes(),
    )
}

fn get(addr: SocketAddr, target: &str) -> Response {
    get_with(addr, target, "")
}

/// Sends `request` and reads everything until the proxy closes (or `wait` passes).
fn raw_exchange(addr: SocketAddr, request: &[u8], wait: Duration) -> Vec<u8> {
    let mut s = connect(addr);
    s.set_read_timeout(Some(wait)).unwrap();
    s.write_all(request).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

/// curl `-i` with `args`: its exit code and the (last, final) response it printed.
fn curl_response(args: &[&str]) -> (Option<i32>, Response) {
    let out = curl(&[&["-i"], args].concat());
    let mut bytes = out.stdout;
    // Skip interim responses (100 Continue).
    while bytes.starts_with(b"HTTP/1.1 1") {
        let end = find(&bytes, b"\r\n\r\n").unwrap() + 4;
        bytes.drain(..end);
    }
    let Some(end) = find(&bytes, b"\r\n\r\n") else {
        panic!(
            "curl {args:?}: no response ({:?}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let head = String::from_utf8_lossy(&bytes[..end + 4]).into_owned();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let body = bytes[end + 4..].to_vec();
    (out.status.code(), Response { status, head, body })
}

/// The values of field `name` in an /echo report, as the upstream saw them.
fn echoed(echo: &serde_json::Value, name: &str) -> Vec<String> {
    echo["headers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h[0].as_str().unwrap().eq_ignore_ascii_case(name))
        .map(|h| h[1].as_str().unwrap().to_owned())
        .collect()
}

/// The one value of field `name` in an /echo report (panics when absent or repeated).
fn echoed_one(echo: &serde_json::Value, name: &str) -> String {
    let values = echoed(echo, name);
    assert_eq!(values.len(), 1, "{name}: {values:?} in {echo}");
    values.into_iter().next().unwrap()
}

/// Which upstream answered an /echo: the address it listens at.
fn local(echo: &serde_json::Value) -> String {
    echo["local"].as_str().unwrap().to_owned()
}

/// An upstream written here: 127.0.0.1 on a free port, each connection served by `serve` on a
/// thread of its own. The threads end with the test binary.
fn serve_each(serve: impl Fn(TcpStream) + Clone + Send + 'static) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let serve = serve.clone();
            std::thread::spawn(move || serve(conn));
        }
    });
    addr
}

/// An upstream written here, on std sockets: it keeps every byte it receives, counts the requests
/// it parses (a head and its Content-Length body), answers `GET /status/200` (the health path
/// gunicorn also serves) with 200 or 500 as `healthy` says, and everything else with 200 and
/// `recorder`. Its threads end with the test binary.
struct Recorder {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<u8>>>,
    requests: Arc<AtomicUsize>,
    healthy: Arc<AtomicBool>,
}

impl Recorder {
    fn start() -> Recorder {
        let received = Arc::new(Mutex::new(Vec::new()));
        let requests = Arc::new(AtomicUsize::new(0));
        let healthy = Arc::new(AtomicBool::new(true));
        let (r, n, h) = (
            Arc::clone(&received),
            Arc::clone(&requests),
            Arc::clone(&healthy),
        );
        let addr = serve_each(move |conn| Recorder::serve(conn, &r, &n, &h));
        Recorder {
            addr,
            received,
            requests,
            healthy,
        }
    }

    fn serve(
        mut conn: TcpStream,
        received: &Mutex<Vec<u8>>,
        requests: &AtomicUsize,
        healthy: &AtomicBool,
    ) {
        let mut buf = Vec::new();
        let mut chunk = [0; 16 * 1024];
        loop {
            let Some(end) = find(&buf, b"\r\n\r\n").map(|i| i + 4) else {
                match conn.read(&mut chunk) {
                    Ok(n) if n > 0 => {
                        received.lock().unwrap().extend_from_slice(&chunk[..n]);
                        buf.extend_from_slice(&chunk[..n]);
                        continue;
                    }
                    _ => return,
                }
            };
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let length: usize =
                field(&head, "content-length").map_or(0, |v| v.parse().unwrap_or(0));
            while buf.len() < end + length {
                match conn.read(&mut chunk) {
                    Ok(n) if n > 0 => {
                        received.lock().unwrap().extend_from_slice(&chunk[..n]);
                        buf.extend_from_slice(&chunk[..n]);
                    }
                    _ => return,
                }
            }
            buf.drain(..end + length);
            requests.fetch_add(1, Ordering::SeqCst);
            let (status, body) = if head.starts_with("GET /status/200 ") {
                if healthy.load(Ordering::SeqCst) {
                    ("200 OK", "up\n")
                } else {
                    ("500 Internal Server Error", "down\n")
                }
            } else {
                ("200 OK", "recorder\n")
            };
            let close = field(&head, "connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
            let reply = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\n{}\r\n{body}",
                body.len(),
                if close { "Connection: close\r\n" } else { "" }
            );
            if conn.write_all(reply.as_bytes()).is_err() || close {
                return;
            }
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn received(&self) -> Vec<u8> {
        self.received.lock().unwrap().clone()
    }
}

/// Asserts what every request through the proxy carries: one X-Forwarded-For (the client,
/// 127.0.0.1), X-Forwarded-Proto `scheme`, X-Forwarded-Host and Forwarded naming `host`, and no
/// hop-by-hop field.
fn assert_forwarding_fields(echo: &serde_json::Value, scheme: &str, host: &str) {
    assert_eq!(echoed_one(echo, "x-forwarded-for"), "127.0.0.1", "{echo}");
    assert_eq!(echoed_one(echo, "x-forwarded-proto"), scheme, "{echo}");
    assert_eq!(echoed_one(echo, "x-forwarded-host"), host, "{echo}");
    assert_eq!(
        echoed_one(echo, "forwarded"),
        format!("for=127.0.0.1;proto={scheme};host=\"{host}\""),
        "{echo}"
    );
    for hop in [
        "connection",
        "keep-alive",
        "te",
        "upgrade",
        "transfer-encoding",
        "proxy-connection",
        "proxy-authorization",
    ] {
        assert!(echoed(echo, hop).is_empty(), "{hop} forwarded: {echo}");
    }
}

/// A request id the proxy made: 24 lower-case hex digits.
fn assert_made_request_id(id: &str) {
    assert!(
        id.len() == 24
            && id
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "request id {id:?}"
    );
}

/// curl in clear through the proxy to gunicorn and to uvicorn: the path as it is under `/` and
/// rewritten under `/api/=http://HOST:PORT/`, the query and the client's own fields arrive;
/// hop-by-hop fields (those Connection names, Keep-Alive, TE, Upgrade, Proxy-*) do not;
/// X-Forwarded-For/-Proto/-Host and Forwarded are set; an X-Request-Id is made, a client's kept.
#[test]
fn curl_in_clear_reaches_gunicorn_and_uvicorn_with_the_forwarding_fields() {
    for upstream in [Upstream::gunicorn(), Upstream::uvicorn()] {
        let url = upstream.url();
        let proxy = Proxy::start([
            "--proxy".to_owned(),
            format!("/api/={url}/"),
            "--proxy".to_owned(),
            format!("/={url}"),
        ]);
        let host = proxy.addr.to_string();
        let base = format!("http://{host}");

        let (code, r) = curl_response(&[&format!("{base}/echo/x?a=1&b=%20")]);
        assert_eq!((code, r.status), (Some(0), 200), "{upstream}: {}", r.head);
        let echo = r.json();
        assert_eq!(
            echo["server"],
            upstream.to_string().split(' ').next().unwrap()
        );
        assert_eq!(echo["method"], "GET");
        assert_eq!(echo["path"], "/echo/x", "{upstream}");
        assert_eq!(echo["query"], "a=1&b=%20", "{upstream}");
        assert_eq!(echo["target"], "/echo/x?a=1&b=%20", "{upstream}");
        assert_eq!(echo["http_version"], "1.1");
        assert_eq!(echoed_one(&echo, "host"), host);
        assert_forwarding_fields(&echo, "http", &host);
        let first_id = echoed_one(&echo, "x-request-id");
        assert_made_request_id(&first_id);

        // The rewrite: /api/echo?q=2 reaches the upstream as /echo?q=2.
        let (_, r) = curl_response(&[&format!("{base}/api/echo?q=2")]);
        let echo = r.json();
        assert_eq!(echo["path"], "/echo", "{upstream}: {echo}");
        assert_eq!(echo["target"], "/echo?q=2", "{upstream}: {echo}");
        let second_id = echoed_one(&echo, "x-request-id");
        assert_made_request_id(&second_id);
        assert_ne!(first_id, second_id, "a request id is made per request");

        // The client's fields arrive; hop-by-hop ones, and the fields Connection names, do not.
        let (_, r) = curl_response(&[
            "-H",
            "X-Custom: yes",
            "-H",
            "Connection: keep-alive, X-Secret",
            "-H",
            "X-Secret: only for the proxy",
            "-H",
            "Keep-Alive: timeout=5",
            "-H",
            "TE: trailers",
            "-H",
            "Upgrade: websocket",
            "-H",
            "Proxy-Authorization: Basic cHJveHk6c2VjcmV0",
            "-H",
            "Proxy-Connection: keep-alive",
            "-H",
            "X-Request-Id: chosen-by-the-client",
            "-A",
            "proxy-test/1",
            &format!("{base}/api/echo"),
        ]);
        let echo = r.json();
        assert_eq!(echoed_one(&echo, "x-custom"), "yes", "{upstream}: {echo}");
        assert_eq!(echoed_one(&echo, "user-agent"), "proxy-test/1");
        assert!(echoed(&echo, "x-secret").is_empty(), "{upstream}: {echo}");
        assert_forwarding_fields(&echo, "http", &host);
        assert_eq!(
            echoed_one(&echo, "x-request-id"),
            "chosen-by-the-client",
            "{upstream}: an incoming id is kept"
        );
    }
}

/// curl over TLS (`--tls-listen`, a certificate from a test CA) through the proxy to gunicorn and
/// uvicorn: X-Forwarded-Proto and Forwarded say https, the rewrite and the fields as in clear,
/// and a download arrives byte-exact.
#[test]
fn curl_over_tls_reaches_both_upstreams_as_https() {
    let pki = Pki::new();
    let leaf = pki.leaf("proxy", &["localhost"], KeyKind::EcdsaP256);
    let ca = pki.ca_path();
    for upstream in [Upstream::gunicorn(), Upstream::uvicorn()] {
        let url = upstream.url();
        let mut args: Vec<OsString> = vec![
            "--tls-listen".into(),
            "127.0.0.1:0".into(),
            "--cert".into(),
            leaf.cert.clone().into(),
            "--key".into(),
            leaf.key.clone().into(),
            "--proxy".into(),
            format!("/api/={url}/").into(),
        ];
        args.extend(["--proxy".into(), format!("/={url}").into()]);
        let proxy = Proxy::start(args);
        let tls = proxy.tls_addr.expect("a TLS listener");
        let host = format!("localhost:{}", tls.port());
        let resolve = format!("localhost:{}:127.0.0.1", tls.port());
        let ca = ca.to_str().unwrap();
        let tls_curl = |target: &str, extra: &[&str]| {
            curl_response(
                &[
                    &["--http1.1", "--cacert", ca, "--resolve", &resolve],
                    extra,
                    &[&format!("https://{host}{target}")],
                ]
                .concat(),
            )
        };
        let (code, r) = tls_curl(
            "/api/echo?over=tls",
            &[
                "-H",
                "X-Custom: tls",
                "-H",
                "Connection: X-Secret",
                "-H",
                "X-Secret: s",
            ],
        );
        assert_eq!((code, r.status), (Some(0), 200), "{upstream}: {}", r.head);
        let echo = r.json();
        assert_eq!(echo["path"], "/echo", "{upstream}: {echo}");
        assert_eq!(echo["query"], "over=tls");
        assert_eq!(echoed_one(&echo, "x-custom"), "tls");
        assert!(echoed(&echo, "x-secret").is_empty(), "{upstream}: {echo}");
        assert_forwarding_fields(&echo, "https", &host);
        assert_made_request_id(&echoed_one(&echo, "x-request-id"));

        // The clear listener of the same server still says http.
        let echo = get(proxy.addr, "/echo").json();
        assert_eq!(echoed_one(&echo, "x-forwarded-proto"), "http");

        for route in ["bytes", "chunked"] {
            let n = 300_001;
            let (code, r) = tls_curl(&format!("/{route}/{n}"), &[]);
            assert_eq!((code, r.status), (Some(0), 200), "{upstream} /{route}");
            assert!(r.body == pattern(0, n), "{upstream} /{route}: wrong bytes");
        }
    }
}

/// X-Forwarded-For, -Proto, -Host and Forwarded from a client are replaced by what the proxy
/// saw, unless the client is in `--proxy-trusted`: then its lists are extended and its scheme
/// and host kept.
#[test]
fn spoofed_forwarding_fields_are_replaced_unless_the_client_is_trusted() {
    let upstream = Upstream::uvicorn();
    let spoof = "X-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: https\r\n\
                 X-Forwarded-Host: evil.test\r\nForwarded: for=6.6.6.6;proto=https\r\n";
    let proxy = Proxy::start(["--proxy".to_owned(), format!("/={}", upstream.url())]);
    let echo = get_with(proxy.addr, "/echo", spoof).json();
    assert_forwarding_fields(&echo, "http", "proxied.test");
    assert!(!echo.to_string().contains("6.6.6.6"), "{echo}");
    assert!(!echo.to_string().contains("evil.test"), "{echo}");

    let trusting = Proxy::start([
        "--proxy".to_owned(),
        format!("/={}", upstream.url()),
        "--proxy-trusted".to_owned(),
        "127.0.0.1".to_owned(),
    ]);
    let echo = get_with(trusting.addr, "/echo", spoof).json();
    assert_eq!(
        echoed_one(&echo, "x-forwarded-for"),
        "6.6.6.6, 127.0.0.1",
        "{echo}"
    );
    assert_eq!(echoed_one(&echo, "x-forwarded-proto"), "https", "{echo}");
    assert_eq!(echoed_one(&echo, "x-forwarded-host"), "evil.test", "{echo}");
    assert_eq!(
        echoed_one(&echo, "forwarded"),
        "for=6.6.6.6;proto=https, for=127.0.0.1;proto=http;host=\"proxied.test\"",
        "{echo}"
    );

    // A trusted network that does not hold the client changes nothing.
    let elsewhere = Proxy::start([
        "--proxy".to_owned(),
        format!("/={}", upstream.url()),
        "--proxy-trusted".to_owned(),
        "10.0.0.0/8".to_owned(),
    ]);
    let echo = get_with(elsewhere.addr, "/echo", spoof).json();
    assert_eq!(echoed_one(&echo, "x-forwarded-for"), "127.0.0.1", "{echo}");
}

/// Uploads through the proxy arrive whole, with the right SHA-256 at the upstream's /upload: curl
/// with Content-Length and with chunked coding, a raw chunked body with extensions and a
/// trailer, an empty POST; a body over `--max-body` is refused with 413 before any upstream,
/// with Content-Length and chunked.
#[test]
fn uploads_arrive_whole_with_their_digest() {
    const N: usize = 3 << 20;
    let body = pattern(7, N);
    let sha = sha256_hex(&body);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("upload.bin");
    std::fs::write(&file, &body).unwrap();
    let data = format!("@{}", file.display());
    for upstream in [Upstream::gunicorn(), Upstream::uvicorn()] {
        let proxy = Proxy::start([
            "--proxy-max-body".to_owned(),
            "4m".to_owned(),
            "--proxy".to_owned(),
            format!("/={}", upstream.url()),
        ]);
        let url = format!("http://{}/upload", proxy.addr);
        for framing in [&[][..], &["-H", "Transfer-Encoding: chunked"][..]] {
            let (code, r) = curl_response(
                &[
                    &[
                        "-H",
                        "Expect:",
                        "-H",
                        "Content-Type: application/octet-stream",
                    ],
                    framing,
                    &["--data-binary", &data, &url],
                ]
                .concat(),
            );
            assert_eq!(
                (code, r.status),
                (Some(0), 200),
                "{upstream} {framing:?}: {}",
                r.head
            );
            let digest = r.json();
            assert_eq!(digest["length"], N, "{upstream} {framing:?}");
            assert_eq!(digest["sha256"], sha, "{upstream} {framing:?}");
        }

        // Chunks of odd sizes, an extension and a trailer field, over a raw socket.
        let mut request = b"PUT /upload HTTP/1.1\r\nHost: proxied.test\r\n\
                            Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            .to_vec();
        let small = pattern(3, 100_000);
        for (i, piece) in small.chunks(7_777).enumerate() {
            request.extend_from_slice(format!("{:x};n={i}\r\n", piece.len()).as_bytes());
            request.extend_from_slice(piece);
            request.extend_from_slice(b"\r\n");
        }
        request.extend_from_slice(b"0\r\nX-Trailer: t\r\n\r\n");
        let r = exchange(proxy.addr, &request);
        assert_eq!(r.status, 200, "{upstream}: {}", r.head);
        assert_eq!(r.json()["length"], small.len());
        assert_eq!(r.json()["sha256"], sha256_hex(&small), "{upstream}");

        let r = exchange(
            proxy.addr,
            b"POST /upload HTTP/1.1\r\nHost: proxied.test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(r.status, 200, "{upstream}: {}", r.head);
        assert_eq!(r.json()["length"], 0);

        // Over --proxy-max-body: 413 from the proxy, declared or found while streaming.
        let big = dir.path().join("big.bin");
        std::fs::write(&big, vec![b'x'; 5 << 20]).unwrap();
        let (_, r) = curl_response(&[
            "-H",
            "Expect:",
            "--data-binary",
            &format!("@{}", big.display()),
            &url,
        ]);
        assert_eq!(r.status, 413, "{upstream}: {}", r.head);
        let (_, r) = curl_response(&[
            "-H",
            "Expect:",
            "-H",
            "Transfer-Encoding: chunked",
            "--data-binary",
            &format!("@{}", big.display()),
            &url,
        ]);
        assert_eq!(r.status, 413, "{upstream}, chunked: {}", r.head);
    }
}

/// An upstream written here that reads and keeps every byte and answers nothing: what a
/// streaming body looks like on arrival, and when the proxy ends the connection. While `paused`,
/// it reads nothing (a slow application).
struct Sink {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<u8>>>,
    /// Connections that ended (end of file or an error) on the proxy's side.
    ended: Arc<AtomicUsize>,
    paused: Arc<AtomicBool>,
}

impl Sink {
    fn start() -> Sink {
        let received = Arc::new(Mutex::new(Vec::new()));
        let ended = Arc::new(AtomicUsize::new(0));
        let paused = Arc::new(AtomicBool::new(false));
        let (r, e, p) = (
            Arc::clone(&received),
            Arc::clone(&ended),
            Arc::clone(&paused),
        );
        let addr = serve_each(move |mut conn| {
            let mut chunk = [0; 64 * 1024];
            loop {
                if p.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
                match conn.read(&mut chunk) {
                    Ok(n) if n > 0 => r.lock().unwrap().extend_from_slice(&chunk[..n]),
                    _ => break,
                }
            }
            e.fetch_add(1, Ordering::SeqCst);
        });
        Sink {
            addr,
            received,
            ended,
            paused,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn received(&self) -> Vec<u8> {
        self.received.lock().unwrap().clone()
    }

    /// Waits (up to the I/O timeout) until `done` holds of what arrived and how many connections
    /// ended.
    fn wait_for(&self, what: &str, done: impl Fn(&[u8], usize) -> bool) {
        let start = Instant::now();
        while !done(&self.received(), self.ended.load(Ordering::SeqCst)) {
            assert!(
                start.elapsed() < IO_TIMEOUT,
                "{what}: got {} bytes, {} ended",
                self.received().len(),
                self.ended.load(Ordering::SeqCst)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// An upstream written here for bodies too big to hash in a test: it reads one request with a
/// Content-Length body, compares the body with [`pattern`] as it arrives, and answers
/// `{"length": N, "intact": true|false}`.
fn pattern_checker() -> SocketAddr {
    serve_each(|mut conn: TcpStream| {
        let mut pending = Vec::new();
        let end = loop {
            if let Some(i) = find(&pending, b"\r\n\r\n") {
                break i + 4;
            }
            fill(&mut conn, &mut pending, "a request head");
        };
        let head = String::from_utf8_lossy(&pending[..end]).into_owned();
        let len: u64 = field(&head, "content-length").unwrap().parse().unwrap();
        pending.drain(..end);
        // One period longer than any read, so every read is compared with one slice.
        let expected = pattern(0, 256 * 1024 + 251);
        let mut buf = vec![0; 256 * 1024];
        let (mut offset, mut intact) = (0u64, true);
        let mut check = |data: &[u8], offset: &mut u64| {
            let start = (*offset % 251) as usize;
            intact &= data == &expected[start..start + data.len()];
            *offset += data.len() as u64;
        };
        check(&pending, &mut offset);
        while offset < len {
            let want = buf
                .len()
                .min(usize::try_from(len - offset).unwrap_or(usize::MAX));
            match conn.read(&mut buf[..want]) {
                Ok(n) if n > 0 => check(&buf[..n], &mut offset),
                _ => return,
            }
        }
        let body = format!("{{\"length\": {offset}, \"intact\": {intact}}}");
        let _ = write!(
            conn,
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
    })
}

/// A gibibyte uploaded with Content-Length (checked byte for byte by [`pattern_checker`]), and
/// 64 MiB chunked to gunicorn (which hashes it as it comes), stream through the proxy while its
/// peak memory stays within 8 MiB of what it was before: the body is never held, whatever its
/// size. A second before, an upstream reading nothing must hold the client back, not fill the
/// proxy.
#[test]
fn a_gibibyte_upload_streams_through_a_small_proxy() {
    const N: u64 = 1 << 30;
    const CHUNKED: u64 = 64 << 20;
    let upstream = Upstream::gunicorn();
    let sink = Sink::start();
    sink.paused.store(true, Ordering::SeqCst);
    let checker = pattern_checker();
    let proxy = Proxy::start([
        "--proxy".to_owned(),
        format!("/sink/={}", sink.url()),
        "--proxy".to_owned(),
        format!("/check/=http://{checker}"),
        "--proxy".to_owned(),
        format!("/={}", upstream.url()),
    ]);
    assert_eq!(get(proxy.addr, "/status/200").status, 200);
    let warm_kib = proxy.status_kib("VmHWM:");

    // An upstream that reads nothing: the client is held back, the proxy does not buffer.
    let s = connect(proxy.addr);
    let head =
        format!("POST /sink/x HTTP/1.1\r\nHost: proxied.test\r\nContent-Length: {N}\r\n\r\n");
    let writer = upload_held_back(&proxy, &s, &head, N, warm_kib);
    drop(s);
    sink.paused.store(false, Ordering::SeqCst);
    let _ = writer.join();

    for (framing, len) in [("length", N), ("chunked", CHUNKED)] {
        let started = Instant::now();
        let mut s = connect(proxy.addr);
        // The answer comes after the last byte: as long as the upload takes on a busy machine.
        s.set_read_timeout(Some(Duration::from_secs(600))).unwrap();
        let head = if framing == "length" {
            format!("PUT /check/ HTTP/1.1\r\nHost: proxied.test\r\nContent-Length: {len}\r\n\r\n")
        } else {
            "PUT /upload HTTP/1.1\r\nHost: proxied.test\r\nTransfer-Encoding: chunked\r\n\r\n"
                .to_owned()
        };
        s.write_all(head.as_bytes()).unwrap();
        let mut w = s.try_clone().unwrap();
        let chunk = if framing == "length" { 0 } else { 100_000 };
        let writer = std::thread::spawn(move || send_pattern(&mut w, len, chunk));
        let r = read_response(&mut s, &mut Vec::new(), false);
        writer.join().unwrap().unwrap();
        assert_eq!(r.status, 200, "{framing}: {}", r.head);
        assert_eq!(r.json()["length"], len, "{framing}");
        if framing == "length" {
            assert_eq!(r.json()["intact"], true, "{framing}");
        } else {
            assert_eq!(r.json()["sha256"], pattern_sha256(len), "{framing}");
        }
        eprintln!("{framing}: {len} bytes uploaded in {:?}", started.elapsed());
    }
    let hwm_kib = proxy.status_kib("VmHWM:");
    assert!(
        hwm_kib.saturating_sub(warm_kib) < 8 * 1024,
        "the proxy's peak RSS grew by {} KiB during the uploads",
        hwm_kib.saturating_sub(warm_kib)
    );
}

/// A chunked body reaches the upstream chunked as it arrives, before its end; a malformed chunk
/// then ends the exchange: the client gets 400 (the upstream had not answered), and the upstream
/// connection is closed with nothing of the bad chunk passed on. A client that leaves in the
/// middle of a Content-Length body ends its upstream connection too.
#[test]
fn a_streaming_body_reaches_the_upstream_as_it_comes_and_a_broken_one_is_cut() {
    let sink = Sink::start();
    let upstream = Upstream::gunicorn();
    let proxy = Proxy::start([
        "--proxy".to_owned(),
        format!("/sink/={}", sink.url()),
        "--proxy".to_owned(),
        format!("/={}", upstream.url()),
    ]);
    let mut s = connect(proxy.addr);
    s.write_all(b"POST /sink/a HTTP/1.1\r\nHost: proxied.test\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n3\r\n, w\r\n")
        .unwrap();
    sink.wait_for("the first chunks", |got, _| {
        find(got, b"\r\n\r\n").is_some_and(|end| got.len() >= end + 4 + 18)
    });
    let got = sink.received();
    let end = find(&got, b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&got[..end]).into_owned();
    assert!(head.starts_with("POST /sink/a HTTP/1.1\r\n"), "{head}");
    assert_eq!(field(&head, "transfer-encoding"), Some("chunked"), "{head}");
    assert_eq!(field(&head, "content-length"), None, "{head}");
    // Re-framed: the client's chunk extension is not passed on.
    assert_eq!(&got[end..], b"5\r\nhello\r\n3\r\n, w\r\n");

    s.write_all(b"zz\r\norld\r\n0\r\n\r\n").unwrap();
    let r = read_response(&mut s, &mut Vec::new(), false);
    assert_eq!(r.status, 400, "{}", r.head);
    sink.wait_for("the upstream connection to end", |_, ended| ended == 1);
    assert_eq!(&sink.received()[end..], b"5\r\nhello\r\n3\r\n, w\r\n");

    // A client leaving mid-body.
    let before = sink.received().len();
    let mut s = connect(proxy.addr);
    s.write_all(b"PUT /sink/b HTTP/1.1\r\nHost: proxied.test\r\nContent-Length: 10000000\r\n\r\n")
        .unwrap();
    send_pattern(&mut s, 1 << 20, 0).unwrap();
    sink.wait_for("a megabyte of the second body", |got, _| {
        got.len() >= before + (1 << 20)
    });
    drop(s);
    sink.wait_for("the second upstream connection to end", |_, ended| {
        ended == 2
    });
    let second = sink.received().len() - before;
    assert!(
        second < 1000 + (1 << 20),
        "{second} bytes of a head and a megabyte"
    );
    // The proxy serves on.
    assert_eq!(get(proxy.addr, "/status/200").status, 200);
}

/// HTTP/2 request bodies stream as HTTP/1.1 ones do: a body of unknown length reaches the
/// upstream chunked as its DATA frames come, an upstream that reads nothing holds the client
/// back through the stream's window (the proxy does not grow), and 64 MiB from curl's stdin
/// arrive whole at gunicorn.
#[test]
fn http2_uploads_stream_through_a_small_proxy() {
    let upstream = Upstream::gunicorn();
    let sink = Sink::start();
    sink.paused.store(true, Ordering::SeqCst);
    let proxy = Proxy::start([
        "--h2c".to_owned(),
        "--proxy".to_owned(),
        format!("/sink/={}", sink.url()),
        "--proxy".to_owned(),
        format!("/={}", upstream.url()),
    ]);
    assert_eq!(get(proxy.addr, "/status/200").status, 200);
    let warm_kib = proxy.status_kib("VmHWM:");

    let (mut child, writer) = curl_h2_upload(&format!("http://{}/sink/up", proxy.addr), 1 << 30);
    proxy.assert_held_back(warm_kib, "an HTTP/2 client");
    sink.paused.store(false, Ordering::SeqCst);
    sink.wait_for("the head and a megabyte", |got, _| got.len() > 1 << 20);
    let got = sink.received();
    let end = find(&got, b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&got[..end]).into_owned();
    assert!(head.starts_with("PUT /sink/up HTTP/1.1\r\n"), "{head}");
    assert_eq!(field(&head, "transfer-encoding"), Some("chunked"), "{head}");
    let _ = child.kill();
    let _ = child.wait();
    let _ = writer.join();

    const LEN: u64 = 64 << 20;
    let (child, writer) = curl_h2_upload(&format!("http://{}/upload", proxy.addr), LEN);
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "{out:?}");
    let digest: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(digest["length"], LEN);
    assert_eq!(digest["sha256"], pattern_sha256(LEN));
    let hwm_kib = proxy.status_kib("VmHWM:");
    assert!(
        hwm_kib.saturating_sub(warm_kib) < 8 * 1024,
        "the proxy's peak RSS grew by {} KiB",
        hwm_kib.saturating_sub(warm_kib)
    );
}

/// An upstream that answers before the body ends (gunicorn's /status/413 reads none of it):
/// the answer is relayed as it comes, with `Connection: close` — the rest of the body is not
/// read, so no next request could be found. `Expect: 100-continue` on a streaming body is
/// answered by the proxy (as nginx does), and a request pipelined behind a streamed body is
/// answered after it, in order.
#[test]
fn early_answers_expectations_and_pipelining_with_streaming_bodies() {
    let upstream = Upstream::gunicorn();
    let proxy = Proxy::start(["--proxy".to_owned(), format!("/={}", upstream.url())]);

    let mut s = connect(proxy.addr);
    s.write_all(
        b"POST /status/413 HTTP/1.1\r\nHost: proxied.test\r\nContent-Length: 100000000\r\n\r\n",
    )
    .unwrap();
    send_pattern(&mut s, 1 << 20, 0).unwrap();
    let r = read_response(&mut s, &mut Vec::new(), false);
    assert_eq!(r.status, 413, "{}", r.head);
    assert_eq!(r.field("connection"), Some("close"), "{}", r.head);

    const LEN: u64 = 1 << 20;
    let mut s = connect(proxy.addr);
    write!(
        s,
        "PUT /upload HTTP/1.1\r\nHost: proxied.test\r\nExpect: 100-continue\r\nContent-Length: {LEN}\r\n\r\n"
    )
    .unwrap();
    let mut pending = Vec::new();
    let interim = read_response(&mut s, &mut pending, false);
    assert_eq!(interim.status, 100, "{}", interim.head);
    send_pattern(&mut s, LEN, 0).unwrap();
    s.write_all(b"GET /status/202 HTTP/1.1\r\nHost: proxied.test\r\n\r\n")
        .unwrap();
    let r = read_response(&mut s, &mut pending, false);
    assert_eq!(r.status, 200, "{}", r.head);
    assert_eq!(r.json()["length"], LEN);
    assert_eq!(r.json()["sha256"], pattern_sha256(LEN));
    let r = read_response(&mut s, &mut pending, false);
    assert_eq!(r.status, 202, "the pipelined request: {}", r.head);
}

/// An upstream that answers a large upload at once and closes with the body unread (its kernel
/// resets the connection) while the proxy's writes of the body are held back: the reset and
/// the answer arrive together, and the write that meets the reset is not the end of the
/// exchange — the answer is read and relayed (with `Connection: close`), not turned into 502.
/// Ten rounds, each a fresh connection, since which the proxy sees first is up to its loop.
#[test]
fn an_answer_then_a_reset_during_an_upload_is_relayed() {
    let upstream = serve_each(|mut conn| {
        let mut head = Vec::new();
        let mut byte = [0; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if conn.read(&mut byte).unwrap_or(0) == 0 {
                return;
            }
            head.push(byte[0]);
        }
        // The proxy's writes fill both sides' buffers and wait.
        std::thread::sleep(Duration::from_millis(150));
        let _ = conn.write_all(
            b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 9\r\nConnection: close\r\n\r\ntoo large",
        );
        // Closed with unread bytes: a reset, right behind the answer.
    });
    let proxy = Proxy::start(["--proxy".to_owned(), format!("/=http://{upstream}")]);
    for round in 0..10 {
        let mut s = connect(proxy.addr);
        s.write_all(
            b"POST /upload HTTP/1.1\r\nHost: proxied.test\r\nContent-Length: 100000000\r\n\r\n",
        )
        .unwrap();
        // Written from a thread: the client keeps sending while the answer comes.
        let mut w = s.try_clone().unwrap();
        let writer = std::thread::spawn(move || send_pattern(&mut w, 8 << 20, 0));
        let r = read_response(&mut s, &mut Vec::new(), false);
        assert_eq!(r.status, 413, "round {round}: {}", r.head);
        assert_eq!(r.body, b"too large", "round {round}");
        assert_eq!(r.field("connection"), Some("close"), "{}", r.head);
        let _ = s.shutdown(std::net::Shutdown::Both);
        let _ = writer.join();
    }
}

/// /bytes/N (Content-Length) and /chunked/N (chunked, re-encoded for the client) through the
/// proxy are byte-exact for sizes from 0 to past a read buffer, many on one kept-alive client
/// connection; an HTTP/1.0 client gets the chunked one delimited by the close.
#[test]
fn downloads_are_byte_exact() {
    for upstream in [Upstream::gunicorn(), Upstream::uvicorn()] {
        let proxy = Proxy::start(["--proxy".to_owned(), format!("/={}", upstream.url())]);
        let mut s = connect(proxy.addr);
        let mut pending = Vec::new();
        for n in [0, 1, 250, 251, 65_535, 65_536, 1_000_003] {
            for route in ["bytes", "chunked"] {
                write!(s, "GET /{route}/{n} HTTP/1.1\r\nHost: proxied.test\r\n\r\n").unwrap();
                let r = read_response(&mut s, &mut pending, false);
                assert_eq!(r.status, 200, "{upstream} /{route}/{n}: {}", r.head);
                if route == "bytes" {
                    assert_eq!(r.field("content-length"), Some(n.to_string().as_str()));
                } else if n > 0 {
                    // Unknown length: chunked to an HTTP/1.1 client.
                    assert_eq!(r.field("transfer-encoding"), Some("chunked"), "{}", r.head);
                    assert_eq!(r.field("content-length"), None, "{}", r.head);
                }
                assert_eq!(r.body.len(), n, "{upstream} /{route}/{n}");
                assert!(
                    r.body == pattern(0, n),
                    "{upstream} /{route}/{n}: wrong bytes"
                );
            }
        }
        assert!(pending.is_empty());

        let mut s = connect(proxy.addr);
        s.write_all(b"GET /chunked/100000 HTTP/1.0\r\nHost: proxied.test\r\n\r\n")
            .unwrap();
        let mut all = Vec::new();
        s.read_to_end(&mut all).unwrap();
        let end = find(&all, b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&all[..end]);
        assert_eq!(
            field(&head, "transfer-encoding"),
            None,
            "{upstream}: {head}"
        );
        assert!(
            all[end..] == pattern(0, 100_000)[..],
            "{upstream}: HTTP/1.0 body"
        );
    }
}

/// A gibibyte from gunicorn through the proxy, checked byte for byte as it is read, with a
/// second's pause at the start in which a client that does not read must not make the proxy
/// buffer: the proxy's peak resident memory stays under 64 MiB, and within 8 MiB of what it was
/// before the download.
#[test]
fn a_gibibyte_download_keeps_the_proxy_small() {
    const N: u64 = 1 << 30;
    let upstream = Upstream::gunicorn();
    let proxy = Proxy::start(["--proxy".to_owned(), format!("/={}", upstream.url())]);
    assert_eq!(get(proxy.addr, "/status/200").status, 200);
    let warm_kib = proxy.status_kib("VmHWM:");
    let mut s = connect(proxy.addr);
    write!(
        s,
        "GET /bytes/{N} HTTP/1.1\r\nHost: proxied.test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    // The client reads nothing for a second: back-pressure must stop the proxy reading upstream.
    std::thread::sleep(Duration::from_secs(1));
    let paused_kib = proxy.status_kib("VmRSS:");
    // One period longer than any read, so every read is compared with one slice.
    let expected = pattern(0, 256 * 1024 + 251);
    let mut buf = vec![0; 256 * 1024];
    let mut pending = Vec::new();
    let head = loop {
        if let Some(end) = find(&pending, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&pending[..end + 4]).into_owned();
            pending.drain(..end + 4);
            break head;
        }
        fill(&mut s, &mut pending, "the head");
    };
    assert_eq!(field(&head, "content-length"), Some("1073741824"), "{head}");
    let mut offset = 0u64;
    let check = |chunk: &[u8], offset: &mut u64| {
        let start = (*offset % 251) as usize;
        assert!(
            chunk == &expected[start..start + chunk.len()],
            "wrong bytes after {offset}"
        );
        *offset += chunk.len() as u64;
    };
    check(&pending, &mut offset);
    let started = Instant::now();
    let mut peak_kib = 0;
    loop {
        let n = s.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        check(&buf[..n], &mut offset);
        if offset % (64 << 20) < n as u64 {
            peak_kib = peak_kib.max(proxy.status_kib("VmRSS:"));
        }
    }
    assert_eq!(offset, N, "the whole body");
    let hwm_kib = proxy.status_kib("VmHWM:");
    // The relay stops reading the upstream at 256 KiB of backlog: a few MiB over the warm
    // baseline at most, whatever the body's size (measured: 16 MiB in all, under 1 MiB more).
    assert!(
        hwm_kib.saturating_sub(warm_kib) < 8 * 1024,
        "the proxy's peak RSS grew by {} KiB during the download",
        hwm_kib.saturating_sub(warm_kib)
    );
    eprintln!(
        "1 GiB through the proxy in {:?}; its RSS while the client paused {paused_kib} KiB, \
         sampled peak {peak_kib} KiB, VmHWM {hwm_kib} KiB",
        started.elapsed()
    );
    assert!(
        hwm_kib < 64 * 1024,
        "the proxy's peak RSS was {hwm_kib} KiB"
    );
}

/// HEAD, 304 (If-None-Match on /cached), 204: no body, and the client's connection still in
/// step for the next request.
#[test]
fn head_304_and_204_have_no_body_and_keep_the_connection_in_step() {
    for upstream in [Upstream::gunicorn(), Upstream::uvicorn()] {
        let proxy = Proxy::start(["--proxy".to_owned(), format!("/={}", upstream.url())]);
        let mut s = connect(proxy.addr);
        let mut pending = Vec::new();
        let mut ask = |request: String, head_request: bool| {
            s.write_all(request.as_bytes()).unwrap();
            read_response(&mut s, &mut pending, head_request)
        };
        let r = ask("HEAD /bytes/1000 HTTP/1.1\r\nHost: p\r\n\r\n".into(), true);
        assert_eq!(r.status, 200, "{upstream}: {}", r.head);
        assert_eq!(
            r.field("content-length"),
            Some("1000"),
            "{upstream}: {}",
            r.head
        );
        let r = ask(
            "HEAD /chunked/1000 HTTP/1.1\r\nHost: p\r\n\r\n".into(),
            true,
        );
        assert_eq!(r.status, 200, "{upstream}: {}", r.head);
        let r = ask(
            "GET /cached HTTP/1.1\r\nHost: p\r\nIf-None-Match: \"v1\"\r\n\r\n".into(),
            false,
        );
        assert_eq!(r.status, 304, "{upstream}: {}", r.head);
        assert_eq!(r.field("etag"), Some("\"v1\""), "{}", r.head);
        assert_eq!(r.field("transfer-encoding"), None, "{}", r.head);
        let r = ask("GET /cached HTTP/1.1\r\nHost: p\r\n\r\n".into(), false);
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, &b"cached\n"[..]),
            "{upstream}"
        );
        let r = ask("GET /status/204 HTTP/1.1\r\nHost: p\r\n\r\n".into(), false);
        assert_eq!(r.status, 204, "{upstream}: {}", r.head);
        assert_eq!(r.field("content-length"), None, "{}", r.head);
        assert_eq!(r.field("transfer-encoding"), None, "{}", r.head);
        // Still in step: nothing stray came after the bodiless responses.
        let r = ask("GET /status/201 HTTP/1.1\r\nHost: p\r\n\r\n".into(), false);
        assert_eq!((r.status, r.text().as_str()), (201, "201\n"), "{upstream}");
        assert!(pending.is_empty(), "{upstream}: stray bytes {pending:?}");
    }
}

/// Three requests pipelined in one write (two GETs and a POST with a body) are answered in
/// order on the one connection.
#[test]
fn pipelined_requests_are_answered_in_order() {
    for upstream in [Upstream::gunicorn(), Upstream::uvicorn()] {
        let proxy = Proxy::start(["--proxy".to_owned(), format!("/={}", upstream.url())]);
        let mut s = connect(proxy.addr);
        s.write_all(
            b"GET /echo?n=1 HTTP/1.1\r\nHost: p\r\n\r\n\
              GET /echo?n=2 HTTP/1.1\r\nHost: p\r\n\r\n\
              POST /echo?n=3 HTTP/1.1\r\nHost: p\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
        )
        .unwrap();
        let mut pending = Vec::new();
        for n in 1..=3 {
            let r = read_response(&mut s, &mut pending, false);
            assert_eq!(r.status, 200, "{upstream} #{n}: {}", r.head);
            let echo = r.json();
            assert_eq!(echo["query"], format!("n={n}"), "{upstream}: out of order");
            assert_eq!(echo["body_length"], if n == 3 { 5 } else { 0 });
        }
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).unwrap();
        assert!(
            pending.is_empty() && rest.is_empty(),
            "{upstream}: {rest:?}"
        );
    }
}

/// An upstream that accepts the request and never answers: 504 once
/// `--proxy-first-byte-timeout 1s` has passed (and the timer sweep after it), not before.
#[test]
fn an_upstream_that_never_answers_is_504_after_the_first_byte_timeout() {
    let upstream = Upstream::bad(BadKind::NeverAnswers);
    let proxy = Proxy::start([
        "--proxy".to_owned(),
        format!("/={}", upstream.url()),
        "--proxy-first-byte-timeout".to_owned(),
        "1s".to_owned(),
    ]);
    let start = Instant::now();
    let r = get(proxy.addr, "/anything");
    let took = start.elapsed();
    assert!(
        r.head.starts_with("HTTP/1.1 504 Gateway Timeout\r\n"),
        "{}",
        r.head
    );
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_millis(2500),
        "504 after {took:?}"
    );
}

/// Nothing listening at the upstream's address: 502 at once, on every try.
#[test]
fn nothing_listening_is_502_at_once() {
    let proxy = Proxy::start([
        "--proxy".to_owned(),
        format!("/=http://127.0.0.1:{}", dead_port()),
    ]);
    for _ in 0..3 {
        let start = Instant::now();
        let r = get(proxy.addr, "/echo");
        assert!(
            r.head.starts_with("HTTP/1.1 502 Bad Gateway\r\n"),
            "{}",
            r.head
        );
        assert!(
            start.elapsed() < Duration::from_millis(500),
            "{:?}",
            start.elapsed()
        );
    }
    // POST too (not retried, nowhere to retry).
    let r = exchange(
        proxy.addr,
        b"POST /echo HTTP/1.1\r\nHost: p\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi",
    );
    assert_eq!(r.status, 502, "{}", r.head);
}

/// An upstream that dies mid-response (/die: 512 of 1024 declared bytes, then a reset; the bad
/// upstream's reset-mid-body): the client gets the head, the 512 bytes, and a cut connection —
/// curl exits 18 (partial file) at once, never hangs, never sees a wrong length.
#[test]
fn an_upstream_dying_mid_response_cuts_the_response_short() {
    let gunicorn = Upstream::gunicorn();
    let uvicorn = Upstream::uvicorn();
    let bad = Upstream::bad(BadKind::ResetMidBody);
    for (upstream, target, serves_more) in [
        (&gunicorn, "/die", true),
        (&uvicorn, "/die", true),
        (&bad, "/reset", false),
    ] {
        let proxy = Proxy::start(["--proxy".to_owned(), format!("/={}", upstream.url())]);
        let start = Instant::now();
        let out = curl(&["-o", "-", &format!("http://{}{target}", proxy.addr)]);
        assert_eq!(
            out.status.code(),
            Some(18),
            "{upstream}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.stdout == pattern(0, 512),
            "{upstream}: {} bytes",
            out.stdout.len()
        );
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        // The proxy goes on serving.
        if serves_more {
            assert_eq!(get(proxy.addr, "/status/200").status, 200);
        }
    }
}

/// /stall (512 of 1024 bytes, then silence) with `--proxy-read-timeout 1s`: the client's
/// response is cut after about a second.
#[test]
fn a_stalled_upstream_is_cut_after_the_read_timeout() {
    for upstream in [Upstream::gunicorn(), Upstream::uvicorn()] {
        let proxy = Proxy::start([
            "--proxy".to_owned(),
            format!("/={}", upstream.url()),
            "--proxy-read-timeout".to_owned(),
            "1s".to_owned(),
        ]);
        let start = Instant::now();
        let out = curl(&["-o", "-", &format!("http://{}/stall", proxy.addr)]);
        let took = start.elapsed();
        assert_eq!(
            out.status.code(),
            Some(18),
            "{upstream}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.stdout == pattern(0, 512), "{upstream}");
        assert!(
            took >= Duration::from_secs(1) && took < Duration::from_millis(3000),
            "{upstream}: cut after {took:?}"
        );
    }
}

/// An upstream that closes each keep-alive connection right after its response: a series of
/// requests, back to back on one client connection and on new ones, all succeed (a pooled
/// connection found closed is retried on a fresh one).
#[test]
fn an_upstream_closing_its_keepalive_connections_loses_no_request() {
    let upstream = Upstream::bad(BadKind::CloseAfterResponse);
    let proxy = Proxy::start(["--proxy".to_owned(), format!("/={}", upstream.url())]);
    let mut s = connect(proxy.addr);
    let mut pending = Vec::new();
    for i in 0..40 {
        write!(s, "GET /n/{i} HTTP/1.1\r\nHost: p\r\n\r\n").unwrap();
        let r = read_response(&mut s, &mut pending, false);
        assert_eq!(
            (r.status, r.text().as_str()),
            (200, "ok"),
            "request {i}: {}",
            r.head
        );
    }
    // Several clients at once, so that requests meet connections the upstream has just closed.
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let addr = proxy.addr;
            std::thread::spawn(move || {
                let mut s = connect(addr);
                let mut pending = Vec::new();
                for i in 0..25 {
                    write!(s, "GET /t/{t}/{i} HTTP/1.1\r\nHost: p\r\n\r\n").unwrap();
                    let r = read_response(&mut s, &mut pending, false);
                    assert_eq!(
                        (r.status, r.text().as_str()),
                        (200, "ok"),
                        "{t}/{i}: {}",
                        r.head
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// Responses a proxy must not relay — Content-Length with chunked, two Content-Lengths, a head
/// over 1 MiB, a malformed status line, a bare CR in a field value, a close before any byte —
/// are answered 502, and none of the upstream's bytes reach the client. (A bare LF in a value:
/// see the response-splitting test.)
#[test]
fn malformed_upstream_responses_are_502_and_never_relayed() {
    let cases = [
        (BadKind::ContentLengthAndChunked, "hello"),
        (BadKind::TwoContentLengths, "hello"),
        (BadKind::OversizedHead, "X-Filler"),
        (BadKind::MalformedStatusLine, "2x0"),
        (BadKind::CrInHeaderValue, "injected"),
        (BadKind::CloseBeforeResponse, ""),
    ];
    let upstreams: Vec<(BadKind, &str, Upstream)> = cases
        .iter()
        .map(|&(kind, marker)| (kind, marker, Upstream::bad(kind)))
        .collect();
    for (kind, marker, upstream) in &upstreams {
        let proxy = Proxy::start(["--proxy".to_owned(), format!("/={}", upstream.url())]);
        for _ in 0..2 {
            let raw = raw_exchange(
                proxy.addr,
                b"GET /bad HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n",
                Duration::from_secs(10),
            );
            let text = String::from_utf8_lossy(&raw);
            assert!(
                text.starts_with("HTTP/1.1 502 Bad Gateway\r\n"),
                "{kind:?}: {text}"
            );
            if !marker.is_empty() {
                assert!(!text.contains(marker), "{kind:?} relayed: {text}");
            }
            assert!(!text.contains("X-Injected"), "{kind:?} relayed: {text}");
            assert!(!text.contains("Set-Cookie"), "{kind:?} relayed: {text}");
            assert!(!text.ends_with("\r\n\r\nok"), "{kind:?} relayed: {text}");
        }
    }
}

/// A chunked body with a trailer field (which neither gunicorn nor uvicorn sends) is relayed
/// whole, several times on one kept-alive connection.
#[test]
fn a_chunked_body_with_trailers_is_relayed_whole() {
    relayed_whole(BadKind::ChunkedTrailers, b"hello");
}

/// A body delimited by the upstream's close (no length, `Connection: close`) is relayed whole,
/// chunked to the client, and the client's connection stays open for the next one.
#[test]
fn a_close_delimited_body_is_relayed_whole() {
    relayed_whole(BadKind::CloseDelimited, b"the end is the close\n");
}

/// Asks the bad upstream of `kind` three times through the proxy on one connection: each
/// response is 200 with `body`, chunked to the client.
fn relayed_whole(kind: BadKind, body: &[u8]) {
    {
        let upstream = Upstream::bad(kind);
        let proxy = Proxy::start(["--proxy".to_owned(), format!("/={}", upstream.url())]);
        let mut s = connect(proxy.addr);
        let mut pending = Vec::new();
        for _ in 0..3 {
            s.write_all(b"GET /x HTTP/1.1\r\nHost: p\r\n\r\n").unwrap();
            let r = read_response(&mut s, &mut pending, false);
            assert_eq!(r.status, 200, "{kind:?}: {}", r.head);
            assert_eq!(
                r.field("transfer-encoding"),
                Some("chunked"),
                "{kind:?}: {}",
                r.head
            );
            assert_eq!(r.body, body, "{kind:?}");
        }
    }
}

/// `--proxy /=http://A,http://B` with the default round-robin: one client's requests alternate
/// between two gunicorns (told apart by the address /echo reports).
#[test]
fn round_robin_alternates_between_two_gunicorns() {
    let a = Upstream::gunicorn();
    let b = Upstream::gunicorn();
    let proxy = Proxy::start(["--proxy".to_owned(), format!("/={},{}", a.url(), b.url())]);
    let seen: Vec<String> = (0..10)
        .map(|_| local(&get(proxy.addr, "/echo").json()))
        .collect();
    let (a, b) = (a.addr().to_string(), b.addr().to_string());
    for pair in seen.chunks(2) {
        let mut pair = pair.to_vec();
        pair.sort();
        let mut both = vec![a.clone(), b.clone()];
        both.sort();
        assert_eq!(pair, both, "not alternating: {seen:?}");
    }
    for w in seen.windows(2) {
        assert_ne!(w[0], w[1], "the same server twice in a row: {seen:?}");
    }
}

/// Two gunicorns, one killed (`--proxy-max-fails 1 --proxy-fail-timeout 2s`): every request
/// still succeeds — the one that meets the dead server is retried on the other — and the dead
/// one is then left out; started again on its port, it is back in once the 2 s have passed.
#[test]
fn a_killed_upstream_is_retried_around_then_taken_out() {
    let a = Upstream::gunicorn();
    let b = Upstream::gunicorn();
    let a_addr = a.addr().to_string();
    let b_port = b.addr().port();
    let proxy = Proxy::start([
        "--proxy".to_owned(),
        format!("/={},{}", a.url(), b.url()),
        "--proxy-max-fails".to_owned(),
        "1".to_owned(),
        "--proxy-fail-timeout".to_owned(),
        "2s".to_owned(),
    ]);
    // Both in use, with connections in the pool.
    for _ in 0..4 {
        assert_eq!(get(proxy.addr, "/echo").status, 200);
    }
    drop(b);
    let started = Instant::now();
    for i in 0..20 {
        let r = get(proxy.addr, "/echo");
        assert_eq!(r.status, 200, "request {i} after the kill: {}", r.head);
        assert_eq!(local(&r.json()), a_addr, "request {i}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // Kept-alive client connections too.
    let mut s = connect(proxy.addr);
    let mut pending = Vec::new();
    for _ in 0..5 {
        s.write_all(b"GET /echo HTTP/1.1\r\nHost: p\r\n\r\n")
            .unwrap();
        let r = read_response(&mut s, &mut pending, false);
        assert_eq!(local(&r.json()), a_addr);
    }

    let b = Upstream::start(
        App::Gunicorn(GunicornWorker::Gthread),
        Bind::Port(b_port),
        &[],
    );
    let b_addr = b.addr().to_string();
    let deadline = started + Duration::from_secs(6);
    loop {
        let seen = local(&get(proxy.addr, "/echo").json());
        if seen == b_addr {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{b_addr} not back {:?} after it was taken out",
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "back too early"
    );
}

/// `--proxy-health-check /status/200 --proxy-health-interval 200ms` over gunicorn and an upstream
/// whose /status/200 answers 500 while it is told to be down (it answers every other request): it is
/// taken out — every request goes to gunicorn — and comes back in once /status/200 is 200 again.
/// Passive checks are off (`--proxy-max-fails 0`), so only the active check decides.
#[test]
fn the_active_health_check_takes_a_server_out_and_back_in() {
    let gunicorn = Upstream::gunicorn();
    let recorder = Recorder::start();
    let proxy = Proxy::start([
        "--proxy".to_owned(),
        format!("/={},{}", gunicorn.url(), recorder.url()),
        "--proxy-health-check".to_owned(),
        "/status/200".to_owned(),
        "--proxy-health-interval".to_owned(),
        "200ms".to_owned(),
        "--proxy-health-timeout".to_owned(),
        "1s".to_owned(),
        "--proxy-max-fails".to_owned(),
        "0".to_owned(),
    ]);
    let who = |r: &Response| {
        if r.text() == "recorder\n" {
            "recorder".to_owned()
        } else {
            r.json()["server"].as_str().unwrap().to_owned()
        }
    };
    let round =
        |n: usize| -> Vec<String> { (0..n).map(|_| who(&get(proxy.addr, "/echo"))).collect() };
    let seen = round(6);
    assert!(
        seen.contains(&"recorder".to_owned()) && seen.contains(&"gunicorn".to_owned()),
        "{seen:?}"
    );

    recorder.healthy.store(false, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let seen = round(6);
        if seen.iter().all(|s| s == "gunicorn") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still sent to the unhealthy server: {seen:?}"
        );
    }
    // And it stays out while the check fails.
    std::thread::sleep(Duration::from_millis(500));
    let seen = round(10);
    assert!(seen.iter().all(|s| s == "gunicorn"), "{seen:?}");

    recorder.healthy.store(true, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let seen = round(6);
        if seen.contains(&"recorder".to_owned()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not back after the check passed: {seen:?}"
        );
    }
}

/// `--proxy-balance hash:header:X-User`: each user stays on one server, and the users are shared
/// between both.
#[test]
fn hashing_a_header_keeps_each_user_on_one_server() {
    let a = Upstream::gunicorn();
    let b = Upstream::gunicorn();
    let proxy = Proxy::start([
        "--workers".to_owned(),
        "2".to_owned(),
        "--proxy".to_owned(),
        format!("/={},{}", a.url(), b.url()),
        "--proxy-balance".to_owned(),
        "hash:header:X-User".to_owned(),
    ]);
    let mut per_server = std::collections::BTreeMap::<String, usize>::new();
    for user in 0..16 {
        let servers: Vec<String> = (0..4)
            .map(|_| {
                local(&get_with(proxy.addr, "/echo", &format!("X-User: user-{user}\r\n")).json())
            })
            .collect();
        assert!(
            servers.iter().all(|s| *s == servers[0]),
            "user-{user} moved: {servers:?}"
        );
        *per_server.entry(servers[0].clone()).or_default() += 1;
    }
    assert_eq!(
        per_server.len(),
        2,
        "every user on one server: {per_server:?}"
    );

    // hash:cookie:session — the cookie among others, in any position.
    let proxy = Proxy::start([
        "--proxy".to_owned(),
        format!("/={},{}", a.url(), b.url()),
        "--proxy-balance".to_owned(),
        "hash:cookie:session".to_owned(),
    ]);
    let mut per_server = std::collections::BTreeMap::<String, usize>::new();
    for user in 0..16 {
        let servers: Vec<String> = [
            format!("Cookie: session=s{user}\r\n"),
            format!("Cookie: theme=dark; session=s{user}; lang=en\r\n"),
            format!("Cookie: a=1\r\nCookie: session=s{user}\r\n"),
        ]
        .iter()
        .map(|cookie| local(&get_with(proxy.addr, "/echo", cookie).json()))
        .collect();
        assert!(
            servers.iter().all(|s| *s == servers[0]),
            "session s{user} moved: {servers:?}"
        );
        *per_server.entry(servers[0].clone()).or_default() += 1;
    }
    assert_eq!(
        per_server.len(),
        2,
        "every session on one server: {per_server:?}"
    );
}

/// `--proxy-balance least-conn`: while one server holds a slow request, every other request goes
/// to the other; with nothing in flight the two share the requests.
#[test]
fn least_conn_sends_requests_to_the_idle_server() {
    let a = Upstream::gunicorn();
    let b = Upstream::gunicorn();
    let proxy = Proxy::start([
        "--proxy".to_owned(),
        format!("/={},{}", a.url(), b.url()),
        "--proxy-balance".to_owned(),
        "least-conn".to_owned(),
    ]);
    let mut held = connect(proxy.addr);
    held.write_all(b"GET /slow/1500 HTTP/1.1\r\nHost: p\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let during: Vec<String> = (0..6)
        .map(|_| local(&get(proxy.addr, "/echo").json()))
        .collect();
    assert!(
        during.iter().all(|s| *s == during[0]),
        "requests went to the busy server: {during:?}"
    );
    let r = read_response(&mut held, &mut Vec::new(), false);
    assert_eq!(r.text(), "slept 1500 ms\n");
    let after: Vec<String> = (0..6)
        .map(|_| local(&get(proxy.addr, "/echo").json()))
        .collect();
    let distinct: std::collections::BTreeSet<&String> = after.iter().collect();
    assert_eq!(distinct.len(), 2, "idle servers not shared: {after:?}");
}

/// `[[upstream]]` groups in the config file: weights (3 to 1: six of eight requests to the
/// heavier server, nginx's smooth order), a rule naming a group with a path to drop the prefix
/// (`/w/=weighted/`), and a group's own settings (its `balance`).
#[test]
fn config_file_groups_share_by_weight() {
    let a = Upstream::gunicorn();
    let b = Upstream::gunicorn();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("lowlat.toml");
    std::fs::write(
        &cfg,
        format!(
            "proxy = [\"/w/=weighted/\", \"/h/=hashed/\"]\n\n\
             [[upstream]]\nname = \"weighted\"\n\
             servers = [{{ url = \"{a}\", weight = 3 }}, \"{b}\"]\n\n\
             [[upstream]]\nname = \"hashed\"\nservers = [\"{a}\", \"{b}\"]\n\
             balance = \"hash:header:X-User\"\n",
            a = a.url(),
            b = b.url()
        ),
    )
    .unwrap();
    let proxy = Proxy::start(["--config".as_ref(), cfg.as_os_str()]);
    let seen: Vec<String> = (0..8)
        .map(|_| {
            let echo = get(proxy.addr, "/w/echo").json();
            assert_eq!(echo["path"], "/echo", "{echo}");
            local(&echo)
        })
        .collect();
    let on_a = seen.iter().filter(|s| **s == a.addr().to_string()).count();
    assert_eq!(on_a, 6, "3:1 weights: {seen:?}");
    // Smooth: never four in a row on one server.
    for w in seen.windows(4) {
        assert!(w.iter().any(|s| *s != w[0]), "not smooth: {seen:?}");
    }
    let user =
        |u: &str| local(&get_with(proxy.addr, "/h/echo", &format!("X-User: {u}\r\n")).json());
    for u in ["ann", "bob", "cy"] {
        let first = user(u);
        assert!((0..3).all(|_| user(u) == first), "{u} moved");
    }
}

/// An HTTP/1.0 request without Host (allowed in HTTP/1.0) is forwarded as HTTP/1.1, which must
/// carry Host (RFC 9112 §3.2): uvicorn (h11) refuses one without, so the proxy must supply it.
#[test]
fn an_http10_request_without_host_reaches_the_upstream_with_one() {
    let upstream = Upstream::uvicorn();
    let proxy = Proxy::start(["--proxy".to_owned(), format!("/={}", upstream.url())]);
    let mut s = connect(proxy.addr);
    s.write_all(b"GET /echo HTTP/1.0\r\n\r\n").unwrap();
    let r = read_response(&mut s, &mut Vec::new(), false);
    assert_eq!(r.status, 200, "{}{}", r.head, r.text());
    assert!(!echoed_one(&r.json(), "host").is_empty());
}

/// A request in absolute form (`GET http://other.test/g/echo?x=1`, which a server must accept,
/// RFC 9112 §3.2.2) reaches the upstream in origin form — the path after the prefix, rewritten
/// as for any request — with Host taken from the target (the received Host is ignored), never
/// as the absolute URI beside the client's other Host.
#[test]
fn an_absolute_form_target_reaches_the_upstream_in_origin_form() {
    let recorder = Recorder::start();
    let proxy = Proxy::start([
        "--proxy".to_owned(),
        format!("/g/={}/", recorder.url()),
        "--proxy".to_owned(),
        format!("/={}", recorder.url()),
    ]);
    for (target, expected) in [
        ("http://other.test/g/echo?x=1", "GET /echo?x=1 HTTP/1.1\r\n"),
        ("http://other.test/echo", "GET /echo HTTP/1.1\r\n"),
    ] {
        let before = recorder.received().len();
        let r = exchange(
            proxy.addr,
            format!("GET {target} HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        assert_eq!(r.status, 200, "{target}: {}", r.head);
        let got = String::from_utf8_lossy(&recorder.received()[before..]).into_owned();
        assert!(
            got.starts_with(expected),
            "{target} reached the upstream as {got:?}"
        );
        assert_eq!(field(&got, "host"), Some("other.test"), "{got:?}");
    }
}

/// Request smuggling at the proxy, over raw sockets, in front of a recording upstream: requests
/// whose framing two parsers could read differently (CL.TE, TE.CL, differing Content-Lengths, a
/// transfer coding that is not exactly `chunked`, obs-fold, a bare CR, a NUL) are answered 400
/// and the connection closed, and the upstream receives nothing; those the proxy may read one way
/// only (bare LF line ends, a repeated identical Content-Length) reach it as exactly one request
/// with CRLF line ends and one Content-Length.
#[test]
fn smuggling_attempts_are_refused_before_the_upstream() {
    let refused: [(&str, &[u8]); 13] = [
        (
            "CL.TE",
            b"POST /echo HTTP/1.1\r\nHost: p\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nG",
        ),
        (
            "TE.CL",
            b"POST /echo HTTP/1.1\r\nHost: p\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n8\r\nSMUGGLED\r\n0\r\n\r\n",
        ),
        (
            "two differing Content-Lengths",
            b"POST /echo HTTP/1.1\r\nHost: p\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        ),
        (
            "a Content-Length list",
            b"POST /echo HTTP/1.1\r\nHost: p\r\nContent-Length: 5, 6\r\n\r\nhello!",
        ),
        (
            "a signed Content-Length",
            b"POST /echo HTTP/1.1\r\nHost: p\r\nContent-Length: +5\r\n\r\nhello",
        ),
        (
            "obs-fold",
            b"GET /echo HTTP/1.1\r\nHost: p\r\nX-Folded: a\r\n b\r\n\r\n",
        ),
        (
            "obs-fold of Transfer-Encoding",
            b"POST /echo HTTP/1.1\r\nHost: p\r\nTransfer-Encoding:\r\n chunked\r\nContent-Length: 5\r\n\r\nhello",
        ),
        (
            "a bare CR",
            b"GET /echo HTTP/1.1\r\nHost: p\r\nX-A: a\rX-B: b\r\n\r\n",
        ),
        (
            "xchunked",
            b"POST /echo HTTP/1.1\r\nHost: p\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
        ),
        (
            "identity, chunked",
            b"POST /echo HTTP/1.1\r\nHost: p\r\nTransfer-Encoding: identity, chunked\r\n\r\n0\r\n\r\n",
        ),
        (
            "a space before the colon",
            b"POST /echo HTTP/1.1\r\nHost: p\r\nTransfer-Encoding : chunked\r\nContent-Length: 5\r\n\r\nhello",
        ),
        (
            "chunked in HTTP/1.0",
            b"POST /echo HTTP/1.0\r\nHost: p\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        ),
        (
            "a NUL in a value",
            b"GET /echo HTTP/1.1\r\nHost: p\r\nX-A: a\0b\r\n\r\n",
        ),
    ];
    let accepted: [(&str, &[u8]); 3] = [
        (
            "a bare LF ending a field",
            b"GET /echo HTTP/1.1\r\nHost: p\r\nX-A: a\nX-B: b\r\n\r\n",
        ),
        ("bare LFs throughout", b"GET /echo HTTP/1.1\nHost: p\n\n"),
        (
            "a repeated identical Content-Length",
            b"POST /echo HTTP/1.1\r\nHost: p\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
        ),
    ];
    let recorder = Recorder::start();
    let proxy = Proxy::start(["--proxy".to_owned(), format!("/={}", recorder.url())]);
    for (name, request) in refused {
        let mut s = connect(proxy.addr);
        s.write_all(request).unwrap();
        let mut pending = Vec::new();
        let r = read_response(&mut s, &mut pending, false);
        assert_eq!(r.status, 400, "{name}: {}", r.head);
        // Closed after the 400: nothing after the request is read as another one.
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.read_to_end(&mut pending).unwrap();
        assert!(
            pending.is_empty(),
            "{name}: {}",
            String::from_utf8_lossy(&pending)
        );
        assert_eq!(
            recorder.requests.load(Ordering::SeqCst),
            0,
            "{name} reached the upstream"
        );
        assert!(
            recorder.received().is_empty(),
            "{name} reached the upstream"
        );
    }
    for (i, (name, request)) in accepted.into_iter().enumerate() {
        let before = recorder.received().len();
        let mut s = connect(proxy.addr);
        s.write_all(request).unwrap();
        let r = read_response(&mut s, &mut Vec::new(), false);
        assert_eq!((r.status, r.text().as_str()), (200, "recorder\n"), "{name}");
        assert_eq!(
            recorder.requests.load(Ordering::SeqCst),
            i + 1,
            "{name}: not one request"
        );
        let got = recorder.received()[before..].to_vec();
        let text = String::from_utf8_lossy(&got);
        for (j, &b) in got.iter().enumerate() {
            if b == b'\n' {
                assert!(
                    j > 0 && got[j - 1] == b'\r',
                    "{name}: a bare LF upstream: {text:?}"
                );
            }
            if b == b'\r' {
                assert_eq!(
                    got.get(j + 1),
                    Some(&b'\n'),
                    "{name}: a bare CR upstream: {text:?}"
                );
            }
        }
        let end = find(&got, b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&got[..end]);
        let lengths = head
            .lines()
            .filter(|l| l.to_ascii_lowercase().starts_with("content-length:"))
            .count();
        assert!(lengths <= 1, "{name}: {head}");
        assert!(
            !head.to_ascii_lowercase().contains("transfer-encoding"),
            "{name}: {head}"
        );
        assert_eq!(
            got.len() - end,
            if request.starts_with(b"POST") { 5 } else { 0 },
            "{name}: {text:?}"
        );
    }
}

/// The CR LF injections a response field may carry: CR LF, a bare LF, a bare CR, each before a
/// `Set-Cookie` of the attacker's.
const INJECTIONS: [&str; 3] = [
    "a%0D%0ASet-Cookie:%20injected=1",
    "a%0ASet-Cookie:%20injected=1",
    "a%0DSet-Cookie:%20injected=1",
];

/// Asks `/headers?X-Evil=…` for each of [`INJECTIONS`] through `proxy`, and returns what the
/// client got for each, after checking that no injected field is in it.
fn ask_for_injections(proxy: &Proxy, upstream: &Upstream) -> Vec<String> {
    INJECTIONS
        .iter()
        .map(|evil| {
            let raw = raw_exchange(
                proxy.addr,
                format!(
                    "GET /headers?X-Evil={evil} HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n"
                )
                .as_bytes(),
                Duration::from_secs(10),
            );
            let text = String::from_utf8_lossy(&raw).into_owned();
            assert!(!text.contains("injected"), "{upstream} {evil}: {text}");
            text
        })
        .collect()
}

/// Response splitting asked of gunicorn (`/headers?X-Evil=a%0D%0ASet-Cookie:…`, and with a bare
/// LF or CR): gunicorn refuses the field itself and answers 500, which the proxy relays; no
/// injected field reaches the client, and the proxy goes on serving.
#[test]
fn response_splitting_asked_of_gunicorn_is_refused_by_gunicorn() {
    let upstream = Upstream::gunicorn();
    let proxy = Proxy::start(["--proxy".to_owned(), format!("/={}", upstream.url())]);
    for text in ask_for_injections(&proxy, &upstream) {
        assert!(text.starts_with("HTTP/1.1 500 "), "{text}");
    }
    assert_eq!(get(proxy.addr, "/status/200").status, 200);
}

/// Response splitting asked of uvicorn: h11 refuses the field and closes the connection without
/// a response, which the proxy answers 502; no injected field reaches the client.
#[test]
fn response_splitting_asked_of_uvicorn_is_refused_by_uvicorn_then_502() {
    let upstream = Upstream::uvicorn();
    let proxy = Proxy::start(["--proxy".to_owned(), format!("/={}", upstream.url())]);
    for text in ask_for_injections(&proxy, &upstream) {
        assert!(text.starts_with("HTTP/1.1 502 Bad Gateway\r\n"), "{text}");
    }
    assert_eq!(get(proxy.addr, "/status/200").status, 200);
}

/// Response splitting from an upstream that sends it (the bad upstream, with no library in the
/// way): a field value holding a bare LF, or a bare CR, before `Set-Cookie: injected=1` is one
/// field with a forbidden byte, not two fields: 502, and neither the value nor the cookie reaches
/// the client.
#[test]
fn a_bare_lf_or_cr_in_an_upstream_field_is_502_never_a_second_field() {
    for kind in [BadKind::LfInHeaderValue, BadKind::CrInHeaderValue] {
        let upstream = Upstream::bad(kind);
        let proxy = Proxy::start(["--proxy".to_owned(), format!("/={}", upstream.url())]);
        let raw = raw_exchange(
            proxy.addr,
            b"GET / HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n",
            Duration::from_secs(10),
        );
        let text = String::from_utf8_lossy(&raw);
        assert!(
            text.starts_with("HTTP/1.1 502 Bad Gateway\r\n"),
            "{kind:?}: {text}"
        );
        assert!(
            !text.contains("injected") && !text.contains("X-Injected"),
            "{kind:?}: {text}"
        );
    }
}

/// Hop-by-hop fields in a response (uvicorn sends what it is asked to): Connection, the fields
/// it names, Keep-Alive are dropped; the rest passes.
#[test]
fn hop_by_hop_response_fields_are_dropped() {
    let upstream = Upstream::uvicorn();
    let proxy = Proxy::start(["--proxy".to_owned(), format!("/={}", upstream.url())]);
    let mut s = connect(proxy.addr);
    s.write_all(
        b"GET /headers?X-Hop=1&Connection=X-Hop&Keep-Alive=timeout%3D5&Proxy-Authenticate=Basic&X-Kept=yes HTTP/1.1\r\nHost: p\r\n\r\n",
    )
    .unwrap();
    let mut pending = Vec::new();
    let r = read_response(&mut s, &mut pending, false);
    assert_eq!(r.status, 200, "{}", r.head);
    assert_eq!(r.field("x-kept"), Some("yes"), "{}", r.head);
    for gone in ["x-hop", "keep-alive", "proxy-authenticate", "connection"] {
        assert_eq!(r.field(gone), None, "{gone}: {}", r.head);
    }
    // The client's connection is kept alive, whatever the upstream's said.
    s.write_all(b"GET /status/200 HTTP/1.1\r\nHost: p\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut s, &mut pending, false).status, 200);
}

/// A reload that changes the upstream list under load: `proxy = ["/=http://A"]` in the config
/// file, `lowlat load -c 16 -d 5s` running, the file rewritten to `proxy = ["/=http://B"]` and
/// SIGHUP: the load generator reports no error, and afterwards requests reach B.
#[test]
fn a_reload_switches_the_upstream_under_load() {
    let a = Upstream::gunicorn();
    let b = Upstream::uvicorn();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("lowlat.toml");
    let write = |upstream: &Upstream| {
        std::fs::write(&cfg, format!("proxy = [\"/={}\"]\n", upstream.url())).unwrap();
    };
    write(&a);
    let proxy = Proxy::start([
        "--workers".as_ref(),
        "2".as_ref(),
        "--config".as_ref(),
        cfg.as_os_str(),
    ]);
    assert_eq!(get(proxy.addr, "/echo").json()["server"], "gunicorn");
    let load = Command::new(BIN)
        .args(["load", "-c", "16", "-d", "5s"])
        .arg(format!("http://{}/echo", proxy.addr))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2000));
    write(&b);
    proxy.signal("HUP");
    let out = load.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{report}");
    assert!(!report.contains("Socket errors"), "{report}");
    assert!(!report.contains("Non-2xx"), "{report}");
    assert!(proxy.log().contains("reloaded"), "{}", proxy.log());
    for _ in 0..8 {
        assert_eq!(
            get(proxy.addr, "/echo").json()["server"],
            "uvicorn",
            "{report}"
        );
    }
}

/// A reload builds new groups, whose pools start empty: the idle keep-alive connections of the
/// groups it replaced can never be chosen again, so they close at once (HTTP/1.1 and HTTP/2
/// alike), and a connection busy at the reload closes after its response instead of going back
/// to a pool no request will use. They used to stay open until `--proxy-keepalive-timeout`, so
/// that a reload every minute held a minute's worth of pools on both sides (a soak's
/// descriptors grew 15% after its first reloads).
#[test]
fn a_reload_closes_the_connections_of_the_groups_it_replaced() {
    let dir = tempfile::tempdir().unwrap();
    // Larger than every socket buffer on the way: the upstream is held back until it is read.
    let big = pattern(0, 64 << 20);
    std::fs::write(dir.path().join("big.bin"), &big).unwrap();
    let upstream = Proxy::start([
        "--h2c".as_ref(),
        "--no-app".as_ref(),
        "--root".as_ref(),
        dir.path().as_os_str(),
    ]);
    let cfg = dir.path().join("lowlat.toml");
    let write = |weight: u32| {
        let up = upstream.addr;
        std::fs::write(
            &cfg,
            format!(
                "proxy = [\"/h1/=h1/\", \"/h2/=h2/\"]\n\
                 [[upstream]]\nname = \"h1\"\nservers = [{{ url = \"http://{up}\", weight = {weight} }}]\n\
                 [[upstream]]\nname = \"h2\"\nservers = [{{ url = \"h2c://{up}\", weight = {weight} }}]\n"
            ),
        )
        .unwrap();
    };
    write(1);
    let proxy = Proxy::start([
        "--workers".as_ref(),
        "2".as_ref(),
        "--config".as_ref(),
        cfg.as_os_str(),
    ]);
    let to_upstream = || support::connections_to(upstream.port());
    let wait_for = |want: usize, what: &str| {
        let since = Instant::now();
        while to_upstream() != want {
            assert!(
                since.elapsed() < Duration::from_secs(5),
                "{} upstream connections {what} (wanted {want})",
                to_upstream()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let fill_pools = || {
        for path in ["/h1/plaintext", "/h2/plaintext"] {
            let out = Command::new(BIN)
                .args(["load", "-q", "-c", "16", "-n", "800"])
                .arg(format!("http://{}{path}", proxy.addr))
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && !text.contains("Non-2xx") && !text.contains("errors"),
                "{text}"
            );
        }
        let pooled = to_upstream();
        assert!(pooled >= 4, "{pooled} connections pooled after the load");
    };

    // Reloads without a change and with one: either way the groups are rebuilt.
    for weight in [1, 1, 2] {
        fill_pools();
        write(weight);
        proxy.signal("HUP");
        wait_for(0, "still open 5 s after a reload");
        assert_eq!(support::close_wait_on(proxy.port()), 0);
    }

    // Busy at the reload: a response still coming (64 MiB to a client that has not read it yet,
    // the relay holding the upstream back) finishes whole, then its connection closes rather
    // than waiting in a pool no request will use.
    fill_pools();
    let mut s = connect(proxy.addr);
    s.write_all(b"GET /h1/big.bin HTTP/1.1\r\nHost: p\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    write(1);
    proxy.signal("HUP");
    wait_for(1, "open after a reload while one response is being relayed");
    let mut got = Vec::new();
    let head_end = loop {
        if let Some(i) = find(&got, b"\r\n\r\n") {
            break i + 4;
        }
        fill(&mut s, &mut got, "the head");
    };
    while got.len() < head_end + big.len() {
        fill(&mut s, &mut got, "the body");
    }
    assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"));
    assert!(got[head_end..] == big[..], "the body crossed whole");
    wait_for(0, "open after the response relayed across the reload");
    s.write_all(b"GET /h1/plaintext HTTP/1.1\r\nHost: p\r\n\r\n")
        .unwrap();
    let mut pending = Vec::new();
    let r = read_response(&mut s, &mut pending, false);
    assert_eq!((r.status, r.text().as_str()), (200, "Hello, World!"));
}

/// A client whose request, the start of a streamed body and its close all arrive in one read:
/// the proxy must not forward that request for nobody. It used to start the exchange after the
/// connection had closed and gone, still naming the connection's slot as its client; the next
/// connection given that slot then received the abandoned request's response as its own (a soak
/// saw healthy clients answered 408 by an upstream, and WebSocket tunnels with a response in
/// their stream). The proxy is stopped while the abandoning client writes, so that everything
/// it sent is read at once; clients that follow each ask for their own path, and the upstream
/// (here, a thread) answers the abandoned POST with `ORPHAN` at once.
#[test]
fn an_exchange_abandoned_before_it_started_reaches_no_other_client() {
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let up = upstream.local_addr().unwrap();
    let posts = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&posts);
    std::thread::spawn(move || {
        for conn in upstream.incoming() {
            let Ok(conn) = conn else { return };
            let posts = Arc::clone(&seen);
            std::thread::spawn(move || {
                let mut writer = conn.try_clone().unwrap();
                let mut reader = std::io::BufReader::new(conn);
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let target = line.split(' ').nth(1).unwrap_or("").to_owned();
                    let mut field = String::new();
                    while reader.read_line(&mut field).unwrap_or(0) > 2 {
                        field.clear();
                    }
                    let body = if line.starts_with("POST") {
                        // Answered before its body: the proxy relays it to whoever it names.
                        posts.fetch_add(1, Ordering::SeqCst);
                        "ORPHAN".to_owned()
                    } else {
                        std::thread::sleep(Duration::from_millis(30));
                        target
                    };
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if writer.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    let proxy = Proxy::start(["--proxy".to_owned(), format!("/up/=http://{up}/")]);
    let wrong = Arc::new(Mutex::new(Vec::new()));
    for round in 0..60 {
        proxy.signal("STOP");
        let mut abandoning = connect(proxy.addr);
        abandoning
            .write_all(b"POST /up/upload HTTP/1.1\r\nHost: p\r\nContent-Length: 200000\r\n\r\n")
            .unwrap();
        abandoning.write_all(&[b'y'; 1000]).unwrap();
        abandoning.shutdown(std::net::Shutdown::Write).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        proxy.signal("CONT");
        let clients: Vec<_> = (0..8)
            .map(|k| {
                let wrong = Arc::clone(&wrong);
                let addr = proxy.addr;
                std::thread::sleep(Duration::from_micros(500));
                std::thread::spawn(move || {
                    let path = format!("/own-{round}-{k}");
                    let mut s = connect(addr);
                    s.write_all(format!("GET /up{path} HTTP/1.1\r\nHost: p\r\n\r\n").as_bytes())
                        .unwrap();
                    let mut pending = Vec::new();
                    let r = read_response(&mut s, &mut pending, false);
                    // Anything more (a second response) shows within a moment.
                    s.set_read_timeout(Some(Duration::from_millis(100)))
                        .unwrap();
                    let mut more = [0; 256];
                    let extra = s.read(&mut more).unwrap_or(0);
                    if r.text() != path || extra > 0 {
                        wrong
                            .lock()
                            .unwrap()
                            .push(format!("{path}: got {:?} and {extra} bytes more", r.text()));
                    }
                })
            })
            .collect();
        for c in clients {
            c.join().unwrap();
        }
        drop(abandoning);
    }
    let wrong = wrong.lock().unwrap();
    assert!(
        wrong.is_empty(),
        "{} clients answered with another's response ({} abandoned POSTs forwarded): {:?}",
        wrong.len(),
        posts.load(Ordering::SeqCst),
        &wrong[..wrong.len().min(5)]
    );
}

/// A client that closes while its request waits on a slow upstream (/slow/3000): the proxy drops
/// the exchange at once — it closes its upstream connection, leaves no CLOSE-WAIT on its own
/// port — and the next requests are served.
#[test]
fn a_client_leaving_during_a_slow_response_drops_the_exchange() {
    let upstream = Upstream::gunicorn();
    let proxy = Proxy::start(["--proxy".to_owned(), format!("/={}", upstream.url())]);
    assert_eq!(get(proxy.addr, "/status/200").status, 200);
    let clients: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = connect(proxy.addr);
            s.write_all(b"GET /slow/3000 HTTP/1.1\r\nHost: p\r\n\r\n")
                .unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let left = Instant::now();
    drop(clients);
    // Well before the upstream answers (3 s), the proxy has seen the clients go and closed both
    // sides: its port has no CLOSE-WAIT and gunicorn's has one per abandoned exchange.
    let deadline = left + Duration::from_millis(1500);
    loop {
        let proxy_side = support::close_wait_on(proxy.port());
        let upstream_side = support::close_wait_on(upstream.addr().port());
        if proxy_side == 0 && upstream_side >= 4 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{:?} after the clients left: {proxy_side} CLOSE-WAIT on the proxy's port, \
             {upstream_side} on the upstream's",
            left.elapsed()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let start = Instant::now();
    for _ in 0..5 {
        assert_eq!(get(proxy.addr, "/echo").status, 200);
    }
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    // After the slow responses would have come, still nothing left over.
    std::thread::sleep(Duration::from_millis(
        3000u64.saturating_sub(left.elapsed().as_millis() as u64) + 300,
    ));
    assert_eq!(support::close_wait_on(proxy.port()), 0);
    assert_eq!(get(proxy.addr, "/status/200").status, 200);
}

/// Upstreams on unix sockets (`--proxy /=unix:/path`): gunicorn and uvicorn answer /echo (at
/// their socket's path), downloads are byte-exact, uploads whole.
#[test]
fn unix_socket_upstreams() {
    let dir = tempfile::tempdir().unwrap();
    for app in [App::Gunicorn(GunicornWorker::Gthread), App::Uvicorn] {
        let path = dir.path().join("upstream.sock");
        let upstream = Upstream::start(app, Bind::Unix(path.clone()), &[]);
        let proxy = Proxy::start(["--proxy".to_owned(), format!("/=unix:{}", path.display())]);
        let echo = get(proxy.addr, "/echo?via=unix").json();
        assert_eq!(
            local(&echo),
            path.display().to_string(),
            "{upstream}: {echo}"
        );
        assert_eq!(echo["target"], "/echo?via=unix", "{upstream}: {echo}");
        assert_eq!(echoed_one(&echo, "x-forwarded-for"), "127.0.0.1");
        for route in ["bytes", "chunked"] {
            let r = get(proxy.addr, &format!("/{route}/200001"));
            assert!(r.body == pattern(0, 200_001), "{upstream} /{route}");
        }
        let body = pattern(1, 500_000);
        let mut request = format!(
            "POST /upload HTTP/1.1\r\nHost: p\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(&body);
        let digest = exchange(proxy.addr, &request).json();
        assert_eq!(digest["sha256"], sha256_hex(&body), "{upstream}");
    }
}

/// Dot segments (`..`, `.`, and `%2e%2e`, which RFC 3986 §6.2.2.2 makes the same) in a target
/// under a rewritten prefix (`--proxy /api/=http://HOST:PORT/echo/`) never reach the upstream
/// as they are: `/api/../status/200` must not become `/echo/../status/200`, which an upstream
/// that resolves dot segments serves as `/status/200`, outside what the rule maps. The proxy may
/// refuse such a target (400), or resolve it before it matches a rule (as nginx does), but the
/// upstream must not get a dot segment.
#[test]
fn dot_segments_never_escape_a_rewritten_prefix() {
    let upstream = Upstream::gunicorn();
    let proxy = Proxy::start([
        "--proxy".to_owned(),
        format!("/api/={}/echo/", upstream.url()),
    ]);
    assert_eq!(get(proxy.addr, "/api/x").json()["target"], "/echo/x");
    for target in [
        "/api/../status/200",
        "/api/%2e%2e/status/200",
        "/api/%2E%2E/status/200",
        "/api/./../status/200",
        "/api/a/../../status/200",
        "/api/..",
    ] {
        let r = get(proxy.addr, target);
        if r.status == 200 && r.field("content-type") == Some("application/json") {
            let seen = r.json()["target"].as_str().unwrap().to_owned();
            let path = seen.split('?').next().unwrap().to_ascii_lowercase();
            assert!(
                !path
                    .split('/')
                    .any(|seg| matches!(seg, "." | ".." | "%2e" | "%2e%2e" | ".%2e" | "%2e.")),
                "{target} reached the upstream as {seen}"
            );
        }
    }
}

/// curl over HTTP/2 — in clear with prior knowledge (`--h2c`), and over TLS by ALPN — through
/// the proxy to gunicorn: the request arrives as HTTP/1.1 with the forwarding fields (https over
/// TLS), downloads are byte-exact, an upload arrives whole, and ten streams at once on one TLS
/// connection all succeed.
#[test]
fn curl_over_http2_reaches_gunicorn() {
    let upstream = Upstream::gunicorn();
    let pki = Pki::new();
    let leaf = pki.leaf("proxy", &["localhost"], KeyKind::EcdsaP256);
    let ca = pki.ca_path();
    let args: Vec<OsString> = vec![
        "--h2c".into(),
        "--tls-listen".into(),
        "127.0.0.1:0".into(),
        "--cert".into(),
        leaf.cert.clone().into(),
        "--key".into(),
        leaf.key.clone().into(),
        "--proxy".into(),
        format!("/={}", upstream.url()).into(),
    ];
    let proxy = Proxy::start(args);
    let tls = proxy.tls_addr.expect("a TLS listener");
    let resolve = format!("localhost:{}:127.0.0.1", tls.port());
    let ca = ca.to_str().unwrap();
    let clear = ["--http2-prior-knowledge"];
    let over_tls = ["--http2", "--cacert", ca, "--resolve", &resolve];
    let bases = [
        (&clear[..], format!("http://{}", proxy.addr), "http"),
        (
            &over_tls[..],
            format!("https://localhost:{}", tls.port()),
            "https",
        ),
    ];
    let body = pattern(5, 300_000);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("upload.bin");
    std::fs::write(&file, &body).unwrap();
    for (how, base, scheme) in &bases {
        let (code, r) = curl_response(&[*how, &[&format!("{base}/echo?h2=1")]].concat());
        assert_eq!((code, r.status), (Some(0), 200), "{scheme}: {}", r.head);
        assert!(r.head.starts_with("HTTP/2 200"), "{scheme}: {}", r.head);
        let echo = r.json();
        assert_eq!(echo["http_version"], "1.1", "{echo}");
        assert_eq!(echo["query"], "h2=1");
        assert_eq!(echoed_one(&echo, "x-forwarded-proto"), *scheme, "{echo}");
        assert_eq!(echoed_one(&echo, "x-forwarded-for"), "127.0.0.1", "{echo}");
        assert_made_request_id(&echoed_one(&echo, "x-request-id"));

        for route in ["bytes", "chunked"] {
            let n = 1_000_003;
            let (code, r) = curl_response(&[*how, &[&format!("{base}/{route}/{n}")]].concat());
            assert_eq!((code, r.status), (Some(0), 200), "{scheme} /{route}");
            assert!(r.body == pattern(0, n), "{scheme} /{route}: wrong bytes");
        }
        let (code, r) = curl_response(
            &[
                *how,
                &[
                    "--data-binary",
                    &format!("@{}", file.display()),
                    &format!("{base}/upload"),
                ],
            ]
            .concat(),
        );
        assert_eq!(
            (code, r.status),
            (Some(0), 200),
            "{scheme} upload: {}",
            r.head
        );
        assert_eq!(r.json()["sha256"], sha256_hex(&body), "{scheme}");

        // Ten streams at once on one connection. Over TLS only: curl 7.88 fails every stream but
        // the first of a prior-knowledge connection before sending it (against h2o as well).
        if *scheme == "http" {
            continue;
        }
        let urls: Vec<String> = (0..10)
            .map(|i| format!("{base}/slow/{}", 100 + i))
            .collect();
        let mut args: Vec<&str> = how.to_vec();
        args.extend([
            "-Z",
            "--parallel-max",
            "10",
            "-w",
            "%{http_version} %{http_code}\\n",
        ]);
        for url in &urls {
            args.extend(["-o", "/dev/null", url.as_str()]);
        }
        let out = curl(&args);
        let report = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{scheme}: {report}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            report.lines().filter(|l| *l == "2 200").count(),
            10,
            "{scheme}: {report}"
        );
    }
}

/// Over HTTP/2, a response the upstream cuts short (/die's reset; /stall past
/// `--proxy-read-timeout 1s`) ends its stream at once with RST_STREAM: curl fails within a few
/// seconds (exit 92, or 18) with no more than the 512 bytes that came, instead of waiting.
#[test]
fn http2_a_response_cut_by_the_upstream_resets_the_stream() {
    let upstream = Upstream::gunicorn();
    let proxy = Proxy::start([
        "--h2c".to_owned(),
        "--proxy".to_owned(),
        format!("/={}", upstream.url()),
        "--proxy-read-timeout".to_owned(),
        "1s".to_owned(),
    ]);
    for target in ["/die", "/stall"] {
        let start = Instant::now();
        let out = curl(&[
            "--http2-prior-knowledge",
            "--max-time",
            "10",
            "-o",
            "-",
            &format!("http://{}{target}", proxy.addr),
        ]);
        let code = out.status.code();
        assert!(
            matches!(code, Some(92 | 18 | 56)),
            "{target}: curl exit {code:?} after {:?}: {}",
            start.elapsed(),
            String::from_utf8_lossy(&out.stderr)
        );
        // What came before the reset, if anything: never more, never other bytes.
        let got = out.stdout.len();
        assert!(
            got <= 512 && out.stdout == pattern(0, got),
            "{target}: {got} bytes"
        );
        assert!(
            start.elapsed() < Duration::from_secs(4),
            "{target}: {:?}",
            start.elapsed()
        );
    }
}

/// Over HTTP/2, nothing listening at the upstream's address: the stream gets 502 at once.
#[test]
fn http2_nothing_listening_is_502_at_once() {
    let proxy = Proxy::start([
        "--h2c".to_owned(),
        "--proxy".to_owned(),
        format!("/=http://127.0.0.1:{}", dead_port()),
    ]);
    let start = Instant::now();
    let (code, r) = curl_response(&[
        "--http2-prior-knowledge",
        "--max-time",
        "5",
        &format!("http://{}/echo", proxy.addr),
    ]);
    assert_eq!((code, r.status), (Some(0), 502), "{}", r.head);
    assert_eq!(r.text(), "502 Bad Gateway\n");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
}

/// `--access-log` with a proxied request: the line ends with the upstream's address, status and
/// response time (nginx's `$upstream_addr $upstream_status $upstream_response_time`), in the
/// combined format and in JSON.
#[test]
fn the_access_log_names_the_upstream() {
    let upstream = Upstream::gunicorn();
    let dir = tempfile::tempdir().unwrap();
    for format in ["combined", "json"] {
        let log = dir.path().join(format!("access-{format}.log"));
        let proxy = Proxy::start([
            "--access-log".as_ref(),
            log.as_os_str(),
            "--access-log-format".as_ref(),
            format.as_ref(),
            "--proxy".as_ref(),
            format!("/={}", upstream.url()).as_ref(),
        ]);
        assert_eq!(get(proxy.addr, "/status/201").status, 201);
        let deadline = Instant::now() + Duration::from_secs(5);
        let line = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(line) = text.lines().find(|l| l.contains("/status/201")) {
                break line.to_owned();
            }
            assert!(Instant::now() < deadline, "no line in {text:?}");
            std::thread::sleep(Duration::from_millis(50));
        };
        let addr = upstream.addr().to_string();
        if format == "json" {
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(v["upstream_addr"], addr.as_str(), "{line}");
            assert_eq!(v["upstream_status"], 201, "{line}");
            assert!(v["upstream_response_time"].as_f64().is_some(), "{line}");
        } else {
            // … "referer" "user-agent" "ADDR" STATUS SECONDS
            let tail: Vec<&str> = line.rsplitn(3, ' ').collect();
            assert_eq!(
                tail[2].rsplit(' ').next(),
                Some(format!("\"{addr}\"").as_str()),
                "{line}"
            );
            assert_eq!(tail[1], "201", "{line}");
            assert!(tail[0].parse::<f64>().is_ok(), "{line}");
        }
    }
}

/// Sockets in state ESTABLISHED whose remote port is `port` (connections to the server listening
/// there), from /proc/net/tcp.
fn established_to(port: u16) -> usize {
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    text.lines()
        .skip(1)
        .filter(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let remote_port = cols
                .get(2)
                .and_then(|a| a.rsplit_once(':'))
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            remote_port == Some(port) && cols.get(3) == Some(&"01")
        })
        .count()
}

/// Upstream connections are kept alive and reused: gunicorn (gthread) sees one client port for a
/// series of requests; with `--proxy-keepalive 0` every request has a connection of its own.
#[test]
fn upstream_connections_are_reused_unless_keepalive_is_0() {
    let upstream = Upstream::gunicorn();
    for (keepalive, reused) in [("512", true), ("0", false)] {
        let proxy = Proxy::start([
            "--proxy".to_owned(),
            format!("/={}", upstream.url()),
            "--proxy-keepalive".to_owned(),
            keepalive.to_owned(),
        ]);
        let ports: Vec<String> = (0..5)
            .map(|_| {
                get(proxy.addr, "/echo").json()["client"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        let distinct: std::collections::BTreeSet<&String> = ports.iter().collect();
        if reused {
            assert_eq!(
                distinct.len(),
                1,
                "--proxy-keepalive {keepalive}: {ports:?}"
            );
        } else {
            assert_eq!(
                distinct.len(),
                5,
                "--proxy-keepalive {keepalive}: {ports:?}"
            );
        }
    }
}

/// A client on IPv6 (`--listen [::1]:0`): X-Forwarded-For names it `::1`, Forwarded quotes and
/// brackets it as RFC 7239 §6 says (`for="[::1]"`).
#[test]
fn an_ipv6_client_is_named_as_rfc_7239_says() {
    let upstream = Upstream::uvicorn();
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--workers", "1", "--listen", "[::1]:0", "--proxy"])
        .arg(format!("/={}", upstream.url()));
    let (mut child, _stderr, banner) = support::spawn_serve(cmd);
    let addr = support::address(&banner, "http://");
    let echo = get(addr, "/echo").json();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(echoed_one(&echo, "x-forwarded-for"), "::1", "{echo}");
    assert_eq!(
        echoed_one(&echo, "forwarded"),
        "for=\"[::1]\";proto=http;host=\"proxied.test\"",
        "{echo}"
    );
}

/// A client that leaves in the middle of a gibibyte download: the proxy closes its upstream
/// connection at once (it neither reads the rest nor keeps the connection), and serves on.
#[test]
fn a_client_leaving_mid_download_closes_the_upstream_connection() {
    let upstream = Upstream::gunicorn();
    let port = upstream.addr().port();
    let proxy = Proxy::start(["--proxy".to_owned(), format!("/={}", upstream.url())]);
    let mut s = connect(proxy.addr);
    s.write_all(b"GET /bytes/1073741824 HTTP/1.1\r\nHost: p\r\n\r\n")
        .unwrap();
    let mut buf = vec![0; 1 << 20];
    s.read_exact(&mut buf).unwrap();
    assert_eq!(
        established_to(port),
        1,
        "the download's upstream connection"
    );
    let cpu_before = proxy_cpu_ticks(&proxy);
    drop(s);
    let left = Instant::now();
    while established_to(port) > 0 {
        assert!(
            left.elapsed() < Duration::from_secs(1),
            "the upstream connection is still open {:?} after the client left",
            left.elapsed()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    // Not reading the rest of the gibibyte: well under a second of CPU.
    let used = proxy_cpu_ticks(&proxy) - cpu_before;
    assert!(used < 50, "{used} ticks of CPU after the client left");
    assert_eq!(get(proxy.addr, "/status/200").status, 200);
}

/// A client that leaves before its answer is complete is logged as nginx logs it: 499 while
/// the upstream had not answered yet, and the status with the bytes sent when it left in the
/// middle of a body; over HTTP/1.1 and HTTP/2.
#[test]
fn a_client_that_leaves_is_logged_499_or_with_what_it_got() {
    let upstream = Upstream::gunicorn();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let proxy = Proxy::start([
        "--access-log".as_ref(),
        log.as_os_str(),
        "--access-log-format".as_ref(),
        "$request_uri $status".as_ref(),
        "--h2c".as_ref(),
        "--proxy".as_ref(),
        format!("/={}", upstream.url()).as_ref(),
    ]);
    let mut s = connect(proxy.addr);
    s.write_all(b"GET /slow/3000 HTTP/1.1\r\nHost: p\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(s);
    let mut s = connect(proxy.addr);
    s.write_all(b"GET /bytes/1073741824 HTTP/1.1\r\nHost: p\r\n\r\n")
        .unwrap();
    let mut buf = vec![0; 1 << 20];
    s.read_exact(&mut buf).unwrap();
    drop(s);
    // Over HTTP/2 too: a client that gives up on its stream's answer and goes.
    let started = Instant::now();
    Command::new("nghttp")
        .args(["-n", "--timeout=300ms"])
        .arg(format!("http://{}/slow/2900", proxy.addr))
        .output()
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "nghttp waited for the answer"
    );
    assert_eq!(
        support::lines_of(&log, 3),
        ["/slow/3000 499", "/bytes/1073741824 200", "/slow/2900 499"]
    );
}

/// The proxy's CPU time so far (utime + stime), in clock ticks.
fn proxy_cpu_ticks(proxy: &Proxy) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", proxy.pid())).unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_name.split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// An upstream whose accept queue is full (a listener with a backlog of 0 that never accepts,
/// its queue filled), so that a connect to it waits: 504 after `--proxy-connect-timeout 1s`.
#[test]
fn a_connect_that_hangs_is_504_after_the_connect_timeout() {
    let mut listener = Command::new(support::upstream::python())
        .args([
            "-c",
            "import socket, sys, time\n\
             s = socket.socket()\n\
             s.bind(('127.0.0.1', 0))\n\
             s.listen(0)\n\
             print(s.getsockname()[1], flush=True)\n\
             sys.stdin.read()\n",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(listener.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port: u16 = line.trim().parse().unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    // Fill the accept queue: once it is full, the kernel drops further SYNs.
    let fillers: Vec<TcpStream> = (0..4)
        .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok())
        .collect();
    let proxy = Proxy::start([
        "--proxy".to_owned(),
        format!("/=http://{addr}"),
        "--proxy-connect-timeout".to_owned(),
        "1s".to_owned(),
    ]);
    let start = Instant::now();
    let r = get(proxy.addr, "/echo");
    let took = start.elapsed();
    drop(fillers);
    drop(listener.stdin.take());
    let _ = listener.wait();
    assert!(
        r.head.starts_with("HTTP/1.1 504 Gateway Timeout\r\n"),
        "{}",
        r.head
    );
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_millis(2500),
        "504 after {took:?}"
    );
}

/// From a `--proxy-trusted` client, an X-Forwarded-For or Forwarded list split over several
/// field lines (one list, RFC 9110 §5.3) is kept whole and extended: `1.1.1.1` and `2.2.2.2` on
/// two lines become `1.1.1.1, 2.2.2.2, 127.0.0.1`.
#[test]
fn repeated_forwarding_fields_from_a_trusted_client_are_all_kept() {
    let upstream = Upstream::uvicorn();
    let proxy = Proxy::start([
        "--proxy".to_owned(),
        format!("/={}", upstream.url()),
        "--proxy-trusted".to_owned(),
        "127.0.0.1".to_owned(),
    ]);
    let echo = get_with(
        proxy.addr,
        "/echo",
        "X-Forwarded-For: 1.1.1.1\r\nX-Forwarded-For: 2.2.2.2\r\n\
         Forwarded: for=1.1.1.1\r\nForwarded: for=2.2.2.2\r\n",
    )
    .json();
    assert_eq!(
        echoed(&echo, "x-forwarded-for").join(", "),
        "1.1.1.1, 2.2.2.2, 127.0.0.1",
        "{echo}"
    );
    assert_eq!(
        echoed(&echo, "forwarded").join(", "),
        "for=1.1.1.1, for=2.2.2.2, for=127.0.0.1;proto=http;host=\"proxied.test\"",
        "{echo}"
    );
}
