//! Automatic HTTPS against a real ACME server: Pebble, Let's Encrypt's test CA (built by
//! scripts/test-deps.sh from scripts/pebble/go.mod), with pebble-challtestsrv as its DNS server
//! answering every name with 127.0.0.1, so that Pebble validates the challenges against lowlat's
//! own listeners on local ports (its `httpPort` and `tlsPort`).
//!
//! Each test starts its own Pebble on free ports; certificates are checked against Pebble's
//! root with curl and with a rustls client.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lowlat_testkit::pki::{KeyKind, Pki};
use rustls::pki_types::pem::PemObject;

mod support;
use support::upstream::tool;
use support::BIN;

/// A local port free for TCP and UDP (the DNS server takes both).
fn free_port() -> u16 {
    loop {
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = tcp.local_addr().unwrap().port();
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

fn wait_for_port(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not start on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A child process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Pebble and its DNS server.
struct Ca {
    pebble: Option<Proc>,
    _dns: Proc,
    pki: Pki,
    listen: u16,
    management: u16,
    /// Where lowlat must listen for Pebble to validate: HTTP-01 and TLS-ALPN-01.
    http_port: u16,
    tls_port: u16,
    config: PathBuf,
    dns_port: u16,
    log: PathBuf,
}

impl Ca {
    /// Pebble issuing certificates valid for `validity` seconds, refusing the names in
    /// `blocked`.
    fn start(validity: u64, blocked: &[&str]) -> Self {
        let pki = Pki::new();
        let tls = pki.leaf("pebble", &["localhost"], KeyKind::EcdsaP256);
        let (listen, management, http_port, tls_port, dns_port) = (
            free_port(),
            free_port(),
            free_port(),
            free_port(),
            free_port(),
        );
        let dns = Command::new(tool("pebble-challtestsrv"))
            .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
            .args(["-dns01", &format!("127.0.0.1:{dns_port}")])
            .args(["-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", ""])
            .args(["-management", &format!("127.0.0.1:{}", free_port())])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start pebble-challtestsrv");
        let dns = Proc(dns);
        let config = pki.dir().join("pebble.json");
        let cfg = serde_json::json!({"pebble": {
            "listenAddress": format!("127.0.0.1:{listen}"),
            "managementListenAddress": format!("127.0.0.1:{management}"),
            "certificate": tls.cert,
            "privateKey": tls.key,
            "httpPort": http_port,
            "tlsPort": tls_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
            "domainBlocklist": blocked,
            "certificateValidityPeriod": validity,
        }});
        std::fs::write(&config, cfg.to_string()).unwrap();
        let log = pki.dir().join("pebble.log");
        let mut ca = Self {
            pebble: None,
            _dns: dns,
            pki,
            listen,
            management,
            http_port,
            tls_port,
            config,
            dns_port,
            log,
        };
        ca.run();
        wait_for_port(dns_port, "pebble-challtestsrv");
        ca
    }

    /// (Re)starts Pebble itself.
    fn run(&mut self) {
        let log = std::fs::File::create(&self.log).unwrap();
        let pebble = Command::new(tool("pebble"))
            .arg("-config")
            .arg(&self.config)
            .args(["-dnsserver", &format!("127.0.0.1:{}", self.dns_port)])
            // No artificial pauses, and no nonce refused at random: runs that do not depend
            // on luck.
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .expect("start pebble");
        self.pebble = Some(Proc(pebble));
        wait_for_port(self.listen, "pebble");
        wait_for_port(self.management, "pebble's management interface");
    }

    /// Stops Pebble: the CA becomes unreachable.
    fn stop(&mut self) {
        self.pebble = None;
    }

    fn directory(&self) -> String {
        format!("https://localhost:{}/dir", self.listen)
    }

    /// Pebble's root (it makes a new one each start), for clients to verify against.
    fn root(&self) -> PathBuf {
        let out = Command::new("curl")
            .args(["-sS", "--fail", "--cacert"])
            .arg(self.pki.ca_path())
            .arg(format!("https://localhost:{}/roots/0", self.management))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let path = self.pki.dir().join(format!("root-{}.pem", rand_suffix()));
        std::fs::write(&path, &out.stdout).unwrap();
        path
    }

    /// The settings every test's lowlat needs to reach this CA, as TOML lines.
    fn settings(&self, state: &Path) -> String {
        format!(
            "acme_directory = \"{}\"\nacme_ca_root = \"{}\"\nacme_email = \"admin@example.com\"\nstate_dir = \"{}\"\nworkers = 1\n",
            self.directory(),
            self.pki.ca_path().display(),
            state.display()
        )
    }
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// A `lowlat serve` whose error log is gathered line by line.
struct Serve {
    child: Mutex<Proc>,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Serve {
    fn start(config: &Path) -> Self {
        let mut child = Command::new(BIN)
            .arg("serve")
            .arg("--config")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn lowlat");
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push(line);
            }
        });
        let serve = Self {
            child: Mutex::new(Proc(child)),
            lines,
        };
        serve.wait_for("listening on", 1, Duration::from_secs(20));
        serve
    }

    fn log(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    fn count(&self, needle: &str) -> usize {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    /// Waits until `count` log lines contain `needle`.
    fn wait_for(&self, needle: &str, count: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.count(needle) < count {
            if let Ok(Some(status)) = self.child.lock().unwrap().0.try_wait() {
                panic!("lowlat exited ({status}):\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "no {count} lines with {needle:?} in {limit:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `curl https://NAME:PORT/plaintext`, verified against `root`, NAME resolved to 127.0.0.1.
fn curl(root: &Path, name: &str, port: u16) -> Output {
    Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(root)
        .args(["--resolve", &format!("{name}:{port}:127.0.0.1")])
        .arg(format!("https://{name}:{port}/plaintext"))
        .output()
        .unwrap()
}

fn assert_served(root: &Path, name: &str, port: u16) {
    let out = curl(root, name, port);
    assert!(
        out.status.success() && out.stdout == b"Hello, World!",
        "{name}: {out:?}"
    );
}

/// The leaf certificate served for `name`, after rustls verified it against `root`.
fn served_leaf(root: &Path, name: &str, port: u16) -> Vec<u8> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(root).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut conn =
        rustls::ClientConnection::new(Arc::new(cfg), name.to_owned().try_into().unwrap()).unwrap();
    let mut sock = TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port))).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).unwrap();
    }
    conn.peer_certificates().unwrap()[0].to_vec()
}

fn write_config(dir: &Path, file: &str, text: &str) -> PathBuf {
    let path = dir.join(file);
    std::fs::write(&path, text).unwrap();
    path
}

const TWO_SITES: &str = "acme = true\n\n[[site]]\nserver_names = [\"a.test\", \"www.a.test\"]\n\n[[site]]\nserver_names = [\"b.test\"]\n";

/// HTTP-01 for two sites (three names): obtained, stored 0600, served and verified against
/// Pebble's root by curl; a name without a certificate is refused, not shown another's; a
/// restart with the CA gone serves the stored certificates.
#[test]
fn http01_two_sites_stored_and_reloaded_without_the_ca() {
    let mut ca = Ca::start(3600, &[]);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let config = write_config(
        dir.path(),
        "lowlat.toml",
        &format!(
            "listen = [\"127.0.0.1:{}\"]\ntls_listen = [\"127.0.0.1:{}\"]\nacme_challenge = [\"http-01\"]\n{}{TWO_SITES}",
            ca.http_port,
            ca.tls_port,
            ca.settings(&state)
        ),
    );
    let started = Instant::now();
    let serve = Serve::start(&config);
    serve.wait_for("certificate obtained", 3, Duration::from_secs(60));
    let root = ca.root();
    for name in ["a.test", "www.a.test", "b.test"] {
        assert_served(&root, name, ca.tls_port);
    }
    // Reported, not asserted (docs/PERFORMANCE.md records it): from the process's start to the
    // three names answered over https, with Pebble validating against the local listeners.
    eprintln!(
        "acme: three names issued and served {:?} after the start",
        started.elapsed()
    );
    // A name no site lists: refused with an alert, not answered with a site's certificate.
    let out = curl(&root, "c.test", ca.tls_port);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("alert access denied"), "{said}");
    let first = served_leaf(&root, "b.test", ca.tls_port);
    // RFC 9773: the CA's renewal information is asked for each certificate.
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(&ca.log)
        .unwrap()
        .matches("renewalInfo")
        .count()
        < 3
    {
        assert!(Instant::now() < deadline, "no renewal information asked");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Stored, secret.
    let certs = std::fs::read_dir(state.join("acme"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    for name in ["a.test", "www.a.test", "b.test"] {
        for file in ["cert.pem", "key.pem"] {
            let meta = std::fs::metadata(certs.join("certificates").join(name).join(file)).unwrap();
            assert_eq!(
                std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
                0o600
            );
        }
    }
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(certs.join("account.json"))
                .unwrap()
                .permissions()
        ) & 0o777,
        0o600
    );
    drop(serve);
    // The CA gone: a restart serves what is stored, without an order.
    ca.stop();
    let serve = Serve::start(&config);
    serve.wait_for("certificate from", 3, Duration::from_secs(10));
    for name in ["a.test", "www.a.test", "b.test"] {
        assert_served(&root, name, ca.tls_port);
    }
    assert_eq!(served_leaf(&root, "b.test", ca.tls_port), first);
    // SIGHUP re-reads the file's certificates (none here) and keeps ACME's.
    let pid = serve.child.lock().unwrap().0.id();
    assert!(Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    serve.wait_for("SIGHUP", 1, Duration::from_secs(10));
    for name in ["a.test", "www.a.test", "b.test"] {
        assert_served(&root, name, ca.tls_port);
    }
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(serve.count("certificate obtained"), 0, "{}", serve.log());
    assert_eq!(serve.count("cannot obtain"), 0, "{}", serve.log());
}

/// TLS-ALPN-01 with no clear-text listener at all: the TLS listener's resolver shows the
/// challenge certificate to Pebble's validation (ALPN acme-tls/1), then serves the one issued.
#[test]
fn tls_alpn01_without_a_clear_listener() {
    let ca = Ca::start(3600, &[]);
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "lowlat.toml",
        &format!(
            "tls_listen = [\"127.0.0.1:{}\"]\nacme_challenge = [\"tls-alpn-01\"]\n{}{TWO_SITES}",
            ca.tls_port,
            ca.settings(&dir.path().join("state"))
        ),
    );
    let serve = Serve::start(&config);
    serve.wait_for("certificate obtained", 3, Duration::from_secs(60));
    let root = ca.root();
    for name in ["a.test", "www.a.test", "b.test"] {
        assert_served(&root, name, ca.tls_port);
    }
    let pebble = std::fs::read_to_string(&ca.log).unwrap();
    assert!(!pebble.contains("validate w/ HTTP"), "{pebble}");
}

/// The CA unreachable, then refusing: each failure is one log line with the reason (the CA's
/// problem document when it answers) and the next try; the name's handshakes are refused.
#[test]
fn ca_unreachable_or_refusing_is_said_once_per_failure() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new();
    let (http, tls, nowhere) = (free_port(), free_port(), free_port());
    let config = write_config(
        dir.path(),
        "lowlat.toml",
        &format!(
            "listen = [\"127.0.0.1:{http}\"]\ntls_listen = [\"127.0.0.1:{tls}\"]\nacme = true\nacme_domain = [\"a.test\"]\nacme_directory = \"https://localhost:{nowhere}/dir\"\nacme_ca_root = \"{}\"\nstate_dir = \"{}\"\nworkers = 1\n",
            pki.ca_path().display(),
            dir.path().join("state").display()
        ),
    );
    let serve = Serve::start(&config);
    serve.wait_for("cannot obtain", 1, Duration::from_secs(20));
    let log = serve.log();
    let line = log.lines().find(|l| l.contains("cannot obtain")).unwrap();
    for words in [
        "a.test",
        "failure 1",
        "cannot be reached",
        "next try in 1m",
        "refused until one is obtained",
    ] {
        assert!(line.contains(words), "{words:?} in {line}");
    }
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(serve.count("cannot obtain"), 1, "backing off: {log}");
    let out = curl(&pki.ca_path(), "a.test", tls);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("alert access denied"),
        "{out:?}"
    );
    drop(serve);

    // A CA that answers no: Pebble's block list, and its problem document in the log.
    let ca = Ca::start(3600, &["blocked.test"]);
    let config = write_config(
        dir.path(),
        "refused.toml",
        &format!(
            "listen = [\"127.0.0.1:{}\"]\ntls_listen = [\"127.0.0.1:{}\"]\nacme = true\nacme_domain = [\"blocked.test\"]\n{}",
            ca.http_port,
            ca.tls_port,
            ca.settings(&dir.path().join("state2"))
        ),
    );
    let serve = Serve::start(&config);
    serve.wait_for("cannot obtain", 1, Duration::from_secs(20));
    let log = serve.log();
    let line = log.lines().find(|l| l.contains("cannot obtain")).unwrap();
    for words in [
        "blocked.test",
        "the CA refused",
        "urn:ietf:params:acme:error:rejectedIdentifier",
        "next try in 1m",
    ] {
        assert!(line.contains(words), "{words:?} in {line}");
    }
}

/// A certificate of 30 seconds is renewed at about 20, while `lowlat load` makes a new TLS
/// connection for every request: no request fails, and the new certificate is served. Then,
/// the CA gone, the next renewal fails, is said, and the certificate in use stays.
#[test]
fn renewal_of_a_short_certificate_under_load_then_the_ca_gone() {
    let mut ca = Ca::start(30, &[]);
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "lowlat.toml",
        &format!(
            "listen = [\"127.0.0.1:{}\"]\ntls_listen = [\"localhost:{}\"]\nacme = true\nacme_domain = [\"localhost\"]\n{}",
            ca.http_port,
            ca.tls_port,
            ca.settings(&dir.path().join("state"))
        ),
    );
    let serve = Serve::start(&config);
    serve.wait_for("certificate obtained", 1, Duration::from_secs(60));
    let root = ca.root();
    let first = served_leaf(&root, "localhost", ca.tls_port);
    let load = Command::new(BIN)
        .args(["load", "-c", "2", "-d", "28s", "--no-keepalive", "--cacert"])
        .arg(&root)
        .arg(format!("https://localhost:{}/plaintext", ca.tls_port))
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&load.stdout);
    assert!(
        load.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&load.stderr)
    );
    assert!(!report.contains("errors"), "{report}");
    assert!(!report.contains("Non-2xx"), "{report}");
    // Renewed while the load ran (at about 20 of its 28 seconds).
    assert_eq!(serve.count("certificate obtained"), 2, "{}", serve.log());
    assert!(report.contains("handshakes"), "{report}");
    let second = served_leaf(&root, "localhost", ca.tls_port);
    assert_ne!(first, second, "a new certificate is served");

    // The CA gone: the next renewal fails, said once, and the certificate in use stays.
    ca.stop();
    serve.wait_for("cannot obtain", 1, Duration::from_secs(30));
    let log = serve.log();
    let line = log.lines().find(|l| l.contains("cannot obtain")).unwrap();
    assert!(
        line.contains("cannot be reached") && line.contains("the certificate in use is kept"),
        "{line}"
    );
    assert_eq!(served_leaf(&root, "localhost", ca.tls_port), second);
}

/// Two processes sharing a state directory, started together: each certificate is ordered
/// once, by whichever takes its lock first; the other waits and serves what was stored.
/// HTTP-01 answers are shared through the directory too, as the CA reaches only one of them.
#[test]
fn two_processes_share_a_state_dir() {
    let ca = Ca::start(3600, &[]);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let other_tls = free_port();
    let configs: Vec<PathBuf> = [
        (ca.http_port, ca.tls_port, "one.toml"),
        (free_port(), other_tls, "two.toml"),
    ]
    .iter()
    .map(|(http, tls, file)| {
        write_config(
            dir.path(),
            file,
            &format!(
                "listen = [\"127.0.0.1:{http}\"]\ntls_listen = [\"127.0.0.1:{tls}\"]\nacme_challenge = [\"http-01\"]\n{}{TWO_SITES}",
                ca.settings(&state)
            ),
        )
    })
    .collect();
    let one = Serve::start(&configs[0]);
    let two = Serve::start(&configs[1]);
    let settled = |s: &Serve| s.count("certificate obtained") + s.count("another process");
    let deadline = Instant::now() + Duration::from_secs(90);
    while settled(&one) < 3 || settled(&two) < 3 {
        assert!(
            Instant::now() < deadline,
            "one:\n{}\ntwo:\n{}",
            one.log(),
            two.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        one.count("certificate obtained") + two.count("certificate obtained"),
        3,
        "one order per name:\none:\n{}\ntwo:\n{}",
        one.log(),
        two.log()
    );
    let root = ca.root();
    for name in ["a.test", "www.a.test", "b.test"] {
        assert_eq!(
            served_leaf(&root, name, ca.tls_port),
            served_leaf(&root, name, other_tls)
        );
    }
    assert_eq!(one.count("cannot obtain") + two.count("cannot obtain"), 0);
}

/// `--check-config` lists the names to be requested, and refuses a wildcard (DNS-01) and a
/// missing TLS listener with their reasons.
#[test]
fn check_config_says_which_names() {
    let dir = tempfile::tempdir().unwrap();
    let check = |text: &str| {
        let path = write_config(dir.path(), "check.toml", text);
        Command::new(BIN)
            .args(["serve", "--check-config", "--config"])
            .arg(&path)
            .output()
            .unwrap()
    };
    let state = dir.path().join("state");
    let base = format!(
        "listen = [\"127.0.0.1:8080\"]\ntls_listen = [\"127.0.0.1:8443\"]\nstate_dir = \"{}\"\n",
        state.display()
    );
    let out = check(&format!(
        "{base}{TWO_SITES}[[site]]\nserver_names = [\"c.test\"]\nacme = false\n"
    ));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout.contains("will request a certificate for each of a.test, www.a.test, b.test from https://acme-v02.api.letsencrypt.org/directory (challenges: http-01, tls-alpn-01"),
        "{stdout}"
    );
    assert!(!stdout.contains("c.test"), "{stdout}");

    let out = check(&format!(
        "{base}acme = true\n[[site]]\nserver_names = [\"*.a.test\"]\n"
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr
            .matches("*.a.test: a wildcard certificate needs the DNS-01 challenge")
            .count(),
        1,
        "{stderr}"
    );

    let out = check(&format!(
        "listen = [\"127.0.0.1:8080\"]\nstate_dir = \"{}\"\n{TWO_SITES}",
        state.display()
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("--acme needs --tls-listen"), "{stderr}");

    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let out = check(&format!(
        "listen = [\"127.0.0.1:8080\"]\ntls_listen = [\"127.0.0.1:8443\"]\nstate_dir = \"{}\"\n{TWO_SITES}",
        file.display()
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains("state_dir") && stderr.contains("not a folder"),
        "{stderr}"
    );
}

/// The CA reaches only the process on its HTTP-01 port, while another process sharing the
/// state directory orders: the first answers the second's challenge from the directory.
#[test]
fn http01_answered_for_another_process() {
    let ca = Ca::start(3600, &[]);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    // On the CA's port, ordering a name of its own (so its challenge answers are mounted).
    let front = write_config(
        dir.path(),
        "front.toml",
        &format!(
            "listen = [\"127.0.0.1:{}\"]\ntls_listen = [\"127.0.0.1:{}\"]\nacme_challenge = [\"http-01\"]\nacme_domain = [\"front.test\"]\n{}",
            ca.http_port,
            ca.tls_port,
            ca.settings(&state)
        ),
    );
    let front = Serve::start(&front);
    front.wait_for("certificate obtained", 1, Duration::from_secs(60));
    // Elsewhere, ordering b.test: validated through the front process.
    let back_tls = free_port();
    let back = write_config(
        dir.path(),
        "back.toml",
        &format!(
            "listen = [\"127.0.0.1:{}\"]\ntls_listen = [\"127.0.0.1:{back_tls}\"]\nacme_challenge = [\"http-01\"]\nacme_domain = [\"b.test\"]\n{}",
            free_port(),
            ca.settings(&state)
        ),
    );
    let back = Serve::start(&back);
    back.wait_for("certificate obtained", 1, Duration::from_secs(60));
    assert_served(&ca.root(), "b.test", back_tls);
    assert_eq!(front.count("b.test"), 0, "{}", front.log());
    // The answers are withdrawn once the order is done.
    let challenges = std::fs::read_dir(state.join("acme"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("challenges");
    assert_eq!(std::fs::read_dir(challenges).unwrap().count(), 0);
}
