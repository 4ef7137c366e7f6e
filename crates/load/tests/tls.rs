//! `lowlat load https://` for real: against `lowlat serve`'s engine over TLS (in process) and
//! against nginx with a certificate chain made at test time. Verification with `--cacert`,
//! its failure counted and explained, `--insecure`, resumption, pipelining, the JSON report
//! against its schema, and a plain-HTTP server given an https URL.

use std::path::Path;
use std::time::{Duration, Instant};

use lowlat_load::{LoadConfig, TlsOptions};
use lowlat_server::tls::ALPN_HTTP1;
use lowlat_server::{builtin_service, Running, Server, ServerConfig};
use lowlat_testkit::pki::{KeyKind, Pki};

mod common;
use common::lowlat::{counted, run, stop, trusting};
use common::peer::Peer;

/// `lowlat serve`'s engine offering HTTP/1.1 over TLS: its `https://localhost:PORT` base.
fn tls_server(pki: &Pki) -> (Running, String) {
    let (running, https, _) = common::lowlat::serve(pki, ALPN_HTTP1);
    (running, https)
}

/// Exact counts over TLS 1.3, with and without 16-deep pipelining; the report names the
/// protocol and cipher, and one handshake per connection.
#[test]
fn exact_counts_over_tls() {
    let pki = Pki::new();
    let (server, base) = tls_server(&pki);
    for pipeline in [1, 16] {
        let cfg = LoadConfig {
            pipeline,
            ..counted(&format!("{base}/plaintext"), 5000, trusting(&pki))
        };
        let r = run(&cfg);
        assert_eq!(r.responses, 5000, "pipeline {pipeline}");
        assert_eq!(r.status.success, 5000);
        assert_eq!(r.errors.total(), 0, "{:?} {:?}", r.errors, r.tls_error);
        let tls = r.tls.clone().expect("a TLS summary");
        assert_eq!(tls.protocol, "TLSv1.3");
        assert!(tls.cipher.starts_with("TLS13_"), "{}", tls.cipher);
        assert_eq!(tls.handshakes, 4, "one per connection");
        let text = lowlat_load::text::render(&r, false);
        assert!(text.contains("  TLS: TLSv1.3, TLS13_"), "{text}");
    }
    stop(server);
}

/// A certificate the client does not trust: every handshake fails, counted as a TLS error, and
/// the reason is kept; `--insecure` then works against the same server.
#[test]
fn verification_failures_are_reported_and_insecure_skips_them() {
    let pki = Pki::new();
    let (server, base) = tls_server(&pki);
    let other = Pki::new();
    let r = run(&counted(&format!("{base}/plaintext"), 20, trusting(&other)));
    assert_eq!(r.responses, 0);
    assert_eq!(r.errors.tls, 20, "{:?}", r.errors);
    assert_eq!(r.errors.total(), 20);
    let why = r.tls_error.clone().expect("the first failure's reason");
    // In words, with what to do: not rustls's `invalid peer certificate: UnknownIssuer`.
    assert!(why.contains("failed: certificate not trusted ("), "{why}");
    assert!(
        why.ends_with(": pass --cacert FILE, or -k to skip verification"),
        "{why}"
    );
    let v = lowlat_load::json::to_json(&r, &counted(&base, 20, trusting(&other)));
    assert_eq!(v["errors"]["tls"], 20);
    assert!(v["tls"]["first_error"]
        .as_str()
        .unwrap()
        .contains("certificate"));

    let insecure = TlsOptions {
        insecure: true,
        ..TlsOptions::default()
    };
    let r = run(&counted(&format!("{base}/plaintext"), 200, insecure));
    assert_eq!(r.responses, 200);
    assert_eq!(r.errors.total(), 0);
    stop(server);
}

/// `--no-keepalive`: a full handshake per request; with `--tls-resume`, the reconnects resume.
#[test]
fn resumption_on_reconnects() {
    let pki = Pki::new();
    let (server, base) = tls_server(&pki);
    for resume in [false, true] {
        let cfg = LoadConfig {
            keep_alive: false,
            ..counted(
                &format!("{base}/plaintext"),
                200,
                TlsOptions {
                    resume,
                    ..trusting(&pki)
                },
            )
        };
        let r = run(&cfg);
        assert_eq!(r.responses, 200, "{:?}", r.errors);
        let tls = r.tls.unwrap();
        assert!(tls.handshakes >= 200, "{tls:?}");
        if resume {
            // Each connection's first handshake is full; the rest resume.
            assert!(tls.resumed >= tls.handshakes - 8, "{tls:?}");
        } else {
            assert_eq!(tls.resumed, 0, "{tls:?}");
        }
    }
    stop(server);
}

/// The JSON report of an https run validates against the schema and carries the TLS block.
#[test]
fn json_report_over_tls_matches_the_schema() {
    let pki = Pki::new();
    let (server, base) = tls_server(&pki);
    let cfg = LoadConfig {
        pipeline: 4,
        ..counted(&format!("{base}/json"), 400, trusting(&pki))
    };
    let r = run(&cfg);
    let v = lowlat_load::json::to_json(&r, &cfg);
    let schema: serde_json::Value = serde_json::from_str(lowlat_load::json::SCHEMA).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:#?}\n{v:#}");
    assert_eq!(v["tls"]["protocol"], "TLSv1.3");
    assert_eq!(v["errors"]["tls"], 0);
    assert_eq!(v["responses"], 400);
    stop(server);
}

/// An https URL to a server that speaks plain HTTP: handshake failures, promptly, no hang.
#[test]
fn plain_server_given_https() {
    let plain = Server::bind(
        ServerConfig {
            listen: vec!["127.0.0.1:0".parse().unwrap()],
            workers: 1,
            ..ServerConfig::default()
        },
        builtin_service(),
    )
    .unwrap()
    .start()
    .unwrap();
    let url = format!("https://{}/plaintext", plain.local_addrs()[0]);
    let started = Instant::now();
    let r = run(&counted(
        &url,
        10,
        TlsOptions {
            insecure: true,
            ..TlsOptions::default()
        },
    ));
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(r.responses, 0);
    assert_eq!(r.errors.tls, 10, "{:?}", r.errors);
    stop(plain);
}

/// nginx, serving a leaf and its CA as a chain: verified with `--cacert`, over TLS 1.3 and, with
/// nginx limited to it, TLS 1.2.
#[test]
fn against_nginx_with_a_chain() {
    let pki = Pki::new();
    let leaf = pki.leaf("nginx", &["localhost"], KeyKind::EcdsaP256);
    for (protocols, want) in [("TLSv1.2 TLSv1.3", "TLSv1.3"), ("TLSv1.2", "TLSv1.2")] {
        let nginx = nginx(&leaf.cert, &leaf.key, protocols);
        let url = format!("https://localhost:{}/plaintext", nginx.port);
        let r = run(&counted(&url, 300, trusting(&pki)));
        assert_eq!(r.responses, 300, "{:?} {:?}", r.errors, r.tls_error);
        assert_eq!(r.tls.unwrap().protocol, want);
        // Without the CA: the system's roots do not know it.
        let r = run(&counted(&url, 5, TlsOptions::default()));
        assert_eq!(r.errors.tls, 5, "{:?}", r.errors);
    }
}

/// An nginx with one TLS server block on a free port, stopped on drop.
fn nginx(cert: &Path, key: &Path, protocols: &str) -> Peer {
    Peer::start(
        &["/usr/sbin/nginx", "/usr/bin/nginx", "/sbin/nginx"],
        |dir, port| {
            let run = dir.display().to_string();
            let conf = format!(
                "daemon off;\nmaster_process off;\nworker_processes 1;\npid {run}/nginx.pid;\n\
             error_log {run}/error.log error;\nevents {{ worker_connections 256; }}\n\
             http {{\n access_log off;\n client_body_temp_path {run}/body;\n\
             proxy_temp_path {run}/proxy;\n fastcgi_temp_path {run}/fastcgi;\n\
             uwsgi_temp_path {run}/uwsgi;\n scgi_temp_path {run}/scgi;\n\
             server {{\n  listen 127.0.0.1:{port} ssl;\n  ssl_certificate {};\n\
             ssl_certificate_key {};\n  ssl_protocols {protocols};\n\
             location = /plaintext {{ default_type text/plain; return 200 'Hello, World!'; }}\n\
             }}\n}}\n",
                cert.display(),
                key.display()
            );
            let conf_path = dir.join("nginx.conf");
            std::fs::write(&conf_path, conf).unwrap();
            vec![
                "-p".into(),
                run.clone(),
                "-c".into(),
                conf_path.display().to_string(),
                "-e".into(),
                format!("{run}/error.log"),
            ]
        },
    )
}
