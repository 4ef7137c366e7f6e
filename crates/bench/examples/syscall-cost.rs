//! What counting system calls through the kernel's tracepoints costs the server: a running
//! server (PID; pin it where you want it measured) is loaded by `lowlat load`'s engine, one
//! thread on CPU 1, 16 connections, in PAIRS pairs of 4 s measurements — one with
//! `lowlat bench`'s syscall counters open on every thread of its tree, one without, the order
//! alternating — and the server tree's CPU (utime + stime) per response is printed for each,
//! then the medians and their ratio.
//!
//!     taskset -c 0 target/release/lowlat serve --workers 1 --listen 127.0.0.1:18181 &
//!     cargo run --release -p lowlat-bench --example syscall-cost -- $! http://127.0.0.1:18181/plaintext 6

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use lowlat_bench::load::{Engine, LoadDriver, LoadPlan};
use lowlat_bench::procfs;
use lowlat_bench::syscalls::{SyscallCounters, Tracepoints};

/// utime + stime of the whole tree, in clock ticks.
fn tree_ticks(root: u32) -> u64 {
    procfs::proc_tree(root)
        .into_iter()
        .filter_map(procfs::proc_sample)
        .map(|s| s.ticks)
        .sum()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(pid), Some(url)) = (args.next().and_then(|a| a.parse::<u32>().ok()), args.next())
    else {
        eprintln!("usage: syscall-cost SERVER_PID URL [PAIRS]");
        std::process::exit(2);
    };
    let pairs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(6);
    let tracepoints = Tracepoints::find(None).unwrap_or_else(|e| {
        eprintln!("syscall-cost: {} (fix: {})", e.reason, e.fix);
        std::process::exit(1);
    });
    let plan = LoadPlan {
        url,
        threads: 1,
        connections: 16,
        duration: Duration::from_secs(4),
        pipeline: 1,
        method: "GET".into(),
        headers: Vec::new(),
        body: None,
        timeout: Duration::from_secs(8),
        keepalive: true,
        pin_cpus: vec![1],
        tls: lowlat_load::TlsOptions::default(),
        h2: false,
        h3: false,
    };
    let stop = AtomicBool::new(false);
    let hz = 100.0; // /proc's clock ticks per second on Linux
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for pair in 0..pairs {
        let order = if pair % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for counting in order {
            // Dropping the counters closes them: the tracepoints are off again.
            let counters = counting.then(|| {
                SyscallCounters::open(&tracepoints, pid).unwrap_or_else(|e| {
                    eprintln!("syscall-cost: {} (fix: {})", e.reason, e.fix);
                    std::process::exit(1);
                })
            });
            let t0 = tree_ticks(pid);
            let outcome = Engine.run(&plan, &stop).unwrap_or_else(|e| {
                eprintln!("syscall-cost: {e}");
                std::process::exit(1);
            });
            let ticks = tree_ticks(pid) - t0;
            drop(counters);
            let us = ticks as f64 / hz * 1e6 / outcome.responses.max(1) as f64;
            println!(
                "{} {us:.3} µs/req of server CPU ({} responses)",
                if counting { "counted  " } else { "uncounted" },
                outcome.responses
            );
            if counting { &mut on } else { &mut off }.push(us);
        }
    }
    let (off, on) = (median(off), median(on));
    println!(
        "medians: uncounted {off:.3}, counted {on:.3} µs/req of server CPU: ×{:.3}",
        on / off
    );
}
