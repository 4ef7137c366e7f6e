//! The report page: one self-contained HTML file (no external scripts, styles, fonts or
//! images — the charts are inline SVG), so it can be committed, mailed or opened offline.
//!
//! A few lines of script, run on load, count the charts that laid out with a non-zero size
//! and write the count into `data-charts-rendered` on the page and the console, which the
//! browser test reads.

use super::charts::Chart;
use super::summary::{slug, Point, Summary};
use crate::doctor::{Check, Status};
use crate::results::Results;

pub(crate) const STYLE: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:1000px;padding:0 1em;color:#222}\
h1{font-size:1.6em}h2{margin-top:2em;border-bottom:1px solid #ddd}table{border-collapse:collapse;margin:1em 0;font-size:.9em}\
td,th{border:1px solid #ddd;padding:.25em .6em;text-align:right}th{background:#f4f4f4}td.l,th.l{text-align:left}\
figure{margin:1.5em 0}figure svg{max-width:100%;height:auto;border:1px solid #eee}figcaption{font-size:.85em;color:#555}\
pre{background:#f7f7f7;padding:1em;overflow:auto;font-size:.85em}.warn{color:#a60}.fail{color:#c00;font-weight:bold}.ok{color:#080}\
.note{color:#555;font-size:.9em}div.wide{overflow-x:auto}table.syscalls{font-size:.8em}table.syscalls td,table.syscalls th{padding:.2em .4em}";

const SCRIPT: &str = "window.addEventListener('load',function(){var n=0;\
document.querySelectorAll('figure.chart svg').forEach(function(s){var r=s.getBoundingClientRect();if(r.width>0){if(r.height>0){n++;}}});\
document.body.setAttribute('data-charts-rendered',String(n));console.info('lowlat-report: '+n+' charts rendered');});";

fn fmt_opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "–".into(), |v| format!("{v:.prec$}"))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 && a.is_finite() => format!("{:.2}", a / b),
        _ => "–".into(),
    }
}

fn peak(ps: &[Point]) -> Option<&Point> {
    ps.iter().max_by(|a, b| a.rps_mean.total_cmp(&b.rps_mean))
}

fn median_us(ps: &[Point]) -> Option<f64> {
    let mut v: Vec<f64> = ps.iter().filter_map(|p| p.us_per_req).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

/// One row of an environment-check table, its cells ready for the page.
struct CheckRow<'a> {
    name: &'a str,
    value: &'a str,
    need: &'a str,
    class: &'static str,
    word: &'static str,
    fix: &'a str,
}

fn check_rows(checks: &[Check]) -> Vec<CheckRow<'_>> {
    checks
        .iter()
        .map(|c| {
            let (class, word) = match c.status {
                Status::Ok => ("ok", "ok"),
                Status::Warn => ("warn", "warn"),
                Status::Fail => ("fail", "FAIL"),
                Status::Info => ("", "info"),
            };
            CheckRow {
                name: &c.name,
                value: &c.value,
                need: &c.need,
                class,
                word,
                fix: c.fix.as_deref().unwrap_or_default(),
            }
        })
        .collect()
}

struct MachineCells {
    cpus: usize,
    model: String,
    smt: String,
    governor: String,
    kernel: String,
    memory_mib: u64,
}

struct Figure<'a> {
    id: &'a str,
    series: String,
    /// The chart itself, inserted as it is (inline SVG, made here).
    svg: &'a str,
    title: &'a str,
}

struct Section<'a> {
    id: String,
    name: &'a str,
    figures: Vec<Figure<'a>>,
    /// Every level of every target: 15 cells, formatted.
    levels: Vec<[String; 15]>,
}

/// The system-call section: a column per call some server made (see
/// [`super::syscalls::syscall_table`]).
struct SyscallSection {
    columns: Vec<&'static str>,
    never_made: String,
    rows: Vec<SyscallRow>,
}

struct SyscallRow {
    scenario: String,
    target: String,
    connections: u32,
    /// Total, each column, other; empty when nothing was counted.
    cells: Vec<String>,
    /// Why nothing was counted.
    why: String,
}

/// The page: `templates/report.stpl`, which HTML-escapes every value but the style, the script
/// and the charts (made here).
#[derive(sailfish::TemplateSimple)]
#[template(path = "report.stpl")]
struct Page<'a> {
    style: &'a str,
    script: &'a str,
    name: &'a str,
    description: &'a str,
    started: &'a str,
    finished: &'a str,
    status: &'a str,
    rows: usize,
    duration_s: f64,
    rounds: u32,
    version: &'a str,
    machine: MachineCells,
    baseline: &'a str,
    /// One row per scenario × target: 13 cells, formatted.
    summary: Vec<[String; 13]>,
    syscalls: Option<SyscallSection>,
    scenarios: Vec<Section<'a>>,
    checks: Vec<Vec<CheckRow<'a>>>,
    spec_file: &'a str,
    spec_text: &'a str,
}

/// The whole page.
#[must_use]
pub fn page(
    res: &Results,
    summary: &Summary,
    baseline: &str,
    charts: &[(String, Chart, String)],
) -> String {
    let h = &res.header;
    let m = &h.machine;
    let mut summary_rows = Vec::new();
    let mut sections = Vec::new();
    for (scenario, per_target) in summary {
        let base = per_target
            .iter()
            .find(|(t, _)| t == baseline)
            .map(|(_, p)| p);
        let base_peak = base.and_then(|p| peak(p)).map(|p| p.rps_mean);
        let base_us = base.and_then(|p| median_us(p));
        let mut levels = Vec::new();
        for (t, ps) in per_target {
            if let Some(pk) = peak(ps) {
                let us = median_us(ps);
                summary_rows.push([
                    scenario.clone(),
                    t.clone(),
                    format!("{:.0}", pk.rps_mean),
                    pk.connections.to_string(),
                    ratio(Some(pk.rps_mean), base_peak),
                    fmt_opt(us, 2),
                    ratio(us, base_us),
                    format!("{:.2}", pk.p99_us / 1000.0),
                    format!("{:.1}", ps.iter().map(|p| p.rss_mib).fold(0.0, f64::max)),
                    ps.iter().map(|p| p.errors).sum::<u64>().to_string(),
                    fmt_opt(pk.syscalls_per_req, 2),
                    fmt_opt(pk.switches_per_req, 2),
                    pk.bound_by.as_str().to_string(),
                ]);
            }
            for p in ps {
                let b = base.and_then(|b| b.iter().find(|x| x.connections == p.connections));
                levels.push([
                    t.clone(),
                    p.connections.to_string(),
                    p.rounds.to_string(),
                    format!("{:.0}", p.rps_mean),
                    format!("{:.0}", p.rps_min),
                    format!("{:.0}", p.rps_max),
                    ratio(Some(p.rps_mean), b.map(|b| b.rps_mean)),
                    fmt_opt(p.us_per_req, 2),
                    ratio(p.us_per_req, b.and_then(|b| b.us_per_req)),
                    format!("{:.3}", p.p50_us / 1000.0),
                    format!("{:.3}", p.p99_us / 1000.0),
                    format!("{:.0}", p.cpu_pct),
                    format!("{:.1}", p.rss_mib),
                    p.errors.to_string(),
                    p.bound_by.as_str().to_string(),
                ]);
            }
        }
        let figures = charts
            .iter()
            .filter(|(section, _, _)| section == scenario)
            .map(|(_, chart, svg)| Figure {
                id: &chart.id,
                series: chart
                    .series
                    .iter()
                    .map(|x| x.name.as_str())
                    .collect::<Vec<_>>()
                    .join("|"),
                svg: strip_xml_decl(svg),
                title: &chart.title,
            })
            .collect();
        sections.push(Section {
            id: slug(scenario),
            name: scenario,
            figures,
            levels,
        });
    }
    let mut checks = vec![check_rows(&h.doctor)];
    if !res.target_checks.is_empty() {
        checks.push(check_rows(&res.target_checks));
    }
    let page = Page {
        style: STYLE,
        script: SCRIPT,
        name: &h.spec_name,
        description: &h.spec_description,
        started: &h.started,
        finished: if res.finished.is_empty() {
            "–"
        } else {
            &res.finished
        },
        status: &res.status,
        rows: res.rows.len(),
        duration_s: h.duration_s,
        rounds: h.rounds,
        version: &h.lowlat_version,
        machine: MachineCells {
            cpus: m.cpus,
            model: m.cpu_model.clone(),
            smt: m.smt_groups.join(" "),
            governor: if m.governors.is_empty() {
                "none exposed".to_string()
            } else {
                m.governors.join(", ")
            },
            kernel: m.kernel.clone(),
            memory_mib: m.memory_mib,
        },
        baseline,
        summary: summary_rows,
        syscalls: super::syscalls::syscall_table(summary).map(|t| SyscallSection {
            columns: t.columns,
            never_made: t.never_made.join(", "),
            rows: t
                .rows
                .into_iter()
                .map(|r| {
                    let (cells, why) = match r.cells {
                        Ok(c) => (c, String::new()),
                        Err(w) => (Vec::new(), w),
                    };
                    SyscallRow {
                        scenario: r.scenario,
                        target: r.target,
                        connections: r.connections,
                        cells,
                        why,
                    }
                })
                .collect(),
        }),
        scenarios: sections,
        checks,
        spec_file: &h.spec_file,
        spec_text: &h.spec_text,
    };
    // Rendering into a String cannot fail with these fields; an empty page would say so.
    sailfish::TemplateSimple::render_once(page).unwrap_or_default()
}

pub(crate) fn strip_xml_decl(svg: &str) -> &str {
    match svg.find("<svg") {
        Some(at) => &svg[at..],
        None => svg,
    }
}
