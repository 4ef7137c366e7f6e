//! What the tests of the `lowlat` binary share: starting `lowlat serve` as a process and
//! reading the addresses from its banner; starting the proxy's upstreams ([`upstream`]).

#![allow(dead_code)]

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
