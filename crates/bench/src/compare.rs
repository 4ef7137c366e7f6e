//! `lowlat bench compare BASE.json NEW.json`: did a change make the server faster? For every
//! (scenario, target, connections) cell that both runs measured, the ratio NEW/BASE of req/s,
//! server µs/req, p50, p99 and peak RSS, each with a bootstrap confidence interval over the
//! rounds, and a verdict on the cell: faster, slower, or no measurable change.
//!
//! The verdict reads server µs/req (the busy time of the server's cores per request, which
//! still ranks servers when the loader is the bottleneck), or req/s when a run has no µs/req.
//! A cell is *slower* only when the whole 95% interval of its cost ratio lies above
//! 1 + threshold — noise of 3–30% on a shared machine must not fail a build — and *faster*
//! when it lies below 1 − threshold. With fewer than [`MIN_ROUNDS`] rounds on a side, the
//! interval means nothing and the cell says so instead of guessing; when no cell at all could
//! be judged, the gate exits [`EXIT_UNDECIDED`] rather than pass.
//!
//! The bootstrap resamples each side's rounds with replacement ([`RESAMPLES`] times, from a
//! fixed seed, so a comparison is reproducible) and takes the ratio of the resampled means.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::error::BenchError;
use crate::results::{Results, Row};

/// Rounds each side needs before a verdict is given.
pub const MIN_ROUNDS: usize = 3;
/// Bootstrap resamples per interval.
pub const RESAMPLES: usize = 4000;
/// Exit status when a cell is slower beyond the threshold (a CI gate): 3, as `lowlat load`'s
/// failed thresholds.
pub const EXIT_SLOWER: u8 = 3;
/// Exit status when no cell could be judged (too few rounds on a side everywhere, or no cell
/// in common): a gate that cannot decide must not pass as if nothing got slower.
pub const EXIT_UNDECIDED: u8 = 4;

/// What a cell's figures say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Faster,
    Slower,
    NoMeasurableChange,
    /// Too few rounds on a side to decide.
    Undecided,
}

impl Verdict {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Faster => "faster",
            Self::Slower => "slower",
            Self::NoMeasurableChange => "no measurable change",
            Self::Undecided => "too few rounds to decide",
        }
    }
}

/// A ratio NEW/BASE and its 95% interval; `None` where a side lacks the figure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Ratio {
    pub ratio: f64,
    pub low: f64,
    pub high: f64,
}

/// One cell of the comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cell {
    pub scenario: String,
    pub target: String,
    pub connections: u32,
    pub base_rounds: usize,
    pub new_rounds: usize,
    pub rps: Option<Ratio>,
    pub us_per_req: Option<Ratio>,
    pub p50: Option<Ratio>,
    pub p99: Option<Ratio>,
    pub rss: Option<Ratio>,
    /// What the verdict was read from: `server_us_per_req` or `rps`.
    pub judged_on: &'static str,
    pub verdict: Verdict,
}

/// The whole comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub threshold: f64,
    pub cells: Vec<Cell>,
    /// Cells measured by one run only, as `scenario/target/connections`.
    pub only_in_base: Vec<String>,
    pub only_in_new: Vec<String>,
    /// Differences between the runs that do not stop the comparison (spec text, versions).
    pub notes: Vec<String>,
}

impl Comparison {
    /// Whether any cell is slower beyond the threshold.
    #[must_use]
    pub fn regressed(&self) -> bool {
        self.cells.iter().any(|c| c.verdict == Verdict::Slower)
    }

    /// Cells given a verdict (faster, slower or no measurable change).
    #[must_use]
    pub fn judged(&self) -> usize {
        self.cells
            .iter()
            .filter(|c| c.verdict != Verdict::Undecided)
            .count()
    }

    /// Why no cell could be judged, and what to run instead; `None` when some cell was.
    #[must_use]
    pub fn undecided(&self) -> Option<String> {
        if self.judged() > 0 {
            return None;
        }
        if self.cells.is_empty() {
            return Some("no cell could be judged: the runs measured no cell in common (scenario, target and connections)".into());
        }
        let fewest = |f: fn(&Cell) -> usize| self.cells.iter().map(f).min().unwrap_or(0);
        let (b, n) = (fewest(|c| c.base_rounds), fewest(|c| c.new_rounds));
        if b >= MIN_ROUNDS && n >= MIN_ROUNDS {
            return Some(
                "no cell could be judged: neither run has server µs/req or req/s to compare".into(),
            );
        }
        Some(format!(
            "no cell could be judged: a verdict needs at least {MIN_ROUNDS} rounds on each side and the runs have as few as {b} (BASE) and {n} (NEW); measure both with --rounds {MIN_ROUNDS} or more (5 gives tighter intervals)"
        ))
    }
}

/// Checks that two runs can be compared: the same spec and the same machine, unless `force`.
///
/// # Errors
/// [`BenchError::Compare`] saying what differs.
pub fn compatible(base: &Results, new: &Results, force: bool) -> Result<Vec<String>, BenchError> {
    let (b, n) = (&base.header, &new.header);
    let mut refusals = Vec::new();
    if b.spec_name != n.spec_name {
        refusals.push(format!(
            "different specs ({:?} and {:?})",
            b.spec_name, n.spec_name
        ));
    }
    let (bm, nm) = (&b.machine, &n.machine);
    if bm.cpu_model != nm.cpu_model || bm.cpus != nm.cpus {
        refusals.push(format!(
            "different machines ({} × {:?} and {} × {:?})",
            bm.cpus, bm.cpu_model, nm.cpus, nm.cpu_model
        ));
    }
    let mut notes = Vec::new();
    if bm.kernel != nm.kernel {
        notes.push(format!("kernels differ: {} and {}", bm.kernel, nm.kernel));
    }
    if b.spec_text != n.spec_text {
        notes.push("the spec's text differs between the runs".into());
    }
    // The tracepoints make every system call dearer (about 10% of lowlat's µs/req on
    // /plaintext, see docs/PERFORMANCE.md): a run with them is not the same measurement.
    let counted = |r: &Results| r.rows.iter().any(|x| x.syscalls_per_req.is_some());
    if counted(base) != counted(new) {
        notes.push(format!(
            "system calls were counted in {} only: the tracepoints add to the server's µs/req (run both with or both with --no-syscalls)",
            if counted(base) { "BASE" } else { "NEW" }
        ));
    }
    if b.lowlat_version != n.lowlat_version {
        notes.push(format!(
            "lowlat {} and {}",
            b.lowlat_version, n.lowlat_version
        ));
    }
    if refusals.is_empty() {
        return Ok(notes);
    }
    if force {
        notes.extend(
            refusals
                .into_iter()
                .map(|r| format!("compared anyway: {r}")),
        );
        return Ok(notes);
    }
    Err(BenchError::Compare(format!(
        "{}; ratios between them would measure that difference (--force compares anyway)",
        refusals.join(" and ")
    )))
}

/// Compares two runs cell by cell.
#[must_use]
pub fn compare(base: &Results, new: &Results, threshold: f64, notes: Vec<String>) -> Comparison {
    let group = |r: &Results| {
        let mut m: BTreeMap<(String, String, u32), Vec<Row>> = BTreeMap::new();
        for row in &r.rows {
            m.entry((row.scenario.clone(), row.target.clone(), row.connections))
                .or_default()
                .push(row.clone());
        }
        m
    };
    let (b, n) = (group(base), group(new));
    let name = |k: &(String, String, u32)| format!("{}/{}/{}", k.0, k.1, k.2);
    let mut cells = Vec::new();
    let mut rng = SplitMix(0x6c6f_776c_6174);
    for (key, base_rows) in &b {
        let Some(new_rows) = n.get(key) else { continue };
        let series = |rows: &[Row], f: &dyn Fn(&Row) -> Option<f64>| -> Vec<f64> {
            rows.iter().filter_map(f).collect()
        };
        let mut ratio_of = |f: &dyn Fn(&Row) -> Option<f64>| {
            bootstrap(&series(base_rows, f), &series(new_rows, f), &mut rng)
        };
        let rps = ratio_of(&|r| Some(r.rps));
        let us_per_req = ratio_of(&|r| r.server_us_per_req);
        let p50 = ratio_of(&|r| Some(r.p50_us as f64));
        let p99 = ratio_of(&|r| Some(r.p99_us as f64));
        let rss = ratio_of(&|r| Some(r.rss_peak_kb as f64));
        let (judged_on, cost) = match (us_per_req, rps) {
            (Some(c), _) => ("server_us_per_req", Some(c)),
            // Throughput: a higher ratio is better, so its inverse is the cost.
            (None, Some(r)) => (
                "rps",
                Some(Ratio {
                    ratio: 1.0 / r.ratio,
                    low: 1.0 / r.high,
                    high: 1.0 / r.low,
                }),
            ),
            (None, None) => ("rps", None),
        };
        let verdict = if base_rows.len() < MIN_ROUNDS || new_rows.len() < MIN_ROUNDS {
            Verdict::Undecided
        } else {
            match cost {
                Some(c) if c.low > 1.0 + threshold => Verdict::Slower,
                Some(c) if c.high < 1.0 - threshold => Verdict::Faster,
                Some(_) => Verdict::NoMeasurableChange,
                None => Verdict::Undecided,
            }
        };
        cells.push(Cell {
            scenario: key.0.clone(),
            target: key.1.clone(),
            connections: key.2,
            base_rounds: base_rows.len(),
            new_rounds: new_rows.len(),
            rps,
            us_per_req,
            p50,
            p99,
            rss,
            judged_on,
            verdict,
        });
    }
    Comparison {
        threshold,
        cells,
        only_in_base: b.keys().filter(|k| !n.contains_key(*k)).map(name).collect(),
        only_in_new: n.keys().filter(|k| !b.contains_key(*k)).map(name).collect(),
        notes,
    }
}

/// The ratio of means NEW/BASE with a 95% percentile-bootstrap interval; `None` when a side
/// is empty or its mean is zero.
fn bootstrap(base: &[f64], new: &[f64], rng: &mut SplitMix) -> Option<Ratio> {
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    if base.is_empty() || new.is_empty() || mean(base) <= 0.0 {
        return None;
    }
    let ratio = mean(new) / mean(base);
    let mut draws = Vec::with_capacity(RESAMPLES);
    let resample = |v: &[f64], rng: &mut SplitMix| {
        let n = v.len();
        (0..n).map(|_| v[rng.below(n)]).sum::<f64>() / n as f64
    };
    for _ in 0..RESAMPLES {
        let b = resample(base, rng);
        let n = resample(new, rng);
        if b > 0.0 {
            draws.push(n / b);
        }
    }
    draws.sort_by(f64::total_cmp);
    let at = |q: f64| draws[((draws.len() - 1) as f64 * q).round() as usize];
    Some(Ratio {
        ratio,
        low: at(0.025),
        high: at(0.975),
    })
}

/// A small, seedable generator for the resampling (SplitMix64): a comparison gives the same
/// intervals every time it is run.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n ≥ 1; the modulo bias is below 2^-50 for any round count).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The comparison as a text table, one line per cell, then what is missing and the notes.
#[must_use]
pub fn render_text(c: &Comparison) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "NEW ÷ BASE, with 95% intervals over the rounds; threshold {:.1}%",
        c.threshold * 100.0
    );
    let _ = writeln!(
        s,
        "| scenario | target | conns | rounds | req/s | server µs/req | p50 | p99 | RSS | verdict |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|");
    let fmt = |r: &Option<Ratio>| match r {
        Some(r) => format!("{:.3} [{:.3}–{:.3}]", r.ratio, r.low, r.high),
        None => "–".into(),
    };
    for cell in &c.cells {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {}/{} | {} | {} | {} | {} | {} | {} |",
            cell.scenario,
            cell.target,
            cell.connections,
            cell.base_rounds,
            cell.new_rounds,
            fmt(&cell.rps),
            fmt(&cell.us_per_req),
            fmt(&cell.p50),
            fmt(&cell.p99),
            fmt(&cell.rss),
            cell.verdict.as_str()
        );
    }
    if c.cells.iter().any(|x| x.verdict == Verdict::Undecided) {
        let _ = writeln!(
            s,
            "Cells with fewer than {MIN_ROUNDS} rounds on a side are not judged: run more rounds (--rounds)."
        );
    }
    for (what, list) in [
        ("only in BASE", &c.only_in_base),
        ("only in NEW", &c.only_in_new),
    ] {
        if !list.is_empty() {
            let _ = writeln!(s, "{what}: {}", list.join(", "));
        }
    }
    for note in &c.notes {
        let _ = writeln!(s, "note: {note}");
    }
    let slower = c
        .cells
        .iter()
        .filter(|x| x.verdict == Verdict::Slower)
        .count();
    let faster = c
        .cells
        .iter()
        .filter(|x| x.verdict == Verdict::Faster)
        .count();
    let _ = writeln!(
        s,
        "{} cells: {slower} slower, {faster} faster, {} without a measurable change, {} undecided",
        c.cells.len(),
        c.cells
            .iter()
            .filter(|x| x.verdict == Verdict::NoMeasurableChange)
            .count(),
        c.cells
            .iter()
            .filter(|x| x.verdict == Verdict::Undecided)
            .count()
    );
    s
}

/// The comparison page: the table, then each scenario's charts (req/s, µs/req, p50, p99, CPU,
/// RSS) with both runs on them (BASE dashed, NEW solid, one colour per target), in the report's style.
///
/// # Errors
/// [`BenchError::Chart`] when a chart cannot be drawn.
pub fn html(
    base: &Results,
    new: &Results,
    base_name: &str,
    new_name: &str,
    c: &Comparison,
) -> Result<String, BenchError> {
    use crate::report::charts::{Chart, Series};
    let (bs, ns) = (
        crate::report::summarise(base),
        crate::report::summarise(new),
    );
    let color_of = |t: &str| base.header.targets.iter().position(|x| x == t).unwrap_or(0);
    let mut figures = Vec::new();
    for (scenario, base_targets) in &bs {
        let Some((_, new_targets)) = ns.iter().find(|(s, _)| s == scenario) else {
            continue;
        };
        type Pick = fn(&crate::report::Point) -> Option<f64>;
        let metrics: [(&str, &str, &str, Pick); 6] = [
            ("rps", "requests per second", "requests / s", |p| {
                Some(p.rps_mean)
            }),
            (
                "us-per-req",
                "server-core µs per request (lower is better)",
                "µs of server cores / request",
                |p| p.us_per_req,
            ),
            ("p50", "latency p50", "ms", |p| Some(p.p50_us / 1000.0)),
            ("p99", "latency p99", "ms", |p| Some(p.p99_us / 1000.0)),
            ("cpu", "server CPU (process tree)", "% of one core", |p| {
                Some(p.cpu_pct)
            }),
            ("rss", "server memory (peak RSS)", "MiB", |p| {
                Some(p.rss_mib)
            }),
        ];
        for (id, title, y, pick) in metrics {
            let mut series = Vec::new();
            for (label, targets, dashed) in
                [("BASE", base_targets, true), ("NEW", new_targets, false)]
            {
                for (t, ps) in targets {
                    series.push(Series {
                        name: format!("{t} {label}"),
                        color: color_of(t),
                        points: ps
                            .iter()
                            .filter_map(|p| Some((f64::from(p.connections), pick(p)?)))
                            .collect(),
                        band: vec![],
                        dashed,
                        hollow: vec![],
                    });
                }
            }
            let chart = Chart {
                id: format!("{}-{id}", crate::report::slug(scenario)),
                title: format!("{scenario}: {title} (BASE dashed, NEW solid)"),
                x_label: "concurrent connections".into(),
                y_label: y.into(),
                log_x: false,
                log_y: false,
                y_from_zero: true,
                series,
            };
            let svg = chart.svg()?;
            figures.push((
                chart.id.clone(),
                crate::report::html::strip_xml_decl(&svg).to_owned(),
                chart.title.clone(),
            ));
        }
    }
    let fmt = |r: &Option<Ratio>| match r {
        Some(r) => format!("{:.3} [{:.3}–{:.3}]", r.ratio, r.low, r.high),
        None => "–".into(),
    };
    let rows = c
        .cells
        .iter()
        .map(|x| {
            [
                x.scenario.clone(),
                x.target.clone(),
                x.connections.to_string(),
                format!("{}/{}", x.base_rounds, x.new_rounds),
                fmt(&x.rps),
                fmt(&x.us_per_req),
                fmt(&x.p50),
                fmt(&x.p99),
                fmt(&x.rss),
                x.verdict.as_str().to_owned(),
                match x.verdict {
                    Verdict::Slower => "fail",
                    Verdict::Faster => "ok",
                    _ => "",
                }
                .to_owned(),
            ]
        })
        .collect();
    let mut notes = c.notes.clone();
    for (what, list) in [
        ("only in BASE", &c.only_in_base),
        ("only in NEW", &c.only_in_new),
    ] {
        if !list.is_empty() {
            notes.push(format!("{what}: {}", list.join(", ")));
        }
    }
    let page = ComparePage {
        style: crate::report::html::STYLE,
        name: &base.header.spec_name,
        base: base_name,
        new: new_name,
        threshold: format!("{:.1}%", c.threshold * 100.0),
        rows,
        notes,
        figures,
    };
    Ok(sailfish::TemplateSimple::render_once(page).unwrap_or_default())
}

#[derive(sailfish::TemplateSimple)]
#[template(path = "compare.stpl")]
struct ComparePage<'a> {
    style: &'a str,
    name: &'a str,
    base: &'a str,
    new: &'a str,
    threshold: String,
    /// 11 cells: the table's 10 and the verdict's CSS class.
    rows: Vec<[String; 11]>,
    notes: Vec<String>,
    /// (id, inline SVG, caption)
    figures: Vec<(String, String, String)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_brackets_the_ratio() {
        let mut rng = SplitMix(1);
        let base = [10.0, 10.5, 9.5, 10.2, 9.8];
        let new = [12.0, 12.6, 11.4, 12.2, 11.8];
        let r = bootstrap(&base, &new, &mut rng).unwrap();
        assert!((r.ratio - 1.2).abs() < 0.01, "{r:?}");
        assert!(r.low < r.ratio && r.ratio < r.high, "{r:?}");
        assert!(r.low > 1.1 && r.high < 1.3, "{r:?}");
        // Identical samples: a degenerate interval at 1.
        let r = bootstrap(&base, &base, &mut rng).unwrap();
        assert!((r.ratio - 1.0).abs() < 1e-12);
        assert!(r.low <= 1.0 && r.high >= 1.0, "{r:?}");
        assert!(bootstrap(&[], &new, &mut rng).is_none());
    }
}
