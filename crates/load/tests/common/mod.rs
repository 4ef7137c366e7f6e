//! Small HTTP/1.1 servers written with std::net for the integration tests: one thread per
//! connection, blocking I/O, a handler closure per connection. They misbehave on purpose (slow,
//! closing, chunked, malformed, silent) and count what they saw.

#![allow(dead_code)]

pub mod lowlat;
pub mod peer;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use lowlat_load::{LoadConfig, Report, Target};

/// What the server saw, shared with the test.
#[derive(Default)]
pub struct Seen {
    pub requests: AtomicU64,
    pub connections: AtomicU64,
    /// Request targets, in arrival order (only when `log_targets`).
    pub targets: Mutex<Vec<String>>,
    pub log_targets: AtomicBool,
}

/// A running test server; stops accepting when dropped.
pub struct TestServer {
    pub addr: SocketAddr,
    pub seen: Arc<Seen>,
    stop: Arc<AtomicBool>,
}

impl TestServer {
    /// Starts a server on 127.0.0.1:0 calling `handler` for each connection, in its own thread.
    pub fn start<F>(handler: F) -> Self
    where
        F: Fn(&mut Conn) + Send + Sync + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let seen = Arc::new(Seen::default());
        let stop = Arc::new(AtomicBool::new(false));
        let handler = Arc::new(handler);
        {
            let (seen, stop) = (Arc::clone(&seen), Arc::clone(&stop));
            thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    seen.connections.fetch_add(1, Ordering::Relaxed);
                    let _ = stream.set_nodelay(true);
                    // Every connection thread ends by itself: the client closes, or this fires.
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(15)));
                    let (seen, handler, stop) =
                        (Arc::clone(&seen), Arc::clone(&handler), Arc::clone(&stop));
                    thread::spawn(move || {
                        let mut conn = Conn {
                            stream,
                            buf: Vec::new(),
                            seen,
                            stop,
                        };
                        handler(&mut conn);
                    });
                }
            });
        }
        Self { addr, seen, stop }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn requests(&self) -> u64 {
        self.seen.requests.load(Ordering::Relaxed)
    }

    pub fn connections(&self) -> u64 {
        self.seen.connections.load(Ordering::Relaxed)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so that it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(100));
    }
}

/// One server-side connection.
pub struct Conn {
    pub stream: TcpStream,
    buf: Vec<u8>,
    seen: Arc<Seen>,
    stop: Arc<AtomicBool>,
}

/// A request as the test server saw it.
pub struct Request {
    pub method: String,
    pub target: String,
    pub head: String,
    pub body: Vec<u8>,
}

impl Conn {
    /// Reads the next request (head and `Content-Length` body); `None` at EOF or error.
    pub fn next_request(&mut self) -> Option<Request> {
        loop {
            if let Some(end) = find(&self.buf, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.buf[..end + 4]).into_owned();
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse().ok())?
                    })
                    .unwrap_or(0);
                if self.buf.len() >= end + 4 + len {
                    let body = self.buf[end + 4..end + 4 + len].to_vec();
                    self.buf.drain(..end + 4 + len);
                    let mut parts = head.split(' ');
                    let method = parts.next().unwrap_or("").to_owned();
                    let target = parts.next().unwrap_or("").to_owned();
                    self.seen.requests.fetch_add(1, Ordering::Relaxed);
                    if self.seen.log_targets.load(Ordering::Relaxed) {
                        self.seen.targets.lock().unwrap().push(target.clone());
                    }
                    return Some(Request {
                        method,
                        target,
                        head,
                        body,
                    });
                }
            }
            let mut tmp = [0u8; 16 * 1024];
            match self.stream.read(&mut tmp) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
            }
        }
    }

    /// Whether another complete request head is already buffered (pipelined behind this one).
    pub fn has_buffered_request(&self) -> bool {
        find(&self.buf, b"\r\n\r\n").is_some()
    }

    /// Writes all of `bytes`; false when the client is gone.
    pub fn send(&mut self, bytes: &[u8]) -> bool {
        self.stream.write_all(bytes).is_ok()
    }

    /// Whether the test server is shutting down.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A plain keep-alive response with `body`.
pub fn ok_response(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A well-behaved keep-alive server answering every request with "hello", writing the answers
/// to a pipelined batch in one write.
pub fn hello_server() -> TestServer {
    TestServer::start(|c| {
        let resp = ok_response("hello");
        let mut out = Vec::new();
        while c.next_request().is_some() {
            out.extend_from_slice(&resp);
            if !c.has_buffered_request() {
                if !c.send(&out) {
                    return;
                }
                out.clear();
            }
        }
    })
}

/// A config for `urls` with small, test-friendly defaults.
pub fn config(urls: &[String]) -> LoadConfig {
    LoadConfig {
        targets: urls.iter().map(|u| Target::new(u.as_str())).collect(),
        threads: 1,
        connections: 2,
        timeout: Duration::from_secs(5),
        duration: Some(Duration::from_secs(20)),
        ..LoadConfig::default()
    }
}

/// Runs `cfg` to completion.
pub fn run(cfg: &LoadConfig) -> Report {
    lowlat_load::run(cfg, &AtomicBool::new(false)).expect("run starts")
}
