//! The report's outputs against a real run: JSON valid against the checked-in schema, the
//! HdrHistogram log read back into the same histogram, the text report's wrk lines, and the CLI's
//! exit codes.

mod common;

use std::time::{Duration, SystemTime};

use base64::Engine as _;
use clap::Parser;
use common::{config, hello_server, run, TestServer};
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;
use lowlat_load::LoadConfig;

fn sample_run() -> (LoadConfig, lowlat_load::Report) {
    let server = hello_server();
    let cfg = LoadConfig {
        connections: 4,
        pipeline: 2,
        requests: Some(500),
        ..config(&[server.url("/")])
    };
    let r = run(&cfg);
    (cfg, r)
}

/// `--json` output validates against `schema/report.schema.json` and carries the figures.
#[test]
fn json_matches_schema() {
    let schema: serde_json::Value = serde_json::from_str(lowlat_load::json::SCHEMA).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    let (cfg, r) = sample_run();
    let v = lowlat_load::json::to_json(&r, &cfg);
    let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:#?}\n{v:#}");
    assert_eq!(v["responses"], 500);
    assert_eq!(v["latency_us"]["count"], 500);
    assert_eq!(v["status"]["2xx"], 500);
    assert_eq!(v["status_codes"], serde_json::json!({"200": 500}));
    assert_eq!(v["errors"]["total"], 0);
    assert_eq!(v["config"]["pipeline"], 2);
    // An empty run (every request failed) is valid too.
    let failed = lowlat_load::Report {
        responses: 0,
        latency: lowlat_load::report::new_latency_histogram(),
        ..r
    };
    let v = lowlat_load::json::to_json(&failed, &cfg);
    assert!(validator.is_valid(&v), "{v:#}");
}

/// `--hdr-log` writes a standard interval log whose histogram reads back equal to the report's.
#[test]
fn hdr_log_round_trip() {
    let (_, r) = sample_run();
    let mut log = Vec::new();
    lowlat_load::hdrlog::write_log(&mut log, &r, SystemTime::now(), None).unwrap();
    let text = String::from_utf8(log.clone()).unwrap();
    assert!(text.contains("#[StartTime: "), "{text}");
    assert!(text.contains(
        "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\""
    ));
    let mut intervals = Vec::new();
    for entry in IntervalLogIterator::new(&log) {
        if let LogEntry::Interval(h) = entry.expect("log parses") {
            intervals.push((h.duration(), h.max(), h.encoded_histogram().to_owned()));
        }
    }
    assert_eq!(intervals.len(), 1);
    let (length, max_ms, encoded) = &intervals[0];
    assert!((length.as_secs_f64() - r.elapsed.as_secs_f64()).abs() < 0.01);
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .unwrap();
    let back: Histogram<u64> = Deserializer::new().deserialize(&mut &bytes[..]).unwrap();
    assert_eq!(back, r.latency);
    assert_eq!(back.len(), 500);
    assert!((max_ms - r.latency.max() as f64 / 1000.0).abs() < 1.0);
}

/// With intervals asked for, the log has one histogram per interval, and together they hold
/// every response of the report.
#[test]
fn hdr_log_intervals() {
    let server = hello_server();
    let cfg = LoadConfig {
        connections: 2,
        duration: Some(Duration::from_millis(550)),
        latency_intervals: Some(Duration::from_millis(100)),
        ..config(&[server.url("/")])
    };
    let r = run(&cfg);
    assert!(
        (5..=7).contains(&r.intervals.len()),
        "{} intervals",
        r.intervals.len()
    );
    // A run long enough for rate samples: its JSON (with them) still matches the schema.
    let schema: serde_json::Value = serde_json::from_str(lowlat_load::json::SCHEMA).unwrap();
    let v = lowlat_load::json::to_json(&r, &cfg);
    assert!(
        v["thread_req_per_sec"]["samples"].as_u64().unwrap() >= 3,
        "{v:#}"
    );
    assert!(jsonschema::is_valid(&schema, &v), "{v:#}");
    let total: u64 = r.intervals.iter().map(|i| i.latency.len()).sum();
    assert_eq!(total, r.latency.len());
    assert!(r.intervals.windows(2).all(|w| w[0].start < w[1].start));
    let mut log = Vec::new();
    lowlat_load::hdrlog::write_log(&mut log, &r, SystemTime::now(), None).unwrap();
    let mut merged: Option<Histogram<u64>> = None;
    let mut count = 0;
    for entry in IntervalLogIterator::new(&log) {
        if let LogEntry::Interval(h) = entry.expect("log parses") {
            count += 1;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(h.encoded_histogram())
                .unwrap();
            let mut back: Histogram<u64> =
                Deserializer::new().deserialize(&mut &bytes[..]).unwrap();
            // Each interval is sized to its own maximum; the sum must grow.
            back.auto(true);
            match &mut merged {
                Some(m) => m.add(&back).unwrap(),
                None => merged = Some(back),
            }
        }
    }
    assert_eq!(count, r.intervals.len());
    let merged = merged.unwrap();
    assert_eq!(merged.len(), r.latency.len());
    assert_eq!(merged.max(), r.latency.max());
}

/// The text report keeps wrk's lines that scripts grep.
#[test]
fn text_report_has_wrk_lines() {
    let (cfg, r) = sample_run();
    let banner = lowlat_load::text::banner(&cfg);
    assert!(
        banner.starts_with("Running 500 requests (at most 20s) @ http://127.0.0.1:"),
        "{banner}"
    );
    let text = lowlat_load::text::render(&r, true);
    assert!(text.contains("  500 requests in "), "{text}");
    assert!(text.contains("Requests/sec: "), "{text}");
    assert!(text.contains("Detailed Percentile spectrum"), "{text}");
    // wrk2's --latency block.
    assert!(text.contains(" 99.900%"), "{text}");
    assert!(text.contains("100.000%"), "{text}");
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: lowlat_load::cli::LoadArgs,
}

fn cli(argv: &[&str]) -> Result<String, clap::Error> {
    let cli = Cli::try_parse_from(std::iter::once("load").chain(argv.iter().copied()))?;
    Ok(format!("{:?}", lowlat_load::cli::run(cli.args)))
}

/// Exit codes: 0 on success, 1 for a run that cannot start or where every request failed, and
/// 2 for usage errors: clap's for malformed flags, and values clap cannot check alone (a URL
/// that is not http:// or https://, more threads than connections).
#[test]
fn cli_exit_codes() {
    let server = hello_server();
    let url = server.url("/");
    let success = format!("{:?}", std::process::ExitCode::SUCCESS);
    let failure = format!("{:?}", std::process::ExitCode::from(1));
    let usage = format!("{:?}", std::process::ExitCode::from(2));
    assert_eq!(
        cli(&["-q", "-t1", "-c2", "-n", "50", &url]).unwrap(),
        success
    );
    assert_eq!(
        cli(&["-q", "-t1", "-c2", "-n", "50", "--json", &url]).unwrap(),
        success
    );
    assert_eq!(
        cli(&[
            "-q",
            "-t1",
            "-c2",
            "-n",
            "1k",
            "--pipeline",
            "4",
            "--latency",
            &url
        ])
        .unwrap(),
        success
    );
    assert_eq!(
        cli(&["-q", "-t1", "-c2", "-n", "10", "notaurl"]).unwrap(),
        usage
    );
    assert_eq!(
        cli(&["-q", "-t1", "-c2", "-n", "10", "ftp://127.0.0.1/"]).unwrap(),
        usage
    );
    assert_eq!(cli(&["-q", "-t3", "-c2", "-n", "10", &url]).unwrap(), usage);
    // Without -t, one connection runs one thread.
    assert_eq!(cli(&["-q", "-c1", "-n", "10", &url]).unwrap(), success);
    assert_eq!(
        cli(&["-q", "-t1", "-c2", "-n", "10", "http://127.0.0.1:1/"]).unwrap(),
        failure
    );
    let broken = TestServer::start(|c| {
        while c.next_request().is_some() {
            if !c.send(b"NOT HTTP\r\n\r\n") {
                return;
            }
        }
    });
    assert_eq!(
        cli(&["-q", "-t1", "-c1", "-n", "5", &broken.url("/")]).unwrap(),
        failure
    );
    for bad in [
        &["-d", "10x", "http://a/"][..],
        &["-n", "-5", "http://a/"],
        &["-H", "novalue", "http://a/"],
        &["--body", "a", "--body-file", "b", "http://a/"],
        &["-R", "0", "http://a/"],
        &["-c", "0", "http://a/"],
        &["-t", "0", "http://a/"],
        &["-t", "2k", "http://a/"],
        &["--pipeline", "1025", "http://a/"],
        &[],
    ] {
        let e = cli(bad).unwrap_err();
        assert_eq!(e.exit_code(), 2, "{bad:?}");
    }
}

/// `--hdr-log` from the CLI writes a file.
#[test]
fn cli_writes_hdr_log() {
    let server = hello_server();
    let dir = std::env::temp_dir().join(format!("lowlat-load-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("run.hlog");
    let out = cli(&[
        "-q",
        "-t1",
        "-c2",
        "-d",
        "300ms",
        "--hdr-log",
        path.to_str().unwrap(),
        &server.url("/"),
    ]);
    assert_eq!(
        out.unwrap(),
        format!("{:?}", std::process::ExitCode::SUCCESS)
    );
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.lines().any(|l| l.starts_with("0.000,")), "{text}");
    std::fs::remove_dir_all(&dir).ok();
    let _ = Duration::ZERO;
}
