//! Load from several agents: `--tag` and `--start-at`, and `lowlat load merge` of their interval
//! logs — equal to one histogram of every sample (merged, never averaged), the total rate taken
//! over the time the logs cover together (the agents' rates added when they ran at once), a
//! warning for logs that do not overlap, and several real agents run at once on loopback.

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
/// merge into a report whose counts are the agents' sums and whose rate is theirs added (within
/// the few milliseconds by which their starts differ), without a warning.
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
    assert!(
        (merged.total_rate() - rates).abs() < rates * 0.05,
        "{} against {rates} added",
        merged.total_rate()
    );
    assert_eq!(merged.warning(), None);
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

/// A log of `responses` one-second intervals of one response each, started at `started`.
fn write_agent_log(path: &std::path::Path, tag: &str, started: SystemTime, seconds: u64) {
    let mut report = lowlat_load::Report::empty();
    for i in 0..seconds {
        let mut h = lowlat_load::report::new_latency_histogram();
        for _ in 0..1000 {
            h.record(100).unwrap();
        }
        report.latency.add(&h).unwrap();
        report.intervals.push(lowlat_load::report::LatencyInterval {
            start: Duration::from_secs(i),
            length: Duration::from_secs(1),
            latency: h,
        });
    }
    report.elapsed = Duration::from_secs(seconds);
    report.responses = report.latency.len();
    let mut f = std::fs::File::create(path).unwrap();
    lowlat_load::hdrlog::write_log(&mut f, &report, started, Some(tag)).unwrap();
}

/// Where the logs lie in time decides the rate: together, the agents' rates add; one after
/// the other (or apart), the rate is every response over the time they cover, with a warning;
/// overlapping for less than half that time, a warning too.
#[test]
fn rate_over_the_time_the_logs_cover() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    // (offsets of the two agents' starts in seconds, 10 s each) → covered, together, warned
    for (b_offset, covered, together, warned) in [
        (0, 10, 10, false),
        (2, 12, 8, false),
        (8, 18, 2, true),
        (10, 20, 0, true),
        (60, 20, 0, true),
    ] {
        let a = dir.path().join(format!("a{b_offset}.hlog"));
        let b = dir.path().join(format!("b{b_offset}.hlog"));
        write_agent_log(&a, "a", t0, 10);
        write_agent_log(&b, "b", t0 + Duration::from_secs(b_offset), 10);
        let m = merge(vec![read_log(&a).unwrap(), read_log(&b).unwrap()]);
        let t = m.timing.expect("wall-clock times");
        assert_eq!(t.covered, Duration::from_secs(covered), "offset {b_offset}");
        assert_eq!(
            t.together,
            Duration::from_secs(together),
            "offset {b_offset}"
        );
        assert!(
            (m.total_rate() - 20_000.0 / covered as f64).abs() < 1e-6,
            "offset {b_offset}: {}",
            m.total_rate()
        );
        assert_eq!(
            m.warning().is_some(),
            warned,
            "offset {b_offset}: {:?}",
            m.warning()
        );
        let json = lowlat_load::merge::to_json(&m);
        assert_eq!(json["covered_secs"], covered as f64);
        let text = lowlat_load::merge::render_text(&m);
        let all = text.lines().find(|l| l.contains("all agents")).unwrap();
        assert!(all.contains(&format!("{covered}.00s")), "{text}");
    }
    let apart = merge(vec![
        read_log(&dir.path().join("a60.hlog")).unwrap(),
        read_log(&dir.path().join("b60.hlog")).unwrap(),
    ]);
    let w = apart.warning().unwrap();
    assert!(
        w.starts_with("the logs do not overlap in time (a 2027-01-15T08:00:00Z–2027-01-15T08:00:10Z, b 2027-01-15T08:01:00Z–2027-01-15T08:01:10Z)"),
        "{w}"
    );
}

/// A log without wall-clock times (no `#[BaseTime]`, relative interval times) cannot be placed:
/// the rates are added as before, and the warning says the overlap could not be checked.
#[test]
fn logs_without_wall_clock_times_are_taken_as_together() {
    let dir = tempfile::tempdir().unwrap();
    let with_times = dir.path().join("a.hlog");
    write_agent_log(&with_times, "a", SystemTime::now(), 2);
    let text = std::fs::read_to_string(&with_times).unwrap();
    let without: String = text
        .lines()
        .filter(|l| !l.starts_with("#[BaseTime") && !l.starts_with("#[StartTime"))
        .map(|l| format!("{l}\n"))
        .collect();
    let bare = dir.path().join("bare.hlog");
    std::fs::write(&bare, without.replace("Tag=a,", "Tag=bare,")).unwrap();
    let m = merge(vec![
        read_log(&with_times).unwrap(),
        read_log(&bare).unwrap(),
    ]);
    assert_eq!(m.timing, None);
    assert!((m.total_rate() - 2000.0).abs() < 1e-6, "{}", m.total_rate());
    let w = m.warning().unwrap();
    assert!(w.starts_with("bare has no wall-clock times"), "{w}");
}
