//! Trailer fields from an upstream reach the client: `lowlat serve --proxy` in front of an
//! upstream that ends a chunked body with `X-Checksum` (tests/upstreams/bad_upstream.py's
//! `chunked-trailers`), asked by a raw HTTP/1.1 client (the trailer section of the chunked body
//! it gets) and by nghttp over HTTP/2 (a HEADERS frame after the DATA, ending the stream).
//!
//! And the other way: trailer fields a client sends after its request body reach the upstream —
//! an HTTP/2 one (tests/upstreams/h2_recorder.py, which records them) as a last HEADERS frame,
//! from an HTTP/1.1 client's chunked body and from an HTTP/2 client's trailing HEADERS; an
//! HTTP/1.1 one in the trailer section of the re-chunked body. Framing, hop-by-hop, routing and
//! authentication fields stay behind.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command};
use std::time::Duration;

mod support;
use support::upstream::{python, upstreams_dir, BadKind, Upstream};
use support::BIN;

/// A proxy with one worker, HTTP/2 in clear (`--h2c`) beside HTTP/1.1, forwarding `/` to `url`.
struct Proxy {
    child: Child,
    addr: SocketAddr,
}

impl Proxy {
    fn start(url: &str) -> Proxy {
        let mut cmd = Command::new(BIN);
        cmd.args([
            "serve",
            "--workers",
            "1",
            "--listen",
            "127.0.0.1:0",
            "--h2c",
        ])
        .args(["--proxy", &format!("/={url}")]);
        let (child, _stderr, banner) = support::spawn_serve(cmd);
        let addr = support::address(&banner, "http://");
        Proxy { child, addr }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP/1.1 client gets the upstream's trailer in the chunked body's trailer section,
/// twice on one kept-alive upstream connection.
#[test]
fn an_http1_client_gets_the_trailer_section() {
    let upstream = Upstream::bad(BadKind::ChunkedTrailers);
    let proxy = Proxy::start(&upstream.url());
    for _ in 0..2 {
        let mut s = TcpStream::connect(proxy.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.write_all(b"GET /x HTTP/1.1\r\nHost: p\r\nTE: trailers\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        let text = String::from_utf8_lossy(&out);
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        assert!(text.contains("Transfer-Encoding: chunked\r\n"), "{text}");
        assert!(
            text.ends_with("\r\n\r\n5\r\nhello\r\n0\r\nX-Checksum: 5d41402a\r\n\r\n"),
            "{text:?}"
        );
    }
}

/// An HTTP/2 client gets the trailer as a HEADERS frame that ends the stream, after DATA frames
/// that do not.
#[test]
fn an_http2_client_gets_a_trailing_headers_frame() {
    let upstream = Upstream::bad(BadKind::ChunkedTrailers);
    let proxy = Proxy::start(&upstream.url());
    let out = Command::new("nghttp")
        .args(["-v", "-t", "30"])
        .arg(format!("http://{}/x", proxy.addr))
        .output()
        .expect("run nghttp (scripts/test-deps.sh installs it)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let data = text.find("recv DATA frame").expect("no DATA frame");
    let trailer = text
        .find("x-checksum: 5d41402a")
        .unwrap_or_else(|| panic!("no trailer: {text}"));
    assert!(data < trailer, "{text}");
    let data_line = text[data..].lines().next().unwrap();
    assert!(
        data_line.contains("flags=0x00"),
        "DATA ended the stream: {text}"
    );
    let last = &text[trailer..];
    let headers = last
        .find("recv HEADERS frame")
        .expect("no trailing HEADERS");
    let flags = last[headers..].lines().nth(1).unwrap_or_default();
    assert!(flags.contains("END_STREAM"), "{text}");
}

/// A chunked request from an HTTP/1.1 client with trailer fields, sent to the proxy at `addr`
/// (`Connection: close`): the whole answer.
fn post_with_trailers(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(
        b"POST /digest HTTP/1.1\r\nHost: p\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
          3\r\nhel\r\n2\r\nlo\r\n0\r\nX-Checksum: 5d41402a\r\nContent-Length: 5\r\n\
          Connection: close\r\nAuthorization: secret\r\ngrpc-status: 0\r\n\r\n",
    )
    .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// The JSON body of an answer.
fn body_json(answer: &str) -> serde_json::Value {
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body.trim()).unwrap_or_else(|e| panic!("{e}: {answer}"))
}

/// The trailers an HTTP/2 upstream received, from an HTTP/1.1 client's chunked body and from an
/// HTTP/2 client's trailing HEADERS frame: those that may pass, and no others.
#[test]
fn client_trailers_reach_an_http2_upstream() {
    let upstream = Upstream::h2_recorder();
    let proxy = Proxy::start(&format!("h2c://127.0.0.1:{}", upstream.addr().port()));
    let answer = post_with_trailers(proxy.addr);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let got = body_json(&answer);
    assert_eq!(got["length"], 5, "{got}");
    assert_eq!(
        got["trailers"],
        serde_json::json!({"x-checksum": "5d41402a", "grpc-status": "0"}),
        "{got}"
    );

    let out = Command::new(python())
        .arg(upstreams_dir().join("h2_recorder.py"))
        .args(["--send", &format!("http://{}/digest", proxy.addr)])
        .args([
            "--trailer",
            "x-checksum=5d41402a",
            "--trailer",
            "content-length=5",
        ])
        .args(["--trailer", "authorization=secret"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, body) = text.split_once('\n').unwrap();
    assert_eq!(status, "200", "{text}");
    let got: serde_json::Value = serde_json::from_str(body.trim()).unwrap();
    assert_eq!(got["length"], 5, "{got}");
    assert_eq!(
        got["trailers"],
        serde_json::json!({"x-checksum": "5d41402a"}),
        "{got}"
    );
}

/// An HTTP/1.1 upstream gets the client's trailer fields in the trailer section of the chunked
/// body the proxy sends it (those that may pass, names in lower case).
#[test]
fn client_trailers_reach_an_http1_upstream_in_the_last_chunk() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let up = listener.local_addr().unwrap();
    let recorded = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        // The head, then the body up to the end of its trailer section (after the last chunk,
        // "0", the section ends with an empty line).
        let done = |got: &[u8]| {
            let text = String::from_utf8_lossy(got);
            text.split_once("\r\n\r\n").is_some_and(|(_, body)| {
                body.split_once("\n0\r\n")
                    .is_some_and(|(_, rest)| rest == "\r\n" || rest.ends_with("\r\n\r\n"))
            })
        };
        while !done(&got) {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "{}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .unwrap();
        String::from_utf8_lossy(&got).into_owned()
    });
    let proxy = Proxy::start(&format!("http://{up}"));
    let answer = post_with_trailers(proxy.addr);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let got = recorded.join().unwrap();
    let body = got.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    assert_eq!(
        body, "3\r\nhel\r\n2\r\nlo\r\n0\r\nx-checksum: 5d41402a\r\ngrpc-status: 0\r\n\r\n",
        "{got}"
    );
}
