//! The engine against real sockets: small std::net servers that behave and misbehave.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{config, hello_server, ok_response, run, TestServer};
use lowlat_load::{LoadConfig, LoadError, Target};

/// `-n` sends exactly N requests and gets exactly N responses, over several threads.
#[test]
fn exact_count() {
    let server = hello_server();
    let cfg = LoadConfig {
        threads: 2,
        connections: 8,
        requests: Some(1000),
        ..config(&[server.url("/")])
    };
    let r = run(&cfg);
    assert_eq!(r.responses, 1000);
    assert_eq!(r.requests, 1000);
    assert_eq!(r.errors.total(), 0);
    assert_eq!(r.status.success, 1000);
    assert_eq!(r.latency.len(), 1000);
    assert_eq!(server.requests(), 1000);
    assert_eq!(r.bytes_read, 1000 * ok_response("hello").len() as u64);
}

/// `-n` with a warm-up: exactly N responses are measured after it, whether requests go one at a
/// time, 16 deep, or at a constant rate (a request sent in the loop turn that crosses the end
/// of the warm-up used to be measured without being taken from the count).
#[test]
fn exact_count_after_warmup() {
    let server = hello_server();
    for (pipeline, rate) in [(1, None), (16, None), (1, Some(5000.0))] {
        let cfg = LoadConfig {
            threads: 2,
            connections: 4,
            requests: Some(1000),
            warmup: Duration::from_millis(200),
            pipeline,
            rate,
            ..config(&[server.url("/")])
        };
        let r = run(&cfg);
        let case = format!("pipeline {pipeline}, rate {rate:?}");
        assert_eq!(r.responses, 1000, "{case}");
        assert_eq!(r.latency.len(), 1000, "{case}");
        assert_eq!(r.status.success, 1000, "{case}");
        assert_eq!(r.errors.total(), 0, "{case}");
    }
}

/// `-n` with `--pipeline 16`: still exactly N, with a count that is not a multiple of 16.
#[test]
fn exact_count_pipelined() {
    let server = hello_server();
    let cfg = LoadConfig {
        connections: 3,
        pipeline: 16,
        requests: Some(1001),
        ..config(&[server.url("/")])
    };
    let r = run(&cfg);
    assert_eq!(r.responses, 1001);
    assert_eq!(r.errors.total(), 0);
    assert_eq!(server.requests(), 1001);
    // A batch's responses are recorded together; every one of them still counts once.
    assert_eq!(r.latency.len(), 1001);
    assert_eq!(r.status.success, 1001);
}

/// Pipelined responses are matched to their requests in order: the server answers the i-th
/// request of a batch of 16 after i × 15 ms, each with a different framing and body size, and the
/// histogram must hold each of those latencies once.
#[test]
fn pipelined_responses_matched_in_order() {
    let server = TestServer::start(|c| {
        let start = Instant::now();
        for i in 1..=16u32 {
            if c.next_request().is_none() {
                return;
            }
            let due = start + Duration::from_millis(u64::from(i) * 15);
            thread::sleep(due.saturating_duration_since(Instant::now()));
            let body = "x".repeat(i as usize);
            let resp = if i % 2 == 0 {
                format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{i:x}\r\n{body}\r\n0\r\n\r\n")
            } else {
                format!("HTTP/1.1 200 OK\r\nContent-Length: {i}\r\n\r\n{body}")
            };
            if !c.send(resp.as_bytes()) {
                return;
            }
        }
        while c.next_request().is_some() {}
    });
    let cfg = LoadConfig {
        connections: 1,
        pipeline: 16,
        requests: Some(16),
        ..config(&[server.url("/")])
    };
    let r = run(&cfg);
    assert_eq!(r.responses, 16);
    assert_eq!(r.errors.total(), 0);
    // The k-th smallest latency is at least k × 15 ms (the server never answers early) and not
    // far above it (a late server thread may merge two answers into one read, never reorder).
    let mut sorted = Vec::new();
    for v in r.latency.iter_recorded() {
        for _ in 0..v.count_at_value() {
            sorted.push(r.latency.highest_equivalent(v.value_iterated_to()));
        }
    }
    assert_eq!(sorted.len(), 16);
    for (k, us) in sorted.iter().enumerate() {
        let at = (k as u64 + 1) * 15_000;
        assert!(
            *us + 1_000 >= at && *us < at + 150_000,
            "response {k}: {us} us"
        );
    }
    // Bodies counted: 1 + 2 + ... + 16 bytes of body inside bytes_read.
    assert!(r.bytes_read > 136);
}

/// A server that answers `Connection: close` and closes after every response: the loader
/// reconnects, and pipelined requests left unanswered are sent again, not counted as errors.
#[test]
fn reconnects_after_connection_close() {
    let server = TestServer::start(|c| {
        if c.next_request().is_some() {
            c.send(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok");
        }
    });
    for pipeline in [1, 4] {
        let cfg = LoadConfig {
            connections: 4,
            pipeline,
            requests: Some(200),
            ..config(&[server.url("/")])
        };
        let r = run(&cfg);
        assert_eq!(r.responses, 200, "pipeline {pipeline}");
        assert_eq!(r.errors.total(), 0, "pipeline {pipeline}: {:?}", r.errors);
    }
    assert!(server.connections() >= 400);
}

/// A server that closes after each response without saying so: every request ends as a
/// response or a read error, and the loader keeps reconnecting.
#[test]
fn abrupt_close_is_a_read_error() {
    let server = TestServer::start(|c| {
        if c.next_request().is_some() {
            c.send(&ok_response("bye"));
        }
        // Wait for the next request, then drop the connection unanswered.
        let _ = c.next_request();
    });
    let cfg = LoadConfig {
        connections: 2,
        requests: Some(100),
        ..config(&[server.url("/")])
    };
    let r = run(&cfg);
    assert_eq!(r.responses + r.errors.total(), 100, "{:?}", r.errors);
    assert!(r.responses >= 40, "{} responses", r.responses);
    assert_eq!(r.errors.total(), r.errors.read);
}

/// Chunked responses written in small pieces (the head split too) are reassembled.
#[test]
fn chunked_bodies_in_pieces() {
    let server = TestServer::start(|c| {
        while c.next_request().is_some() {
            let parts: [&[u8]; 6] = [
                b"HTTP/1.1 200 OK\r\nTransfer-",
                b"Encoding: chunked\r\n\r\n",
                b"5\r\nhel",
                b"lo\r\n6;ext=1\r\n world\r\n",
                b"0\r\nTrailer: x\r\n",
                b"\r\n",
            ];
            for p in parts {
                if !c.send(p) {
                    return;
                }
                thread::sleep(Duration::from_millis(1));
            }
        }
    });
    let cfg = LoadConfig {
        connections: 2,
        requests: Some(40),
        ..config(&[server.url("/")])
    };
    let r = run(&cfg);
    assert_eq!(r.responses, 40);
    assert_eq!(r.errors.total(), 0);
}

/// Large bodies (1 MiB by length, 1 MiB chunked in 64 KiB chunks) span many reads and are
/// counted, not copied.
#[test]
fn large_bodies() {
    let server = TestServer::start(|c| {
        let body = vec![b'x'; 1 << 20];
        let mut by_length =
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
        by_length.extend_from_slice(&body);
        let mut chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for piece in body.chunks(64 * 1024) {
            chunked.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
            chunked.extend_from_slice(piece);
            chunked.extend_from_slice(b"\r\n");
        }
        chunked.extend_from_slice(b"0\r\n\r\n");
        let mut i = 0;
        while c.next_request().is_some() {
            i += 1;
            if !c.send(if i % 2 == 0 { &chunked } else { &by_length }) {
                return;
            }
        }
    });
    let cfg = LoadConfig {
        connections: 2,
        pipeline: 2,
        requests: Some(20),
        ..config(&[server.url("/big")])
    };
    let r = run(&cfg);
    assert_eq!(r.responses, 20);
    assert_eq!(r.errors.total(), 0, "{:?}", r.errors);
    assert!(r.bytes_read > 20 << 20);
}

/// A malformed status line is a protocol error, never a response.
#[test]
fn malformed_status_line_is_a_protocol_error() {
    let server = TestServer::start(|c| {
        while c.next_request().is_some() {
            if !c.send(b"HTTP/1.1 2OO OK\r\nContent-Length: 0\r\n\r\n") {
                return;
            }
        }
    });
    let cfg = LoadConfig {
        connections: 2,
        requests: Some(20),
        ..config(&[server.url("/")])
    };
    let r = run(&cfg);
    assert_eq!(r.responses, 0);
    assert_eq!(r.errors.protocol, 20, "{:?}", r.errors);
    assert!(r.all_failed());
}

/// Bytes nobody asked for (a second response to one request) are a protocol error that ends
/// the connection; the response before them still counts.
#[test]
fn unsolicited_bytes_are_a_protocol_error() {
    let server = TestServer::start(|c| {
        let twice = [ok_response("one"), ok_response("two")].concat();
        while c.next_request().is_some() {
            // One write: both arrive in the same read, the second with nothing in flight.
            if !c.send(&twice) {
                return;
            }
        }
    });
    let cfg = LoadConfig {
        connections: 1,
        requests: Some(5),
        ..config(&[server.url("/")])
    };
    let r = run(&cfg);
    assert_eq!(r.responses, 5);
    assert_eq!(r.errors.protocol, 5, "{:?}", r.errors);
}

/// A server that never answers: each request times out, and the run still ends on the count.
#[test]
fn silent_server_times_out() {
    let server = TestServer::start(|c| while c.next_request().is_some() {});
    let cfg = LoadConfig {
        connections: 2,
        requests: Some(4),
        timeout: Duration::from_millis(200),
        ..config(&[server.url("/")])
    };
    let t = Instant::now();
    let r = run(&cfg);
    assert_eq!(r.responses, 0);
    assert_eq!(r.errors.timeout, 4, "{:?}", r.errors);
    assert!(t.elapsed() < Duration::from_secs(3));
}

/// A slow server: latency covers the server's delay.
#[test]
fn slow_server_latency() {
    let server = TestServer::start(|c| {
        while c.next_request().is_some() {
            thread::sleep(Duration::from_millis(30));
            if !c.send(&ok_response("slow")) {
                return;
            }
        }
    });
    let cfg = LoadConfig {
        connections: 2,
        requests: Some(20),
        ..config(&[server.url("/")])
    };
    let r = run(&cfg);
    assert_eq!(r.responses, 20);
    let p50 = r.latency.value_at_quantile(0.5);
    assert!((30_000..200_000).contains(&p50), "p50 {p50} us");
}

/// Status classes are counted; a 404 or 503 is a response, not an error.
#[test]
fn status_classes() {
    let server = TestServer::start(|c| {
        let mut i = 0;
        while c.next_request().is_some() {
            i += 1;
            let status = match i % 4 {
                0 => "200 OK",
                1 => "301 Moved",
                2 => "404 Not Found",
                _ => "503 Busy",
            };
            let resp = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
            if !c.send(resp.as_bytes()) {
                return;
            }
        }
    });
    let cfg = LoadConfig {
        connections: 1,
        requests: Some(40),
        ..config(&[server.url("/")])
    };
    let r = run(&cfg);
    assert_eq!(r.responses, 40);
    assert_eq!(r.status.success, 10);
    assert_eq!(r.status.redirection, 10);
    assert_eq!(r.status.client_error, 10);
    assert_eq!(r.status.server_error, 10);
    assert_eq!(r.status.not_ok(), 20);
    assert_eq!(r.errors.total(), 0);
}

/// The same with 16-deep pipelining: each batch of 16 is answered in one write whose statuses
/// change inside it, and each response is counted under its own status and once in the
/// histogram.
#[test]
fn status_classes_pipelined() {
    let server = TestServer::start(|c| {
        let mut i = 0;
        let mut batch = String::new();
        while c.next_request().is_some() {
            i += 1;
            let status = if i % 4 == 0 {
                "404 Not Found"
            } else {
                "200 OK"
            };
            batch += &format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
            if i % 16 == 0 && !c.send(std::mem::take(&mut batch).as_bytes()) {
                return;
            }
        }
    });
    let cfg = LoadConfig {
        connections: 1,
        pipeline: 16,
        requests: Some(96),
        ..config(&[server.url("/")])
    };
    let r = run(&cfg);
    assert_eq!(r.responses, 96);
    assert_eq!(r.status.success, 72);
    assert_eq!(r.status.client_error, 24);
    assert_eq!(r.latency.len(), 96);
    assert_eq!(r.errors.total(), 0);
}

/// HEAD responses carry a Content-Length but no body; pipelined, they must not desynchronise.
#[test]
fn head_requests_pipelined() {
    let server = TestServer::start(|c| {
        while let Some(req) = c.next_request() {
            let resp = if req.method == "HEAD" {
                b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n".to_vec()
            } else {
                b"HTTP/1.1 405 No\r\nContent-Length: 0\r\n\r\n".to_vec()
            };
            if !c.send(&resp) {
                return;
            }
        }
    });
    let cfg = LoadConfig {
        connections: 2,
        pipeline: 4,
        method: "HEAD".into(),
        requests: Some(50),
        ..config(&[server.url("/")])
    };
    let r = run(&cfg);
    assert_eq!(r.responses, 50);
    assert_eq!(r.status.success, 50);
    assert_eq!(r.errors.total(), 0);
}

/// POST with a body and extra headers: the server sees them on every request.
#[test]
fn method_body_and_headers() {
    let server = TestServer::start(|c| {
        while let Some(req) = c.next_request() {
            let good = req.method == "POST"
                && req.body == b"payload"
                && req.head.contains("\r\nX-Test: 1\r\n")
                && req.head.contains("\r\nHost: 127.0.0.1:");
            let resp: &[u8] = if good {
                b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
            } else {
                b"HTTP/1.1 400 Bad\r\nContent-Length: 0\r\n\r\n"
            };
            if !c.send(resp) {
                return;
            }
        }
    });
    let cfg = LoadConfig {
        connections: 2,
        pipeline: 2,
        method: "POST".into(),
        body: Some(b"payload".to_vec()),
        headers: vec![("X-Test".into(), "1".into())],
        requests: Some(30),
        ..config(&[server.url("/submit")])
    };
    let r = run(&cfg);
    assert_eq!(r.status.success, 30, "{:?}", r.status);
}

/// `--no-keepalive`: one connection per request, `Connection: close` on each.
#[test]
fn no_keepalive_opens_a_connection_per_request() {
    let server = TestServer::start(|c| {
        while let Some(req) = c.next_request() {
            let close = req.head.contains("Connection: close");
            // Answer as a server that ignores the client's close would: keep-alive.
            let resp: &[u8] = if close {
                b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
            } else {
                b"HTTP/1.1 400 Bad\r\nContent-Length: 0\r\n\r\n"
            };
            if !c.send(resp) {
                return;
            }
        }
    });
    let cfg = LoadConfig {
        connections: 2,
        keep_alive: false,
        requests: Some(30),
        ..config(&[server.url("/")])
    };
    let r = run(&cfg);
    assert_eq!(r.status.success, 30);
    assert_eq!(r.errors.total(), 0);
    assert!(server.connections() >= 30);
}

/// HTTP/1.0 requests; an HTTP/1.0 server that keeps the connection only when asked.
#[test]
fn http10() {
    let server = TestServer::start(|c| {
        while let Some(req) = c.next_request() {
            let keep = req.head.starts_with("GET / HTTP/1.0\r\n")
                && req.head.contains("Connection: keep-alive");
            let resp: &[u8] = if keep {
                b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx"
            } else {
                b"HTTP/1.0 400 Bad\r\nContent-Length: 0\r\n\r\n"
            };
            if !c.send(resp) || !keep {
                return;
            }
        }
    });
    let cfg = LoadConfig {
        connections: 2,
        http10: true,
        requests: Some(20),
        ..config(&[server.url("/")])
    };
    let r = run(&cfg);
    assert_eq!(r.status.success, 20);
    // Two loader connections, kept alive, and the one made to check the target before the run.
    assert_eq!(server.connections(), 3);
}

/// Weighted URLs on one host: `a@3 b@1` over one connection splits 300/100 exactly.
#[test]
fn weighted_urls() {
    let server = hello_server();
    server.seen.log_targets.store(true, Ordering::Relaxed);
    let cfg = LoadConfig {
        connections: 1,
        pipeline: 3,
        requests: Some(400),
        targets: vec![
            Target::parse(&format!("{}@3", server.url("/a"))).unwrap(),
            Target::parse(&format!("{}@1", server.url("/b"))).unwrap(),
        ],
        ..config(&[])
    };
    let r = run(&cfg);
    assert_eq!(r.responses, 400);
    let targets = server.seen.targets.lock().unwrap();
    assert_eq!(targets.iter().filter(|t| *t == "/a").count(), 300);
    assert_eq!(targets.iter().filter(|t| *t == "/b").count(), 100);
}

/// URLs on two hosts: both get connections and requests.
#[test]
fn several_hosts() {
    let (one, two) = (hello_server(), hello_server());
    let cfg = LoadConfig {
        threads: 2,
        connections: 4,
        requests: Some(400),
        ..config(&[one.url("/"), two.url("/")])
    };
    let r = run(&cfg);
    assert_eq!(r.responses, 400);
    assert_eq!(one.requests() + two.requests(), 400);
    assert!(one.requests() > 50 && two.requests() > 50);
}

/// The stop flag ends a long run promptly and keeps what was measured.
#[test]
fn stop_flag_interrupts() {
    let server = hello_server();
    let cfg = LoadConfig {
        duration: Some(Duration::from_secs(60)),
        ..config(&[server.url("/")])
    };
    let stop = Arc::new(AtomicBool::new(false));
    let setter = {
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(300));
            stop.store(true, Ordering::Relaxed);
        })
    };
    let t = Instant::now();
    let r = lowlat_load::run(&cfg, &stop).unwrap();
    setter.join().unwrap();
    assert!(t.elapsed() < Duration::from_secs(3));
    assert!(r.interrupted);
    assert!(r.responses > 0);
}

/// A duration-bounded run lasts its duration, and the warm-up is not measured.
#[test]
fn duration_and_warmup() {
    let server = hello_server();
    let cfg = LoadConfig {
        duration: Some(Duration::from_millis(500)),
        warmup: Duration::from_millis(300),
        ..config(&[server.url("/")])
    };
    let t = Instant::now();
    let r = run(&cfg);
    let wall = t.elapsed();
    assert!(
        wall >= Duration::from_millis(800) && wall < Duration::from_secs(3),
        "{wall:?}"
    );
    assert!(r.elapsed >= Duration::from_millis(480) && r.elapsed < Duration::from_millis(800));
    assert!(
        server.requests() > r.responses,
        "warm-up requests are not reported"
    );
    assert!(r.cpu_time() > Duration::ZERO);
    // wrk's Req/Sec row: about four 100 ms samples of the one thread, none from the warm-up.
    let rates = r.thread_rates.expect("rate samples");
    assert!((2..=6).contains(&rates.samples), "{rates:?}");
    let rps = r.requests_per_sec();
    assert!(
        rates.mean > rps * 0.5 && rates.mean < rps * 1.5,
        "{rates:?} vs {rps}"
    );
    assert!(lowlat_load::text::render(&r, false).contains("    Req/Sec "));
}

/// Bad input is a typed error before any load: refused connection, bad URL, bad options.
#[test]
fn bad_input_is_an_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let run_err = |cfg: LoadConfig| lowlat_load::run(&cfg, &AtomicBool::new(false)).unwrap_err();
    let e = run_err(config(&[format!("http://127.0.0.1:{port}/")]));
    assert!(matches!(e, LoadError::Connect { .. }), "{e}");
    assert!(
        e.to_string().starts_with("cannot connect to 127.0.0.1:"),
        "{e}"
    );
    let e = run_err(config(&["ftp://127.0.0.1/".into()]));
    assert!(matches!(e, LoadError::BadUrl { .. }), "{e}");
    let e = run_err(LoadConfig {
        tls: lowlat_load::TlsOptions {
            cacert: Some("/nonexistent/ca.pem".into()),
            ..Default::default()
        },
        ..config(&["https://127.0.0.1:1/".into()])
    });
    assert!(matches!(e, LoadError::Tls(_)), "{e}");
    assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
    let e = run_err(LoadConfig {
        connections: 0,
        ..config(&["http://127.0.0.1:1/".into()])
    });
    assert!(matches!(e, LoadError::Config(_)), "{e}");
}
