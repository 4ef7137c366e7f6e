//! `lowlat load` as a user of wrk, oha or h2load first meets it, as processes against
//! `lowlat serve`: TLS verification failures said in words with what to do, no latency table
//! for a run that got no response, usage errors as one line naming the flag (exit 2), the
//! thread count lowered to a small connection count, `-U`'s block after the corrected one,
//! the status code and error distributions, and `merge` of logs that do not overlap.

use std::path::Path;
use std::process::Command;

use lowlat_testkit::pki::{KeyKind, Pki};

mod support;
use support::BIN;

/// A `lowlat serve` process, killed when dropped.
struct Serve {
    child: std::process::Child,
    base: String,
}

impl Serve {
    /// In clear: its `http://127.0.0.1:PORT` base.
    fn plain() -> Self {
        let mut cmd = Command::new(BIN);
        cmd.args(["serve", "--workers", "1", "--listen", "127.0.0.1:0"]);
        let (child, _, banner) = support::spawn_serve(cmd);
        let base = format!("http://{}", support::address(&banner, "http://"));
        Self { child, base }
    }

    /// Over TLS with this certificate: its `https://localhost:PORT` base.
    fn tls(cert: &Path, key: &Path) -> Self {
        let mut cmd = Command::new(BIN);
        cmd.args(["serve", "--workers", "1", "--tls-listen", "127.0.0.1:0"])
            .arg("--cert")
            .arg(cert)
            .arg("--key")
            .arg(key);
        let (child, _, banner) = support::spawn_serve(cmd);
        let port = support::address(&banner, "https://").port();
        Self {
            child,
            base: format!("https://localhost:{port}"),
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `lowlat load ARGS`: exit code, stdout, stderr.
fn load(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(BIN).arg("load").args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A certificate that does not verify: the reason in words with what to do (no rustls enum
/// names, no byte lists), no latency table of zeros, "no response received", exit 1 — for a
/// self-signed certificate, one signed with a key of another type than the trusted one of its
/// issuer's name, an expired one, and one for another name.
#[test]
fn tls_failures_said_in_words_without_a_latency_table() {
    let pki = Pki::new();
    let unrelated_ca = Pki::new();
    let self_signed = pki.self_signed("self", &["localhost"], KeyKind::EcdsaP256);
    let rsa_namesake = pki.self_signed("namesake", &["localhost"], KeyKind::Rsa2048);
    let expired = pki.expired_leaf("expired", &["localhost"]);
    let other_name = pki.leaf("other", &["example.test"], KeyKind::EcdsaP256);
    let cases = [
        (
            &self_signed,
            unrelated_ca.ca_path(),
            "certificate not trusted (self-signed?): pass --cacert FILE, or -k to skip verification",
        ),
        (
            &self_signed,
            rsa_namesake.cert.clone(),
            "certificate not trusted (self-signed, or from another CA of the same name?): it is \
             signed with ECDSA with SHA-256, but the trusted certificate named as its issuer has \
             a key for RSA: pass --cacert FILE, or -k to skip verification",
        ),
        (&expired, pki.ca_path(), "certificate expired on "),
        (
            &other_name,
            pki.ca_path(),
            "certificate is not for localhost (it names example.test): use a URL with one of its \
             names, or -k to skip verification",
        ),
    ];
    for (cert, cacert, said) in cases {
        let serve = Serve::tls(&cert.cert, &cert.key);
        let url = format!("{}/plaintext", serve.base);
        let cacert = cacert.display().to_string();
        let (code, out, err) = load(&["-t1", "-c1", "-d1s", "-q", "--cacert", &cacert, &url]);
        assert_eq!(code, Some(1), "{out}{err}");
        assert!(err.contains(said), "wanted {said:?} in:\n{err}");
        assert!(
            !err.contains("Context") && !err.contains("[6, "),
            "debug output: {err}"
        );
        assert!(err.contains("no response received"), "{err}");
        assert!(out.contains("  no response received"), "{out}");
        assert!(!out.contains("Latency") && !out.contains("0.00us"), "{out}");
        assert!(out.contains("  Error distribution:\n    ["), "{out}");
        assert!(out.contains("] tls: "), "{out}");
        // Skipping verification then works against the same server.
        let (code, out, err) = load(&["-t1", "-c1", "-n", "10", "-q", "-k", &url]);
        assert_eq!(code, Some(0), "{out}{err}");
    }
}

/// The first request over TLS is charged its connection and handshake, not the crypto
/// library's start: AWS-LC seeds its generator from CPU jitter on first use (0.1 to 0.3 s here),
/// which the loader does before its clock starts. Before, every TLS run's first requests waited
/// for it — a constant-rate run's p99 showed it as a stall. The best of three runs (a fresh
/// process each) must take less than 50 ms.
#[test]
fn the_first_tls_request_is_not_charged_the_crypto_library_start() {
    let pki = Pki::new();
    let leaf = pki.leaf("first", &["localhost"], KeyKind::EcdsaP256);
    let serve = Serve::tls(&leaf.cert, &leaf.key);
    let url = format!("{}/plaintext", serve.base);
    let ca = pki.ca_path().display().to_string();
    let mut best = u64::MAX;
    for _ in 0..3 {
        let (code, out, err) = load(&["-c1", "-n", "1", "--json", "--cacert", &ca, &url]);
        assert_eq!(code, Some(0), "{out}{err}");
        let r: serde_json::Value = serde_json::from_str(&out).unwrap();
        best = best.min(r["latency_us"]["max"].as_u64().unwrap());
    }
    assert!(best < 50_000, "the first request took {best} us at best");
}

/// Usage errors exit 2 with one line that names the flag and says the accepted range in
/// words; `-c1` without `-t` runs one thread instead of failing, and says so.
#[test]
fn usage_errors_name_the_flag_and_exit_2() {
    let serve = Serve::plain();
    let url = format!("{}/plaintext", serve.base);
    for (args, said) in [
        (
            &["-c", "0", "-d1s"][..],
            "lowlat load: invalid value '0' for '--connections <N>': must be a number from 1 to \
             1000000",
        ),
        (
            &["-t", "0", "-d1s"],
            "lowlat load: invalid value '0' for '--threads <N>': must be a number from 1 to 1024",
        ),
        (
            &["-c2", "-t4", "-d1s"],
            "lowlat load: --threads 4 is more than --connections 2: each thread needs a \
             connection, so -t must be a number from 1 to 2",
        ),
        (
            &["--pipeline", "0"],
            "lowlat load: invalid value '0' for '--pipeline <N>': must be a number from 1 to 1024",
        ),
    ] {
        let mut argv = args.to_vec();
        argv.push(&url);
        let (code, out, err) = load(&argv);
        assert_eq!(code, Some(2), "{args:?}: {out}{err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with(said), "{args:?}: {err}");
        assert!(!err.contains("..="), "Rust's range syntax: {err}");
        assert!(out.is_empty(), "no banner for a usage error: {out}");
    }
    let ftp = serve.base.replace("http://", "ftp://");
    let (code, _, err) = load(&["-d1s", &ftp]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("only http:// and https:// URLs are supported"),
        "{err}"
    );
    let (code, out, err) = load(&["-c1", "-n", "100", "-q", &url]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("  1 threads and 1 connections"), "{out}");
    assert_eq!(
        err.trim(),
        "lowlat load: 1 thread, as there is only 1 connection"
    );
}

/// `-R … -U` without `-L`: the corrected latency first, in full, then the uncorrected one, as
/// docs/load.md says (and as `-L -U` prints them).
#[test]
fn uncorrected_latency_follows_the_corrected_one() {
    let serve = Serve::plain();
    let url = format!("{}/plaintext", serve.base);
    let (code, out, err) = load(&["-t1", "-c2", "-d1s", "-R", "200", "-U", "-q", &url]);
    assert_eq!(code, Some(0), "{out}{err}");
    let corrected = out
        .find("(HdrHistogram - Recorded Latency)")
        .unwrap_or_else(|| panic!("no corrected block:\n{out}"));
    let uncorrected = out
        .find("(HdrHistogram - Uncorrected Latency")
        .unwrap_or_else(|| panic!("no uncorrected block:\n{out}"));
    assert!(corrected < uncorrected, "{out}");
    assert_eq!(out.matches("Detailed Percentile spectrum").count(), 2);
}

/// oha's distributions: responses by status code and failures by kind, in the text and the
/// JSON.
#[test]
fn status_codes_and_error_kinds_are_counted() {
    let serve = Serve::plain();
    let (ok, missing) = (
        format!("{}/plaintext", serve.base),
        format!("{}/missing", serve.base),
    );
    let (code, out, err) = load(&["-t1", "-c2", "-n", "100", "-q", &ok, &missing]);
    assert_eq!(code, Some(0), "{out}{err}");
    let distribution: Vec<&str> = out
        .lines()
        .skip_while(|l| *l != "  Status code distribution:")
        .skip(1)
        .take_while(|l| l.starts_with("    ["))
        .collect();
    assert_eq!(distribution.len(), 2, "{out}");
    assert!(distribution[0].starts_with("    [200] "), "{out}");
    assert!(distribution[1].starts_with("    [404] "), "{out}");
    let total: u64 = distribution
        .iter()
        .map(|l| l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(total, 100, "{out}");
    assert!(!out.contains("Error distribution"), "{out}");

    let (code, out, err) = load(&["-t1", "-c2", "-n", "100", "-q", "--json", &ok, &missing]);
    assert_eq!(code, Some(0), "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let codes = v["status_codes"].as_object().expect("status_codes");
    assert_eq!(codes.len(), 2, "{v:#}");
    assert_eq!(codes["200"], v["status"]["2xx"]);
    assert_eq!(codes["404"], v["status"]["4xx"]);

    // A server that answers with garbage: failures by kind, with what the kind means.
    let garbage = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = garbage.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in garbage.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut buf = [0u8; 4096];
                while matches!(s.read(&mut buf), Ok(n) if n > 0) {
                    if s.write_all(b"NOT HTTP\r\n\r\n").is_err() {
                        return;
                    }
                }
            });
        }
    });
    let (code, out, _) = load(&["-t1", "-c1", "-n", "5", "-q", &format!("http://{addr}/")]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("  Error distribution:\n    [5] protocol: not a valid HTTP response\n"),
        "{out}"
    );
}

/// `lowlat load merge` of two runs made one after the other: a warning that the logs do not
/// overlap, and the rate over the time they cover together — not the sum of their rates.
#[test]
fn merge_of_runs_one_after_the_other_warns_and_keeps_the_real_rate() {
    let serve = Serve::plain();
    let url = format!("{}/plaintext", serve.base);
    let dir = tempfile::tempdir().unwrap();
    let mut logs = Vec::new();
    for tag in ["first", "second"] {
        let log = dir.path().join(format!("{tag}.hlog")).display().to_string();
        let (code, out, err) = load(&[
            "-t1",
            "-c2",
            "-d1s",
            "-q",
            "--tag",
            tag,
            "--hdr-log",
            &log,
            &url,
        ]);
        assert_eq!(code, Some(0), "{out}{err}");
        logs.push(log);
    }
    let mut argv = vec!["merge", "--json"];
    argv.extend(logs.iter().map(String::as_str));
    let (code, out, err) = load(&argv);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        err.starts_with("lowlat load merge: warning: the logs do not overlap in time (first "),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let agents = v["agents"].as_array().unwrap();
    let sum: f64 = agents
        .iter()
        .map(|a| a["requests_per_sec"].as_f64().unwrap())
        .sum();
    let highest = agents
        .iter()
        .map(|a| a["requests_per_sec"].as_f64().unwrap())
        .fold(0.0, f64::max);
    let rate = v["requests_per_sec"].as_f64().unwrap();
    assert!(rate <= highest * 1.01, "{rate} of {sum} added: {v:#}");
    let covered = v["covered_secs"].as_f64().unwrap();
    assert!((1.9..2.5).contains(&covered), "{v:#}");
    let responses = v["responses"].as_f64().unwrap();
    assert!((rate - responses / covered).abs() < 1e-6, "{v:#}");
    assert!(v["warning"].as_str().unwrap().contains("do not overlap"));
}
