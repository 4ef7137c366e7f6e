//! Client certificates (mTLS) of `lowlat serve` as curl and openssl meet them: a site that
//! requires one refuses handshakes without it or with one of another CA, a site where it is
//! optional answers both; an upstream (a listener of the test's) gets the verified subject and
//! fingerprint and never the fields a client forged; a request whose `Host` names a site that
//! requires a certificate on a connection made for another name is refused (over HTTP/1.1 and
//! HTTP/2), as is one in clear and one over HTTP/3; SIGHUP re-reads the CA file; the access log
//! has nginx's `$ssl_client_*`; `--check-config` names each bad setting's line.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lowlat_testkit::pki::{CertFiles, DnType, KeyKind, Pki};

mod support;
use support::{Served, BIN};

/// The test's certificates: a server CA and its certificate for the sites' names, the CA of
/// the client certificates with alice's, and another CA with mallory's.
struct Certs {
    server_ca: Pki,
    server: CertFiles,
    client_ca: Pki,
    alice: CertFiles,
    rogue_ca: Pki,
    mallory: CertFiles,
}

fn certs() -> Certs {
    let server_ca = Pki::new();
    let server = server_ca.leaf(
        "server",
        &["localhost", "mtls.test", "open.test", "opt.test"],
        KeyKind::EcdsaP256,
    );
    let client_ca = Pki::named("Client CA, Example");
    let alice = client_ca.client(
        "alice",
        &[
            (DnType::CountryName, "FR"),
            (DnType::OrganizationName, "Example"),
            (DnType::CommonName, "alice"),
        ],
    );
    let rogue_ca = Pki::named("Rogue CA");
    let mallory = rogue_ca.client("mallory", &[(DnType::CommonName, "mallory")]);
    Certs {
        server_ca,
        server,
        client_ca,
        alice,
        rogue_ca,
        mallory,
    }
}

/// An upstream that answers every request with `200` and the request's head as its body, and
/// hands each head to the test.
struct Echo {
    addr: SocketAddr,
    heads: mpsc::Receiver<String>,
}

impl Echo {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, heads) = mpsc::channel();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let tx = tx.clone();
                std::thread::spawn(move || {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&head).into_owned();
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{head}",
                        head.len()
                    );
                    let _ = conn.write_all(reply.as_bytes());
                    let _ = tx.send(head);
                });
            }
        });
        Self { addr, heads }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The head of the next request the upstream got.
    fn next(&self) -> String {
        self.heads
            .recv_timeout(Duration::from_secs(10))
            .expect("a request at the upstream")
    }
}

/// curl over HTTPS to `name` (resolved to the server), with `args`.
fn curl_https(served: &Served, certs: &Certs, name: &str, args: &[&str]) -> Output {
    let port = served.tls_addr.unwrap().port();
    support::curl_https(port, &certs.server_ca.ca_path(), name, "/", args)
}

/// curl's `--cert`/`--key` arguments for a client certificate.
fn with_cert(files: &CertFiles) -> Vec<String> {
    vec![
        "--cert".into(),
        files.cert.display().to_string(),
        "--key".into(),
        files.key.display().to_string(),
    ]
}

fn args<'a>(v: &'a [String], more: &[&'a str]) -> Vec<&'a str> {
    v.iter()
        .map(String::as_str)
        .chain(more.iter().copied())
        .collect()
}

/// The status and body of a curl answer (`-w` puts the status last).
fn answer(out: &Output) -> (u16, String) {
    assert!(
        out.status.success(),
        "curl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
    (status.trim().parse().unwrap_or(0), body.to_owned())
}

/// SHA-256 of a certificate's DER, lower-case hex, as openssl computes it.
fn fingerprint(cert: &Path) -> String {
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
        .arg(cert)
        .output()
        .expect("run openssl");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split('=')
        .nth(1)
        .unwrap()
        .trim()
        .replace(':', "")
        .to_ascii_lowercase()
}

/// The value of the one field `name` in a request head; panics when it is there more than once.
fn only_field<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    let mut found = head.lines().skip(1).filter_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    });
    let first = found.next();
    assert!(found.next().is_none(), "{name} twice in {head}");
    first
}

fn serve(certs: &Certs, extra: &[&str]) -> Served {
    support::serve_tls(&certs.server, extra)
}

const W: [&str; 2] = ["-w", "\n%{http_code}"];

/// A site that requires a certificate: none, or one of another CA, ends the handshake; alice's
/// reaches the upstream with her subject, issuer and fingerprint, and the fields she wrote
/// herself are gone; in clear the site answers 403; the access log says who she was.
#[test]
fn required_certificate() {
    let certs = certs();
    let echo = Echo::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let ca = certs.client_ca.ca_path();
    let served = serve(
        &certs,
        &[
            "--client-ca",
            ca.to_str().unwrap(),
            "--proxy",
            &format!("/={}", echo.url()),
            "--access-log",
            log.to_str().unwrap(),
            "--access-log-format",
            "$ssl_client_verify \"$ssl_client_s_dn\" \"$ssl_client_i_dn\" $ssl_client_serial $ssl_client_fingerprint $status",
        ],
    );

    let none = curl_https(&served, &certs, "localhost", &[]);
    assert!(!none.status.success(), "served without a certificate");
    let rogue = curl_https(
        &served,
        &certs,
        "localhost",
        &args(&with_cert(&certs.mallory), &[]),
    );
    assert!(!rogue.status.success(), "served another CA's certificate");
    let expired = certs
        .client_ca
        .expired_client("bob", &[(DnType::CommonName, "bob")]);
    let expired = curl_https(
        &served,
        &certs,
        "localhost",
        &args(&with_cert(&expired), &[]),
    );
    assert!(!expired.status.success(), "served an expired certificate");

    let alice = with_cert(&certs.alice);
    let forged = [
        "-H",
        "X-Client-Cert-Subject: CN=root",
        "-H",
        "x-client-verify: SUCCESS",
        "-H",
        "X-Client-Cert-Fingerprint: 00",
        "-H",
        "Client-Cert: :AAAA:",
    ];
    let (status, _) = answer(&curl_https(
        &served,
        &certs,
        "localhost",
        &args(&alice, &[&forged[..], &W[..]].concat()),
    ));
    assert_eq!(status, 200);
    let head = echo.next();
    let fp = fingerprint(&certs.alice.cert);
    assert_eq!(
        only_field(&head, "X-Client-Verify"),
        Some("SUCCESS"),
        "{head}"
    );
    assert_eq!(
        only_field(&head, "X-Client-Cert-Subject"),
        Some("CN=alice,O=Example,C=FR")
    );
    assert_eq!(
        only_field(&head, "X-Client-Cert-Issuer"),
        Some("CN=Client CA\\, Example")
    );
    assert_eq!(
        only_field(&head, "X-Client-Cert-Fingerprint"),
        Some(fp.as_str())
    );
    assert!(only_field(&head, "X-Client-Cert-Serial").is_some_and(|s| !s.is_empty()));
    assert_eq!(only_field(&head, "Client-Cert"), None, "{head}");

    // Over HTTP/2 too, on one connection for two requests.
    let port = served.tls_addr.unwrap().port();
    let second = format!("https://localhost:{port}/again");
    let out = curl_https(
        &served,
        &certs,
        "localhost",
        &args(&alice, &["--http2", "-o", "/dev/null", &second]),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for _ in 0..2 {
        let head = echo.next();
        assert_eq!(
            only_field(&head, "X-Client-Verify"),
            Some("SUCCESS"),
            "{head}"
        );
    }

    // In clear, no certificate can come: refused before the upstream.
    let clear = support::curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &format!("http://{}/", served.addr),
    ]);
    assert_eq!(String::from_utf8_lossy(&clear.stdout), "403");

    served.stop();
    let lines = std::fs::read_to_string(&log).unwrap();
    let first = lines.lines().next().unwrap();
    assert!(
        first.starts_with("SUCCESS \"CN=alice,O=Example,C=FR\" \"CN=Client CA\\x5C, Example\" ")
            && first.ends_with(&format!(" {fp} 200")),
        "{lines}"
    );
    assert!(
        lines.lines().any(|l| l == "- \"-\" \"-\" - - 403"),
        "{lines}"
    );
}

/// A site where the certificate is optional: no certificate is answered, and the upstream is
/// told `NONE` (and nothing the client claimed); alice's is passed on; mallory's still ends the
/// handshake (a certificate sent must verify).
#[test]
fn optional_certificate() {
    let certs = certs();
    let echo = Echo::start();
    let ca = certs.client_ca.ca_path();
    let served = serve(
        &certs,
        &[
            "--client-ca",
            ca.to_str().unwrap(),
            "--client-cert",
            "optional",
            "--proxy",
            &format!("/={}", echo.url()),
        ],
    );
    let forged = [
        "-H",
        "X-Client-Verify: SUCCESS",
        "-H",
        "X-Client-Cert-Subject: CN=alice",
    ];
    let (status, _) = answer(&curl_https(
        &served,
        &certs,
        "localhost",
        &[&forged[..], &W[..]].concat(),
    ));
    assert_eq!(status, 200);
    let head = echo.next();
    assert_eq!(only_field(&head, "X-Client-Verify"), Some("NONE"), "{head}");
    assert_eq!(only_field(&head, "X-Client-Cert-Subject"), None, "{head}");

    let (status, _) = answer(&curl_https(
        &served,
        &certs,
        "localhost",
        &args(&with_cert(&certs.alice), &W),
    ));
    assert_eq!(status, 200);
    let head = echo.next();
    assert_eq!(
        only_field(&head, "X-Client-Verify"),
        Some("SUCCESS"),
        "{head}"
    );

    let rogue = curl_https(
        &served,
        &certs,
        "localhost",
        &args(&with_cert(&certs.mallory), &[]),
    );
    assert!(!rogue.status.success(), "served another CA's certificate");
    let expired = certs
        .client_ca
        .expired_client("bob", &[(DnType::CommonName, "bob")]);
    let expired = curl_https(
        &served,
        &certs,
        "localhost",
        &args(&with_cert(&expired), &[]),
    );
    assert!(!expired.status.success(), "served an expired certificate");
}

/// Two sites in a config file, the first (the default) without client certificates: its
/// handshakes ask for none and its upstream never sees a forged field; the second requires
/// alice's CA. A request naming the second on a connection made for the first (SNI and `Host`
/// differ, as HTTP/2 coalescing does) is answered 421, over HTTP/1.1 and HTTP/2, and so is one
/// from a client that sent no name at all; openssl s_client sees which CA names the second
/// site's handshake asks for.
#[test]
fn sites_in_a_config_file() {
    let certs = certs();
    let echo = Echo::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("lowlat.toml");
    std::fs::write(
        &config,
        format!(
            "[[site]]\nserver_names = [\"open.test\"]\nproxy = [\"/={up}\"]\n\n\
             [[site]]\nserver_names = [\"mtls.test\"]\nproxy = [\"/={up}\"]\nclient_ca = \"{ca}\"\nclient_cert = \"required\"\n",
            up = echo.url(),
            ca = certs.client_ca.ca_path().display()
        ),
    )
    .unwrap();
    let served = serve(&certs, &["--config", config.to_str().unwrap()]);
    let alice = with_cert(&certs.alice);

    // The open site: no certificate asked for, forged fields dropped all the same.
    let (status, _) = answer(&curl_https(
        &served,
        &certs,
        "open.test",
        &["-H", "X-Client-Verify: SUCCESS", "-w", "\n%{http_code}"],
    ));
    assert_eq!(status, 200);
    let head = echo.next();
    assert_eq!(only_field(&head, "X-Client-Verify"), None, "{head}");

    // The mTLS site by its own name.
    let refused = curl_https(&served, &certs, "mtls.test", &[]);
    assert!(!refused.status.success(), "served without a certificate");
    let (status, _) = answer(&curl_https(&served, &certs, "mtls.test", &args(&alice, &W)));
    assert_eq!(status, 200);
    assert_eq!(only_field(&echo.next(), "X-Client-Verify"), Some("SUCCESS"));

    // Its name in Host on a connection made for the open site: misdirected.
    for version in ["--http1.1", "--http2"] {
        let (status, _) = answer(&curl_https(
            &served,
            &certs,
            "open.test",
            &args(
                &alice,
                &[version, "-H", "Host: mtls.test", "-w", "\n%{http_code}"],
            ),
        ));
        assert_eq!(status, 421, "{version}");
    }
    // No SNI at all (an IP address): the default site's handshake, then the same answer.
    let port = served.tls_addr.unwrap().port();
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "20",
            "-k",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .args(["-H", "Host: mtls.test"])
        .arg(format!("https://127.0.0.1:{port}/"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "421");
    assert!(
        echo.heads.try_recv().is_err(),
        "a misdirected request reached the upstream"
    );

    // What each handshake asks for, as openssl s_client reports it.
    let asked = |name: &str| {
        let out = Command::new("openssl")
            .args(["s_client", "-connect"])
            .arg(format!("127.0.0.1:{port}"))
            .args(["-servername", name, "-CAfile"])
            .arg(certs.server_ca.ca_path())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let open = asked("open.test");
    assert!(
        open.contains("No client certificate CA names sent"),
        "{open}"
    );
    let mtls = asked("mtls.test");
    assert!(
        mtls.contains("Acceptable client certificate CA names") && mtls.contains("Client CA"),
        "{mtls}"
    );
}

/// SIGHUP re-reads the CA file: once it holds the other CA, mallory's certificate is the one
/// verified and alice's is refused.
#[test]
fn sighup_rereads_the_ca_file() {
    let certs = certs();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("clients.pem");
    std::fs::copy(certs.client_ca.ca_path(), &ca).unwrap();
    let served = serve(&certs, &["--client-ca", ca.to_str().unwrap()]);
    let plaintext = |who: &CertFiles| {
        let port = served.tls_addr.unwrap().port();
        let url = format!("https://localhost:{port}/plaintext");
        curl_https(
            &served,
            &certs,
            "localhost",
            &args(&with_cert(who), &[&url, "-o", "/dev/null"]),
        )
        .status
        .success()
    };
    assert!(plaintext(&certs.alice));
    assert!(!plaintext(&certs.mallory));
    std::fs::copy(certs.rogue_ca.ca_path(), &ca).unwrap();
    served.signal("HUP");
    let start = Instant::now();
    while !served.log().contains("SIGHUP: reloaded") {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{}",
            served.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(plaintext(&certs.mallory));
    assert!(!plaintext(&certs.alice));
    // A CA file broken on reload keeps the one in use.
    std::fs::write(&ca, "not a certificate").unwrap();
    served.signal("HUP");
    let start = Instant::now();
    while !served.log().contains("certificates in use are kept") {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{}",
            served.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(plaintext(&certs.mallory));
}

/// `--check-config` says each bad client-certificate setting on its line: a CA file that is not
/// there, one without a certificate, a mode that does not exist, a mode without a CA file; and
/// a start without a TLS listener is refused in one line.
#[test]
fn check_config_names_bad_settings() {
    let certs = certs();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.toml");
    let missing = dir.path().join("missing.pem");
    std::fs::write(
        &config,
        format!(
            "tls_listen = [\"127.0.0.1:0\"]\ncert = \"{cert}\"\nkey = \"{key}\"\n\n\
             [[site]]\nserver_names = [\"a.test\"]\nclient_ca = \"{missing}\"\n\n\
             [[site]]\nserver_names = [\"b.test\"]\nclient_ca = \"{keyfile}\"\n\n\
             [[site]]\nserver_names = [\"c.test\"]\nclient_cert = \"maybe\"\n\n\
             [[site]]\nserver_names = [\"d.test\"]\nclient_cert = \"optional\"\n\n\
             [[site]]\nserver_names = [\"e.test\"]\nclient_ca = \"{ca}\"\nclient_cert = \"off\"\n",
            cert = certs.server.cert.display(),
            key = certs.server.key.display(),
            missing = missing.display(),
            keyfile = certs.alice.key.display(),
            ca = certs.client_ca.ca_path().display(),
        ),
    )
    .unwrap();
    let out = support::check_config(Some(&config), &[]);
    let stderr = out.stderr;
    assert_eq!(out.code, Some(1), "{stderr}");
    let shown = config.display().to_string();
    for (line, words) in [
        (7, "missing.pem: cannot read it"),
        (11, "no CERTIFICATE block"),
        (15, "\"maybe\" is not a client certificate mode"),
        (19, "--client-cert optional: needs --client-ca"),
    ] {
        assert!(
            stderr.lines().any(
                |l| l.starts_with(&format!("lowlat serve: {shown}:{line}: ")) && l.contains(words)
            ),
            "line {line}: {words} in\n{stderr}"
        );
    }
    assert_eq!(stderr.lines().count(), 4, "{stderr}");

    // Without a TLS listener there is no handshake to ask in.
    let out = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--client-ca"])
        .arg(certs.client_ca.ca_path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--client-ca") && stderr.contains("--tls-listen"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

/// Over HTTP/3 no certificate is asked for: a site that requires one answers 421 (the client
/// goes back to TCP) and advertises no HTTP/3, while a site that asks for none does.
#[test]
fn http3_is_refused_where_a_certificate_is_required() {
    let certs = certs();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("lowlat.toml");
    std::fs::write(
        &config,
        format!(
            "[[site]]\nserver_names = [\"localhost\"]\nclient_ca = \"{ca}\"\n\n\
             [[site]]\nserver_names = [\"open.test\"]\n",
            ca = certs.client_ca.ca_path().display()
        ),
    )
    .unwrap();
    let served = serve(
        &certs,
        &[
            "--config",
            config.to_str().unwrap(),
            "--h3-listen",
            "127.0.0.1:0",
        ],
    );
    let r = support::h3::client(&served, &["get", "GET", "/plaintext"]);
    assert_eq!(r["responses"][0]["status"], 421, "{r}");
    // Over TCP with alice's certificate: answered, without Alt-Svc.
    let out = curl_https(
        &served,
        &certs,
        "localhost",
        &args(&with_cert(&certs.alice), &["-D", "-", "-o", "/dev/null"]),
    );
    let head = String::from_utf8_lossy(&out.stdout);
    assert!(head.starts_with("HTTP/2 200"), "{head}");
    assert!(support::field(&head, "alt-svc").is_none(), "{head}");
    let out = curl_https(
        &served,
        &certs,
        "open.test",
        &["-D", "-", "-o", "/dev/null"],
    );
    let head = String::from_utf8_lossy(&out.stdout);
    assert!(support::field(&head, "alt-svc").is_some(), "{head}");
}
