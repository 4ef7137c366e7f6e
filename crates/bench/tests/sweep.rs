//! A short real sweep — 2 targets (lowlat serve and nginx) × 2 levels × 1 s — producing JSON
//! and CSV with the expected rows, a report whose SVG and HTML parse and name every series, and
//! that report opened in headless Chromium: every chart lays out, the screenshot is not blank,
//! and the console shows no error.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::OnceLock;

use lowlat_bench::report::{self, ReportOptions};
use lowlat_bench::results::{self, BoundBy};
use lowlat_bench::runner::{self, RunOptions};

const TARGETS: [&str; 2] = ["lowlat", "nginx"];
const LEVELS: [u32; 2] = [2, 8];
/// Charts per scenario: req/s, µs/req, latency, CPU, kernel work per request (the tests run
/// where /proc/PID/io of the targets can be read), RSS, CPU over time, RSS over time.
const CHARTS: usize = 8;

const NGINX_CONF: &str = r"daemon off;
master_process on;
worker_processes 1;
pid ${run_dir}/nginx.pid;
error_log ${run_dir}/nginx-error.log error;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path ${run_dir}/body;
    proxy_temp_path ${run_dir}/proxy;
    fastcgi_temp_path ${run_dir}/fastcgi;
    uwsgi_temp_path ${run_dir}/uwsgi;
    scgi_temp_path ${run_dir}/scgi;
    server {
        listen 127.0.0.1:${nginx_port};
        location = /plaintext { default_type text/plain; return 200 'Hello, World!'; }
    }
}
";

struct Swept {
    dir: PathBuf,
    results: PathBuf,
}

/// Runs the sweep once for every test in this file.
fn swept() -> &'static Swept {
    static ONCE: OnceLock<Swept> = OnceLock::new();
    ONCE.get_or_init(|| {
        let nginx = common::need("nginx");
        let serve = common::lowlat_serve();
        common::tracefs();
        let dir = common::scratch("sweep");
        std::fs::write(dir.join("nginx.conf.in"), NGINX_CONF).unwrap();
        let (lp, np) = (common::free_port(), common::free_port());
        let spec_text = format!(
            r#"
name = "ci-sweep"
description = "lowlat and nginx, /plaintext"
[vars]
nginx_port = "{np}"
[run]
retries = 0
duration = "1s"
rounds = 1
warmup = "300ms"
pause = "200ms"
levels = [{l0}, {l1}]
[loader]
threads = 1
cpus = [1]
timeout = "3s"
[[target]]
name = "lowlat"
command = ["{serve}", "--workers", "1", "--listen", "127.0.0.1:{lp}"]
url = "http://127.0.0.1:{lp}"
cpus = [0]
ready = {{ http = "/plaintext", timeout = "10s" }}
[[target]]
name = "nginx"
command = ["{nginx}", "-p", "${{run_dir}}", "-c", "${{run_dir}}/nginx.conf", "-e", "${{run_dir}}/nginx-error.log"]
templates = {{ "nginx.conf" = "${{spec_dir}}/nginx.conf.in" }}
url = "http://127.0.0.1:${{nginx_port}}"
cpus = [0]
[[scenario]]
name = "plaintext"
path = "/plaintext"
headers = {{ Accept = "text/plain" }}
"#,
            l0 = LEVELS[0],
            l1 = LEVELS[1],
            serve = serve.display(),
            nginx = nginx.display(),
        );
        let spec_path = common::write_spec(&dir, "ci.toml", &spec_text);
        let spec = lowlat_bench::spec::load(&spec_path).unwrap_or_else(|e| panic!("{e}"));
        let out = dir.join("out");
        let opts = RunOptions { out_dir: out.clone(), progress: false, force: true, perf_counters: false, syscalls: true, tracefs: None };
        let results = runner::run(&spec, &lowlat_bench::load::Engine, &opts, &AtomicBool::new(false)).unwrap_or_else(|e| panic!("sweep failed: {e}"));
        report::render(&results, &ReportOptions { png: true, ..ReportOptions::default() }).unwrap_or_else(|e| panic!("report failed: {e}"));
        Swept { dir: out, results }
    })
}

/// The JSON has one row per target × level with real measurements; the CSV has the same rows.
#[test]
fn sweep_writes_expected_rows() {
    let s = swept();
    let res = results::read(&s.results).unwrap();
    assert_eq!(res.status, "complete");
    assert_eq!(res.rows.len(), TARGETS.len() * LEVELS.len());
    assert!(
        !res.header.doctor.is_empty(),
        "the environment check is recorded"
    );
    assert_eq!(
        res.target_checks.len(),
        2 * TARGETS.len(),
        "each target's open-file limit and how its system calls were counted are recorded"
    );
    assert!(res.header.machine.cpus >= 1 && !res.header.machine.kernel.is_empty());
    for t in TARGETS {
        for l in LEVELS {
            let r = res
                .rows
                .iter()
                .find(|r| r.target == t && r.connections == l)
                .unwrap_or_else(|| panic!("row {t} c={l} missing"));
            assert!(
                r.requests > 100 && r.rps > 100.0,
                "{t} c={l}: {} requests",
                r.requests
            );
            assert_eq!(r.errors, 0, "{t} c={l}: errors {:?}", r.errors_by_kind);
            assert!(r.p50_us > 0 && r.p99_us >= r.p50_us);
            assert!(
                r.samples.len() >= 5,
                "{t} c={l}: {} samples in 1 s",
                r.samples.len()
            );
            assert!(r.rss_peak_kb > 0, "{t}: RSS measured");
            // Pinned to one core, a tree uses at most ~100% of it (nginx's master and worker
            // both count; a worker started before the measurement must not count from zero).
            assert!(
                r.server_cpu_pct <= 105.0,
                "{t}: {:.1}% of one pinned core",
                r.server_cpu_pct
            );
            assert!(
                r.server_cpu_pct > 1.0,
                "{t}: server CPU measured ({:.1}%)",
                r.server_cpu_pct
            );
            // Both answer each request with at least one receive and one send.
            let sys = r.syscalls_per_req.as_ref().expect("system calls counted");
            assert!(sys.total >= 2.0 && sys.total < 20.0, "{t} c={l}: {sys:?}");
            let us = r.server_us_per_req.expect("µs/req");
            assert!(us > 0.0 && us < 100_000.0, "{t}: {us} µs/req");
            assert_eq!(
                (r.server_cores.clone(), r.loader_cores.clone()),
                (vec![0], vec![1])
            );
            assert!(matches!(
                r.bound_by,
                BoundBy::ClientBound | BoundBy::ServerBound | BoundBy::Neither
            ));
        }
    }
    let schema: serde_json::Value = serde_json::from_str(results::SCHEMA).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&s.results).unwrap()).unwrap();
    let errors: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
    assert!(
        errors.is_empty(),
        "results.json does not match its schema: {errors:#?}"
    );
    let csv = std::fs::read_to_string(s.dir.join("results.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 1 + res.rows.len());
    let cols = lines[0].split(',').count();
    for l in &lines[1..] {
        assert_eq!(l.split(',').count(), cols, "{l}");
    }
    for t in TARGETS {
        assert!(
            lines
                .iter()
                .filter(|l| l.starts_with(&format!("{t},plaintext,")))
                .count()
                == LEVELS.len()
        );
    }
}

/// Every SVG parses as XML and names each of its series; every PNG decodes and is not blank.
#[test]
fn charts_parse_and_name_every_series() {
    let s = swept();
    let charts = s.dir.join("charts");
    let mut svgs = 0;
    for e in std::fs::read_dir(&charts).unwrap() {
        let p = e.unwrap().path();
        match p.extension().and_then(|x| x.to_str()) {
            Some("svg") => {
                svgs += 1;
                let text = std::fs::read_to_string(&p).unwrap();
                let doc = roxmltree::Document::parse(&text)
                    .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                let texts: String = doc
                    .descendants()
                    .filter_map(|n| n.text())
                    .collect::<Vec<_>>()
                    .join("\n");
                for t in TARGETS {
                    assert!(texts.contains(t), "{} lacks series {t}", p.display());
                }
                if p.to_string_lossy().contains("latency") {
                    assert!(
                        texts.contains("lowlat p50") && texts.contains("nginx p99"),
                        "{}",
                        p.display()
                    );
                }
            }
            Some("png") => assert_not_blank(&p),
            _ => {}
        }
    }
    assert_eq!(svgs, CHARTS);
}

/// The HTML page is well-formed, holds every chart inline with every series, and the summary.
#[test]
fn html_report_parses_and_holds_every_chart() {
    let s = swept();
    let html = std::fs::read_to_string(s.dir.join("report.html")).unwrap();
    let body = html.trim_start_matches("<!DOCTYPE html>");
    let doc = roxmltree::Document::parse(body)
        .unwrap_or_else(|e| panic!("report.html is not well-formed: {e}"));
    let figures: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("figure"))
        .collect();
    assert_eq!(figures.len(), CHARTS);
    for f in &figures {
        assert!(
            f.descendants().any(|n| n.has_tag_name("svg")),
            "figure {:?} has no inline svg",
            f.attribute("id")
        );
        let series = f.attribute("data-series").unwrap_or("");
        for t in TARGETS {
            assert!(
                series.contains(t),
                "figure {:?} lacks {t}",
                f.attribute("id")
            );
        }
    }
    for needle in [
        "Machine",
        "Summary",
        "Environment check",
        "Spec",
        "req/s ÷ baseline",
        "System calls per request",
        "ip_local_port_range",
        "ci-sweep",
    ] {
        assert!(html.contains(needle), "report lacks {needle}");
    }
    assert!(
        !html.contains("src=\"http") && !html.contains("href=\"http"),
        "the page loads nothing from elsewhere"
    );
}

fn chromium() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in ["chromium", "chromium-browser"] {
        if std::env::split_paths(&path).any(|d| d.join(name).is_file()) {
            return common::need(name);
        }
    }
    panic!("chromium is not installed: run scripts/test-deps.sh");
}

fn chromium_cmd(profile: &Path) -> Command {
    let mut c = Command::new(chromium());
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--enable-logging=stderr",
        "--v=0",
        "--window-size=1200,4000",
        "--virtual-time-budget=5000",
    ]);
    c.arg(format!("--user-data-dir={}", profile.display()));
    c
}

/// Headless Chromium renders every chart, the screenshot is not blank, and the console shows
/// only the page's own info line (no error, no failed load).
#[test]
fn report_renders_in_headless_chromium() {
    let s = swept();
    let page = s.dir.join("report.html");
    let url = format!("file://{}", page.display());
    let work = common::scratch("chromium");

    let out = chromium_cmd(&work.join("profile1"))
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .expect("run chromium");
    let dom = String::from_utf8_lossy(&out.stdout);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "chromium failed: {log}");
    assert!(
        dom.contains(&format!("data-charts-rendered=\"{CHARTS}\"")),
        "not every chart laid out; console:\n{log}"
    );
    let console: Vec<&str> = log.lines().filter(|l| l.contains("CONSOLE")).collect();
    assert!(
        console
            .iter()
            .any(|l| l.contains(&format!("lowlat-report: {CHARTS} charts rendered"))),
        "console not captured:\n{log}"
    );
    let others: Vec<&&str> = console
        .iter()
        .filter(|l| !l.contains("lowlat-report:"))
        .collect();
    assert!(others.is_empty(), "console messages: {others:#?}");

    let shot = work.join("shot.png");
    let out = chromium_cmd(&work.join("profile2"))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(&url)
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_not_blank(&shot);
}

/// Fails unless the image has many colours and a fair share of non-white pixels.
fn assert_not_blank(p: &Path) {
    let img = image::open(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .to_rgb8();
    let mut colours = std::collections::HashSet::new();
    let mut ink = 0usize;
    for px in img.pixels() {
        colours.insert(px.0);
        if px.0.iter().any(|&c| c < 200) {
            ink += 1;
        }
    }
    let share = ink as f64 / (img.width() * img.height()) as f64;
    assert!(
        colours.len() > 8 && share > 0.005,
        "{} looks blank: {} colours, {:.3}% ink",
        p.display(),
        colours.len(),
        share * 100.0
    );
}
