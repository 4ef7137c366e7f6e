//! `lowlat load --h2` for real: exact counts at 1, 10 and 100 streams per connection over TLS
//! (ALPN h2) and h2c against `lowlat serve`'s engine in process, constant rate over HTTP/2, a
//! clear failure against a server that does not offer h2, and exact counts against h2o.

use std::path::Path;
use std::time::Duration;

use lowlat_load::{LoadConfig, TlsOptions};
use lowlat_server::tls::{ALPN_H2_HTTP1, ALPN_HTTP1};
use lowlat_testkit::pki::{KeyKind, Pki};

mod common;
use common::lowlat::{counted, run, serve as server, stop, trusting};
use common::peer::Peer;

/// `n` requests over HTTP/2, `streams` per connection.
fn h2(url: &str, n: u64, streams: u32, tls: TlsOptions) -> LoadConfig {
    LoadConfig {
        pipeline: streams,
        h2: true,
        ..counted(url, n, tls)
    }
}

#[test]
fn exact_counts_over_tls_and_h2c() {
    let pki = Pki::new();
    let (server, https, http) = server(&pki, ALPN_H2_HTTP1);
    for streams in [1, 10, 100] {
        for base in [&https, &http] {
            let cfg = h2(
                &format!("{base}/plaintext"),
                20_000,
                streams,
                trusting(&pki),
            );
            let r = run(&cfg);
            assert_eq!(r.responses, 20_000, "{base} -m {streams}");
            assert_eq!(r.status.success, 20_000);
            assert_eq!(r.errors.total(), 0, "{:?} {:?}", r.errors, r.tls_error);
            // 13 body bytes per response, and a few of head.
            assert!(r.bytes_read > 20_000 * 13, "{}", r.bytes_read);
            let text = lowlat_load::text::banner(&cfg);
            let per = if streams == 1 { "stream" } else { "streams" };
            assert!(
                text.contains(&format!("HTTP/2, {streams} {per} per connection")),
                "{text}"
            );
        }
    }
    stop(server);
}

#[test]
fn constant_rate_over_h2() {
    let pki = Pki::new();
    let (server, https, _) = server(&pki, ALPN_H2_HTTP1);
    let cfg = LoadConfig {
        requests: None,
        duration: Some(Duration::from_secs(2)),
        rate: Some(1000.0),
        ..h2(&format!("{https}/plaintext"), 1, 10, trusting(&pki))
    };
    let r = run(&cfg);
    assert_eq!(r.errors.total(), 0, "{:?}", r.errors);
    assert!(
        (1800..=2200).contains(&r.responses),
        "{} responses for 1000/s over 2 s",
        r.responses
    );
    // Latency from the schedule: well under the 1 ms interval on loopback.
    assert!(r.latency.value_at_quantile(0.5) < 5_000);
    stop(server);
}

#[test]
fn a_server_without_h2_fails_clearly() {
    let pki = Pki::new();
    let (server, https, _) = server(&pki, ALPN_HTTP1);
    let cfg = h2(&format!("{https}/plaintext"), 100, 10, trusting(&pki));
    let r = run(&cfg);
    assert_eq!(r.responses, 0);
    assert!(r.errors.tls > 0, "{:?}", r.errors);
    let why = r.tls_error.unwrap_or_default();
    assert!(why.contains("HTTP/2"), "{why}");
    stop(server);
}

/// h2o, the reference HTTP/2 server, on a free port with TLS, serving a 100-byte file.
fn h2o(cert: &Path, key: &Path) -> Peer {
    Peer::start(
        &["/usr/bin/h2o", "/usr/sbin/h2o", "/usr/local/bin/h2o"],
        |dir, port| {
            std::fs::write(dir.join("100.html"), [b'X'; 100]).unwrap();
            // As root, h2o needs a user to run as.
            let user = if runs_as_root() { "user: root\n" } else { "" };
            let conf = format!(
                "{user}num-threads: 1\npid-file: {run}/h2o.pid\nerror-log: {run}/error.log\n\
             listen:\n  host: 127.0.0.1\n  port: {port}\n  ssl:\n    certificate-file: {}\n\
             \x20   key-file: {}\nhosts:\n  \"default\":\n    paths:\n      \"/\":\n\
             \x20       file.dir: {run}\n",
                cert.display(),
                key.display(),
                run = dir.display()
            );
            let conf_path = dir.join("h2o.conf");
            std::fs::write(&conf_path, conf).unwrap();
            vec!["-c".into(), conf_path.display().to_string()]
        },
    )
}

/// Whether the tests run as root.
fn runs_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next().map(|u| u == "0"))
        .unwrap_or(false)
}

#[test]
fn against_h2o() {
    let pki = Pki::new();
    let leaf = pki.leaf("h2o", &["localhost", "127.0.0.1"], KeyKind::EcdsaP256);
    let h2o = h2o(&leaf.cert, &leaf.key);
    for streams in [1, 100] {
        let cfg = h2(
            &format!("https://localhost:{}/100.html", h2o.port),
            10_000,
            streams,
            trusting(&pki),
        );
        let r = run(&cfg);
        assert_eq!(r.responses, 10_000, "-m {streams}");
        assert_eq!(r.status.success, 10_000);
        assert_eq!(r.errors.total(), 0, "{:?} {:?}", r.errors, r.tls_error);
        assert!(r.bytes_read >= 10_000 * 100);
    }
}

/// The JSON report over HTTP/2 follows the schema and says how many streams ran; the
/// HdrHistogram interval log is written as over HTTP/1.1.
#[test]
fn json_report_and_hdr_log_over_h2() {
    let pki = Pki::new();
    let (server, https, _) = server(&pki, ALPN_H2_HTTP1);
    let cfg = LoadConfig {
        latency_intervals: Some(Duration::from_millis(200)),
        ..h2(&format!("{https}/json"), 2000, 16, trusting(&pki))
    };
    let r = run(&cfg);
    let v = lowlat_load::json::to_json(&r, &cfg);
    let schema: serde_json::Value = serde_json::from_str(lowlat_load::json::SCHEMA).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:#?}\n{v:#}");
    assert_eq!(v["config"]["h2_streams"], 16);
    assert_eq!(v["responses"], 2000);
    let counted: u64 = r.intervals.iter().map(|i| i.latency.len()).sum();
    assert_eq!(counted, 2000);
    stop(server);
}
