//! `lowlat serve` over TLS as a real process: certificates re-read on SIGHUP without dropping
//! open connections, one-line errors for unusable certificates, a warning for an expired one.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use lowlat_testkit::pki::{CertFiles, KeyKind, Pki};
use rustls::pki_types::pem::PemObject;

mod support;
use support::BIN;

/// A `lowlat serve` with one TLS listener; stderr is read line by line.
struct Serve {
    child: Child,
    addr: SocketAddr,
    stderr: BufReader<std::process::ChildStderr>,
    banner: String,
}

impl Serve {
    fn start(cert: &Path, key: &Path) -> Self {
        let mut cmd = Command::new(BIN);
        cmd.args(["serve", "--workers", "1", "--tls-listen", "127.0.0.1:0"])
            .arg("--cert")
            .arg(cert)
            .arg("--key")
            .arg(key);
        let (child, stderr, banner) = support::spawn_serve(cmd);
        let addr = support::address(&banner, "https://");
        Self {
            child,
            addr,
            stderr,
            banner,
        }
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }

    fn next_line(&mut self) -> String {
        let mut line = String::new();
        self.stderr.read_line(&mut line).unwrap();
        line
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

type Client = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

fn connect(addr: SocketAddr, ca: &Path) -> Client {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let conn =
        rustls::ClientConnection::new(Arc::new(cfg), "localhost".try_into().unwrap()).unwrap();
    let mut c = rustls::StreamOwned::new(conn, sock);
    while c.conn.is_handshaking() {
        c.conn.complete_io(&mut c.sock).expect("handshake");
    }
    c
}

fn plaintext(c: &mut Client) {
    c.write_all(b"GET /plaintext HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(b"Hello, World!") {
        let n = c.read(&mut buf).expect("response");
        assert!(n > 0, "closed: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"));
}

fn presented(c: &Client) -> Vec<u8> {
    c.conn.peer_certificates().unwrap()[0].as_ref().to_vec()
}

fn copy_pair(from: &CertFiles, to: &Path) {
    std::fs::copy(&from.cert, to.join("live.crt")).unwrap();
    std::fs::copy(&from.key, to.join("live.key")).unwrap();
}

/// SIGHUP re-reads the certificate: new connections get the new one, a connection opened
/// before keeps working; a broken file on reload keeps the old certificate in use.
#[test]
fn sighup_reloads_certificates_without_dropping_connections() {
    let pki = Pki::new();
    let old = pki.leaf("old", &["localhost"], KeyKind::EcdsaP256);
    let new = pki.leaf("new", &["localhost"], KeyKind::Rsa2048);
    let live = tempfile::tempdir().unwrap();
    copy_pair(&old, live.path());
    let mut serve = Serve::start(&live.path().join("live.crt"), &live.path().join("live.key"));

    let mut before = connect(serve.addr, &pki.ca_path());
    plaintext(&mut before);
    assert_eq!(presented(&before), old.leaf_der);

    copy_pair(&new, live.path());
    serve.signal("HUP");
    let line = serve.next_line();
    assert!(line.contains("reloaded 1 certificate"), "{line}");
    let mut after = connect(serve.addr, &pki.ca_path());
    plaintext(&mut after);
    assert_eq!(
        presented(&after),
        new.leaf_der,
        "new connections get the new certificate"
    );
    plaintext(&mut before);

    // A key that does not match: the reload is refused, the current certificate stays.
    std::fs::copy(&old.key, live.path().join("live.key")).unwrap();
    serve.signal("HUP");
    let line = serve.next_line();
    assert!(
        line.contains("does not match") && line.contains("kept"),
        "{line}"
    );
    let mut third = connect(serve.addr, &pki.ca_path());
    plaintext(&mut third);
    assert_eq!(presented(&third), new.leaf_der);
    plaintext(&mut before);
    plaintext(&mut after);
}

/// Unusable certificates: one line naming the file, exit 1, nothing bound.
#[test]
fn bad_certificates_are_one_line_errors() {
    let pki = Pki::new();
    let a = pki.leaf("a", &["localhost"], KeyKind::EcdsaP256);
    let b = pki.leaf("b", &["localhost"], KeyKind::EcdsaP256);
    let garbage = pki.dir().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let missing = pki.dir().join("missing.crt");
    let tls = ["serve", "--tls-listen", "127.0.0.1:0"];
    let cases: Vec<(Vec<String>, &str)> = vec![
        (flags(&tls, &[&a.cert, &b.key]), "does not match"),
        (flags(&tls, &[&missing, &a.key]), "missing.crt"),
        (flags(&tls, &[&garbage, &a.key]), "garbage.pem"),
        (flags(&tls, &[&a.cert, &garbage]), "garbage.pem"),
        (
            vec!["serve".into(), "--tls-listen".into(), "127.0.0.1:0".into()],
            "needs a certificate",
        ),
        (
            vec![
                "serve".into(),
                "--listen".into(),
                "127.0.0.1:0".into(),
                "--cert".into(),
                a.cert.display().to_string(),
                "--key".into(),
                a.key.display().to_string(),
            ],
            "--tls-listen",
        ),
        (
            vec![
                "serve".into(),
                "--tls-listen".into(),
                "127.0.0.1:0".into(),
                "--cert".into(),
                a.cert.display().to_string(),
            ],
            "pairs",
        ),
    ];
    for (args, want) in cases {
        let out = Command::new(BIN).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("lowlat serve: "), "{err}");
        assert!(err.contains(want), "{args:?}: want {want:?} in {err}");
    }
}

/// An expired certificate is served, with a warning at start naming it.
#[test]
fn expired_certificate_warns_at_start() {
    let pki = Pki::new();
    let expired = pki.expired_leaf("expired", &["localhost"]);
    let serve = Serve::start(&expired.cert, &expired.key);
    assert!(
        serve.banner.contains("WARN") && serve.banner.contains("expired.crt"),
        "{}",
        serve.banner
    );
}

/// A CA certificate (what a plain `openssl req -x509` makes: CA:TRUE), which rustls clients
/// refuse as a server's own: `--check-config` still says ok but warns, naming the file, and a
/// start warns the same.
#[test]
fn a_ca_certificate_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("ca.crt"), dir.path().join("ca.key"));
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=localhost", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let out = Command::new(BIN)
        .args([
            "serve",
            "--tls-listen",
            "127.0.0.1:0",
            "--check-config",
            "--cert",
        ])
        .arg(&cert)
        .arg("--key")
        .arg(&key)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("configuration ok"));
    assert!(
        err.contains("warning:") && err.contains("ca.crt") && err.contains("CA:TRUE"),
        "{err}"
    );
    let serve = Serve::start(&cert, &key);
    assert!(
        serve.banner.contains("WARN") && serve.banner.contains("CA:TRUE"),
        "{}",
        serve.banner
    );
}

fn flags(base: &[&str], pair: &[&Path; 2]) -> Vec<String> {
    let mut v: Vec<String> = base.iter().map(|s| (*s).to_owned()).collect();
    v.push("--cert".into());
    v.push(pair[0].display().to_string());
    v.push("--key".into());
    v.push(pair[1].display().to_string());
    v
}

/// A `[[site]]`'s `cert`/`key` is one more certificate, chosen by SNI among the names it lists;
/// the first site's is the default.
#[test]
fn site_certificates_in_the_config_file() {
    let pki = Pki::new();
    let a = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256);
    let b = pki.leaf("b", &["b.test"], KeyKind::EcdsaP256);
    let cfg = pki.dir().join("sites.toml");
    std::fs::write(
        &cfg,
        format!(
            "workers = 1\ntls_listen = [\"127.0.0.1:0\"]\n\n[[site]]\nserver_names = [\"a.test\"]\ncert = \"{}\"\nkey = \"{}\"\n\n[[site]]\nserver_names = [\"b.test\"]\ncert = \"{}\"\nkey = \"{}\"\n",
            a.cert.display(),
            a.key.display(),
            b.cert.display(),
            b.key.display()
        ),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let addr: SocketAddr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("https://"))
        .unwrap_or_else(|| panic!("{line}"))
        .parse()
        .unwrap();
    for (name, want) in [
        ("b.test", "b.test"),
        ("a.test", "a.test"),
        ("other.test", "a.test"),
    ] {
        let out = Command::new("openssl")
            .args([
                "s_client",
                "-connect",
                &addr.to_string(),
                "-servername",
                name,
            ])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&format!("CN = {want}")) || text.contains(&format!("CN={want}")),
            "{name}: {text}"
        );
    }
    let _ = child.kill();
    let _ = child.wait();
}
