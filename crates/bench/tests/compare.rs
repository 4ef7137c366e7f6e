//! `lowlat bench compare` on the recorded TLS run (3 rounds per cell) and copies of it changed
//! on purpose: identical runs show no measurable change; a 20% regression is caught and exits 3;
//! too few rounds are said, not guessed, and a gate where no cell could be judged exits 4 (the
//! recorded 2-round static run against itself); runs of another machine are refused unless
//! forced; results written before /proc's VFS call counts were dropped still compare.

use std::path::{Path, PathBuf};

use clap::Parser;
use lowlat_bench::compare::{compare, compatible, Verdict};
use lowlat_bench::results::{self, Results};

fn recorded() -> Results {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/results/tls/results.json");
    results::read(&p).unwrap_or_else(|e| panic!("{e}"))
}

/// The same run with every cell's cost raised by `factor` (µs/req and latency up, req/s down).
fn slowed(r: &Results, factor: f64) -> Results {
    let mut r = r.clone();
    for row in &mut r.rows {
        row.rps /= factor;
        row.server_us_per_req = row.server_us_per_req.map(|v| v * factor);
        row.p50_us = (row.p50_us as f64 * factor) as u64;
        row.p99_us = (row.p99_us as f64 * factor) as u64;
    }
    r
}

fn write(dir: &Path, name: &str, r: &Results) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_string(r).unwrap()).unwrap();
    p
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: lowlat_bench::cli::BenchArgs,
}

fn cli(argv: &[&str]) -> String {
    let cli = Cli::try_parse_from(std::iter::once("bench").chain(argv.iter().copied())).unwrap();
    format!("{:?}", lowlat_bench::cli::run(cli.args))
}

/// A run against itself: every cell without a measurable change, exit 0.
#[test]
fn identical_runs_show_no_change() {
    let base = recorded();
    let cmp = compare(&base, &base, 0.05, Vec::new());
    assert!(!cmp.cells.is_empty());
    for c in &cmp.cells {
        assert_eq!(c.verdict, Verdict::NoMeasurableChange, "{c:?}");
        let r = c.us_per_req.unwrap();
        assert!(
            (r.ratio - 1.0).abs() < 1e-9 && r.low <= 1.0 && r.high >= 1.0,
            "{r:?}"
        );
    }
    assert!(!cmp.regressed());
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "a.json", &base);
    let p = p.display().to_string();
    assert_eq!(cli(&["compare", &p, &p]), "ExitCode(unix_exit_status(0))");
}

/// 20% more server time per request in every cell: each is slower, the gate exits 3; the
/// reverse comparison calls every cell faster.
#[test]
fn a_regression_is_caught() {
    let base = recorded();
    let worse = slowed(&base, 1.2);
    let cmp = compare(&base, &worse, 0.05, Vec::new());
    for c in &cmp.cells {
        assert_eq!(c.verdict, Verdict::Slower, "{c:?}");
        let r = c.us_per_req.unwrap();
        assert!((r.ratio - 1.2).abs() < 1e-9, "{r:?}");
    }
    assert!(cmp.regressed());
    let back = compare(&worse, &base, 0.05, Vec::new());
    assert!(back.cells.iter().all(|c| c.verdict == Verdict::Faster));
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (
        write(dir.path(), "a.json", &base),
        write(dir.path(), "b.json", &worse),
    );
    let out = cli(&[
        "compare",
        &a.display().to_string(),
        &b.display().to_string(),
    ]);
    assert_eq!(out, "ExitCode(unix_exit_status(3))");
    // A 2% change is inside a 5% threshold: no verdict of slower.
    let cmp = compare(&base, &slowed(&base, 1.02), 0.05, Vec::new());
    assert!(!cmp.regressed());
}

/// A results.json written before `kernel_per_req` lost /proc's `syscr`/`syscw` (every row
/// carrying them) still reads, and compares against a run written now, in both directions: the
/// same figures, no change, exit 0.
#[test]
fn results_with_the_old_proc_call_counts_still_compare() {
    let base = recorded();
    let mut old: serde_json::Value = serde_json::to_value(&base).unwrap();
    for row in old["rows"].as_array_mut().unwrap() {
        row["kernel_per_req"] = serde_json::json!({
            "syscr": 0.0, "syscw": 0.0,
            "voluntary_switches": 0.5, "involuntary_switches": 0.01, "minor_faults": 0.0
        });
    }
    let dir = tempfile::tempdir().unwrap();
    let old_path = dir.path().join("old.json");
    std::fs::write(&old_path, old.to_string()).unwrap();
    let read_back = results::read(&old_path).unwrap_or_else(|e| panic!("{e}"));
    let k = read_back.rows[0]
        .kernel_per_req
        .expect("the rest of kernel_per_req is kept");
    assert!((k.voluntary_switches - 0.5).abs() < 1e-9, "{k:?}");
    let new_path = write(dir.path(), "new.json", &base);
    let (old_path, new_path) = (
        old_path.display().to_string(),
        new_path.display().to_string(),
    );
    assert_eq!(
        cli(&["compare", &old_path, &new_path]),
        "ExitCode(unix_exit_status(0))"
    );
    assert_eq!(
        cli(&["compare", &new_path, &old_path]),
        "ExitCode(unix_exit_status(0))"
    );
}

/// Two rounds a side: the cells are not judged, and the text says how to fix it.
#[test]
fn too_few_rounds_are_said() {
    let mut base = recorded();
    base.rows.retain(|r| r.round < 2);
    let cmp = compare(&base, &slowed(&base, 1.5), 0.05, Vec::new());
    assert!(cmp.cells.iter().all(|c| c.verdict == Verdict::Undecided));
    assert!(!cmp.regressed(), "an undecided cell is not a slower one");
    assert_eq!(cmp.judged(), 0);
    let why = cmp.undecided().expect("nothing judged");
    assert!(why.contains("--rounds 3"), "{why}");
    let text = lowlat_bench::compare::render_text(&cmp);
    assert!(text.contains("fewer than 3 rounds"), "{text}");
    // One cell with enough rounds is a judgement: the gate can pass.
    let mut mixed = recorded();
    let first = (mixed.rows[0].scenario.clone(), mixed.rows[0].target.clone());
    mixed
        .rows
        .retain(|r| r.round < 2 || (r.scenario == first.0 && r.target == first.1));
    let cmp = compare(&mixed, &mixed, 0.05, Vec::new());
    assert!(cmp.judged() > 0 && cmp.undecided().is_none());
}

/// Two real 2-round runs (the recorded static sweep's first two rounds, against themselves):
/// no cell can be judged, so the gate fails with its own status, 4 — not 0 as if nothing had
/// got slower, not 3 as if something had.
#[test]
fn two_round_runs_fail_the_gate() {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/results/static-100b-kernel/results.json");
    let mut res = results::read(&p).unwrap_or_else(|e| panic!("{e}"));
    res.rows.retain(|r| r.round < 2);
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (
        write(dir.path(), "a.json", &res),
        write(dir.path(), "b.json", &res),
    );
    assert_eq!(
        cli(&[
            "compare",
            &a.display().to_string(),
            &b.display().to_string()
        ]),
        format!(
            "{:?}",
            std::process::ExitCode::from(lowlat_bench::compare::EXIT_UNDECIDED)
        )
    );
    // No cell in common is no judgement either.
    let mut other = res.clone();
    for r in &mut other.rows {
        r.connections += 1;
    }
    let cmp = compare(&res, &other, 0.05, Vec::new());
    assert!(cmp.cells.is_empty());
    assert!(cmp.undecided().unwrap().contains("no cell in common"));
}

/// Another machine is refused, naming the difference, unless forced; another spec likewise.
#[test]
fn mismatched_runs_are_refused() {
    let base = recorded();
    let mut other = base.clone();
    other.header.machine.cpu_model = "Some Other CPU".into();
    let e = compatible(&base, &other, false).unwrap_err().to_string();
    assert!(
        e.contains("different machines") && e.contains("Some Other CPU"),
        "{e}"
    );
    let notes = compatible(&base, &other, true).unwrap();
    assert!(
        notes.iter().any(|n| n.contains("compared anyway")),
        "{notes:?}"
    );
    let mut spec = base.clone();
    spec.header.spec_name = "other".into();
    let e = compatible(&base, &spec, false).unwrap_err().to_string();
    assert!(e.contains("different specs"), "{e}");
    // A cell only one run measured is listed, not compared.
    let mut fewer = base.clone();
    fewer.rows.retain(|r| r.target != "h2o");
    let cmp = compare(&base, &fewer, 0.05, Vec::new());
    assert!(
        cmp.only_in_base.iter().any(|k| k.contains("/h2o/")),
        "{cmp:?}"
    );
}

/// `--html`: a well-formed page with the table (slower cells marked) and, per scenario, the
/// six charts carrying both runs' lines.
#[test]
fn html_page_overlays_both_runs() {
    let base = recorded();
    let worse = slowed(&base, 1.2);
    let cmp = compare(&base, &worse, 0.05, Vec::new());
    let page = lowlat_bench::compare::html(&base, &worse, "base.json", "new.json", &cmp).unwrap();
    let body = page.trim_start_matches("<!DOCTYPE html>");
    let doc = roxmltree::Document::parse(body).unwrap_or_else(|e| panic!("{e}"));
    let figures: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("figure"))
        .collect();
    assert_eq!(figures.len(), 6 * base.header.scenarios.len());
    assert!(page.contains("lowlat BASE") && page.contains("lowlat NEW"));
    let slower = doc
        .descendants()
        .filter(|n| n.has_tag_name("td") && n.attribute("class") == Some("l fail"))
        .count();
    assert_eq!(slower, cmp.cells.len());
}
