//! `lowlat bench report`: turns a results file into charts (SVG and PNG) and one
//! self-contained HTML page (charts inline, machine, environment check, spec, summary table
//! with ratios to a baseline target).
//!
//! For every scenario: req/s vs connections (mean line, min–max band over rounds), server µs
//! per request, p50 and p99 latency, server CPU % and RSS vs connections, and CPU and RSS over
//! time at one chosen level. It reads only the results file, so a report can be redrawn, or
//! drawn from a run that was cut short.

pub mod charts;
pub mod html;

use std::path::{Path, PathBuf};

use crate::error::BenchError;
use crate::results::{BoundBy, Results, Row, SyscallsPerReq};
use charts::{Chart, Series};

/// What to draw, beyond the results.
#[derive(Debug, Clone, Default)]
pub struct ReportOptions {
    /// Output directory (default: the results file's directory).
    pub out_dir: Option<PathBuf>,
    /// Target the ratios compare against (default: the spec's baseline).
    pub baseline: Option<String>,
    /// Connection level for the over-time charts (default: each scenario's highest).
    pub level: Option<u32>,
    /// Also write PNG files (SVG is always written).
    pub png: bool,
}

/// Files a report wrote.
#[derive(Debug, Clone)]
pub struct ReportFiles {
    pub html: PathBuf,
    pub svg: Vec<PathBuf>,
    pub png: Vec<PathBuf>,
    /// The syscall table as Markdown, when the results have one.
    pub syscalls: Option<String>,
}

/// Rows of one target at one level of one scenario, summarised over rounds.
#[derive(Debug, Clone)]
pub struct Point {
    pub connections: u32,
    pub rounds: usize,
    pub rps_mean: f64,
    pub rps_min: f64,
    pub rps_max: f64,
    pub us_per_req: Option<f64>,
    pub p50_us: f64,
    pub p99_us: f64,
    pub cpu_pct: f64,
    pub rss_mib: f64,
    pub errors: u64,
    pub bound_by: BoundBy,
    /// Every system call of the server per request, counted through tracepoints (median over
    /// rounds; `None` where they were not counted).
    pub syscalls_per_req: Option<f64>,
    /// The same by call: each figure the median over the rounds that counted it.
    pub syscalls: Option<SyscallsPerReq>,
    /// Why the rounds have no syscall figures, when they have none.
    pub syscalls_unavailable: Option<String>,
    /// Context switches (voluntary + involuntary) of the server per request.
    pub switches_per_req: Option<f64>,
}

/// (scenario, [(target, points by level)]), scenarios and targets in spec order.
pub type Summary = Vec<(String, Vec<(String, Vec<Point>)>)>;

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Summarises the rows by scenario, target and level: mean and min–max req/s, medians of the rest.
#[must_use]
pub fn summarise(res: &Results) -> Summary {
    let mut out = Summary::new();
    for scenario in &res.header.scenarios {
        let mut per_target = Vec::new();
        for target in &res.header.targets {
            let rows: Vec<&Row> = res
                .rows
                .iter()
                .filter(|r| &r.scenario == scenario && &r.target == target)
                .collect();
            if rows.is_empty() {
                continue;
            }
            let mut levels: Vec<u32> = rows.iter().map(|r| r.connections).collect();
            levels.sort_unstable();
            levels.dedup();
            let points = levels
                .into_iter()
                .map(|c| {
                    let at: Vec<&&Row> = rows.iter().filter(|r| r.connections == c).collect();
                    let rps: Vec<f64> = at.iter().map(|r| r.rps).collect();
                    let med = |f: &dyn Fn(&Row) -> f64| {
                        median(at.iter().map(|r| f(r)).collect()).unwrap_or(0.0)
                    };
                    let mut bounds: Vec<BoundBy> = at.iter().map(|r| r.bound_by).collect();
                    bounds.sort_by_key(|b| *b as u8);
                    Point {
                        connections: c,
                        rounds: at.len(),
                        rps_mean: rps.iter().sum::<f64>() / rps.len() as f64,
                        rps_min: rps.iter().copied().fold(f64::INFINITY, f64::min),
                        rps_max: rps.iter().copied().fold(0.0, f64::max),
                        us_per_req: median(at.iter().filter_map(|r| r.server_us_per_req).collect()),
                        p50_us: med(&|r| r.p50_us as f64),
                        p99_us: med(&|r| r.p99_us as f64),
                        cpu_pct: med(&|r| r.server_cpu_pct),
                        rss_mib: med(&|r| r.rss_peak_kb as f64 / 1024.0),
                        errors: at.iter().map(|r| r.errors).sum(),
                        bound_by: bounds[bounds.len() / 2],
                        syscalls_per_req: median(
                            at.iter()
                                .filter_map(|r| Some(r.syscalls_per_req.as_ref()?.total))
                                .collect(),
                        ),
                        syscalls: syscall_medians(&at),
                        syscalls_unavailable: at
                            .iter()
                            .find_map(|r| r.syscalls_unavailable.clone())
                            .filter(|_| at.iter().all(|r| r.syscalls_per_req.is_none())),
                        switches_per_req: median(
                            at.iter()
                                .filter_map(|r| {
                                    r.kernel_per_req
                                        .map(|k| k.voluntary_switches + k.involuntary_switches)
                                })
                                .collect(),
                        ),
                    }
                })
                .collect();
            per_target.push((target.clone(), points));
        }
        out.push((scenario.clone(), per_target));
    }
    out
}

/// Each syscall figure's median over the rounds that counted it; `None` when none did.
fn syscall_medians(rows: &[&&Row]) -> Option<SyscallsPerReq> {
    let counted: Vec<&SyscallsPerReq> = rows
        .iter()
        .filter_map(|r| r.syscalls_per_req.as_ref())
        .collect();
    let first = counted.first()?;
    let med = |f: &dyn Fn(&SyscallsPerReq) -> Option<f64>| {
        median(counted.iter().filter_map(|s| f(s)).collect())
    };
    Some(SyscallsPerReq {
        total: med(&|s| Some(s.total)).unwrap_or(0.0),
        calls: first
            .calls
            .keys()
            .filter_map(|name| Some((name.clone(), med(&|s| s.call(name))?)))
            .collect(),
        other: med(&|s| Some(s.other)).unwrap_or(0.0),
    })
}

/// The report's table of system calls per request: one row per scenario × target × level,
/// a column per call that some server made.
#[derive(Debug, Clone, PartialEq)]
pub struct SyscallTable {
    /// The calls shown, in [`crate::syscalls::CALLS`] order: those some row made.
    pub columns: Vec<&'static str>,
    /// Calls counted in every row and made by none (left out of the columns).
    pub never_made: Vec<&'static str>,
    pub rows: Vec<SyscallTableRow>,
}

/// One row of [`SyscallTable`].
#[derive(Debug, Clone, PartialEq)]
pub struct SyscallTableRow {
    pub scenario: String,
    pub target: String,
    pub connections: u32,
    /// Total, each column, other — formatted; or why nothing was counted.
    pub cells: Result<Vec<String>, String>,
}

/// The syscall table of a summary; `None` when no row has syscall figures or a reason.
#[must_use]
pub fn syscall_table(summary: &Summary) -> Option<SyscallTable> {
    let points = || {
        summary.iter().flat_map(|(sc, per_target)| {
            per_target
                .iter()
                .flat_map(move |(t, ps)| ps.iter().map(move |p| (sc, t, p)))
        })
    };
    if points().all(|(_, _, p)| p.syscalls.is_none() && p.syscalls_unavailable.is_none()) {
        return None;
    }
    let mut columns = Vec::new();
    let mut never_made = Vec::new();
    for call in crate::syscalls::CALLS {
        let figures: Vec<Option<f64>> = points()
            .filter_map(|(_, _, p)| p.syscalls.as_ref())
            .map(|s| s.call(call.name))
            .collect();
        // Shown when some row made it; "never made" only when every row could count it.
        if figures.iter().flatten().any(|v| *v >= 0.0005) {
            columns.push(call.name);
        } else if !figures.is_empty() && figures.iter().all(Option::is_some) {
            never_made.push(call.name);
        }
    }
    let rows = points()
        .map(|(sc, t, p)| SyscallTableRow {
            scenario: sc.clone(),
            target: t.clone(),
            connections: p.connections,
            cells: match (&p.syscalls, &p.syscalls_unavailable) {
                (Some(s), _) => {
                    let mut v = vec![format!("{:.3}", s.total)];
                    v.extend(
                        columns
                            .iter()
                            .map(|c| s.call(c).map_or_else(|| "–".into(), |x| format!("{x:.3}"))),
                    );
                    v.push(format!("{:.3}", s.other));
                    Ok(v)
                }
                (None, Some(why)) => Err(format!("not counted: {why}")),
                (None, None) => Err("not counted".into()),
            },
        })
        .collect();
    Some(SyscallTable {
        columns,
        never_made,
        rows,
    })
}

/// The syscall table as Markdown (what `lowlat bench report` prints), with a line on what was
/// left out.
#[must_use]
pub fn syscall_table_text(t: &SyscallTable) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = write!(s, "| scenario | target | conns | total |");
    for c in &t.columns {
        let _ = write!(s, " {c} |");
    }
    let _ = writeln!(s, " other |");
    let _ = writeln!(s, "|---|---|---|---|{}---|", "---|".repeat(t.columns.len()));
    for r in &t.rows {
        let _ = write!(s, "| {} | {} | {} |", r.scenario, r.target, r.connections);
        match &r.cells {
            Ok(cells) => {
                for c in cells {
                    let _ = write!(s, " {c} |");
                }
            }
            Err(why) => {
                let _ = write!(s, " {why} |{}", " |".repeat(t.columns.len() + 1));
            }
        }
        s.push('\n');
    }
    if !t.never_made.is_empty() {
        let _ = writeln!(
            s,
            "\nCounted and made by no server: {}.",
            t.never_made.join(", ")
        );
    }
    s
}

/// Levels spread over more than a factor of 20 and not evenly spaced read better on a log axis.
fn log_axis(levels: &[u32]) -> bool {
    let (Some(&lo), Some(&hi)) = (levels.iter().min(), levels.iter().max()) else {
        return false;
    };
    if levels.len() < 3 || hi < lo.saturating_mul(20) {
        return hi >= lo.saturating_mul(20) && levels.len() > 1;
    }
    let step = levels[1] - levels[0];
    !levels.windows(2).all(|w| w[1] - w[0] == step)
}

/// Builds every chart of the report, in page order, with the section (scenario) each belongs to.
#[must_use]
pub fn build_charts(
    res: &Results,
    summary: &Summary,
    opts: &ReportOptions,
) -> Vec<(String, Chart)> {
    let color_of = |t: &str| res.header.targets.iter().position(|x| x == t).unwrap_or(0);
    let mut out = Vec::new();
    for scenario in &res.header.scenarios {
        let Some((_, per_target)) = summary.iter().find(|(s, _)| s == scenario) else {
            continue;
        };
        if per_target.is_empty() {
            continue;
        }
        let mut levels: Vec<u32> = per_target
            .iter()
            .flat_map(|(_, p)| p.iter().map(|p| p.connections))
            .collect();
        levels.sort_unstable();
        levels.dedup();
        let log_x = log_axis(&levels);
        let sid = slug(scenario);
        let chart = |id: &str, title: &str, y: &str, log_y: bool, series: Vec<Series>| Chart {
            id: format!("{sid}-{id}"),
            title: format!("{scenario}: {title}"),
            x_label: "concurrent connections".into(),
            y_label: y.into(),
            log_x,
            log_y,
            y_from_zero: !log_y,
            series,
        };
        let line = |name: &str, t: &str, f: &dyn Fn(&Point) -> Option<f64>, dashed: bool| Series {
            name: name.into(),
            color: color_of(t),
            points: per_target
                .iter()
                .find(|(n, _)| n == t)
                .map(|(_, ps)| {
                    ps.iter()
                        .filter_map(|p| Some((f64::from(p.connections), f(p)?)))
                        .collect()
                })
                .unwrap_or_default(),
            band: vec![],
            dashed,
            hollow: vec![],
        };
        let targets: Vec<&str> = per_target.iter().map(|(t, _)| t.as_str()).collect();
        let rps: Vec<Series> = per_target
            .iter()
            .map(|(t, ps)| Series {
                name: t.clone(),
                color: color_of(t),
                points: ps
                    .iter()
                    .map(|p| (f64::from(p.connections), p.rps_mean))
                    .collect(),
                band: ps
                    .iter()
                    .map(|p| (f64::from(p.connections), p.rps_min, p.rps_max))
                    .collect(),
                dashed: false,
                hollow: ps
                    .iter()
                    .filter(|p| p.bound_by == BoundBy::ClientBound)
                    .map(|p| (f64::from(p.connections), p.rps_mean))
                    .collect(),
            })
            .collect();
        out.push((
            scenario.clone(),
            chart(
                "rps",
                "requests per second (mean; band: min–max over rounds; ring: client-bound)",
                "requests / s",
                false,
                rps,
            ),
        ));
        out.push((
            scenario.clone(),
            chart(
                "us-per-req",
                "server-core µs per request (lower is better)",
                "µs of server cores / request",
                false,
                targets
                    .iter()
                    .map(|t| line(t, t, &|p| p.us_per_req, false))
                    .collect(),
            ),
        ));
        let mut lat = Vec::new();
        for t in &targets {
            lat.push(line(
                &format!("{t} p50"),
                t,
                &|p| Some(p.p50_us / 1000.0),
                false,
            ));
            lat.push(line(
                &format!("{t} p99"),
                t,
                &|p| Some(p.p99_us / 1000.0),
                true,
            ));
        }
        out.push((
            scenario.clone(),
            chart(
                "latency",
                "latency p50 (solid) and p99 (dashed)",
                "ms (log scale)",
                true,
                lat,
            ),
        ));
        out.push((
            scenario.clone(),
            chart(
                "cpu",
                "server CPU (process tree)",
                "% of one core",
                false,
                targets
                    .iter()
                    .map(|t| line(t, t, &|p| Some(p.cpu_pct), false))
                    .collect(),
            ),
        ));
        if per_target.iter().any(|(_, ps)| {
            ps.iter()
                .any(|p| p.syscalls_per_req.is_some() || p.switches_per_req.is_some())
        }) {
            let mut kernel = Vec::new();
            let counted = per_target
                .iter()
                .any(|(_, ps)| ps.iter().any(|p| p.syscalls_per_req.is_some()));
            for t in &targets {
                if counted {
                    kernel.push(line(
                        &format!("{t} syscalls"),
                        t,
                        &|p| p.syscalls_per_req,
                        false,
                    ));
                }
                kernel.push(line(
                    &format!("{t} context switches"),
                    t,
                    &|p| p.switches_per_req,
                    true,
                ));
            }
            out.push((
                scenario.clone(),
                chart(
                    "kernel",
                    "kernel work per request: system calls (solid), context switches (dashed)",
                    "per request",
                    false,
                    kernel,
                ),
            ));
        }
        out.push((
            scenario.clone(),
            chart(
                "rss",
                "server memory (peak RSS)",
                "MiB",
                false,
                targets
                    .iter()
                    .map(|t| line(t, t, &|p| Some(p.rss_mib), false))
                    .collect(),
            ),
        ));

        // Over time, at one level: the chosen one when this scenario has it, else its highest.
        let level = opts
            .level
            .filter(|l| levels.contains(l))
            .or_else(|| levels.last().copied())
            .unwrap_or(0);
        let row_at = |t: &str| {
            res.rows
                .iter()
                .find(|r| &r.scenario == scenario && r.target == t && r.connections == level)
        };
        let over_time = |f: &dyn Fn(&crate::sampler::Sample) -> f64| -> Vec<Series> {
            targets
                .iter()
                .filter_map(|t| {
                    let r = row_at(t)?;
                    Some(Series {
                        name: (*t).into(),
                        color: color_of(t),
                        points: r.samples.iter().map(|s| (s.t, f(s))).collect(),
                        band: vec![],
                        dashed: false,
                        hollow: vec![],
                    })
                })
                .collect()
        };
        let timed = |id: &str, title: &str, y: &str, series: Vec<Series>| Chart {
            id: format!("{sid}-{id}"),
            title: format!("{scenario}: {title} at {level} connections (round 1)"),
            x_label: "seconds".into(),
            y_label: y.into(),
            log_x: false,
            log_y: false,
            y_from_zero: true,
            series,
        };
        out.push((
            scenario.clone(),
            timed(
                "cpu-time",
                "server CPU over time",
                "% of one core",
                over_time(&|s| s.cpu_pct),
            ),
        ));
        out.push((
            scenario.clone(),
            timed(
                "rss-time",
                "server memory over time",
                "MiB",
                over_time(&|s| s.rss_kb as f64 / 1024.0),
            ),
        ));
    }
    out
}

/// A file-name-safe form of a scenario name.
#[must_use]
pub fn slug(s: &str) -> String {
    let s: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    if s.is_empty() {
        "scenario".into()
    } else {
        s
    }
}

/// Writes the charts and the HTML page for `results_path`.
///
/// # Errors
/// [`BenchError::Results`] for an unreadable results file, an unknown baseline or a level with
/// no rows;
/// [`BenchError::Chart`] or [`BenchError::Io`] when writing fails.
pub fn render(results_path: &Path, opts: &ReportOptions) -> Result<ReportFiles, BenchError> {
    let res = crate::results::read(results_path)?;
    let out_dir = opts.out_dir.clone().unwrap_or_else(|| {
        results_path
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
    });
    let out_dir = if out_dir.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        out_dir
    };
    let baseline = opts
        .baseline
        .clone()
        .unwrap_or_else(|| res.header.baseline.clone());
    if !res.header.targets.contains(&baseline) {
        return Err(BenchError::Results {
            path: results_path.to_path_buf(),
            message: format!(
                "no target named {baseline:?} to use as baseline; targets: {}",
                res.header.targets.join(", ")
            ),
        });
    }
    if res.rows.is_empty() {
        return Err(BenchError::Results {
            path: results_path.to_path_buf(),
            message: format!("has no rows yet (status: {})", res.status),
        });
    }
    if let Some(level) = opts.level {
        if !res.rows.iter().any(|r| r.connections == level) {
            let mut levels: Vec<u32> = res.rows.iter().map(|r| r.connections).collect();
            levels.sort_unstable();
            levels.dedup();
            let list: Vec<String> = levels.iter().map(u32::to_string).collect();
            return Err(BenchError::Results {
                path: results_path.to_path_buf(),
                message: format!(
                    "no rows at --level {level}; the levels measured are {}",
                    list.join(", ")
                ),
            });
        }
    }
    let chart_dir = out_dir.join("charts");
    std::fs::create_dir_all(&chart_dir).map_err(|e| BenchError::io(&chart_dir, e))?;
    let summary = summarise(&res);
    let charts = build_charts(&res, &summary, opts);
    let mut files = ReportFiles {
        html: out_dir.join("report.html"),
        svg: Vec::new(),
        png: Vec::new(),
        syscalls: None,
    };
    let mut rendered = Vec::new();
    for (section, chart) in &charts {
        let svg = chart.svg()?;
        let path = chart_dir.join(format!("{}.svg", chart.id));
        std::fs::write(&path, &svg).map_err(|e| BenchError::io(&path, e))?;
        files.svg.push(path);
        if opts.png {
            let path = chart_dir.join(format!("{}.png", chart.id));
            chart.png(&path)?;
            files.png.push(path);
        }
        rendered.push((section.clone(), chart.clone(), svg));
    }
    let page = html::page(&res, &summary, &baseline, &rendered);
    std::fs::write(&files.html, page).map_err(|e| BenchError::io(&files.html, e))?;
    files.syscalls = syscall_table(&summary).map(|t| syscall_table_text(&t));
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_choice() {
        assert!(log_axis(&[16, 256, 1024]));
        assert!(!log_axis(&(1..=100).map(|i| i * 10).collect::<Vec<_>>()));
        assert!(!log_axis(&[1, 2]));
        assert!(log_axis(&[1, 100]));
    }

    #[test]
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![1.0, 2.0]), Some(1.5));
        assert_eq!(median(vec![]), None);
    }
}
