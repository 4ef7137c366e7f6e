//! The text report, laid out like wrk's so that wrk users read it at a glance (and scripts that
//! grep wrk's `N requests in` and `Requests/sec:` lines keep working), plus the percentiles wrk2
//! users expect and, with `--latency`, HdrHistogram's full percentile spectrum.

use std::fmt::Write as _;

use crate::config::LoadConfig;
use crate::report::Report;

/// The banner printed before the run (wrk's `Running 10s test @ URL`).
#[must_use]
pub fn banner(cfg: &LoadConfig) -> String {
    let what = match (cfg.duration, cfg.requests) {
        (Some(d), Some(n)) => format!("{n} requests (at most {})", duration(d.as_secs_f64())),
        (Some(d), None) => format!("{} test", duration(d.as_secs_f64())),
        (None, Some(n)) => format!("{n} requests"),
        (None, None) => format!(
            "{} test",
            duration(crate::config::DEFAULT_DURATION.as_secs_f64())
        ),
    };
    let urls: Vec<&str> = cfg.targets.iter().map(|t| t.url.as_str()).collect();
    let mut s = format!("Running {what} @ {}\n", urls.join(", "));
    let _ = write!(
        s,
        "  {} threads and {} connections",
        cfg.threads, cfg.connections
    );
    if cfg.pipeline > 1 {
        let _ = write!(s, ", pipeline {}", cfg.pipeline);
    }
    if let Some(r) = cfg.rate {
        let _ = write!(s, ", {r} requests/s");
    }
    if !cfg.warmup.is_zero() {
        let _ = write!(s, ", after {} warm-up", duration(cfg.warmup.as_secs_f64()));
    }
    s.push('\n');
    s
}

/// The report, after the banner. `detailed` adds the full percentile spectrum (`--latency`).
#[must_use]
pub fn render(report: &Report, detailed: bool) -> String {
    let mut s = String::new();
    let l = report.latency_summary();
    let _ = writeln!(s, "  Thread Stats   Avg      Stdev     Max   +/- Stdev");
    let _ = writeln!(
        s,
        "    Latency {:>9} {:>9} {:>9} {:>8.2}%",
        micros(l.mean),
        micros(l.stdev),
        micros(l.max as f64),
        l.within_stdev * 100.0
    );
    if let Some(r) = &report.thread_rates {
        let _ = writeln!(
            s,
            "    Req/Sec {:>9} {:>9} {:>9} {:>8.2}%",
            metric(r.mean),
            metric(r.stdev),
            metric(r.max),
            r.within_stdev * 100.0
        );
    }
    let _ = writeln!(s, "  Latency Distribution");
    for (p, v) in [
        ("50", l.p50),
        ("75", l.p75),
        ("90", l.p90),
        ("99", l.p99),
        ("99.9", l.p99_9),
        ("99.99", l.p99_99),
    ] {
        let _ = writeln!(s, "  {p:>6}% {:>9}", micros(v as f64));
    }
    if detailed {
        spectrum(&mut s, report);
    }
    let _ = writeln!(
        s,
        "  {} requests in {}, {} read",
        report.responses,
        duration(report.elapsed.as_secs_f64()),
        bytes(report.bytes_read as f64)
    );
    let e = &report.errors;
    if e.total() > 0 {
        let _ = write!(
            s,
            "  Socket errors: connect {}, read {}, write {}, timeout {}, protocol {}",
            e.connect, e.read, e.write, e.timeout, e.protocol
        );
        if e.tls > 0 || report.tls.is_some() {
            let _ = write!(s, ", tls {}", e.tls);
        }
        s.push('\n');
    }
    if let Some(t) = &report.tls {
        let _ = writeln!(
            s,
            "  TLS: {}, {}; {} handshakes, {} resumed",
            t.protocol, t.cipher, t.handshakes, t.resumed
        );
    }
    let st = &report.status;
    if st.not_ok() > 0 || st.redirection > 0 {
        let _ = writeln!(
            s,
            "  Status: 2xx {}, 3xx {}, 4xx {}, 5xx {}",
            st.success, st.redirection, st.client_error, st.server_error
        );
    }
    if st.not_ok() > 0 {
        let _ = writeln!(s, "  Non-2xx or 3xx responses: {}", st.not_ok());
    }
    if report.interrupted {
        let _ = writeln!(s, "  (interrupted: figures cover the time until the stop)");
    }
    let _ = writeln!(s, "Requests/sec: {:>10.2}", report.requests_per_sec());
    let _ = writeln!(s, "Transfer/sec: {:>10}", bytes(report.bytes_per_sec()));
    if let Some(us) = report.cpu_us_per_response() {
        let _ = writeln!(
            s,
            "Loader CPU:   {:>10} ({us:.2}us per response)",
            duration(report.cpu_time().as_secs_f64())
        );
    }
    s
}

/// HdrHistogram's percentile distribution, as wrk2 and HistogramLogProcessor print it (values
/// in milliseconds).
fn spectrum(s: &mut String, report: &Report) {
    let h = &report.latency;
    let _ = writeln!(s, "\n  Detailed Percentile spectrum:");
    let _ = writeln!(
        s,
        "       Value   Percentile   TotalCount 1/(1-Percentile)\n"
    );
    let mut total = 0u64;
    for v in h.iter_quantiles(5) {
        total += v.count_since_last_iteration();
        let q = v.quantile_iterated_to();
        let value = h.highest_equivalent(v.value_iterated_to()) as f64 / 1000.0;
        if q < 1.0 {
            let _ = writeln!(
                s,
                "{value:12.3} {q:12.6} {total:12} {:12.2}",
                1.0 / (1.0 - q)
            );
        } else {
            let _ = writeln!(s, "{value:12.3} {q:12.6} {:12}", h.len());
        }
    }
    let _ = writeln!(
        s,
        "#[Mean    = {:12.3}, StdDeviation   = {:12.3}]",
        h.mean() / 1000.0,
        h.stdev() / 1000.0
    );
    let _ = writeln!(
        s,
        "#[Max     = {:12.3}, Total count    = {:12}]",
        h.max() as f64 / 1000.0,
        h.len()
    );
    let _ = writeln!(
        s,
        "#[Buckets = {:12}, SubBuckets     = {:12}]",
        h.buckets(),
        h.distinct_values()
    );
    s.push('\n');
}

/// A count in wrk's metric units (`k` = 1000, `M`).
#[must_use]
pub fn metric(n: f64) -> String {
    if n >= 1e6 {
        format!("{:.2}M", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.2}k", n / 1e3)
    } else {
        format!("{n:.2}")
    }
}

/// A time in microseconds, in wrk's units (`us`, `ms`, `s`, `m`).
#[must_use]
pub fn micros(us: f64) -> String {
    if us < 1000.0 {
        format!("{us:.2}us")
    } else if us < 1e6 {
        format!("{:.2}ms", us / 1e3)
    } else {
        duration(us / 1e6)
    }
}

/// A time in seconds, in wrk's units.
#[must_use]
pub fn duration(secs: f64) -> String {
    if secs < 60.0 {
        format!("{secs:.2}s")
    } else if secs < 3600.0 {
        format!("{:.2}m", secs / 60.0)
    } else {
        format!("{:.2}h", secs / 3600.0)
    }
}

/// A byte count in wrk's binary units (`KB` = 1024 B).
#[must_use]
pub fn bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut v = n;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.2}{}", UNITS[u])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(micros(635.91), "635.91us");
        assert_eq!(micros(890_000.0), "890.00ms");
        assert_eq!(micros(1_500_000.0), "1.50s");
        assert_eq!(duration(10.0), "10.00s");
        assert_eq!(duration(120.0), "2.00m");
        assert_eq!(bytes(17.76 * 1024.0 * 1024.0 * 1024.0), "17.76GB");
        assert_eq!(bytes(100.0), "100.00B");
    }
}
