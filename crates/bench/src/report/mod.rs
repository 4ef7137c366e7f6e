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
pub mod summary;
pub mod syscalls;

use std::path::{Path, PathBuf};

use crate::error::BenchError;
use crate::results::{BoundBy, Results};
use charts::{Chart, Series};
pub use summary::{slug, summarise, Point, Summary};
pub use syscalls::{syscall_table, syscall_table_text, SyscallTable, SyscallTableRow};

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
}
