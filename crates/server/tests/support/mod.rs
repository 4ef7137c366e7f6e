//! Shared helpers for the server's integration tests: start a real server on an ephemeral port
//! (from a config, or from `lowlat serve` flags), talk to it over raw TCP, and read responses off
//! the wire exactly as sent; [`alloc`] for the allocation tests.

#![allow(dead_code)] // each test binary uses a different subset

pub mod alloc;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use lowlat_server::{Running, Server, ServerConfig, Service};

/// A server running in this process, shut down when dropped.
pub struct TestServer {
    pub addr: SocketAddr,
    /// The TLS address, when the config has one.
    pub tls_addr: Option<SocketAddr>,
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
        let tls_addr = running.tls_addrs().first().copied();
        Self {
            addr,
            tls_addr,
            running: Some(running),
        }
    }

    /// `lowlat serve --listen 127.0.0.1:0 --workers 1` with `flags`, built as the command line
    /// builds it, with a grace of 1 s.
    pub fn from_flags(flags: &[&str]) -> Self {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            serve: lowlat_server::settings::ServeArgs,
        }
        let argv = ["lowlat", "--listen", "127.0.0.1:0", "--workers", "1"];
        let cli =
            <Cli as clap::Parser>::try_parse_from(argv.iter().chain(flags)).expect("flags parse");
        let service = lowlat_server::settings::service(&cli.serve).unwrap();
        let mut cfg = cli.serve.to_config().unwrap();
        cfg.grace = Duration::from_secs(1);
        Self::start(cfg, service)
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

/// A config with a clear and a TLS listener on ephemeral ports, serving `certs` (the first is
/// the default).
pub fn tls_config(workers: usize, certs: &[&lowlat_testkit::pki::CertFiles]) -> ServerConfig {
    let pairs: Vec<lowlat_server::tls::CertPaths> = certs
        .iter()
        .map(|c| lowlat_server::tls::CertPaths {
            cert: c.cert.clone(),
            key: c.key.clone(),
        })
        .collect();
    let tls = lowlat_server::tls::TlsContext::new(
        &pairs,
        lowlat_server::tls::CryptoBackend::default(),
        lowlat_server::tls::ALPN_HTTP1,
    )
    .expect("TLS context");
    ServerConfig {
        tls_listen: vec!["127.0.0.1:0".parse().unwrap()],
        tls: Some(Arc::new(tls)),
        ..config(workers)
    }
}

/// A rustls client configuration trusting `ca` (PEM file), for the given protocol versions.
pub fn client_config(
    ca: &std::path::Path,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_protocol_versions(versions)
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

/// A blocking TLS client stream.
pub type TlsClient = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// Connects and completes the handshake for `name`.
pub fn tls_connect(addr: SocketAddr, name: &str, cfg: &Arc<rustls::ClientConfig>) -> TlsClient {
    let sock = TcpStream::connect(addr).expect("connect");
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    sock.set_nodelay(true).unwrap();
    let conn = rustls::ClientConnection::new(
        Arc::clone(cfg),
        rustls::pki_types::ServerName::try_from(name.to_owned()).unwrap(),
    )
    .unwrap();
    let mut stream = rustls::StreamOwned::new(conn, sock);
    while stream.conn.is_handshaking() {
        stream
            .conn
            .complete_io(&mut stream.sock)
            .expect("TLS handshake");
    }
    stream
}

/// Reads one response with a Content-Length body (or none) off any reader.
pub fn read_response_from(stream: &mut impl Read) -> (String, Vec<u8>) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = stream.read(&mut byte).expect("read head");
        assert!(
            n > 0,
            "closed inside a head: {:?}",
            String::from_utf8_lossy(&head)
        );
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let len = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).expect("read body");
    (head, body)
}
