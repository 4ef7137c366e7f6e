//! What the tests of the `lowlat` binary share: starting `lowlat serve` as a process and
//! reading the addresses from its banner; starting the proxy's upstreams ([`upstream`]); the
//! cache's counting origin ([`origin`]); an
//! HTTP/3 client ([`h3`]); the small client-side helpers (curl, a response head's fields, a free
//! port, TCP sockets by state, a command's JSON output, what `--check-config` says); `lowlat
//! serve` with a TLS listener and curl over HTTPS to it.

#![allow(dead_code)]

pub mod h3;
pub mod origin;
pub mod upstream;

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, ChildStderr, Command, Output, Stdio};

pub const BIN: &str = env!("CARGO_BIN_EXE_lowlat");

/// Spawns `cmd` (a `lowlat serve`, perhaps behind a shell) with stderr piped, and reads stderr
/// up to the "listening on" line. Returns the child, the rest of its stderr, and every line read
/// (warnings, the metrics address, the banner last).
// The child is returned to the caller, who waits for it (or kills it when dropped).
#[allow(clippy::zombie_processes)]
pub fn spawn_serve(mut cmd: Command) -> (Child, BufReader<ChildStderr>, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn lowlat");
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "no banner: {seen}"
        );
        seen.push_str(&line);
        if line.contains("listening on") {
            return (child, stderr, seen);
        }
    }
}

/// The address after `scheme` (`http://`, `https://`) on the "listening on" line.
pub fn address(stderr: &str, scheme: &str) -> SocketAddr {
    let banner = stderr
        .lines()
        .rfind(|l| l.contains("listening on"))
        .unwrap_or(stderr);
    banner
        .split_whitespace()
        .find_map(|w| w.strip_prefix(scheme))
        .unwrap_or_else(|| panic!("no {scheme} address in {banner:?}"))
        .parse()
        .unwrap()
}

/// Which end of a TCP socket [`tcp_sockets`] matches a port against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Local,
    Remote,
    Either,
}

/// TCP sockets whose `end` port is `port`, in one of `states` (hex, as /proc/net/tcp writes
/// them: 01 established, 08 close-wait): read from /proc/net/tcp and tcp6, so no outside tool
/// is needed.
pub fn tcp_sockets(port: u16, end: End, states: &[&str]) -> usize {
    let mut n = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            // sl, local_address (ADDR:PORT in hex), rem_address, st
            let cols: Vec<&str> = line.split_whitespace().collect();
            let port_of = |i: usize| {
                cols.get(i)
                    .and_then(|a| a.rsplit_once(':'))
                    .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
            };
            let ours = match end {
                End::Local => port_of(1) == Some(port),
                End::Remote => port_of(2) == Some(port),
                End::Either => port_of(1) == Some(port) || port_of(2) == Some(port),
            };
            if ours && cols.get(3).is_some_and(|s| states.contains(s)) {
                n += 1;
            }
        }
    }
    n
}

/// Sockets on local port `port` in TCP state CLOSE-WAIT (the peer closed, this side has not).
pub fn close_wait_on(port: u16) -> usize {
    tcp_sockets(port, End::Local, &["08"])
}

/// Established TCP connections whose remote port is `port` (a proxy's, to an upstream).
pub fn connections_to(port: u16) -> usize {
    tcp_sockets(port, End::Remote, &["01"])
}

/// A port free now (bound, then released): nothing listens on it, or a setting takes it before
/// the start.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// What `lowlat serve --check-config` said: its exit code and what it printed.
pub struct Checked {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// `lowlat serve --check-config`, with `--config file` when given and `flags` after it.
pub fn check_config(file: Option<&std::path::Path>, flags: &[&str]) -> Checked {
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--check-config"]);
    if let Some(file) = file {
        cmd.arg("--config").arg(file);
    }
    let out = cmd
        .args(flags)
        .output()
        .expect("run lowlat serve --check-config");
    Checked {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `lowlat serve` listening in clear and over TLS (free ports) with `cert`, for more flags.
pub fn tls_serve_command(cert: &lowlat_testkit::pki::CertFiles) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--tls-listen",
        "127.0.0.1:0",
    ])
    .arg("--cert")
    .arg(&cert.cert)
    .arg("--key")
    .arg(&cert.key);
    cmd
}

/// `lowlat serve` with one worker, in clear and over TLS with `cert` (see [`Served::tls_addr`]),
/// and `extra`.
pub fn serve_tls(cert: &lowlat_testkit::pki::CertFiles, extra: &[&str]) -> Served {
    let mut cmd = tls_serve_command(cert);
    cmd.args(["--workers", "1"]).args(extra);
    Served::spawn(cmd)
}

/// `text` written to `dir/name`, then [`check_config`] of that file.
pub fn check_config_text(dir: &std::path::Path, name: &str, text: &str) -> Checked {
    let file = dir.join(name);
    std::fs::write(&file, text).unwrap();
    check_config(Some(&file), &[])
}

/// curl over HTTPS to `https://NAME:PORT{path}`, the name resolved to 127.0.0.1 and the
/// server's certificate checked against `ca`, with `args` before the URL (another URL of the
/// same name among them is fetched too).
pub fn curl_https(
    port: u16,
    ca: &std::path::Path,
    name: &str,
    path: &str,
    args: &[&str],
) -> Output {
    let resolve = format!("{name}:{port}:127.0.0.1");
    Command::new("curl")
        .args(["-sS", "--max-time", "20", "--resolve", &resolve, "--cacert"])
        .arg(ca)
        .args(args)
        .arg(format!("https://{name}:{port}{path}"))
        .output()
        .expect("run curl (scripts/test-deps.sh installs it)")
}

/// curl with `args`, silent but for errors, bounded in time.
pub fn curl(args: &[&str]) -> Output {
    Command::new("curl")
        .args(["-sS", "--max-time", "30"])
        .args(args)
        .output()
        .expect("run curl (scripts/test-deps.sh installs it)")
}

/// The value of the series `name` (no labels) on the `/metrics` of `addr`, scraped now.
pub fn metric(addr: &str, name: &str) -> u64 {
    let out = curl(&[&format!("http://{addr}/metrics")]);
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}")) as u64
}

/// The value of the first field `name` (case-insensitive) in a response head.
pub fn field<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Where `needle` first stands in `hay`.
pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Runs `cmd` (no standard input), which must succeed, and parses its standard output as JSON;
/// a failure says the command, its exit status, what it printed and its stderr.
pub fn json_output(cmd: &mut Command) -> serde_json::Value {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{cmd:?} printed {stdout:?}: {e}"))
}

/// Sends SIGTERM to `child` and returns how long it took to exit (panics after `limit`).
pub fn stop_and_time(child: &mut Child, limit: std::time::Duration) -> std::time::Duration {
    let start = std::time::Instant::now();
    let ok = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -TERM");
    loop {
        if child.try_wait().unwrap().is_some() {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "still running {limit:?} after SIGTERM"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// A running `lowlat serve` whose stderr is collected on a thread (so that the pipe never fills)
/// and printed when a test fails; its addresses are read from the banner.
pub struct Served {
    pub child: Child,
    pub addr: SocketAddr,
    /// The TLS listener's address, when there is one.
    pub tls_addr: Option<SocketAddr>,
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Served {
    /// `lowlat serve --listen 127.0.0.1:0` with `args`, one worker unless they say otherwise.
    pub fn start<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> Served {
        let args: Vec<std::ffi::OsString> =
            args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let mut cmd = Command::new(BIN);
        cmd.args(["serve", "--listen", "127.0.0.1:0"]);
        if !args.iter().any(|a| a == "--workers") {
            cmd.args(["--workers", "1"]);
        }
        cmd.args(&args);
        Served::spawn(cmd)
    }

    /// Starts `cmd`, a `lowlat serve` made by the caller.
    pub fn spawn(cmd: Command) -> Served {
        let (child, mut stderr, banner) = spawn_serve(cmd);
        let addr = address(&banner, "http://");
        let tls_addr = banner
            .contains("https://")
            .then(|| address(&banner, "https://"));
        let log = std::sync::Arc::new(std::sync::Mutex::new(banner));
        let sink = std::sync::Arc::clone(&log);
        std::thread::spawn(move || {
            let mut line = String::new();
            while stderr.read_line(&mut line).is_ok_and(|n| n > 0) {
                sink.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        Served {
            child,
            addr,
            tls_addr,
            log,
        }
    }

    /// SIGTERM, and waits (15 s at most) for it to exit: what it writes on the way out (the
    /// access log) is then on disk.
    pub fn stop(mut self) {
        stop_and_time(&mut self.child, std::time::Duration::from_secs(15));
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything it wrote to stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// The address of its metrics listener (`--metrics`), from its log.
    pub fn metrics_addr(&self) -> SocketAddr {
        metrics_addr(&self.log())
    }

    /// Sends it `kill -SIG`.
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig}");
    }

    /// Waits a second while `client` sends to an upstream that reads nothing, then asserts that
    /// the peak memory (VmHWM) is less than 8 MiB above `warm_kib`: the client is held back, not
    /// buffered.
    pub fn assert_held_back(&self, warm_kib: u64, client: &str) {
        std::thread::sleep(std::time::Duration::from_secs(1));
        let grew = self.status_kib("VmHWM:").saturating_sub(warm_kib);
        assert!(
            grew < 8 * 1024,
            "the proxy grew by {grew} KiB while its upstream read nothing from {client}"
        );
    }

    /// A field of /proc/PID/status in KiB (`VmRSS:`, `VmHWM:`).
    pub fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in {status}"))
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- log of lowlat serve ---\n{}", self.log());
        }
    }
}

/// The lines of the file at `path` once it holds at least `count` of them (an access log is
/// written a moment after the answer it records); fails after five seconds with what it held.
pub fn lines_of(path: &std::path::Path, count: usize) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().count() >= count {
            return text.lines().map(str::to_owned).collect();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{count} lines awaited in {}; it holds {text:?}",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The address a `lowlat serve` log gives for its metrics listener ("metrics on http://ADDR/").
pub fn metrics_addr(log: &str) -> SocketAddr {
    log.lines()
        .find_map(|l| l.split("metrics on http://").nth(1))
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no metrics address in {log}"))
        .parse()
        .unwrap()
}
