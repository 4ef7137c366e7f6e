//! The figures a report draws: the rows of a results file summarised by scenario, target and
//! connection level (mean and min–max req/s over rounds, medians of the rest), and the
//! file-name form of a scenario's name.
//!
//! Both the page ([`super::html`]) and the charts ([`super::build_charts`]) read these; this
//! module reads only the results and draws nothing.

use crate::results::{BoundBy, Results, Row, SyscallsPerReq};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![1.0, 2.0]), Some(1.5));
        assert_eq!(median(vec![]), None);
    }
}
