//! The report page: one self-contained HTML file (no external scripts, styles, fonts or
//! images — the charts are inline SVG), so it can be committed, mailed or opened offline.
//!
//! A few lines of script, run on load, count the charts that laid out with a non-zero size
//! and write the count into `data-charts-rendered` on the page and the console, which the
//! browser test reads.

use std::fmt::Write as _;

use super::charts::Chart;
use super::{Point, Summary};
use crate::doctor::{Check, Status};
use crate::results::Results;

/// Escapes text for HTML content and attribute values.
#[must_use]
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:1000px;padding:0 1em;color:#222}\
h1{font-size:1.6em}h2{margin-top:2em;border-bottom:1px solid #ddd}table{border-collapse:collapse;margin:1em 0;font-size:.9em}\
td,th{border:1px solid #ddd;padding:.25em .6em;text-align:right}th{background:#f4f4f4}td.l,th.l{text-align:left}\
figure{margin:1.5em 0}figure svg{max-width:100%;height:auto;border:1px solid #eee}figcaption{font-size:.85em;color:#555}\
pre{background:#f7f7f7;padding:1em;overflow:auto;font-size:.85em}.warn{color:#a60}.fail{color:#c00;font-weight:bold}.ok{color:#080}\
.note{color:#555;font-size:.9em}";

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

fn checks_table(s: &mut String, checks: &[Check]) {
    s.push_str("<table><tr><th class=\"l\">check</th><th class=\"l\">value</th><th class=\"l\">needs</th><th class=\"l\">status</th><th class=\"l\">fix</th></tr>");
    for c in checks {
        let (class, word) = match c.status {
            Status::Ok => ("ok", "ok"),
            Status::Warn => ("warn", "warn"),
            Status::Fail => ("fail", "FAIL"),
            Status::Info => ("", "info"),
        };
        let _ = write!(
            s,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l {class}\">{word}</td><td class=\"l\">{}</td></tr>",
            esc(&c.name),
            esc(&c.value),
            esc(&c.need),
            c.fix.as_deref().map(esc).unwrap_or_default()
        );
    }
    s.push_str("</table>");
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
    let mut s = String::with_capacity(1 << 20);
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\"><head><meta charset=\"utf-8\"/><meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"/>\
<title>lowlat bench: {name}</title><style>{STYLE}</style></head><body>\n<h1>lowlat bench: {name}</h1>\n",
        name = esc(&h.spec_name)
    );
    if !h.spec_description.is_empty() {
        let _ = writeln!(s, "<p>{}</p>", esc(&h.spec_description));
    }
    let _ = writeln!(
        s,
        "<p class=\"note\">Started {} · finished {} · status <b>{}</b> · {} rows · {} s per measurement × {} round(s) · lowlat {}</p>",
        esc(&h.started),
        esc(if res.finished.is_empty() { "–" } else { &res.finished }),
        esc(&res.status),
        res.rows.len(),
        h.duration_s,
        h.rounds,
        esc(&h.lowlat_version)
    );

    let m = &h.machine;
    let _ = writeln!(
        s,
        "<h2 id=\"machine\">Machine</h2><table><tr><th class=\"l\">CPU</th><td class=\"l\">{} × {}</td></tr><tr><th class=\"l\">SMT siblings</th><td class=\"l\">{}</td></tr>\
<tr><th class=\"l\">governor</th><td class=\"l\">{}</td></tr><tr><th class=\"l\">kernel</th><td class=\"l\">{}</td></tr><tr><th class=\"l\">memory</th><td class=\"l\">{} MiB</td></tr></table>",
        m.cpus,
        esc(&m.cpu_model),
        esc(&m.smt_groups.join(" ")),
        esc(&if m.governors.is_empty() { "none exposed".to_string() } else { m.governors.join(", ") }),
        esc(&m.kernel),
        m.memory_mib
    );

    // Summary: one line per scenario × target, then every level in a fold-out.
    let _ = writeln!(
        s,
        "<h2 id=\"summary\">Summary</h2><p class=\"note\">Ratios compare each target with the baseline, <b>{}</b>: \
req/s ÷ baseline above 1 is faster; µs/req ÷ baseline below 1 is cheaper. Server µs/req is the busy time of the \
server's cores (kernel work included) per request: it still ranks servers when the load generator is the bottleneck \
(\"client-bound\": req/s then understates the server).</p>",
        esc(baseline)
    );
    s.push_str("<table class=\"summary\"><tr><th class=\"l\">scenario</th><th class=\"l\">target</th><th>peak req/s</th><th>at conns</th><th>req/s ÷ baseline</th><th>median server µs/req</th><th>µs/req ÷ baseline</th><th>p99 ms at peak</th><th>max RSS MiB</th><th>errors</th><th class=\"l\">bound by (at peak)</th></tr>\n");
    for (scenario, per_target) in summary {
        let base = per_target
            .iter()
            .find(|(t, _)| t == baseline)
            .map(|(_, p)| p);
        let base_peak = base.and_then(|p| peak(p)).map(|p| p.rps_mean);
        let base_us = base.and_then(|p| median_us(p));
        for (t, ps) in per_target {
            let Some(pk) = peak(ps) else { continue };
            let us = median_us(ps);
            let _ = writeln!(
                s,
                "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{:.0}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.1}</td><td>{}</td><td class=\"l\">{}</td></tr>",
                esc(scenario),
                esc(t),
                pk.rps_mean,
                pk.connections,
                ratio(Some(pk.rps_mean), base_peak),
                fmt_opt(us, 2),
                ratio(us, base_us),
                pk.p99_us / 1000.0,
                ps.iter().map(|p| p.rss_mib).fold(0.0, f64::max),
                ps.iter().map(|p| p.errors).sum::<u64>(),
                pk.bound_by.as_str()
            );
        }
    }
    s.push_str("</table>\n");

    for (scenario, per_target) in summary {
        let sid = super::slug(scenario);
        let _ = writeln!(s, "<h2 id=\"s-{sid}\">Scenario {}</h2>", esc(scenario));
        for (section, chart, svg) in charts {
            if section != scenario {
                continue;
            }
            let _ = writeln!(
                s,
                "<figure class=\"chart\" id=\"{}\" data-series=\"{}\">{}<figcaption>{}</figcaption></figure>",
                esc(&chart.id),
                esc(&chart.series.iter().map(|x| x.name.as_str()).collect::<Vec<_>>().join("|")),
                strip_xml_decl(svg),
                esc(&chart.title)
            );
        }
        let base = per_target
            .iter()
            .find(|(t, _)| t == baseline)
            .map(|(_, p)| p);
        let _ = writeln!(s, "<details><summary>Every level of {}</summary><table><tr><th class=\"l\">target</th><th>conns</th><th>rounds</th><th>req/s mean</th><th>min</th><th>max</th><th>req/s ÷ baseline</th><th>server µs/req</th><th>µs/req ÷ baseline</th><th>p50 ms</th><th>p99 ms</th><th>CPU %</th><th>RSS MiB</th><th>errors</th><th class=\"l\">bound by</th></tr>", esc(scenario));
        for (t, ps) in per_target {
            for p in ps {
                let b = base.and_then(|b| b.iter().find(|x| x.connections == p.connections));
                let _ = writeln!(
                    s,
                    "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{:.0}</td><td>{:.0}</td><td>{:.0}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.3}</td><td>{:.3}</td><td>{:.0}</td><td>{:.1}</td><td>{}</td><td class=\"l\">{}</td></tr>",
                    esc(t),
                    p.connections,
                    p.rounds,
                    p.rps_mean,
                    p.rps_min,
                    p.rps_max,
                    ratio(Some(p.rps_mean), b.map(|b| b.rps_mean)),
                    fmt_opt(p.us_per_req, 2),
                    ratio(p.us_per_req, b.and_then(|b| b.us_per_req)),
                    p.p50_us / 1000.0,
                    p.p99_us / 1000.0,
                    p.cpu_pct,
                    p.rss_mib,
                    p.errors,
                    p.bound_by.as_str()
                );
            }
        }
        s.push_str("</table></details>\n");
    }

    s.push_str("<h2 id=\"environment\">Environment check</h2>");
    checks_table(&mut s, &h.doctor);
    if !res.target_checks.is_empty() {
        checks_table(&mut s, &res.target_checks);
    }
    let _ = writeln!(
        s,
        "<h2 id=\"spec\">Spec</h2><p class=\"note\">{}</p><pre>{}</pre>",
        esc(&h.spec_file),
        esc(&h.spec_text)
    );
    let _ = write!(s, "<script>{SCRIPT}</script>\n</body></html>\n");
    s
}

fn strip_xml_decl(svg: &str) -> &str {
    match svg.find("<svg") {
        Some(at) => &svg[at..],
        None => svg,
    }
}
