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
