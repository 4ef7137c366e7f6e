//! Ninety seconds of `scripts/soak.py`: the real `lowlat serve` (this build) with TLS, HTTP/2,
//! HTTP/3, files, the proxy to HTTP/1.1 and HTTP/2 upstreams, a WebSocket tunnel and the cache,
//! under a steady mixed load from `lowlat load`, h2load and oha, with reloads, upstream
//! restarts and bad clients, judged by the script (no error, no leak, no drift, everything given
//! back at the end). The load is a fifth of the hour-long run's (this is the debug build), the
//! chaos comes every 15 to 25 seconds instead of every one to three minutes (each kind once
//! during the warm-up first), and latency is taken in 8-second segments.
//!
//! Beyond the script's verdict, the test checks that the run did what it claims: every lane
//! answered, each kind of chaos happened and succeeded, every kind of bad client ran, and the
//! samples cover the run — so that a soak which quietly did nothing cannot pass. The verdict's
//! own logic (a leak is caught) is tested in `scripts/test_soak.py`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

mod support;
use support::upstream::python;
use support::BIN;

#[test]
fn ninety_seconds_of_mixed_traffic_with_reloads_restarts_and_bad_clients() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let run = Command::new("python3")
        .arg(root.join("scripts/soak.py"))
        .args(["90s", "--binary", BIN, "--out"])
        .arg(out.path())
        .args([
            "--interval",
            "4s",
            "--segment",
            "8s",
            "--warmup",
            "25s",
            "--calm",
            "15s",
            "--reload-every",
            "15s",
            "--restart-every",
            "15s",
            "--burst-every",
            "25s",
            "--rate-scale",
            "0.2",
            // Ninety seconds of a debug build on shared cores: latency drift is judged coarsely
            // (a p99 20 ms worse at least); errors, answers, growth and leftovers are not.
            "--p99-floor-ms",
            "20",
            "--require-all",
            "--ws-python",
        ])
        .arg(python())
        .output()
        .expect("run python3 scripts/soak.py");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    let report = std::fs::read_to_string(out.path().join("soak.json"))
        .unwrap_or_else(|e| panic!("no soak.json ({e}): {stdout}\n{stderr}"));
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    let log = std::fs::read_to_string(out.path().join("server.log")).unwrap_or_default();
    assert!(
        run.status.success() && report["verdict"]["pass"] == true,
        "the soak failed ({}):\n{stdout}\n{stderr}\nserver log:\n{log}",
        run.status
    );
    assert!(stdout.contains("soak: PASS"), "{stdout}");
    assert!(
        started.elapsed() < Duration::from_secs(240),
        "the soak took {:?}",
        started.elapsed()
    );

    // Every lane ran all along and was answered.
    let lanes = [
        "h1",
        "h1-pipelined",
        "https",
        "h2",
        "h3",
        "proxy-h1",
        "proxy-h2",
        "cache",
        "websocket",
        "h2load-h2c",
        "oha-h3",
    ];
    let segments = report["segments"].as_array().unwrap();
    for lane in lanes {
        let of_lane: Vec<_> = segments.iter().filter(|s| s["lane"] == lane).collect();
        assert!(of_lane.len() >= 10, "{lane}: {} segments", of_lane.len());
        let answered: u64 = of_lane
            .iter()
            .map(|s| s["responses"].as_u64().unwrap())
            .sum();
        assert!(answered > 1000, "{lane}: {answered} responses");
    }

    // Each kind of chaos happened, and went as it should.
    let events = report["events"].as_array().unwrap();
    for kind in ["reload", "purge", "restart", "burst"] {
        let n = events.iter().filter(|e| e["kind"] == kind).count();
        assert!(n >= 2, "{kind}: {n} times: {events:?}");
    }
    assert!(events.iter().all(|e| e["ok"] == true), "{events:?}");
    let restarted: std::collections::HashSet<_> = events
        .iter()
        .filter_map(|e| e["upstream"].as_str())
        .collect();
    assert!(restarted.len() >= 3, "upstreams restarted: {restarted:?}");

    // Every kind of bad client ran, and each was answered as promised.
    let bad = &report["bad_clients"];
    assert_eq!(bad["unexpected"], 0, "{bad}");
    for (kind, stats) in bad["kinds"].as_object().unwrap() {
        assert!(stats["runs"].as_u64().unwrap() >= 1, "{kind}: {stats}");
    }
    assert!(
        bad["kinds"].as_object().unwrap().len() >= 28,
        "kinds of bad clients: {}",
        bad["kinds"]
    );
    assert!(
        report["checks"]["run"].as_u64().unwrap() >= 300,
        "{}",
        report["checks"]
    );

    // The samples cover the run, and the judgement had its figures.
    let samples = report["samples"].as_array().unwrap();
    assert!(samples.len() >= 20, "{} samples", samples.len());
    let resources = &report["resources"];
    for key in ["rss_kb", "fds", "threads"] {
        assert!(
            resources[key]["base"].is_number() && resources[key]["end"].is_number(),
            "{key}: {resources}"
        );
    }
    assert!(
        report["drain"]["fd_census"].is_object(),
        "{}",
        report["drain"]
    );
    assert!(
        report["cache"]["stored"].as_f64().unwrap() > 2.0 * 50.0,
        "the cache refilled: {}",
        report["cache"]
    );
    for file in ["samples.csv", "segments.csv", "chart.svg"] {
        assert!(out.path().join(file).is_file(), "{file}");
    }
}
