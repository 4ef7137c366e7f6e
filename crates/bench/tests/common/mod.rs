//! Helpers shared by lowlat-bench's integration tests: required tools (a missing one fails the
//! test with the command that installs it), free ports, scratch directories, the `lowlat serve`
//! example program, finding processes by a marker in their command line (and waiting for them to
//! be gone), and the ceiling responder built from bench/kit.

#![allow(dead_code)] // each test file uses a different subset

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The path of `tool` on PATH; fails the test when it is missing.
pub fn need(tool: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in
        std::env::split_paths(&path).chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
    {
        let p = dir.join(tool);
        if p.is_file() {
            return p;
        }
    }
    panic!("{tool} is not installed: run scripts/test-deps.sh");
}

/// Makes sure the kernel's syscall tracepoints can be counted: mounts tracefs at
/// /sys/kernel/tracing when it is not mounted and this is root (as `lowlat bench doctor` tells
/// a person to), and fails the test with the reason and the fix otherwise.
pub fn tracefs() {
    use lowlat_bench::syscalls;
    let Err(why) = syscalls::probe(None) else {
        return;
    };
    // Root is uid 0 on /proc/self/status's Uid line (real, effective, saved, fs).
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    if root && why.reason.contains("not mounted") {
        let _ = std::process::Command::new("mount")
            .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
            .status();
    }
    if let Err(why) = syscalls::probe(None) {
        panic!(
            "syscall tracepoints unavailable: {} (fix: {})",
            why.reason, why.fix
        );
    }
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr").port()
}

/// A fresh scratch directory.
pub fn scratch(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "lowlat-bench-test-{}-{name}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create scratch dir");
    d
}

/// The `lowlat-serve` example (built by `cargo test` beside the test binaries).
pub fn lowlat_serve() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let p = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("examples").join("lowlat-serve"))
        .expect("target dir");
    assert!(p.is_file(), "{} missing: run `cargo test -p lowlat-bench` (it builds the examples), or `cargo build -p lowlat-bench --examples` first", p.display());
    p
}

/// Processes whose command line contains `marker`.
pub fn procs_with(marker: &str) -> Vec<(u32, String)> {
    let me = std::process::id();
    lowlat_bench::procfs::all_pids()
        .into_iter()
        .filter(|&p| p != me)
        .filter_map(|p| {
            let raw = std::fs::read(format!("/proc/{p}/cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&raw).replace('\0', " ");
            cmd.contains(marker).then_some((p, cmd))
        })
        .collect()
}

/// Writes a spec file into `dir`.
pub fn write_spec(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write spec");
    p
}

/// Waits briefly for processes to be reaped by init before declaring survivors.
pub fn assert_none_survive(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let left: Vec<_> = procs_with(marker)
            .into_iter()
            .filter(|(p, _)| !is_zombie(*p))
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "processes survived: {left:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `then` on a thread once results.csv holds a row (or after 30 s).
pub fn after_first_row(
    dir: &Path,
    then: impl FnOnce() + Send + 'static,
) -> std::thread::JoinHandle<()> {
    let csv = dir.join("out/results.csv");
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline
            && std::fs::read_to_string(&csv).map_or(0, |s| s.lines().count()) < 2
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        then();
    })
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
    })
}

/// The ceiling responder (bench/kit/ceiling/ceiling.c) compiled with gcc into `dir`, under the
/// name `name` (a process name no other test's process has).
pub fn ceiling(dir: &Path, name: &str) -> PathBuf {
    let gcc = need("gcc");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/kit/ceiling/ceiling.c");
    let exe = dir.join(name);
    let out = std::process::Command::new(gcc)
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run gcc");
    assert!(
        out.status.success(),
        "gcc {}: {}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}
