//! Shared helpers for the server's integration tests: start a real server on an ephemeral port,
//! talk to it over raw TCP, and read responses off the wire exactly as sent.

#![allow(dead_code)] // each test binary uses a different subset

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use lowlat_server::{Running, Server, ServerConfig, Service};

/// A server running in this process, shut down when dropped.
pub struct TestServer {
    pub addr: SocketAddr,
    running: Option<Running>,
}

impl TestServer {
    /// Starts `service` with `cfg` (its listen address replaced by 127.0.0.1:0).
    pub fn start(mut cfg: ServerConfig, service: Service) -> Self {
        if cfg.listen.is_empty() || cfg.listen[0].port() != 0 {
            cfg.listen = vec!["127.0.0.1:0".parse().unwrap()];
        }
        let server = Server::bind(cfg, service).expect("bind");
        let running = server.start().expect("start");
        let addr = running.local_addrs()[0];
        Self {
            addr,
            running: Some(running),
        }
    }

    /// The built-in endpoints with a small config.
    pub fn builtin(workers: usize) -> Self {
        Self::start(config(workers), lowlat_server::builtin_service())
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_nodelay(true).unwrap();
        s
    }

    /// Shuts down gracefully and waits for the workers.
    pub fn stop(mut self) {
        if let Some(running) = self.running.take() {
            running.shutdown_handle().shutdown();
            running.wait().expect("clean shutdown");
        }
    }

    pub fn shutdown_handle(&self) -> lowlat_server::ShutdownHandle {
        self.running.as_ref().unwrap().shutdown_handle()
    }

    pub fn take_running(&mut self) -> Running {
        self.running.take().unwrap()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            running.shutdown_handle().shutdown();
            let _ = running.wait();
        }
    }
}

/// A config for tests: `workers` workers, short grace.
pub fn config(workers: usize) -> ServerConfig {
    ServerConfig {
        workers,
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        grace: Duration::from_secs(2),
        ..ServerConfig::default()
    }
}

/// A service from a router-building closure.
pub fn service(f: impl Fn() -> lowlat_server::Router + Send + Sync + 'static) -> Service {
    Arc::new(move |_| f())
}

/// One response as read off the wire.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads responses from a stream, keeping bytes that belong to the next one.
pub struct Reader {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Reader {
    pub fn new(stream: TcpStream) -> Self {
        Self {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 65536];
        match self.stream.read(&mut chunk) {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// Reads one response to a request made with `method` (HEAD responses have no body).
    pub fn reply_to(&mut self, method: &str) -> Option<Reply> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut resp = httparse::Response::new(&mut headers);
            match resp.parse(&self.buf).expect("well-formed response") {
                httparse::Status::Complete(head_len) => {
                    let status = resp.code.unwrap();
                    let headers: Vec<(String, String)> = resp
                        .headers
                        .iter()
                        .map(|h| {
                            (
                                h.name.to_owned(),
                                String::from_utf8_lossy(h.value).into_owned(),
                            )
                        })
                        .collect();
                    let len: usize = headers
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                        .map_or(0, |(_, v)| v.parse().expect("numeric content-length"));
                    let body_len = if method == "HEAD" || status == 304 || status < 200 {
                        0
                    } else {
                        len
                    };
                    while self.buf.len() < head_len + body_len {
                        if !self.fill() {
                            return None;
                        }
                    }
                    let body = self.buf[head_len..head_len + body_len].to_vec();
                    self.buf.drain(..head_len + body_len);
                    return Some(Reply {
                        status,
                        headers,
                        body,
                    });
                }
                httparse::Status::Partial => {
                    if !self.fill() {
                        return None;
                    }
                }
            }
        }
    }

    pub fn reply(&mut self) -> Option<Reply> {
        self.reply_to("GET")
    }

    /// True when the server closed the connection (EOF or reset) with nothing more to read.
    pub fn closed(&mut self) -> bool {
        self.buf.is_empty() && !self.fill()
    }
}

/// Sends one request on a fresh connection and reads one reply.
pub fn roundtrip(addr: SocketAddr, request: &[u8]) -> Option<Reply> {
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut r = Reader::new(stream);
    r.send(request);
    let method = std::str::from_utf8(request)
        .ok()
        .and_then(|s| s.split(' ').next())
        .unwrap_or("GET")
        .to_owned();
    r.reply_to(&method)
}

/// `GET path` with a Host header.
pub fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").into_bytes()
}
