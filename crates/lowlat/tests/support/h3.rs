//! `lowlat serve --h3-listen` as a process and a real HTTP/3 client for it: aioquic, from the
//! test environment `scripts/test-deps.sh` makes, running `tests/quic/client.py` (one scenario
//! per subcommand, one JSON answer).

use std::path::PathBuf;
use std::process::Command;

use lowlat_testkit::pki::{CertFiles, KeyKind, Pki};

use super::Served;

/// The test environment's Python, checked to have aioquic.
pub fn python() -> PathBuf {
    let python = super::upstream::venv().join("bin/python");
    let ok = Command::new(&python)
        .args(["-c", "import aioquic"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "no aioquic in the Python environment at {}: run scripts/test-deps.sh",
        python.display()
    );
    python
}

pub fn client_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/quic/client.py")
}

/// Runs one client scenario against `served`'s QUIC address; returns its JSON answer.
pub fn client(served: &Served, scenario: &[&str]) -> serde_json::Value {
    let addr = super::address(&served.log(), "h3://");
    let out = Command::new(python())
        .arg(client_script())
        .arg(scenario[0])
        .arg(addr.ip().to_string())
        .arg(addr.port().to_string())
        .args(&scenario[1..])
        .output()
        .expect("run the QUIC client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    let value: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| {
        panic!(
            "client {scenario:?}: {e}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(value.get("error").is_none(), "client {scenario:?}: {value}");
    value
}

/// A `lowlat serve` with TLS and QUIC (and the echo protocol offered), plus `args`.
pub fn serve(cert: &CertFiles, args: &[&str]) -> Served {
    let mut cmd = super::tls_serve_command(cert);
    cmd.env("LOWLAT_QUIC_ECHO", "1")
        .args(["--h3-listen", "127.0.0.1:0"]);
    if !args.contains(&"--workers") {
        cmd.args(["--workers", "1"]);
    }
    cmd.args(args);
    Served::spawn(cmd)
}

pub fn cert() -> (Pki, CertFiles) {
    let pki = Pki::new();
    let cert = pki.leaf("quic", &["localhost"], KeyKind::EcdsaP256);
    (pki, cert)
}
