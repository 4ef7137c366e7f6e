//! Rate mode (`-R`): the asked throughput is delivered, and latency is measured from each
//! request's scheduled send time, so a server stall shows up in the percentiles (coordinated
//! omission corrected, as in wrk2).

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{config, hello_server, ok_response, run, TestServer};
use lowlat_load::LoadConfig;

/// `-R 1000` over 5 s delivers 5000 ± 5% responses.
#[test]
fn rate_is_accurate() {
    let server = hello_server();
    let cfg = LoadConfig {
        threads: 2,
        connections: 10,
        rate: Some(1000.0),
        duration: Some(Duration::from_secs(5)),
        ..config(&[server.url("/")])
    };
    let r = run(&cfg);
    let rate = r.requests_per_sec();
    assert!(
        (950.0..=1050.0).contains(&rate),
        "{rate} req/s, {} responses",
        r.responses
    );
    assert_eq!(r.errors.total(), 0);
    // An idle server at 1000 req/s answers in well under a millisecond: the schedule is kept.
    let p50 = r.latency.value_at_quantile(0.5);
    assert!(p50 < 5_000, "p50 {p50} us");
}

/// A server that stalls for 1 s: in rate mode, p99.9 is at least ~1 s (every request scheduled
/// during the stall is charged from its schedule), while a closed loop would hide it.
#[test]
fn coordinated_omission_is_corrected() {
    let started = Arc::new(AtomicU64::new(0));
    let epoch = Instant::now();
    let server = {
        let started = Arc::clone(&started);
        TestServer::start(move |c| {
            let resp = ok_response("hi");
            while c.next_request().is_some() {
                // The stall: from 1.0 s to 2.0 s after the first request, nobody is answered.
                let first = started.load(Ordering::Relaxed);
                let first = if first == 0 {
                    let now = epoch.elapsed().as_micros() as u64;
                    match started.compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed) {
                        Ok(_) => now,
                        Err(v) => v,
                    }
                } else {
                    first
                };
                let stall_from = epoch + Duration::from_micros(first) + Duration::from_secs(1);
                let stall_to = stall_from + Duration::from_secs(1);
                let now = Instant::now();
                if now >= stall_from && now < stall_to {
                    thread::sleep(stall_to - now);
                }
                if !c.send(&resp) {
                    return;
                }
            }
        })
    };
    let cfg = LoadConfig {
        connections: 4,
        rate: Some(200.0),
        duration: Some(Duration::from_secs(4)),
        uncorrected_latency: true,
        ..config(&[server.url("/")])
    };
    let r = run(&cfg);
    assert_eq!(r.errors.total(), 0, "{:?}", r.errors);
    let p999 = r.latency.value_at_quantile(0.999);
    assert!(p999 >= 900_000, "p99.9 {p999} us");
    // About a quarter of the requests were scheduled during the stall.
    let p90 = r.latency.value_at_quantile(0.90);
    assert!(p90 >= 200_000, "p90 {p90} us");
    // -U: measured from the actual send, the requests queued behind the stall look fast (they
    // left after it); only the few in flight when it began waited the whole second. This is
    // the figure coordinated omission reports, kept beside the corrected one.
    let u = r.uncorrected_latency.as_ref().expect("-U histogram");
    assert_eq!(u.len(), r.responses, "one uncorrected sample per response");
    let u_p90 = u.value_at_quantile(0.90);
    assert!(
        u_p90 * 2 < p90,
        "uncorrected p90 {u_p90} us vs corrected {p90} us"
    );
    assert!(
        u.max() >= 900_000,
        "the in-flight requests waited: max {} us",
        u.max()
    );
    // And the asked rate was still delivered over the run (the backlog is caught up).
    assert!(
        (r.responses as f64 - 800.0).abs() < 80.0,
        "{} responses",
        r.responses
    );
}

/// Rate mode over a server that closes after every response: the schedule is kept across the
/// reconnects, with no errors.
#[test]
fn rate_survives_connection_close() {
    let server = TestServer::start(|c| {
        if c.next_request().is_some() {
            c.send(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok");
        }
    });
    let cfg = LoadConfig {
        connections: 4,
        pipeline: 2,
        rate: Some(400.0),
        duration: Some(Duration::from_secs(1)),
        ..config(&[server.url("/")])
    };
    let r = run(&cfg);
    assert_eq!(r.errors.total(), 0, "{:?}", r.errors);
    assert!(
        (360..=440).contains(&r.responses),
        "{} responses",
        r.responses
    );
}

/// Responses are matched to their own requests, in order: in rate mode with `--pipeline 4` one
/// connection has up to four requests in flight, scheduled 10 ms apart; the server answers each
/// exactly 25 ms after it arrived. Matched in order every latency is ~25 ms; any other matching
/// would spread them by multiples of 10 ms.
#[test]
fn pipelined_responses_matched_to_their_requests() {
    let server = TestServer::start(|c| {
        let Ok(mut out) = c.stream.try_clone() else {
            return;
        };
        let (tx, rx) = std::sync::mpsc::channel::<Instant>();
        let writer = thread::spawn(move || {
            use std::io::Write;
            let resp = ok_response("in order");
            for arrived in rx {
                let due = arrived + Duration::from_millis(25);
                thread::sleep(due.saturating_duration_since(Instant::now()));
                if out.write_all(&resp).is_err() {
                    return;
                }
            }
        });
        while c.next_request().is_some() {
            if tx.send(Instant::now()).is_err() {
                break;
            }
        }
        drop(tx);
        let _ = writer.join();
    });
    let cfg = LoadConfig {
        connections: 1,
        pipeline: 4,
        rate: Some(100.0),
        duration: Some(Duration::from_secs(1)),
        ..config(&[server.url("/")])
    };
    let r = run(&cfg);
    assert_eq!(r.errors.total(), 0, "{:?}", r.errors);
    assert!(r.responses >= 90, "{} responses", r.responses);
    let (p1, p99) = (
        r.latency.value_at_quantile(0.01),
        r.latency.value_at_quantile(0.99),
    );
    assert!(p1 >= 24_000 && p99 < 40_000, "p1 {p1} us, p99 {p99} us");
}
