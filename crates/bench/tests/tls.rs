//! `lowlat bench` over https, for real: a short sweep of `lowlat serve` over TLS with the
//! certificate verified against a CA made at test time (keep-alive and a full handshake per
//! request, resumed), the negotiated protocol in every row; and a target whose certificate the
//! spec does not trust, refused at the readiness check with the reason.

mod common;

use std::sync::atomic::AtomicBool;

use lowlat_bench::error::BenchError;
use lowlat_bench::results;
use lowlat_bench::runner::{self, RunOptions};
use lowlat_testkit::pki::{KeyKind, Pki};

fn spec_text(port: u16, cert: &str, key: &str, ca: &str, ready_timeout: &str) -> String {
    let serve = common::lowlat_serve();
    format!(
        r#"
name = "ci-tls"
description = "lowlat serve over TLS"
[run]
retries = 0
duration = "1s"
rounds = 1
warmup = "300ms"
pause = "200ms"
levels = [2]
[loader]
threads = 1
cpus = [1]
timeout = "3s"
[[target]]
name = "lowlat"
command = ["{serve}", "--workers", "1", "--tls-listen", "127.0.0.1:{port}", "--cert", "{cert}", "--key", "{key}"]
url = "https://127.0.0.1:{port}"
tls = {{ cacert = "{ca}" }}
cpus = [0]
ready = {{ http = "/plaintext", timeout = "{ready_timeout}" }}
[[scenario]]
name = "keepalive"
path = "/plaintext"
[[scenario]]
name = "handshake"
path = "/plaintext"
keepalive = false
tls_resume = true
"#,
        serve = serve.display()
    )
}

/// Runs the spec against a server whose certificate `server_ca` issued, trusting `trusted`'s CA.
fn sweep(
    name: &str,
    server_ca: &Pki,
    trusted: &Pki,
    ready_timeout: &str,
) -> Result<std::path::PathBuf, BenchError> {
    let leaf = server_ca.leaf("srv", &["localhost", "127.0.0.1"], KeyKind::EcdsaP256);
    let dir = common::scratch(name);
    let text = spec_text(
        common::free_port(),
        &leaf.cert.display().to_string(),
        &leaf.key.display().to_string(),
        &trusted.ca_path().display().to_string(),
        ready_timeout,
    );
    let spec = lowlat_bench::spec::load(&common::write_spec(&dir, "tls.toml", &text))
        .unwrap_or_else(|e| panic!("{e}"));
    let opts = RunOptions {
        out_dir: dir.join("out"),
        progress: false,
        force: true,
        perf_counters: false,
        syscalls: false,
        tracefs: None,
    };
    runner::run(
        &spec,
        &lowlat_bench::load::Engine,
        &opts,
        &AtomicBool::new(false),
    )
}

/// Both scenarios measured over TLS 1.3, without errors, the protocol recorded per row.
#[test]
fn https_sweep() {
    let pki = Pki::new();
    let path =
        sweep("tls-sweep", &pki, &pki, "10s").unwrap_or_else(|e| panic!("sweep failed: {e}"));
    let res = results::read(&path).unwrap();
    assert_eq!(res.rows.len(), 2);
    for r in &res.rows {
        assert!(r.requests > 50, "{}: {} requests", r.scenario, r.requests);
        assert_eq!(r.errors, 0, "{}: {:?}", r.scenario, r.errors_by_kind);
        let tls = r
            .tls
            .as_deref()
            .unwrap_or_else(|| panic!("{}: no tls", r.scenario));
        assert!(tls.starts_with("TLSv1.3 TLS13_"), "{tls}");
    }
    // The file validates against the shipped schema, tls field included.
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../schema/results.schema.json")).unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:#?}");
}

/// A certificate the spec's `cacert` does not vouch for: the readiness check fails, saying the
/// TLS handshake failed on the certificate, and nothing is measured.
#[test]
fn untrusted_certificate_fails_readiness() {
    let (pki, stranger) = (Pki::new(), Pki::new());
    let err = sweep("tls-untrusted", &pki, &stranger, "2s").expect_err("an untrusted certificate");
    assert!(matches!(err, BenchError::NotReady { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("TLS handshake") && msg.contains("certificate"),
        "{msg}"
    );
}

/// `--check` finds a `cacert` that is missing before anything starts.
#[test]
fn missing_cacert_is_found_by_check() {
    let dir = common::scratch("tls-check");
    let text = spec_text(
        common::free_port(),
        "/nonexistent/c.pem",
        "/nonexistent/k.pem",
        "/nonexistent/ca.pem",
        "2s",
    );
    let spec = lowlat_bench::spec::load(&common::write_spec(&dir, "tls.toml", &text))
        .unwrap_or_else(|e| panic!("{e}"));
    let vars = lowlat_bench::target::target_vars(
        &spec.vars,
        &dir,
        &dir.join("run"),
        &dir.join("out"),
        "lowlat",
    );
    let err = lowlat_bench::target::preflight(&spec.targets[0], &vars).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("tls") && msg.contains("/nonexistent/ca.pem"),
        "{msg}"
    );
}
