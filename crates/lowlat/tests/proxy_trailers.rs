//! Trailer fields from an upstream reach the client: `lowlat serve --proxy` in front of an
//! upstream that ends a chunked body with `X-Checksum` (tests/upstreams/bad_upstream.py's
//! `chunked-trailers`), asked by a raw HTTP/1.1 client (the trailer section of the chunked body
//! it gets) and by nghttp over HTTP/2 (a HEADERS frame after the DATA, ending the stream).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command};
use std::time::Duration;

mod support;
use support::upstream::{BadKind, Upstream};
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
