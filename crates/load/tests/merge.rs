//! Load from several agents: `--tag` and `--start-at`, and `lowlat load merge` of their interval
//! logs — equal to one histogram of every sample (merged, never averaged), the total rate the
//! sum of the agents', and several real agents run at once on loopback.

mod common;

use std::time::{Duration, Instant, SystemTime};

use clap::Parser;
use lowlat_load::merge::{merge, read_log};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: lowlat_load::cli::LoadArgs,
}

fn cli(argv: &[&str]) -> String {
    let cli = Cli::try_parse_from(std::iter::once("load").chain(argv.iter().copied()))
        .unwrap_or_else(|e| panic!("{e}"));
    format!("{:?}", lowlat_load::cli::run(cli.args))
}

/// A small generator, so the property runs over many seeds reproducibly.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Merging k logs equals one histogram of all their samples: for many seeds, k agents with
/// random latencies and interval counts, written as interval logs and merged back.
#[test]
fn merging_logs_equals_one_histogram_of_all_samples() {
    let dir = tempfile::tempdir().unwrap();
    for seed in 1..40u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let k = 1 + (rng.next() % 5) as usize;
        let mut all = lowlat_load::report::new_latency_histogram();
        let mut paths = Vec::new();
        for agent in 0..k {
            let intervals = 1 + (rng.next() % 6) as usize;
            let mut report = lowlat_load::Report::empty();
            for i in 0..intervals {
                let mut h = lowlat_load::report::new_latency_histogram();
                for _ in 0..(rng.next() % 500) {
                    // Latencies from 1 µs to ~1 s, spread over the decades.
                    let v = 1 + rng.next() % 10u64.pow(1 + (rng.next() % 6) as u32);
                    h.record(v).unwrap();
                    all.record(v).unwrap();
                }
                report.latency.add(&h).unwrap();
                report.intervals.push(lowlat_load::report::LatencyInterval {
                    start: Duration::from_secs(i as u64),
                    length: Duration::from_secs(1),
                    latency: h,
                });
            }
            report.elapsed = Duration::from_secs(intervals as u64);
            report.responses = report.latency.len();
            let p = dir.path().join(format!("s{seed}-a{agent}.hlog"));
            let mut f = std::fs::File::create(&p).unwrap();
            lowlat_load::hdrlog::write_log(
                &mut f,
                &report,
                SystemTime::now(),
                Some(&format!("a{agent}")),
            )
            .unwrap();
            paths.push(p);
        }
        let merged = merge(paths.iter().map(|p| read_log(p).unwrap()).collect());
        assert_eq!(merged.latency, all, "seed {seed}: merged ≠ all samples");
        for q in [0.5, 0.9, 0.99, 0.999] {
            assert_eq!(
                merged.latency.value_at_quantile(q),
                all.value_at_quantile(q),
                "seed {seed} q {q}"
            );
        }
        assert_eq!(merged.agents.len(), k);
        assert_eq!(merged.agents[0].name, "a0", "the tag names the agent");
    }
}

/// Three agents at once against one server, each tagged and started together; their logs
/// merge into a report whose counts and rate are the agents' sums.
#[test]
fn agents_on_loopback_merge() {
    let server = common::hello_server();
    let url = server.url("/");
    let dir = tempfile::tempdir().unwrap();
    let start = humantime::format_rfc3339_millis(SystemTime::now() + Duration::from_millis(700))
        .to_string();
    let handles: Vec<_> = (0..3)
        .map(|i| {
            let (url, start) = (url.clone(), start.clone());
            let log = dir.path().join(format!("agent-{i}.hlog"));
            std::thread::spawn(move || {
                let began = Instant::now();
                let code = cli(&[
                    "-t1",
                    "-c2",
                    "-d1s",
                    "-q",
                    "--json",
                    "--start-at",
                    &start,
                    "--tag",
                    &format!("agent-{i}"),
                    "--hdr-log",
                    &log.display().to_string(),
                    &url,
                ]);
                (code, began.elapsed())
            })
        })
        .collect();
    for h in handles {
        let (code, took) = h.join().unwrap();
        assert_eq!(code, "ExitCode(unix_exit_status(0))");
        // They waited for the start time, then ran about a second.
        assert!(took >= Duration::from_millis(1500), "{took:?}");
    }
    let logs: Vec<_> = (0..3)
        .map(|i| read_log(&dir.path().join(format!("agent-{i}.hlog"))).unwrap())
        .collect();
    let counts: u64 = logs.iter().map(|a| a.latency.len()).sum();
    let rates: f64 = logs.iter().map(lowlat_load::merge::AgentLog::rate).sum();
    let merged = merge(logs);
    assert_eq!(merged.latency.len(), counts);
    assert!((merged.total_rate() - rates).abs() < 1e-6);
    let names: Vec<&str> = merged.agents.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["agent-0", "agent-1", "agent-2"]);
    let text = lowlat_load::merge::render_text(&merged);
    assert!(
        text.contains("all agents") && text.contains("agent-2"),
        "{text}"
    );
    let paths: Vec<String> = (0..3)
        .map(|i| {
            dir.path()
                .join(format!("agent-{i}.hlog"))
                .display()
                .to_string()
        })
        .collect();
    let mut argv = vec!["merge", "--json"];
    argv.extend(paths.iter().map(String::as_str));
    assert_eq!(cli(&argv), "ExitCode(unix_exit_status(0))");
}

/// `--start-at` in the past starts at once; a bad time or tag is a usage error.
#[test]
fn start_at_and_tag() {
    let server = common::hello_server();
    let url = server.url("/");
    let began = Instant::now();
    let code = cli(&[
        "-t1",
        "-c1",
        "-n",
        "10",
        "-q",
        "--start-at",
        "2001-01-01T00:00:00Z",
        "--tag",
        "x",
        &url,
    ]);
    assert_eq!(code, "ExitCode(unix_exit_status(0))");
    assert!(began.elapsed() < Duration::from_secs(3));
    for bad in [
        &["--start-at", "tomorrow", "http://a/"][..],
        &["--tag", "a,b", "http://a/"],
        &["--tag", "has space", "http://a/"],
    ] {
        let argv = std::iter::once("load").chain(bad.iter().copied());
        assert!(Cli::try_parse_from(argv).is_err(), "{bad:?}");
    }
}
