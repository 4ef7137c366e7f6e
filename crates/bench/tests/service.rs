//! Services (`[[service]]`), with real processes: an upstream started once before the first
//! target and kept for every target, its address in the targets' commands, its CPU neither the
//! server's nor a neighbour's, its record in the results; and it is always stopped — at the end,
//! when it is not ready (before any target starts), when it dies mid-sweep, and on Ctrl-C.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lowlat_bench::error::BenchError;
use lowlat_bench::runner::{self, RunOptions};

fn opts(dir: &Path) -> RunOptions {
    RunOptions {
        out_dir: dir.join("out"),
        progress: false,
        force: true,
        perf_counters: false,
        syscalls: false,
        tracefs: None,
    }
}

/// Two lowlat servers proxy `/up/plaintext` to one ceiling started as a service: it starts once,
/// before both, on the CPU it was given; both reach it through `${upstream_addr}`; its CPU is
/// not charged to a neighbour; the results record it; and it is gone after the run.
#[test]
fn upstream_service_serves_every_target() {
    let dir = common::scratch("svc-proxy");
    // A process name of its own, so that "not a neighbour" is about this one.
    let ceiling = common::ceiling(&dir, "svc-ceiling");
    let up = common::free_port();
    let (a, b) = (common::free_port(), common::free_port());
    let serve = common::lowlat_serve();
    let target = |name: &str, port: u16| {
        format!(
            r#"
[[target]]
name = "{name}"
command = ["{serve}", "--workers", "1", "--listen", "127.0.0.1:{port}", "--proxy", "/up/=http://${{upstream_addr}}"]
url = "http://127.0.0.1:{port}"
ready = {{ http = "/up/plaintext" }}
"#,
            serve = serve.display()
        )
    };
    let spec = common::write_spec(
        &dir,
        "proxy.toml",
        &format!(
            r#"
[vars]
up_port = "{up}"
[run]
retries = 0
duration = "1s"
warmup = 0
pause = "100ms"
levels = [4]
[[service]]
name = "upstream"
# Each start leaves a line in starts.log: a service starts once, whatever the targets.
command = "echo started >> {dir}/starts.log; exec {ceiling} ${{up_port}}"
addr = "127.0.0.1:${{up_port}}"
cpus = [0]
ready = {{ http = "/plaintext", timeout = "10s" }}
{a}{b}
[[scenario]]
name = "proxy"
path = "/up/plaintext"
"#,
            dir = dir.display(),
            ceiling = ceiling.display(),
            a = target("a", a),
            b = target("b", b),
        ),
    );
    let spec = lowlat_bench::spec::load(&spec).unwrap();
    let path = runner::run(
        &spec,
        &lowlat_bench::load::Engine,
        &opts(&dir),
        &AtomicBool::new(false),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let res = lowlat_bench::results::read(&path).unwrap();
    assert_eq!(res.status, "complete");
    assert_eq!(
        std::fs::read_to_string(dir.join("starts.log")).unwrap(),
        "started\n",
        "the service starts once for both targets"
    );
    assert_eq!(res.rows.len(), 2);
    for row in &res.rows {
        assert!(
            row.requests > 0 && row.errors == 0 && row.status_classes[1] == row.requests,
            "every request answered 200 through the upstream: {row:?}"
        );
        assert!(
            !row.foreign_top.iter().any(|t| t.starts_with("svc-ceiling")),
            "the service is not a neighbour: {:?}",
            row.foreign_top
        );
    }
    let rec = &res.header.services;
    assert_eq!(rec.len(), 1, "{rec:?}");
    assert_eq!(rec[0].name, "upstream");
    assert_eq!(rec[0].addr, format!("127.0.0.1:{up}"));
    assert_eq!(rec[0].cpus, vec![0]);
    assert_eq!(rec[0].ready, "http /plaintext");
    assert!(
        rec[0]
            .command
            .last()
            .unwrap()
            .ends_with(&format!("svc-ceiling {up}")),
        "the command as run, variables expanded: {:?}",
        rec[0].command
    );
    assert!(
        res.target_checks
            .iter()
            .any(|c| c.name == "service (upstream)" && c.value.contains("CPUs [0]")),
        "{:?}",
        res.target_checks
    );
    // results.json with a service still matches its schema.
    let schema: serde_json::Value = serde_json::from_str(lowlat_bench::results::SCHEMA).unwrap();
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:#?}");
    common::assert_none_survive(&format!("svc-ceiling {up}"));
}

/// A service that never becomes ready stops the run before any target starts, with an error
/// that names it as a service; nothing of it survives.
#[test]
fn service_not_ready_stops_before_any_target() {
    let dir = common::scratch("svc-ready");
    let (up, port) = (common::free_port(), common::free_port());
    let spec = common::write_spec(
        &dir,
        "r.toml",
        &format!(
            r#"
[run]
retries = 0
duration = "1s"
levels = [1]
[[service]]
name = "mute"
command = "sleep 52.718 & exec sleep 52.719"
addr = "127.0.0.1:{up}"
cpus = [0]
ready = {{ timeout = "1s" }}
[[target]]
name = "t"
command = "touch {dir}/target-started; exec sleep 52.72"
url = "http://127.0.0.1:{port}"
[[scenario]]
name = "s"
path = "/"
"#,
            dir = dir.display()
        ),
    );
    let spec = lowlat_bench::spec::load(&spec).unwrap();
    let err = runner::run(
        &spec,
        &lowlat_bench::load::Engine,
        &opts(&dir),
        &AtomicBool::new(false),
    )
    .expect_err("not ready");
    assert!(matches!(err, BenchError::NotReady { .. }), "{err}");
    let msg = err.to_string();
    for part in [
        "service mute was not ready within 1.0 s",
        &format!("TCP connect to http://127.0.0.1:{up}"),
        "mute.log",
    ] {
        assert!(msg.contains(part), "{msg:?} lacks {part:?}");
    }
    assert!(
        !dir.join("target-started").exists(),
        "no target starts without its services"
    );
    common::assert_none_survive("52.71");
    common::assert_none_survive("52.72");
}

/// A service that exits mid-sweep stops the sweep: the error names the service, the target and
/// the rest of the service's processes are stopped, and finished rows are kept.
#[test]
fn service_dying_mid_sweep_stops_everything() {
    common::need("python3");
    let dir = common::scratch("svc-dies");
    let (up, port) = (common::free_port(), common::free_port());
    let spec = common::write_spec(
        &dir,
        "d.toml",
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
[[service]]
name = "origin"
command = "sleep 63.1 & python3 -m http.server {up} --bind 127.0.0.1 -d {dir} & while [ ! -e {dir}/die ]; do sleep 0.05; done; exit 4"
addr = "127.0.0.1:{up}"
cpus = [0]
ready = {{ http = "/" }}
[[target]]
name = "py"
command = ["python3", "-m", "http.server", "{port}", "--bind", "127.0.0.1", "-d", "{dir}"]
url = "http://127.0.0.1:{port}"
ready = {{ http = "/" }}
[[scenario]]
name = "s"
path = "/"
"#,
            dir = dir.display()
        ),
    );
    let spec = lowlat_bench::spec::load(&spec).unwrap();
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
    .expect_err("service exits");
    when.join().unwrap();
    assert!(matches!(err, BenchError::Exited { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("service origin exited (exit status: 4)"),
        "{err}"
    );
    common::assert_none_survive("63.1");
    common::assert_none_survive(&format!("http.server {up}"));
    common::assert_none_survive(&format!("http.server {port}"));
    let res = lowlat_bench::results::read(&dir.join("out/results.json")).unwrap();
    assert!(
        res.status.starts_with("failed: service origin exited"),
        "{}",
        res.status
    );
    assert!(!res.rows.is_empty(), "rows before the failure are kept");
}

/// Ctrl-C (the stop flag) stops the services with the target.
#[test]
fn interrupt_stops_services() {
    common::need("python3");
    let dir = common::scratch("svc-interrupt");
    let (up, port) = (common::free_port(), common::free_port());
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
[[service]]
name = "origin"
command = ["python3", "-m", "http.server", "{up}", "--bind", "127.0.0.1", "-d", "{dir}"]
addr = "127.0.0.1:{up}"
cpus = "0"
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
    common::assert_none_survive(&format!("http.server {up}"));
    common::assert_none_survive(&format!("http.server {port}"));
}
