//! `lowlat load` against the project's own server (`lowlat serve`'s engine, started in-process on
//! 127.0.0.1:0 with its built-in endpoints): exact counts, pipelining, both endpoints' framing.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use lowlat_load::{LoadConfig, Target};
use lowlat_server::{builtin_service, Server, ServerConfig};

fn with_server(f: impl FnOnce(&str)) {
    let cfg = ServerConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        workers: 1,
        ..ServerConfig::default()
    };
    let running = Server::bind(cfg, builtin_service())
        .unwrap()
        .start()
        .unwrap();
    let base = format!("http://{}", running.local_addrs()[0]);
    f(&base);
    running.shutdown_handle().shutdown();
    running.wait().unwrap();
}

fn run(cfg: &LoadConfig) -> lowlat_load::Report {
    lowlat_load::run(cfg, &AtomicBool::new(false)).unwrap()
}

/// Exact counts, with and without 16-deep pipelining, over two threads.
#[test]
fn exact_counts_against_lowlat_serve() {
    with_server(|base| {
        for pipeline in [1, 16] {
            let cfg = LoadConfig {
                targets: vec![Target::new(format!("{base}/plaintext"))],
                threads: 2,
                connections: 16,
                pipeline,
                requests: Some(20_000),
                duration: Some(Duration::from_secs(30)),
                ..LoadConfig::default()
            };
            let r = run(&cfg);
            assert_eq!(r.responses, 20_000, "pipeline {pipeline}");
            assert_eq!(r.status.success, 20_000);
            assert_eq!(r.errors.total(), 0, "{:?}", r.errors);
        }
    });
}

/// Both built-in endpoints, weighted, in one pipelined run; a missing path is a 404 response,
/// not an error.
#[test]
fn mixed_endpoints_against_lowlat_serve() {
    with_server(|base| {
        let cfg = LoadConfig {
            targets: vec![
                Target::parse(&format!("{base}/plaintext@2")).unwrap(),
                Target::new(format!("{base}/json")),
                Target::new(format!("{base}/missing")),
            ],
            // One connection walks the weighted cycle (plaintext, json, plaintext, missing)
            // exactly 1 000 times.
            connections: 1,
            pipeline: 8,
            requests: Some(4_000),
            duration: Some(Duration::from_secs(30)),
            ..LoadConfig::default()
        };
        let r = run(&cfg);
        assert_eq!(r.responses, 4_000);
        assert_eq!(r.errors.total(), 0, "{:?}", r.errors);
        assert_eq!(r.status.client_error, 1_000, "{:?}", r.status);
        assert_eq!(r.status.success, 3_000);
    });
}
