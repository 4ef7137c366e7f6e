//! What the tests of the `lowlat` binary share: starting `lowlat serve` as a process and
//! reading the addresses from its banner; starting the proxy's upstreams ([`upstream`]); an
//! HTTP/3 client ([`h3`]).

#![allow(dead_code)]

pub mod h3;
pub mod upstream;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, ChildStderr, Command, Stdio};

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

/// Sockets on local port `port` in TCP state CLOSE-WAIT (the peer closed, this side has not):
/// read from /proc/net/tcp and tcp6, so no outside tool is needed.
pub fn close_wait_on(port: u16) -> usize {
    let mut n = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            // sl, local_address (ADDR:PORT in hex), rem_address, st (08 = CLOSE_WAIT)
            let local_port = cols
                .get(1)
                .and_then(|a| a.rsplit_once(':'))
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port) && cols.get(3) == Some(&"08") {
                n += 1;
            }
        }
    }
    n
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
