//! `lowlat load` as a user of wrk, oha or h2load first meets it, as processes against
//! `lowlat serve`: the status code and error distributions.

use std::process::Command;

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
