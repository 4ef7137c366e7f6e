//! The text report, laid out like wrk's so that wrk users read it at a glance (and scripts that
//! grep wrk's `N requests in` and `Requests/sec:` lines keep working), plus the percentiles wrk2
//! users expect and, with `--latency`, HdrHistogram's full percentile spectrum.

use std::fmt::Write as _;

use crate::config::LoadConfig;
use crate::report::Report;

/// The banner printed before the run: wrk's two lines (`Running 10s test @ URL`, `  N threads and
/// M connections`), then lowlat's own settings, if any, on a line of their own.
#[must_use]
pub fn banner(cfg: &LoadConfig) -> String {
    let what = match (cfg.duration, cfg.requests) {
        (Some(d), Some(n)) => format!("{n} requests (at most {})", run_length(d)),
        (Some(d), None) => format!("{} test", run_length(d)),
        (None, Some(n)) => format!("{n} requests"),
        (None, None) => format!("{} test", run_length(crate::config::DEFAULT_DURATION)),
    };
    let urls: Vec<&str> = cfg.targets.iter().map(|t| t.url.as_str()).collect();
    let mut s = format!("Running {what} @ {}\n", urls.join(", "));
    let _ = writeln!(
        s,
        "  {} threads and {} connections",
        cfg.threads, cfg.connections
    );
    let mut extra = Vec::new();
    if cfg.h2 || cfg.h3 {
        extra.push(format!(
            "HTTP/{}, {} stream{} per connection",
            if cfg.h3 { 3 } else { 2 },
            cfg.pipeline,
            if cfg.pipeline == 1 { "" } else { "s" }
        ));
    } else if cfg.pipeline > 1 {
        extra.push(format!("pipeline {}", cfg.pipeline));
    }
    if let Some(r) = cfg.rate {
        extra.push(format!("{r} requests/s"));
    }
    if !cfg.warmup.is_zero() {
        extra.push(format!("after {} warm-up", run_length(cfg.warmup)));
    }
    if !extra.is_empty() {
        let _ = writeln!(s, "  {}", extra.join(", "));
    }
    s
}

/// The report, after the banner: wrk's lines where wrk prints the same fact, in its order and
/// formats (`--latency` gives wrk2's percentile block and spectrum), then lowlat's own lines:
/// oha's status code and error distributions among them.
///
/// With `-U` the corrected block is printed in full first and the uncorrected one after it, so
/// the two read side by side in one format, as `--latency` prints them. A run that got no
/// response has no latency to show: its report says so instead of printing a table of zeros.
#[must_use]
pub fn render(report: &Report, detailed: bool) -> String {
    let mut s = String::new();
    let answered = report.responses > 0;
    let detailed = detailed || report.uncorrected_latency.is_some();
    let l = report.latency_summary();
    if answered {
        thread_stats(&mut s, report);
        if detailed {
            hdr_block(&mut s, &report.latency, "Recorded Latency");
        }
        if let Some(u) = &report.uncorrected_latency {
            s.push('\n');
            hdr_block(
                &mut s,
                u,
                "Uncorrected Latency (measured without taking delayed starts into account)",
            );
        }
    }
    let _ = writeln!(
        s,
        "  {} requests in {}, {}B read",
        report.responses,
        time_us(report.elapsed.as_secs_f64() * 1e6),
        binary(report.bytes_read as f64)
    );
    let e = &report.errors;
    if e.connect + e.read + e.write + e.timeout > 0 {
        let _ = writeln!(
            s,
            "  Socket errors: connect {}, read {}, write {}, timeout {}",
            e.connect, e.read, e.write, e.timeout
        );
    }
    let st = &report.status;
    if st.not_ok() > 0 {
        let _ = writeln!(s, "  Non-2xx or 3xx responses: {}", st.not_ok());
    }
    let _ = writeln!(s, "Requests/sec: {:>9.2}", report.requests_per_sec());
    let _ = writeln!(s, "Transfer/sec: {:>10}B", binary(report.bytes_per_sec()));
    // lowlat's own lines, after everything wrk prints.
    if !answered {
        let _ = writeln!(s, "  no response received");
    } else if !detailed {
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
    }
    distributions(&mut s, report);
    if let Some(t) = &report.tls {
        let _ = writeln!(
            s,
            "  TLS: {}, {}; {} handshakes, {} resumed",
            t.protocol, t.cipher, t.handshakes, t.resumed
        );
    }
    if let Some(h) = &report.h3 {
        let _ = writeln!(
            s,
            "  HTTP/3: {} handshakes, 0-RTT {} accepted, {} refused; {} packets sent, {} lost \
             (their frames retransmitted), {} congestion events, {} GOAWAY",
            h.handshakes,
            h.zero_rtt_accepted,
            h.zero_rtt_rejected,
            h.packets_sent,
            h.packets_lost,
            h.congestion_events,
            h.goaways
        );
    }
    if report.interrupted {
        let _ = writeln!(s, "  (interrupted: figures cover the time until the stop)");
    }
    if let Some(us) = report.cpu_us_per_response() {
        let _ = writeln!(
            s,
            "Loader CPU:   {:>10} ({us:.2}us per response)",
            duration(report.cpu_time().as_secs_f64())
        );
    }
    s
}

/// wrk's thread statistics: the latency and per-thread rate rows.
fn thread_stats(s: &mut String, report: &Report) {
    let l = report.latency_summary();
    let _ = writeln!(
        s,
        "  Thread Stats{:>6}{:>11}{:>8}{:>12}",
        "Avg", "Stdev", "Max", "+/- Stdev"
    );
    let _ = write!(s, "    {:<10}", "Latency");
    units(s, &time_us(l.mean), 8);
    units(s, &time_us(l.stdev), 10);
    units(s, &time_us(l.max as f64), 9);
    let _ = writeln!(s, "{:>8.2}%", l.within_stdev * 100.0);
    let (mean, stdev, max, within) = report
        .thread_rates
        .as_ref()
        .map_or((0.0, 0.0, 0.0, 0.0), |r| {
            (r.mean, r.stdev, r.max, r.within_stdev)
        });
    let _ = write!(s, "    {:<10}", "Req/Sec");
    units(s, &metric(mean), 8);
    units(s, &metric(stdev), 10);
    units(s, &metric(max), 9);
    let _ = writeln!(s, "{:>8.2}%", within * 100.0);
}

/// oha's distributions: responses by status code, then failed requests by kind, each kind
/// with what it means (the first TLS failure's reason goes to stderr, once).
fn distributions(s: &mut String, report: &Report) {
    let mut codes = report.status_codes.iter().peekable();
    if codes.peek().is_some() {
        let _ = writeln!(s, "  Status code distribution:");
        for (code, n) in codes {
            let _ = writeln!(
                s,
                "    [{code}] {n} response{}",
                if n == 1 { "" } else { "s" }
            );
        }
    }
    let e = &report.errors;
    if e.total() == 0 {
        return;
    }
    let _ = writeln!(s, "  Error distribution:");
    for (n, kind, meaning) in [
        (e.connect, "connect", "the connection could not be opened"),
        (e.read, "read", "reset, or closed with requests unanswered"),
        (e.write, "write", "a request could not be written"),
        (e.timeout, "timeout", "no response within the timeout"),
        (e.protocol, "protocol", "not a valid HTTP response"),
        (e.tls, "tls", "TLS handshake or record failed"),
    ] {
        if n > 0 {
            let _ = writeln!(s, "    [{n}] {kind}: {meaning}");
        }
    }
}

/// wrk2's `--latency` (and `-U`) block: its eight percentiles, then the full spectrum, then a
/// rule.
fn hdr_block(s: &mut String, h: &hdrhistogram::Histogram<u64>, what: &str) {
    let _ = writeln!(s, "  Latency Distribution (HdrHistogram - {what})");
    for p in [50.0, 75.0, 90.0, 99.0, 99.9, 99.99, 99.999, 100.0] {
        let _ = write!(s, "{p:>7.3}%");
        units(s, &time_us(h.value_at_percentile(p) as f64), 10);
        s.push('\n');
    }
    spectrum(s, h);
    let _ = writeln!(
        s,
        "----------------------------------------------------------"
    );
}

/// wrk's `print_units`: a value right-aligned in `width` columns, two of which are the unit
/// (a unit of one letter leaves a space after the value, none a two-space gap).
fn units(s: &mut String, msg: &str, width: usize) {
    let b = msg.as_bytes();
    let mut pad = 2;
    if b.last().is_some_and(u8::is_ascii_alphabetic) {
        pad -= 1;
    }
    if b.len() >= 2 && b[b.len() - 2].is_ascii_alphabetic() {
        pad -= 1;
    }
    let _ = write!(s, "{msg:>w$}{:p$}", "", w = width - pad, p = pad);
}

/// wrk's `format_units`: divide by `scale` while the value is at least 85% of it and a larger
/// unit remains (wrk never reaches the last unit of a list), `precision` decimals.
fn scaled(n: f64, scale: f64, base: &str, larger: &[&str], precision: usize) -> String {
    let mut amt = n;
    let mut unit = base;
    let mut i = 0;
    while i + 1 < larger.len() && amt >= scale * 0.85 {
        amt /= scale;
        unit = larger[i];
        i += 1;
    }
    format!("{amt:.precision$}{unit}")
}

/// wrk's `format_time_us`: microseconds as `us`/`ms`, or from a second on as `s`/`m`.
fn time_us(us: f64) -> String {
    if us >= 1e6 {
        scaled(us / 1e6, 60.0, "s", &["m", "h"], 2)
    } else {
        scaled(us, 1000.0, "us", &["ms", "s"], 2)
    }
}

/// wrk's `format_binary` (the caller appends `B`).
fn binary(n: f64) -> String {
    scaled(n, 1024.0, "", &["K", "M", "G", "T", "P"], 2)
}

/// How long a run is, as wrk's banner says it (`10s`, `2m`), or to the millisecond when it is
/// not whole seconds (wrk cannot run those).
fn run_length(d: std::time::Duration) -> String {
    if d.subsec_nanos() == 0 {
        scaled(d.as_secs_f64(), 60.0, "s", &["m", "h"], 0)
    } else {
        duration(d.as_secs_f64())
    }
}

/// HdrHistogram's percentile distribution, as wrk2 and HistogramLogProcessor print it (values
/// in milliseconds).
fn spectrum(s: &mut String, h: &hdrhistogram::Histogram<u64>) {
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

/// A count in wrk's metric units (`k` = 1000, `M`), as wrk's `format_metric`.
#[must_use]
pub fn metric(n: f64) -> String {
    scaled(n, 1000.0, "", &["k", "M", "G", "T", "P"], 2)
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

    /// wrk's own formats, values taken from wrk's output.
    #[test]
    fn wrk_units() {
        assert_eq!(time_us(36.67), "36.67us");
        assert_eq!(
            time_us(900.0),
            "0.90ms",
            "from 85% of a unit up, the larger one"
        );
        assert_eq!(time_us(3340.0), "3.34ms");
        assert_eq!(time_us(1_100_000.0), "1.10s");
        assert_eq!(time_us(90_000_000.0), "1.50m");
        assert_eq!(metric(118_370.0), "118.37k");
        assert_eq!(metric(12.0), "12.00");
        assert_eq!(binary(16.13 * 1024.0 * 1024.0), "16.13M");
        assert_eq!(run_length(std::time::Duration::from_secs(1)), "1s");
        assert_eq!(run_length(std::time::Duration::from_secs(10)), "10s");
        assert_eq!(run_length(std::time::Duration::from_secs(120)), "2m");
        assert_eq!(run_length(std::time::Duration::from_millis(1500)), "1.50s");
        let mut s = String::new();
        super::units(&mut s, "36.67us", 8);
        super::units(&mut s, "121.51us", 10);
        super::units(&mut s, "3.34ms", 9);
        assert_eq!(s, " 36.67us  121.51us   3.34ms");
        let mut s = String::new();
        super::units(&mut s, "118.37k", 8);
        super::units(&mut s, "3.99k", 10);
        super::units(&mut s, "122.87k", 9);
        assert_eq!(s, "118.37k     3.99k  122.87k ");
    }
}
