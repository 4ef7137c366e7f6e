//! Pass/fail limits on a run's figures, for CI jobs: `--max-error-rate`, `--max-p99`,
//! `--min-rps`. A run that breaks one still prints its whole report; the failures are named in
//! the text and the JSON, and `lowlat load` exits with [`EXIT_THRESHOLD`], distinct from a run
//! that could not start (1) and a usage error (2).

use std::time::Duration;

use serde::Serialize;

use crate::report::Report;

/// Exit status when every request ran but a threshold failed.
pub const EXIT_THRESHOLD: u8 = 3;

/// The limits asked for; `None` checks nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Thresholds {
    /// Largest share of failed requests and non-2xx/3xx responses, 0..=1.
    pub max_error_rate: Option<f64>,
    /// Largest 99th-percentile latency.
    pub max_p99: Option<Duration>,
    /// Fewest responses per second.
    pub min_rps: Option<f64>,
}

/// One limit checked against the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    /// The flag that set it, without dashes (`max-p99`).
    pub name: &'static str,
    /// The limit, in the unit of `value`.
    pub limit: f64,
    /// What the run measured: a ratio 0..=1, microseconds, or responses per second.
    pub value: f64,
    pub passed: bool,
}

impl Thresholds {
    /// Whether any limit is set.
    #[must_use]
    pub fn any(&self) -> bool {
        self.max_error_rate.is_some() || self.max_p99.is_some() || self.min_rps.is_some()
    }

    /// Checks every limit that is set.
    #[must_use]
    pub fn check(&self, r: &Report) -> Vec<Outcome> {
        let mut out = Vec::new();
        if let Some(limit) = self.max_error_rate {
            let value = error_rate(r);
            out.push(Outcome {
                name: "max-error-rate",
                limit,
                value,
                passed: value <= limit,
            });
        }
        if let Some(limit) = self.max_p99 {
            let value = r.latency_summary().p99 as f64;
            let limit = limit.as_secs_f64() * 1e6;
            out.push(Outcome {
                name: "max-p99",
                limit,
                value,
                passed: r.responses > 0 && value <= limit,
            });
        }
        if let Some(limit) = self.min_rps {
            let value = r.requests_per_sec();
            out.push(Outcome {
                name: "min-rps",
                limit,
                value,
                passed: value >= limit,
            });
        }
        out
    }
}

/// Failed requests and responses that are not 2xx or 3xx, over every request that ended.
#[must_use]
pub fn error_rate(r: &Report) -> f64 {
    let failed = r.errors.total() + r.status.not_ok();
    let ended = r.responses + r.errors.total();
    if ended == 0 {
        1.0
    } else {
        failed as f64 / ended as f64
    }
}

/// Parses a rate: `1%`, `0.5%`, or a fraction `0.01`.
///
/// # Errors
/// A message for clap.
pub fn parse_rate(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => t.parse::<f64>(),
    }
    .map_err(|_| format!("{text:?} is not a rate (e.g. 1%, 0.5%, 0.01)"))?;
    if !(0.0..=1.0).contains(&v) {
        return Err(format!("{text:?} must be between 0% and 100%"));
    }
    Ok(v)
}

/// One line per outcome, for the text report.
#[must_use]
pub fn describe(o: &Outcome) -> String {
    let (value, limit) = match o.name {
        "max-error-rate" => (
            format!("{:.3}%", o.value * 100.0),
            format!("{:.3}%", o.limit * 100.0),
        ),
        "max-p99" => (crate::text::micros(o.value), crate::text::micros(o.limit)),
        _ => (format!("{:.2}", o.value), format!("{:.2}", o.limit)),
    };
    let verdict = if o.passed { "passed" } else { "FAILED" };
    let op = match (o.name, o.passed) {
        ("min-rps", true) => ">=",
        ("min-rps", false) => "<",
        (_, true) => "<=",
        (_, false) => ">",
    };
    format!("  Threshold --{} {verdict}: {value} {op} {limit}", o.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("1%"), Ok(0.01));
        assert_eq!(parse_rate("0.5%"), Ok(0.005));
        assert_eq!(parse_rate("0.02"), Ok(0.02));
        assert_eq!(parse_rate("0"), Ok(0.0));
        for bad in ["", "%", "x", "101%", "-1%", "2"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }
}
