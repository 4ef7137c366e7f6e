//! The documents' commands still work: every `lowlat …` command in a fenced shell block of the
//! README and of the guides under docs/ is run or at least checked.
//!
//! - `lowlat load` against `http://127.0.0.1:8080`, or `https://localhost:8443` and `:4433`
//!   (HTTP/3), runs, bounded (`-d 1s`, `-n 2000`), against a `lowlat serve` this test starts on
//!   free ports (with `--h2c` for `--h2` in clear; TLS and QUIC with a certificate of the test's
//!   CA, which is the examples' `ca.pem`), and must exit 0.
//! - `lowlat serve` is checked with `--check-config` in a folder holding a fresh `cert.pem`,
//!   `key.pem` and `ca.pem` and the directories the examples name, and must exit 0.
//! - `lowlat man`, `completions` and `--version` run and must exit 0.
//! - What needs more than a test can give it — ports 80 and 443, an ACME CA, files under
//!   /etc or /run, another host, a peer server, a recorded run — is parsed: the same words with
//!   `--help` appended must be accepted (exit 0), so a renamed flag or a value the parser no
//!   longer takes fails here too.
//!
//! Each command's class is decided from its words alone (below), and the test lists how many
//! it ran, checked and parsed, so that a document whose commands all slipped into "parsed"
//! shows.

use std::path::{Path, PathBuf};
use std::process::Command;

use lowlat_testkit::pki::{KeyKind, Pki};

mod support;
use support::{Served, BIN};

/// A command found in a document: where, and its words after `lowlat`.
#[derive(Debug)]
struct Found {
    place: String,
    words: Vec<String>,
}

/// Which of the test's servers a load command runs against.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Server {
    /// HTTP/1.1 in clear (the documents' `127.0.0.1:8080`).
    Plain,
    /// HTTP/2 by prior knowledge in clear too (`--h2` to an `http://` URL).
    H2c,
    /// TLS (`:8443`) and QUIC (`:4433`).
    Tls,
}

/// What is done with a command.
#[derive(Debug, PartialEq, Eq)]
enum Class {
    /// Run against one of the test's servers.
    Load(Server),
    /// `lowlat serve … --check-config`.
    Check,
    /// Run as written (`man`, `completions`, `--version`).
    Run,
    /// `… --help`: the parser accepts the words.
    Parse,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The README and every guide under docs/.
fn documents() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    docs.insert(0, repo().join("README.md"));
    docs
}

/// Every `lowlat` command in the fenced `sh` blocks of `text` (continuation lines joined, a
/// `$ ` prompt and a trailing `# comment` dropped, cut at a redirection or a pipe).
fn commands(name: &str, text: &str) -> Vec<Found> {
    let mut out = Vec::new();
    let mut in_sh = None::<bool>;
    let mut pending = String::new();
    for (number, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            in_sh = match in_sh {
                Some(_) => None,
                None => Some(matches!(info.trim(), "sh" | "bash" | "console" | "shell")),
            };
            continue;
        }
        if in_sh != Some(true) {
            continue;
        }
        if let Some(start) = trimmed.strip_suffix('\\') {
            pending.push_str(start);
            pending.push(' ');
            continue;
        }
        pending.push_str(trimmed);
        let full = std::mem::take(&mut pending);
        let full = full.strip_prefix("$ ").unwrap_or(&full);
        let words = shell_words(full);
        let Some(at) = words
            .iter()
            .position(|w| w == "lowlat" || w.ends_with("/lowlat"))
        else {
            continue;
        };
        if at != 0 {
            continue; // `cargo install … crates/lowlat`, `taskset -c 0 target/…/lowlat` and the like
        }
        let words: Vec<String> = words[1..]
            .iter()
            .take_while(|w| !matches!(w.as_str(), ">" | "|" | "&&" | "&" | ";"))
            .cloned()
            .collect();
        out.push(Found {
            place: format!("{name}:{}", number + 1),
            words,
        });
    }
    out
}

/// Splits a shell line into words: quotes grouped, a `#` that starts a word ends the line.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote = None::<char>;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '#') if !in_word => break,
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// What is done with `words` (after `lowlat`).
fn class(words: &[String]) -> Class {
    let has = |w: &str| words.iter().any(|x| x == w);
    let mentions = |s: &str| words.iter().any(|x| x.contains(s));
    let outside = [
        "/etc/",
        "/run/",
        "/usr/",
        "/var/",
        "example.com",
        "internal",
        "10.0.0.",
    ];
    let needs_outside = outside.iter().any(|s| mentions(s))
        || words
            .iter()
            .any(|w| w.ends_with(":80") || w.ends_with(":443") || w.contains(".0:443"));
    match words.first().map(String::as_str) {
        Some("load") => {
            let urls: Vec<&String> = words.iter().filter(|w| w.contains("://")).collect();
            let all = |prefixes: &[&str]| {
                !urls.is_empty()
                    && urls
                        .iter()
                        .all(|u| prefixes.iter().any(|p| u.starts_with(p)))
            };
            let tls = [
                "https://localhost:8443/",
                "https://127.0.0.1:8443/",
                "https://localhost:4433/",
                "https://127.0.0.1:4433/",
            ];
            if has("--ws") || has("-s") || words.get(1).is_some_and(|w| w == "merge") {
                Class::Parse
            } else if all(&["http://127.0.0.1:8080/"]) {
                Class::Load(if has("--h2") {
                    Server::H2c
                } else {
                    Server::Plain
                })
            } else if all(&tls) {
                Class::Load(Server::Tls)
            } else {
                Class::Parse
            }
        }
        Some("serve") if !needs_outside && !mentions("acme") => Class::Check,
        Some("man" | "completions" | "--version") if !needs_outside => Class::Run,
        _ => Class::Parse,
    }
}

/// `words` made bounded and pointed at the test's servers: durations 1 s (3 s over HTTP/3,
/// where a debug build's 64 QUIC handshakes alone can take a second), counts 2000, the
/// documents' addresses replaced (`addrs`: what each becomes).
fn bounded(words: &[String], addrs: &[(&str, String)]) -> Vec<String> {
    let secs = if words.iter().any(|w| w == "--h3") {
        "3s"
    } else {
        "1s"
    };
    let mut out = Vec::new();
    let mut it = words.iter();
    while let Some(w) = it.next() {
        match w.as_str() {
            "-d" | "--duration" => {
                it.next();
                out.extend(["-d".to_owned(), secs.to_owned()]);
            }
            "-n" | "--requests" => {
                it.next();
                out.extend(["-n".to_owned(), "2000".to_owned()]);
            }
            w if w.starts_with("-d") && w.len() > 2 && w[2..].starts_with(char::is_numeric) => {
                out.push(format!("-d{secs}"));
            }
            w if w.starts_with("-n") && w.len() > 2 && w[2..].starts_with(char::is_numeric) => {
                out.push("-n2000".to_owned());
            }
            w => out.push(
                addrs
                    .iter()
                    .fold(w.to_owned(), |w, (from, to)| w.replace(from, to)),
            ),
        }
    }
    out
}

/// Runs `lowlat ARGS` in `dir`: exit code and what it said on stderr.
fn lowlat(dir: &Path, args: &[String]) -> (Option<i32>, String) {
    let out = Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run lowlat");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A folder the examples can run in: `cert.pem`, `key.pem` and `ca.pem` for localhost and
/// 127.0.0.1, and the directories they name.
fn workdir() -> (Pki, tempfile::TempDir) {
    let pki = Pki::new();
    let leaf = pki.leaf("docs", &["localhost", "127.0.0.1"], KeyKind::EcdsaP256);
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&leaf.cert, dir.path().join("cert.pem")).unwrap();
    std::fs::copy(&leaf.key, dir.path().join("key.pem")).unwrap();
    std::fs::copy(pki.ca_path(), dir.path().join("ca.pem")).unwrap();
    std::fs::create_dir(dir.path().join("site")).unwrap();
    std::fs::write(dir.path().join("site/index.html"), "<p>hello</p>\n").unwrap();
    (pki, dir)
}

/// The extraction itself: prompts, comments, continuations, quotes and redirections.
#[test]
fn commands_are_found_as_a_shell_reads_them() {
    let text =
        "text\n```sh\n$ lowlat load -c 16 \\\n    -d 5s http://127.0.0.1:8080/ # five seconds\n\
                lowlat --access-log-format '$remote_addr \"$request\"' x\n\
                lowlat completions bash > /etc/x\ncargo install --path crates/lowlat\n```\n\
                ```toml\nlowlat = 1\n```\n";
    let found = commands("t.md", text);
    let words: Vec<Vec<String>> = found.iter().map(|f| f.words.clone()).collect();
    let w = |s: &[&str]| s.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        words,
        vec![
            w(&["load", "-c", "16", "-d", "5s", "http://127.0.0.1:8080/"]),
            w(&["--access-log-format", "$remote_addr \"$request\"", "x"]),
            w(&["completions", "bash"]),
        ]
    );
    assert_eq!(found[0].place, "t.md:4");
    assert_eq!(class(&words[0]), Class::Load(Server::Plain));
    assert_eq!(
        bounded(&words[0], &[("127.0.0.1:8080", "127.0.0.1:1".to_owned())]),
        w(&["load", "-c", "16", "-d", "1s", "http://127.0.0.1:1/"])
    );
    assert_eq!(class(&w(&["serve", "--listen", ":80"])), Class::Parse);
    assert_eq!(class(&w(&["serve", "--listen", ":8080"])), Class::Check);
}

/// Every command of the README and the guides runs, checks or parses; the bounded runs take a
/// few seconds in all.
#[test]
fn every_documented_command_works() {
    let (_pki, dir) = workdir();
    let plain = Served::start(["--workers", "1"]);
    let h2c = Served::start(["--workers", "1", "--h2c"]);
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    let tls = Served::start([
        "--workers",
        "1",
        "--tls-listen",
        "127.0.0.1:0",
        "--cert",
        cert.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
        "--h3-listen",
        "127.0.0.1:0",
    ]);
    let tls_port = tls.tls_addr.expect("a TLS listener").port();
    let h3_port = support::address(&tls.log(), "h3://").port();
    let tls_addrs = [
        (":8443", format!(":{tls_port}")),
        (":4433", format!(":{h3_port}")),
    ];
    let mut failures = Vec::new();
    let (mut ran, mut checked, mut parsed) = (0, 0, 0);
    for doc in documents() {
        let name = doc
            .strip_prefix(repo())
            .unwrap_or(&doc)
            .display()
            .to_string();
        let text = std::fs::read_to_string(&doc).unwrap();
        for found in commands(&name, &text) {
            let (args, kind) = match class(&found.words) {
                Class::Load(server) => {
                    ran += 1;
                    let addrs = match server {
                        Server::Plain => vec![("127.0.0.1:8080", plain.addr.to_string())],
                        Server::H2c => vec![("127.0.0.1:8080", h2c.addr.to_string())],
                        Server::Tls => tls_addrs.to_vec(),
                    };
                    (bounded(&found.words, &addrs), "ran")
                }
                Class::Run => {
                    ran += 1;
                    (found.words.clone(), "ran")
                }
                Class::Check => {
                    checked += 1;
                    let mut args = found.words.clone();
                    args.push("--check-config".to_owned());
                    (args, "checked")
                }
                Class::Parse => {
                    parsed += 1;
                    let mut args = found.words.clone();
                    args.push("--help".to_owned());
                    (args, "parsed")
                }
            };
            let (code, err) = lowlat(dir.path(), &args);
            if code != Some(0) {
                let line = err.lines().next().unwrap_or("");
                failures.push(format!(
                    "{}: `lowlat {}` ({kind}: exit {code:?}) {line}",
                    found.place,
                    args.join(" ")
                ));
            }
        }
    }
    eprintln!("documented commands: {ran} ran, {checked} checked, {parsed} parsed");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The README's own examples are among those run or checked, not only parsed.
    assert!(ran >= 12 && checked >= 5, "ran {ran}, checked {checked}");
}
