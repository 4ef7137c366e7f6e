//! `lowlat serve` as a real process: startup line, signals and graceful shutdown, running out of
//! file descriptors, and one-line errors for bad input.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::BIN;

/// A `lowlat serve` child process and the address it printed.
struct ServeProcess {
    child: Child,
    addr: SocketAddr,
}

impl ServeProcess {
    /// Starts `sh -c "<prefix> exec lowlat serve <args>"` on an ephemeral port.
    fn start(shell_prefix: &str, args: &str) -> Self {
        let script = format!("{shell_prefix} exec {BIN} serve --listen 127.0.0.1:0 {args}");
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(script);
        let (child, _, banner) = support::spawn_serve(cmd);
        let addr = support::address(&banner, "http://");
        Self { child, addr }
    }

    fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the exit status, at most `limit`.
    fn wait(&mut self, limit: Duration) -> Option<i32> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// CPU seconds used so far (utime + stime).
    fn cpu_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<&str> = after_comm.split(' ').collect();
        let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
        ticks / 100.0
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn get_plaintext(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /plaintext HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// SIGTERM with a request in flight: the request is answered, then the process exits 0.
#[test]
fn sigterm_finishes_request_in_flight_and_exits_zero() {
    let mut server = ServeProcess::start("", "--workers 2");
    assert!(get_plaintext(server.addr).ends_with("Hello, World!"));
    let mut busy = TcpStream::connect(server.addr).unwrap();
    busy.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    busy.write_all(b"GET /plaintext HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    server.signal("TERM");
    std::thread::sleep(Duration::from_millis(100));
    busy.write_all(b"\r\n").unwrap();
    let mut reply = String::new();
    busy.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
    assert!(reply.contains("Connection: close"));
    assert_eq!(server.wait(Duration::from_secs(5)), Some(0));
}

/// SIGINT on an idle server exits 0 promptly.
#[test]
fn sigint_exits_zero() {
    let mut server = ServeProcess::start("", "--workers 1");
    server.signal("INT");
    assert_eq!(server.wait(Duration::from_secs(3)), Some(0));
}

/// Out of file descriptors: the server neither spins nor dies, and serves again once
/// descriptors free up.
#[test]
fn emfile_does_not_spin_or_kill() {
    let server = ServeProcess::start("ulimit -n 32;", "--workers 1");
    // Far more connections than descriptors; the extra ones wait in the backlog.
    let conns: Vec<TcpStream> = (0..80)
        .map(|_| TcpStream::connect(server.addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let before = server.cpu_seconds();
    std::thread::sleep(Duration::from_secs(1));
    let used = server.cpu_seconds() - before;
    assert!(
        used < 0.3,
        "the server burned {used:.2}s of CPU in 1s while out of descriptors"
    );
    drop(conns);
    std::thread::sleep(Duration::from_millis(500));
    assert!(get_plaintext(server.addr).ends_with("Hello, World!"));
}

/// Bad input gets one line and a non-zero exit; never a panic.
#[test]
fn bad_input_one_line_errors() {
    let run = |args: &[&str]| {
        let out = Command::new(BIN).args(args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Usage errors: exit 2 from the argument parser.
    for args in [
        &["serve", "--workers", "0"][..],
        &["serve", "--listen", "nonsense"],
        &["serve", "--max-body", "12q"],
        &["serve", "--keepalive-timeout", "0s"],
        &["serve", "--max-headers", "1000"],
    ] {
        let (code, err) = run(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("lowlat serve: "), "{args:?}: {err}");
    }
    // The same for every subcommand, and for no subcommand at all.
    for args in [
        &["load", "-c", "zero", "http://127.0.0.1:1/"][..],
        &["load", "--no-such-flag"],
        &["bench", "--levels"],
        &["frobnicate"],
    ] {
        let (code, err) = run(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("lowlat"), "{args:?}: {err}");
    }
    // More connections than the process may open: refused before the run, in one line.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n 256 && exec {BIN} load -c 1000 -d1s http://127.0.0.1:9/"
        ))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("open files"), "{err}");
    // Help is not an error.
    let out = Command::new(BIN)
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("--workers"));
    // A port in use by another socket: exit 1, one line.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let (code, err) = run(&["serve", "--listen", &format!("127.0.0.1:{port}")]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.starts_with("lowlat serve: cannot bind"), "{err}");
    // The metrics address taken: the line says it is the metrics listener's.
    let (code, err) = run(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--metrics",
        &format!("127.0.0.1:{port}"),
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.lines()
            .any(|l| l.starts_with("lowlat serve: cannot bind the metrics listener (--metrics)")),
        "{err}"
    );
}

/// A port another lowlat already serves is refused, not silently shared through SO_REUSEPORT.
#[test]
fn second_server_on_same_port_refused() {
    let first = ServeProcess::start("", "--workers 1");
    let out = Command::new(BIN)
        .args(["serve", "--listen", &first.addr.to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("lowlat serve: cannot bind"), "{err}");
}

/// The error log: JSON lines with a level and a message when asked; at debug level a file that
/// cannot be opened is logged with its errno, at the default level it is not (nothing on the
/// request path above debug); shutdown is logged.
#[test]
fn error_log_levels_and_json() {
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("index.html"), "hi\n").unwrap();
    for (level, expect_debug) in [("debug", true), ("info", false)] {
        let mut child = Command::new(BIN)
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--workers",
                "1",
                "--log-format",
                "json",
            ])
            .args(["--log-level", level, "--root"])
            .arg(root.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let first: serde_json::Value =
            serde_json::from_str(&lines.next().unwrap().unwrap()).expect("a JSON line");
        assert_eq!(first["level"], "INFO");
        let msg = first["fields"]["message"].as_str().unwrap().to_owned();
        let addr: SocketAddr = msg
            .split_whitespace()
            .find_map(|w| w.strip_prefix("http://"))
            .unwrap()
            .parse()
            .unwrap();
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /missing.html HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        assert!(reply.starts_with("HTTP/1.1 404"), "{reply}");
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        assert!(child.wait().unwrap().success());
        let rest: Vec<serde_json::Value> = lines
            .map(|l| serde_json::from_str(&l.unwrap()).expect("every line is JSON"))
            .collect();
        let opened = rest.iter().any(|v| {
            v["level"] == "DEBUG"
                && v["fields"]["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("cannot open"))
                && v["fields"]["errno"] == 2
        });
        assert_eq!(opened, expect_debug, "{level}: {rest:?}");
        assert!(
            rest.iter().any(|v| v["fields"]["message"] == "stopped"),
            "{rest:?}"
        );
    }
}

/// `--config FILE`: the file's settings serve; a flag overrides its key; `--check-config` says
/// ok (exit 0) or lists every problem with its line (exit 1), starting nothing.
#[test]
fn config_file_and_check_config() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("www");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("hello.txt"), "from the config\n").unwrap();
    let cfg = dir.path().join("lowlat.toml");
    std::fs::write(
        &cfg,
        format!(
            "# a site\nlisten = [\"127.0.0.1:0\"]\nworkers = 1\nroot = \"{}\"\nmax_body = \"64k\"\n",
            root.display()
        ),
    )
    .unwrap();
    let out = support::check_config(Some(&cfg), &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("configuration ok"));

    let mut server = ServeProcess::start("", &format!("--config {} --workers 2", cfg.display()));
    let mut s = TcpStream::connect(server.addr).unwrap();
    s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert!(reply.ends_with("from the config\n"), "{reply}");
    server.signal("TERM");
    assert_eq!(server.wait(Duration::from_secs(5)), Some(0));

    let out = support::check_config_text(
        dir.path(),
        "bad.toml",
        "workers = 0\nmax_bodee = \"1m\"\nroot = \"/nonexistent/dir\"\n",
    );
    let err = out.stderr;
    assert_eq!(out.code, Some(1), "{err}");
    assert!(err.contains("bad.toml:1: workers:"), "{err}");
    assert!(
        err.contains("bad.toml:2: max_bodee: unknown key (did you mean `max_body`?)"),
        "{err}"
    );
    // The root is checked too, in the same run, with its line.
    assert!(
        err.contains("bad.toml:3: root: --root /nonexistent/dir:"),
        "{err}"
    );
    assert!(
        err.lines().all(|l| l.starts_with("lowlat serve: ")),
        "{err}"
    );

    // An unknown key, a wrong type and a site's missing root: all three, in line order.
    let out = support::check_config_text(
        dir.path(),
        "sites.toml",
        "autoindex = \"yes\"\ncache_contorl = \"public\"\n\n[[site]]\nserver_names = [\"a.example\"]\nroot = \"/missing/a\"\n\n[[site]]\nserver_names = [\"b.example\"]\nroot = \"/missing/b\"\n",
    );
    let err = out.stderr;
    assert_eq!(out.code, Some(1), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 4, "{err}");
    for (line, want) in lines.iter().zip([
        "sites.toml:1: autoindex: is a switch",
        "sites.toml:2: cache_contorl: unknown key (did you mean `cache_control`?)",
        "sites.toml:6: site[0].root: --root /missing/a:",
        "sites.toml:10: site[1].root: --root /missing/b:",
    ]) {
        assert!(line.contains(want), "{want:?} in {err}");
    }

    // Without a file, the flags alone are checked, and said so.
    let out = support::check_config(None, &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains("configuration ok (command-line flags"),
        "{}",
        out.stdout
    );
}

/// SIGHUP re-reads the config file under load: `lowlat load` running through five reloads sees
/// no error, the next request sees the new settings, and a broken file is refused and the
/// settings in use are kept.
#[test]
fn config_reload_under_load_has_no_errors() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("www");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("a.txt"), "a\n").unwrap();
    let cfg = dir.path().join("lowlat.toml");
    let write = |max_age: u32| {
        std::fs::write(
            &cfg,
            format!(
                "workers = 1\nroot = \"{}\"\ncache_control = \"max-age={max_age}\"\n",
                root.display()
            ),
        )
        .unwrap();
    };
    write(1);
    let mut server = ServeProcess::start("", &format!("--config {}", cfg.display()));
    let url = format!("http://{}/a.txt", server.addr);
    let load = Command::new(BIN)
        .args(["load", "-t1", "-c8", "-d3s", "-q", &url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    for age in 2..7 {
        std::thread::sleep(Duration::from_millis(400));
        write(age);
        server.signal("HUP");
    }
    let out = load.wait_with_output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{report}");
    assert!(!report.contains("Socket errors"), "{report}");
    assert!(!report.contains("Non-2xx"), "{report}");
    std::thread::sleep(Duration::from_millis(200));
    let cache_control = |addr| {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /a.txt HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        reply
            .lines()
            .find_map(|l| l.strip_prefix("Cache-Control: ").map(str::to_owned))
            .unwrap_or_default()
    };
    assert_eq!(cache_control(server.addr), "max-age=6");
    // A broken file: refused, the settings in use stay.
    std::fs::write(&cfg, "cache_control = [\n").unwrap();
    server.signal("HUP");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(cache_control(server.addr), "max-age=6");
    server.signal("TERM");
    assert_eq!(server.wait(Duration::from_secs(5)), Some(0));
}

/// A reload that changes a setting only a restart applies names it (and applies the rest).
#[test]
fn reload_names_the_settings_that_wait_for_a_restart() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("lowlat.toml");
    std::fs::write(&cfg, "workers = 1\nmax_body = \"1m\"\n").unwrap();
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&cfg);
    let (mut child, mut stderr, _) = support::spawn_serve(cmd);
    std::fs::write(&cfg, "workers = 2\nmax_body = \"2m\"\n").unwrap();
    let hup = Command::new("kill")
        .arg("-HUP")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(hup.success());
    let mut line = String::new();
    let mut seen = String::new();
    while stderr.read_line(&mut line).unwrap_or(0) > 0 {
        seen.push_str(&line);
        if line.contains("change only at a restart") {
            break;
        }
        line.clear();
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        line.contains("workers, max_body changed"),
        "no warning naming the keys: {seen}"
    );
}

/// Virtual hosts: `[[site]]` tables chosen by `Host` (any case, with or without a port, a
/// wildcard for one label); a request naming no listed site goes to the first; a site inherits
/// the file's top-level settings of what it serves. Bad sites are refused with their lines.
#[test]
fn sites_by_host() {
    let dir = tempfile::tempdir().unwrap();
    for (site, body) in [("a", "site a\n"), ("b", "site b\n")] {
        let root = dir.path().join(site);
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("index.html"), body).unwrap();
        std::fs::write(root.join("page.txt"), body).unwrap();
    }
    let cfg = dir.path().join("sites.toml");
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    std::fs::write(
        &cfg,
        format!(
            "workers = 1\nmetrics = \"{metrics}\"\ncache_control = \"max-age=60\"\nadd_header = [\"X-Everywhere: yes\"]\n\n[[site]]\nserver_names = [\"a.test\"]\nroot = \"{a}\"\n\n[[site]]\nserver_names = [\"b.test\", \"*.b.test\"]\nroot = \"{b}\"\ncache_control = \"no-store\"\nadd_header = [\"X-Site: b\"]\n",
            a = dir.path().join("a").display(),
            b = dir.path().join("b").display()
        ),
    )
    .unwrap();
    let mut server = ServeProcess::start("", &format!("--config {}", cfg.display()));
    let get = |host: &str| {
        let mut s = TcpStream::connect(server.addr).unwrap();
        write!(
            s,
            "GET /page.txt HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        reply
    };
    assert!(get("a.test").ends_with("site a\n"));
    let b = get("B.TEST:8080");
    assert!(b.ends_with("site b\n"), "{b}");
    assert!(b.contains("Cache-Control: no-store"), "{b}");
    assert!(
        b.contains("\r\nX-Site: b\r\n") && !b.contains("X-Everywhere"),
        "{b}"
    );
    assert!(get("www.b.test").ends_with("site b\n"));
    let other = get("unknown.test");
    assert!(
        other.ends_with("site a\n"),
        "the first site is the default: {other}"
    );
    assert!(
        other.contains("Cache-Control: max-age=60"),
        "inherited: {other}"
    );
    assert!(
        other.contains("\r\nX-Everywhere: yes\r\n"),
        "inherited: {other}"
    );
    // Responses are counted by site, labelled with the site's first name.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let scraped = loop {
        let mut s = TcpStream::connect(metrics).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: m\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        if text.contains("lowlat_responses_total{site=\"b.test\",class=\"2xx\"} 2\n")
            || std::time::Instant::now() > deadline
        {
            break text;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    for line in [
        "lowlat_responses_total{site=\"a.test\",class=\"2xx\"} 2\n",
        "lowlat_responses_total{site=\"b.test\",class=\"2xx\"} 2\n",
        "lowlat_responses_total{site=\"b.test\",class=\"4xx\"} 0\n",
    ] {
        assert!(scraped.contains(line), "{line}: {scraped}");
    }
    server.signal("TERM");
    assert_eq!(server.wait(Duration::from_secs(5)), Some(0));

    let out = support::check_config_text(
        dir.path(),
        "bad.toml",
        "[[site]]\nroot = \"/tmp\"\n\n[[site]]\nserver_names = [\"x.test\"]\nworkers = 3\n",
    );
    let err = out.stderr;
    assert_eq!(out.code, Some(1), "{err}");
    assert!(
        err.contains("bad.toml:1: site[0].server_names: missing"),
        "{err}"
    );
    assert!(
        err.contains("bad.toml:6: site[1].workers: unknown key in a site"),
        "{err}"
    );
}
