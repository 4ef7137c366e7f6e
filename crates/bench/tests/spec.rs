//! Spec parsing: a valid spec with every field, the shipped specs, and each kind of error
//! naming the file, the line and the field.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use lowlat_bench::spec::{self, Launch, Readiness};

const VALID: &str = r#"
name = "demo"
description = "every field"

[vars]
port = "18090"

[run]
duration = "1.5s"
rounds = 2
warmup = "500ms"
pause = 0.25
levels = { from = 0, to = 30, step = 10 }
baseline = "b"

[loader]
threads = 2
cpus = "1"
timeout = "3s"

[[target]]
name = "a"
command = ["server", "--port", "${port}"]
cwd = "${spec_dir}"
env = { RUST_LOG = "warn" }
templates = { "a.conf" = "${spec_dir}/a.conf.in" }
url = "http://127.0.0.1:${port}"
cpus = [0]
ready = { http = "/health", timeout = "5s" }
rss_exclude = ["python3"]

[[target]]
name = "b"
pid = 1
url = "http://127.0.0.1:8081"

[[service]]
name = "up"
command = ["upstream", "--port", "18077"]
env = { UP = "1" }
addr = "127.0.0.1:18077"
cpus = [1]
ready = { tcp = true, timeout = "2s" }

[[scenario]]
name = "plain"
path = "/plaintext"
headers = { Accept = "text/plain" }
pipeline = 16
levels = [1, 16]

[[scenario]]
name = "close"
path = "/x"
method = "HEAD"
keepalive = false
targets = ["a"]
"#;

/// A spec with every field parses into what it says.
#[test]
fn valid_spec_with_every_field() {
    let s = spec::parse(Path::new("demo.toml"), VALID).expect("valid");
    assert_eq!(s.name, "demo");
    assert_eq!(s.run.duration, Duration::from_millis(1500));
    assert_eq!(s.run.rounds, 2);
    assert_eq!(s.run.pause, Duration::from_millis(250));
    assert_eq!(
        s.run.levels,
        vec![10, 20, 30],
        "a range from 0 starts at its first step"
    );
    assert_eq!(s.run.baseline, "b");
    assert_eq!(
        (s.loader.threads, s.loader.cpus.clone(), s.loader.timeout),
        (2, vec![1], Duration::from_secs(3))
    );
    let a = &s.targets[0];
    assert!(
        matches!(&a.launch, Launch::Command { argv, templates, .. } if argv[2] == "${port}" && templates.contains_key("a.conf"))
    );
    assert_eq!(a.ready, Readiness::Http("/health".into()));
    assert_eq!(a.ready_timeout, Duration::from_secs(5));
    assert!(matches!(s.targets[1].launch, Launch::Pid(1)));
    assert_eq!(s.targets[1].ready, Readiness::Tcp);
    assert_eq!(s.scenarios[0].levels, vec![1, 16]);
    assert_eq!(s.scenarios[0].targets, vec!["a", "b"]);
    assert_eq!(s.scenarios[0].pipeline, 16);
    assert_eq!(
        (s.scenarios[1].method.as_str(), s.scenarios[1].keepalive),
        ("HEAD", false)
    );
    assert_eq!(s.scenarios[1].levels, vec![10, 20, 30]);
    let up = &s.services[0];
    assert_eq!(
        (
            up.process.name.as_str(),
            up.addr.as_str(),
            up.process.cpus.clone()
        ),
        ("up", "127.0.0.1:18077", vec![1])
    );
    assert_eq!(up.process.role, spec::Role::Service);
    assert_eq!(
        (up.process.ready.clone(), up.process.ready_timeout),
        (Readiness::Tcp, Duration::from_secs(2))
    );
    assert!(
        matches!(&up.process.launch, Launch::Command { argv, env, .. } if argv[0] == "upstream" && env["UP"] == "1")
    );
    assert_eq!(
        s.vars().get("up_addr").map(String::as_str),
        Some("127.0.0.1:18077"),
        "its address is ${{up_addr}} to the others"
    );
}

/// The specs shipped under bench/specs parse.
#[test]
fn shipped_specs_parse() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/specs");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("bench/specs") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "toml") {
            spec::load(&p).unwrap_or_else(|e| panic!("{e}"));
            n += 1;
        }
    }
    assert!(
        n >= 4,
        "expected the shipped specs and the example, found {n}"
    );
}

/// An https target with its TLS settings, and a scenario resuming sessions.
#[test]
fn https_targets() {
    let text = with(
        "url = \"http://127.0.0.1:8081\"",
        "url = \"https://127.0.0.1:8443\"\ntls = { cacert = \"${spec_dir}/ca.pem\" }",
    )
    .replacen(
        "keepalive = false",
        "keepalive = false\ntls_resume = true",
        1,
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tls.toml");
    std::fs::write(&path, text).unwrap();
    let spec = spec::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let b = &spec.targets[1];
    assert_eq!(b.url, "https://127.0.0.1:8443");
    assert_eq!(b.tls.cacert.as_deref(), Some("${spec_dir}/ca.pem"));
    assert!(!b.tls.insecure);
    assert!(!spec.targets[0].url.starts_with("https"));
    assert!(spec.scenarios[1].tls_resume);
    assert!(!spec.scenarios[0].tls_resume);
}

/// Replaces `from` (which must occur) in the valid spec.
fn with(from: &str, to: &str) -> String {
    assert!(VALID.contains(from), "{from}");
    VALID.replacen(from, to, 1)
}

fn line_of(text: &str, needle: &str) -> usize {
    let at = text.find(needle).unwrap_or_else(|| panic!("{needle}"));
    text[..at].matches('\n').count() + 1
}

/// Each kind of error names the file, the line and the field.
#[test]
fn errors_name_file_line_and_field() {
    // (what, spec text, line holding this text, field, words in the message)
    let cases: Vec<(&str, String, &str, &str, &str)> =
        vec![
        (
            "TOML syntax",
            with("rounds = 2", "rounds = = 2"),
            "rounds = = 2",
            "",
            "expected",
        ),
        (
            "unknown field",
            with("rounds = 2", "roundz = 2"),
            "roundz",
            "run.roundz",
            "unknown field `roundz`",
        ),
        (
            "wrong type",
            with("rounds = 2", "rounds = \"two\""),
            "rounds = \"two\"",
            "run.rounds",
            "invalid type",
        ),
        (
            "bad duration",
            with("duration = \"1.5s\"", "duration = \"1.5 fortnights\""),
            "1.5 fortnights",
            "run.duration",
            "not a duration",
        ),
        (
            "duration of wrong shape",
            with("warmup = \"500ms\"", "warmup = [1]"),
            "warmup = [1]",
            "run.warmup",
            "must be a duration",
        ),
        (
            "zero step",
            with("step = 10", "step = 0"),
            "step = 0",
            "run.levels",
            "step must be at least 1",
        ),
        (
            "level too high",
            with("levels = [1, 16]", "levels = [1, 2000000]"),
            "levels = [1, 2000000]",
            "scenario[0].levels",
            "2000000 connections",
        ),
        (
            "missing url",
            with("url = \"http://127.0.0.1:8081\"\n", ""),
            "[[target]]\nname = \"b\"",
            "target[1]",
            "missing field `url`",
        ),
        (
            "command and pid",
            with("pid = 1", "pid = 1\ncommand = \"x\""),
            "pid = 1",
            "target[1].pid",
            "either command or pid",
        ),
        (
            "not http",
            with("http://127.0.0.1:8081", "ftp://127.0.0.1:8081"),
            "ftp://",
            "target[1].url",
            "http://",
        ),
        (
            "tls on a clear-text target",
            with(
                "url = \"http://127.0.0.1:8081\"",
                "url = \"http://127.0.0.1:8081\"\ntls = { insecure = true }",
            ),
            "tls = { insecure",
            "target[1].tls",
            "https:// URLs only",
        ),
        (
            "tls both ways",
            with(
                "url = \"http://127.0.0.1:8081\"",
                "url = \"https://127.0.0.1:8081\"\ntls = { insecure = true, cacert = \"ca.pem\" }",
            ),
            "tls = { insecure",
            "target[1].tls",
            "not both",
        ),
        (
            "unknown tls key",
            with(
                "url = \"http://127.0.0.1:8081\"",
                "url = \"https://127.0.0.1:8081\"\ntls = { verify = false }",
            ),
            "tls = { verify",
            "target[1].tls.verify",
            "unknown field `verify`",
        ),
        (
            "unknown target",
            with("targets = [\"a\"]", "targets = [\"a\", \"zz\"]"),
            "\"zz\"",
            "scenario[1].targets[1]",
            "no target named \"zz\"",
        ),
        (
            "unknown baseline",
            with("baseline = \"b\"", "baseline = \"q\""),
            "baseline = \"q\"",
            "run.baseline",
            "no target named \"q\"",
        ),
        (
            "pipeline without keep-alive",
            with("pipeline = 16", "pipeline = 16\nkeepalive = false"),
            "pipeline = 16",
            "scenario[0].pipeline",
            "keepalive",
        ),
        (
            "HTTP/2 and HTTP/3 at once",
            with("pipeline = 16", "h2 = 10\nh3 = 10"),
            "h3 = 10",
            "scenario[0].h3",
            "not both",
        ),
        (
            "no HTTP/3 streams",
            with("pipeline = 16", "h3 = 0"),
            "h3 = 0",
            "scenario[0].h3",
            "1–10000",
        ),
        (
            "bad cpus",
            with("cpus = [0]", "cpus = \"zero\""),
            "cpus = \"zero\"",
            "target[0].cpus",
            "CPU numbers",
        ),
        (
            "bad header",
            with("Accept = \"text/plain\"", "\"Bad Header\" = \"x\""),
            "\"Bad Header\"",
            "scenario[0].headers.Bad Header",
            "header names",
        ),
        (
            "zero rounds",
            with("rounds = 2", "rounds = 0"),
            "rounds = 0",
            "run.rounds",
            "at least 1",
        ),
        (
            "bad readiness path",
            with("http = \"/health\"", "http = \"health\""),
            "http = \"health\"",
            "target[0].ready.http",
            "starting with /",
        ),
        (
            "zero readiness timeout",
            with("timeout = \"5s\" }", "timeout = \"0s\" }"),
            "timeout = \"0s\"",
            "target[0].ready.timeout",
            "longer than 0",
        ),
        (
            "service without cpus",
            with("cpus = [1]\n", ""),
            "[[service]]",
            "service[0].cpus",
            "the CPUs to pin it to",
        ),
        (
            "service on a target's CPU",
            with("cpus = [1]", "cpus = [0, 1]"),
            "cpus = [0, 1]",
            "service[0].cpus",
            "CPU 0 is target \"a\"'s",
        ),
        (
            "service address without a port",
            with("addr = \"127.0.0.1:18077\"", "addr = \"127.0.0.1\""),
            "addr = \"127.0.0.1\"",
            "service[0].addr",
            "not host:port",
        ),
        (
            "service named like a target",
            with("name = \"up\"", "name = \"b\""),
            "name = \"b\"\ncommand = [\"upstream",
            "service[0].name",
            "already the name of a target",
        ),
        (
            "service address variable taken by [vars]",
            with("port = \"18090\"", "port = \"18090\"\nup_addr = \"x\""),
            "name = \"up\"",
            "service[0].name",
            "[vars] already defines up_addr",
        ),
        (
            "service with a url",
            with("addr = \"127.0.0.1:18077\"", "url = \"http://127.0.0.1:18077\""),
            "url = \"http://127.0.0.1:18077\"",
            "service[0].url",
            "unknown field `url`",
        ),
        (
            "service without a command",
            with("command = [\"upstream\", \"--port\", \"18077\"]\n", ""),
            "[[service]]",
            "service[0]",
            "missing field `command`",
        ),
        (
            "a framing header",
            with("Accept = \"text/plain\"", "Content-Length = \"5\""),
            "Content-Length",
            "scenario[0].headers.Content-Length",
            "frames each request",
        ),
    ];
    for (what, text, at, field, words) in cases {
        let e = spec::parse(Path::new("bench/specs/x.toml"), &text).expect_err(what);
        assert_eq!(e.file, Path::new("bench/specs/x.toml"), "{what}");
        assert_eq!(e.line, Some(line_of(&text, at)), "{what}: {e}");
        if !field.is_empty() {
            assert_eq!(e.field.as_deref(), Some(field), "{what}: {e}");
        }
        assert!(e.message.contains(words), "{what}: {e}");
        let shown = e.to_string();
        assert!(
            shown.starts_with(&format!("bench/specs/x.toml:{}", line_of(&text, at))),
            "{what}: {shown}"
        );
    }
}

/// A missing file is an error naming it, not a panic.
#[test]
fn missing_file() {
    let e = spec::load(Path::new("/nonexistent/spec.toml")).expect_err("missing");
    assert!(
        e.to_string()
            .starts_with("/nonexistent/spec.toml: cannot read"),
        "{e}"
    );
}
