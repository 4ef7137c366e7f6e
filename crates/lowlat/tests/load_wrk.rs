//! `lowlat load` beside wrk, as processes against the same `lowlat serve`: the text report has
//! wrk's lines, in wrk's order and columns, wherever both print the same fact; wrk's flags
//! (`-T`, `-L`, `-v`) mean what they mean to wrk; `-s` runs wrk's Lua scripts (tested with
//! wrk's own in crates/load/tests/scripts.rs).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_lowlat");

struct Serve(Child, String);

impl Serve {
    fn start() -> Self {
        let mut child = Command::new(BIN)
            .args(["serve", "--workers", "1", "--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stderr.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap()
            .to_owned();
        Self(child, url)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wrk_path() -> String {
    for p in ["/usr/bin/wrk", "/usr/local/bin/wrk"] {
        if std::path::Path::new(p).is_file() {
            return p.to_owned();
        }
    }
    panic!("wrk is not installed: run scripts/test-deps.sh");
}

fn output(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// A line with its numbers (and their units) replaced by `N`, and runs of spaces by one.
fn shape(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            while chars
                .peek()
                .is_some_and(|d| d.is_ascii_digit() || *d == '.')
            {
                chars.next();
            }
            // A unit glued to the number: us, ms, s, m, h, k, M, G, KB, MB, GB, B.
            while chars.peek().is_some_and(|d| "usmhkMGKTPB".contains(*d)) {
                chars.next();
            }
            out.push('N');
        } else if c == ' ' {
            if !out.ends_with(' ') {
                out.push(' ');
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Every line wrk prints, lowlat load prints too, in the same order; the first five (banner
/// and thread statistics) at the same place and, for the statistics rows, the same width.
#[test]
fn text_report_matches_wrk_line_by_line() {
    let serve = Serve::start();
    for path in ["/plaintext", "/missing"] {
        let url = format!("{}{path}", serve.1);
        let wrk = output(&wrk_path(), &["-t1", "-c4", "-d1s", &url]);
        let ours = output(BIN, &["load", "-t1", "-c4", "-d1s", "-q", &url]);
        let (wrk_lines, our_lines): (Vec<&str>, Vec<&str>) =
            (wrk.lines().collect(), ours.lines().collect());
        for i in 0..5 {
            assert_eq!(
                shape(our_lines[i]),
                shape(wrk_lines[i]),
                "line {i}\nwrk:\n{wrk}\nlowlat:\n{ours}"
            );
        }
        for i in 2..5 {
            assert_eq!(
                our_lines[i].len(),
                wrk_lines[i].len(),
                "columns of line {i}\nwrk:\n{wrk}\nlowlat:\n{ours}"
            );
        }
        let mut at = 0;
        for w in &wrk_lines {
            let found = our_lines[at..]
                .iter()
                .position(|o| shape(o) == shape(w))
                .unwrap_or_else(|| panic!("wrk's {w:?} missing or out of order\n{ours}"));
            at += found + 1;
        }
        if path == "/missing" {
            assert!(ours.contains("  Non-2xx or 3xx responses: "), "{ours}");
        }
    }
}

/// wrk's short flags: -T (timeout), -L (latency, wrk2's block), -v (version); -s (a Lua
/// script) that cannot be read is one line, exit 1.
#[test]
fn wrk_flags() {
    let serve = Serve::start();
    let url = format!("{}/plaintext", serve.1);
    let out = output(
        BIN,
        &["load", "-t1", "-c2", "-d1s", "-T", "3s", "-L", "-q", &url],
    );
    assert!(
        out.contains("  Latency Distribution (HdrHistogram - Recorded Latency)"),
        "{out}"
    );
    assert!(out.contains(" 99.999%"), "{out}");
    assert!(out.contains("Detailed Percentile spectrum"), "{out}");
    let v = output(BIN, &["load", "-v"]);
    assert!(v.starts_with("lowlat-load "), "{v}");
    let script = Command::new(BIN)
        .args(["load", "-s", "bench.lua", &url])
        .output()
        .unwrap();
    assert_eq!(script.status.code(), Some(1));
    let err = String::from_utf8_lossy(&script.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("cannot read bench.lua"), "{err}");
    // -U (with -R): wrk2's uncorrected block after the recorded one; without -R a usage error.
    let out = output(
        BIN,
        &[
            "load", "-t1", "-c2", "-d1s", "-R", "500", "-L", "-U", "-q", &url,
        ],
    );
    let rec = out
        .find("(HdrHistogram - Recorded Latency)")
        .expect("recorded block");
    let unc = out
        .find("(HdrHistogram - Uncorrected Latency")
        .expect("uncorrected block");
    assert!(rec < unc, "{out}");
    let u = Command::new(BIN)
        .args(["load", "-U", &url])
        .output()
        .unwrap();
    assert_eq!(u.status.code(), Some(2));
    // A missing argument is named.
    let none = Command::new(BIN).arg("load").output().unwrap();
    let err = String::from_utf8_lossy(&none.stderr);
    assert!(err.contains("<URL>"), "{err}");
}

/// Thresholds for CI: a run that breaks one still reports, names the failure on stderr, in the
/// text and in the JSON, and exits 3; one that keeps to them exits 0.
#[test]
fn thresholds_gate_the_exit_status() {
    let serve = Serve::start();
    let run = |path: &str, extra: &[&str]| {
        let url = format!("{}{path}", serve.1);
        let mut args = vec!["load", "-t1", "-c2", "-d1s", "-q"];
        args.extend_from_slice(extra);
        args.push(&url);
        let out = Command::new(BIN).args(&args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, _) = run(
        "/plaintext",
        &["--max-error-rate", "1%", "--min-rps", "100"],
    );
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("Threshold --max-error-rate passed"), "{out}");
    // Every response a 404: nothing failed at the socket, but the error rate is 100%.
    let (code, out, err) = run("/missing", &["--max-error-rate", "1%"]);
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(
        out.contains("Threshold --max-error-rate FAILED: 100.000% > 1.000%"),
        "{out}"
    );
    assert_eq!(
        err.trim(),
        "lowlat load: threshold failed: --max-error-rate"
    );
    let (code, out, _) = run(
        "/plaintext",
        &["--max-p99", "1ms", "--min-rps", "100M", "--json"],
    );
    assert_eq!(code, Some(3));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let t = v["thresholds"].as_array().unwrap();
    assert_eq!(t.len(), 2);
    assert_eq!(t[1]["name"], "min-rps");
    assert_eq!(t[1]["passed"], false);
    // Without thresholds, a run of 404s is still a successful run.
    let (code, _, _) = run("/missing", &[]);
    assert_eq!(code, Some(0));
}
