//! `lowlat serve`'s engine in process, for the load generator's TLS and HTTP/2 tests: a TLS
//! listener with a certificate from the test PKI and a clear-text one (h2c on), and the run
//! settings those tests share.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use lowlat_load::{LoadConfig, Report, Target, TlsOptions};
use lowlat_server::tls::{CertPaths, CryptoBackend, TlsContext};
use lowlat_server::{builtin_service, Running, Server, ServerConfig};
use lowlat_testkit::pki::{KeyKind, Pki};

/// The server, its `https://localhost:PORT` base (ALPN offering `alpn`) and its
/// `http://127.0.0.1:PORT` base (HTTP/1.1, and HTTP/2 with prior knowledge).
pub fn serve(pki: &Pki, alpn: &[&[u8]]) -> (Running, String, String) {
    let leaf = pki.leaf("srv", &["localhost", "127.0.0.1"], KeyKind::EcdsaP256);
    let tls = TlsContext::new(
        &[CertPaths {
            cert: leaf.cert,
            key: leaf.key,
        }],
        CryptoBackend::default(),
        alpn,
    )
    .unwrap();
    let mut cfg = ServerConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        tls_listen: vec!["127.0.0.1:0".parse().unwrap()],
        tls: Some(Arc::new(tls)),
        workers: 1,
        grace: Duration::from_secs(1),
        ..ServerConfig::default()
    };
    cfg.h2.h2c = true;
    let running = Server::bind(cfg, builtin_service())
        .unwrap()
        .start()
        .unwrap();
    let https = format!("https://localhost:{}", running.tls_addrs()[0].port());
    let http = format!("http://127.0.0.1:{}", running.local_addrs()[0].port());
    (running, https, http)
}

pub fn stop(running: Running) {
    running.shutdown_handle().shutdown();
    running.wait().unwrap();
}

pub fn run(cfg: &LoadConfig) -> Report {
    lowlat_load::run(cfg, &AtomicBool::new(false)).unwrap()
}

/// `n` requests on 4 connections of one thread (20 s at the most).
pub fn counted(url: &str, n: u64, tls: TlsOptions) -> LoadConfig {
    LoadConfig {
        targets: vec![Target::new(url)],
        threads: 1,
        connections: 4,
        requests: Some(n),
        duration: Some(Duration::from_secs(20)),
        tls,
        ..LoadConfig::default()
    }
}

/// Verification against the test PKI's CA only.
pub fn trusting(pki: &Pki) -> TlsOptions {
    TlsOptions {
        cacert: Some(pki.ca_path()),
        ..TlsOptions::default()
    }
}
