//! Targets are always stopped: after a readiness timeout (which says clearly what it waited
//! for), when a target dies mid-sweep, when the load generator fails, and when the run is
//! interrupted — and in every case no process of the target survives and finished rows are kept.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lowlat_bench::error::BenchError;
use lowlat_bench::load::{LoadDriver, LoadOutcome, LoadPlan};
use lowlat_bench::runner::{self, RunOptions};

fn opts(dir: &std::path::Path) -> RunOptions {
    RunOptions {
        out_dir: dir.join("out"),
        progress: false,
        force: true,
        perf_counters: false,
        syscalls: false,
        tracefs: None,
    }
}

/// A target that never listens: the error says which check, how long, and where its output is;
/// the target and its children are gone.
#[test]
fn readiness_timeout_is_a_clear_error() {
    let dir = common::scratch("ready");
    let port = common::free_port();
    let spec = common::write_spec(
        &dir,
        "ready.toml",
        &format!(
            r#"
[run]
retries = 0
duration = "1s"
levels = [1]
[[target]]
name = "mute"
command = "sleep 31.4159 & exec sleep 31.4158"
url = "http://127.0.0.1:{port}"
ready = {{ http = "/health", timeout = "1s" }}
[[scenario]]
name = "s"
path = "/"
"#
        ),
    );
    let spec = lowlat_bench::spec::load(&spec).unwrap();
    let t0 = Instant::now();
    let err = runner::run(
        &spec,
        &lowlat_bench::load::Engine,
        &opts(&dir),
        &AtomicBool::new(false),
    )
    .expect_err("not ready");
    let took = t0.elapsed();
    assert!(matches!(err, BenchError::NotReady { .. }), "{err}");
    let msg = err.to_string();
    for part in [
        "target mute was not ready within 1.0 s",
        &format!("GET http://127.0.0.1:{port}/health"),
        "connect",
        "mute.log",
    ] {
        assert!(msg.contains(part), "{msg:?} lacks {part:?}");
    }
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(10),
        "{took:?}"
    );
    common::assert_none_survive("31.415");
}

/// The target's main process exits mid-sweep while its children keep running: the sweep stops
/// with an error naming it, every process of the group is killed, and finished rows are kept.
#[test]
fn target_dying_mid_sweep_stops_everything() {
    common::need("python3");
    let dir = common::scratch("dies");
    let port = common::free_port();
    let spec = common::write_spec(
        &dir,
        "dies.toml",
        &format!(
            r#"
[run]
retries = 0
duration = "1s"
warmup = 0
pause = "100ms"
levels = [1, 2, 3, 4]
[loader]
timeout = "2s"
[[target]]
name = "brief"
command = "sleep 41.1 & sleep 41.2 & python3 -m http.server {port} --bind 127.0.0.1 -d {dir} & while [ ! -e {dir}/die ]; do sleep 0.05; done; exit 3"
url = "http://127.0.0.1:{port}"
ready = {{ http = "/", timeout = "10s" }}
[[scenario]]
name = "s"
path = "/"
"#,
            dir = dir.display()
        ),
    );
    let spec = lowlat_bench::spec::load(&spec).unwrap();
    // The main process exits once the first row is written.
    let when = common::after_first_row(&dir, {
        let die = dir.join("die");
        move || std::fs::write(&die, b"").unwrap()
    });
    let err = runner::run(
        &spec,
        &lowlat_bench::load::Engine,
        &opts(&dir),
        &AtomicBool::new(false),
    )
    .expect_err("target exits");
    when.join().unwrap();
    assert!(matches!(err, BenchError::Exited { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("target brief exited (exit status: 3)"),
        "{err}"
    );
    common::assert_none_survive("41.1");
    common::assert_none_survive("41.2");
    common::assert_none_survive(&format!("http.server {port}"));
    let res = lowlat_bench::results::read(&dir.join("out/results.json")).unwrap();
    assert!(
        res.status.starts_with("failed: target brief exited"),
        "{}",
        res.status
    );
    assert!(!res.rows.is_empty(), "rows before the failure are kept");
}

/// A load generator that fails on its second run (the measurement after the warm-up).
struct FailingDriver(std::sync::atomic::AtomicU32);

impl LoadDriver for FailingDriver {
    fn run(&self, plan: &LoadPlan, stop: &AtomicBool) -> Result<LoadOutcome, String> {
        if self.0.fetch_add(1, Ordering::Relaxed) >= 1 {
            return Err("engine exploded".into());
        }
        lowlat_bench::load::Engine.run(plan, stop)
    }
}

/// When the load generator fails, the target is stopped and the error names the measurement.
#[test]
fn load_failure_stops_target() {
    common::need("python3");
    let dir = common::scratch("loadfail");
    let port = common::free_port();
    let spec = common::write_spec(
        &dir,
        "f.toml",
        &format!(
            r#"
[run]
retries = 0
duration = "1s"
warmup = "300ms"
levels = [3]
[[target]]
name = "py"
command = ["python3", "-m", "http.server", "{port}", "--bind", "127.0.0.1", "-d", "{dir}"]
url = "http://127.0.0.1:{port}"
[[scenario]]
name = "index"
path = "/"
"#,
            dir = dir.display()
        ),
    );
    let spec = lowlat_bench::spec::load(&spec).unwrap();
    let err = runner::run(
        &spec,
        &FailingDriver(0.into()),
        &opts(&dir),
        &AtomicBool::new(false),
    )
    .expect_err("load fails");
    assert_eq!(
        err.to_string(),
        "load generator against py (index, 3 connections): engine exploded"
    );
    common::assert_none_survive(&format!("http.server {port}"));
}

/// Ctrl-C (the stop flag) ends the sweep early: the error says so, the target is stopped, the
/// rows measured so far are in results.json (status "interrupted") and a report can be drawn.
#[test]
fn interrupt_keeps_finished_rows() {
    common::need("python3");
    let dir = common::scratch("interrupt");
    let port = common::free_port();
    let spec = common::write_spec(
        &dir,
        "i.toml",
        &format!(
            r#"
[run]
retries = 0
duration = "700ms"
warmup = 0
pause = "50ms"
levels = [1, 2, 3, 4, 5, 6]
[[target]]
name = "py"
command = ["python3", "-m", "http.server", "{port}", "--bind", "127.0.0.1", "-d", "{dir}"]
url = "http://127.0.0.1:{port}"
[[scenario]]
name = "index"
path = "/"
"#,
            dir = dir.display()
        ),
    );
    let spec = lowlat_bench::spec::load(&spec).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let t = common::after_first_row(&dir, move || flag.store(true, Ordering::Relaxed));
    let err = runner::run(&spec, &lowlat_bench::load::Engine, &opts(&dir), &stop)
        .expect_err("interrupted");
    t.join().unwrap();
    assert!(matches!(err, BenchError::Interrupted { .. }), "{err}");
    common::assert_none_survive(&format!("http.server {port}"));
    let path = dir.join("out/results.json");
    let res = lowlat_bench::results::read(&path).unwrap();
    assert_eq!(res.status, "interrupted");
    assert!(
        !res.rows.is_empty() && res.rows.len() < 6,
        "{} rows",
        res.rows.len()
    );
    lowlat_bench::report::render(&path, &lowlat_bench::report::ReportOptions::default()).unwrap();
    assert!(dir.join("out/report.html").is_file());
}

/// A results file cut off mid-row keeps every complete row.
#[test]
fn cut_off_results_are_recovered() {
    common::need("python3");
    let dir = common::scratch("cut");
    let port = common::free_port();
    let spec = common::write_spec(
        &dir,
        "c.toml",
        &format!(
            r#"
[run]
retries = 0
duration = "300ms"
warmup = 0
pause = 0
levels = [1, 2]
[[target]]
name = "py"
command = ["python3", "-m", "http.server", "{port}", "--bind", "127.0.0.1", "-d", "{dir}"]
url = "http://127.0.0.1:{port}"
[[scenario]]
name = "index"
path = "/"
"#,
            dir = dir.display()
        ),
    );
    let spec = lowlat_bench::spec::load(&spec).unwrap();
    let path = runner::run(
        &spec,
        &lowlat_bench::load::Engine,
        &opts(&dir),
        &AtomicBool::new(false),
    )
    .unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    // Cut in the middle of the second row, as a kill during a write would.
    let second = text.rfind("\n    {").unwrap();
    std::fs::write(&path, &text[..second + 40]).unwrap();
    let res = lowlat_bench::results::read(&path).unwrap();
    assert_eq!(res.rows.len(), 1);
    assert!(res.status.contains("recovered"));
}

/// A command that does not exist, and a port already taken, are clear errors.
#[test]
fn start_errors_are_clear() {
    let dir = common::scratch("start");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = listener.local_addr().unwrap().port();
    let free = common::free_port();
    for (command, port, want) in [
        (
            "[\"/nonexistent/server\"]",
            free,
            "target t: cannot start \"/nonexistent/server\"",
        ),
        (
            "[\"sleep\", \"5\"]",
            taken,
            "is already in use by another process",
        ),
    ] {
        let spec = common::write_spec(
            &dir,
            "s.toml",
            &format!("[run]\nduration = 1\nlevels = [1]\n[[target]]\nname = \"t\"\ncommand = {command}\nurl = \"http://127.0.0.1:{port}\"\n[[scenario]]\nname = \"s\"\npath = \"/\"\n"),
        );
        let spec = lowlat_bench::spec::load(&spec).unwrap();
        let err = runner::run(
            &spec,
            &lowlat_bench::load::Engine,
            &opts(&dir),
            &AtomicBool::new(false),
        )
        .expect_err(want);
        assert!(err.to_string().contains(want), "{err}");
    }
}

/// An already running server (`pid = N`) is measured — its tree's CPU and memory — and left
/// running afterwards.
#[test]
fn running_pid_is_measured_and_left_alone() {
    common::need("python3");
    let dir = common::scratch("pid");
    let port = common::free_port();
    let mut server = std::process::Command::new("python3")
        .args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "-d",
        ])
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let spec = common::write_spec(
        &dir,
        "p.toml",
        &format!(
            "[run]\nretries = 0\nduration = \"500ms\"\nwarmup = 0\nlevels = [2]\n[[target]]\nname = \"mine\"\npid = {}\nurl = \"http://127.0.0.1:{port}\"\nready = {{ http = \"/\" }}\n[[scenario]]\nname = \"index\"\npath = \"/\"\n",
            server.id()
        ),
    );
    let spec = lowlat_bench::spec::load(&spec).unwrap();
    let run = runner::run(
        &spec,
        &lowlat_bench::load::Engine,
        &opts(&dir),
        &AtomicBool::new(false),
    );
    let alive = server.try_wait().unwrap().is_none();
    let _ = server.kill();
    let _ = server.wait();
    let res = lowlat_bench::results::read(&run.unwrap_or_else(|e| panic!("{e}"))).unwrap();
    assert!(alive, "an attached server must not be stopped");
    let row = &res.rows[0];
    assert!(
        row.requests > 0 && row.rss_peak_kb > 0 && row.server_cpu_pct > 0.0,
        "{row:?}"
    );
}
