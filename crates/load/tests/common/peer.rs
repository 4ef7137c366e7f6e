//! Outside servers run for a test (nginx, h2o): their files written in a temporary directory,
//! the process started, waited for on its port, killed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running outside server.
pub struct Peer {
    child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl Peer {
    /// Starts the first of `candidates` that exists (else: install it with
    /// scripts/test-deps.sh) with the arguments `configure(dir, port)` returns after writing
    /// its files into `dir`; waits until `port` accepts. `dir/error.log` is shown if it does
    /// not start.
    pub fn start(candidates: &[&str], configure: impl FnOnce(&Path, u16) -> Vec<String>) -> Self {
        let bin = candidates
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
            .unwrap_or_else(|| {
                panic!(
                    "{} is not installed: run scripts/test-deps.sh",
                    candidates[0]
                )
            });
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let args = configure(dir.path(), port);
        let child = Command::new(&bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{} did not start: {}",
                bin.display(),
                std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self { child, port, dir }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
