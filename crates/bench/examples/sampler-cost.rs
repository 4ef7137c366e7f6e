//! What the 100 ms /proc sampler costs: it watches a process tree (a PID given, or this
//! process) for a while, with nothing else running in this process, and prints the CPU this
//! process used, as a share of one core. Run it beside a server to measure the sampler on its
//! real workload:
//!
//!     cargo run --release -p lowlat-bench --example sampler-cost -- PID [SECONDS]

use std::time::{Duration, Instant};

use lowlat_bench::sampler::{Sampler, Watch};

fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rfind(')').map_or("", |i| &stat[i + 2..]);
    let f: Vec<f64> = after
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    (f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0)) / 100.0
}

fn main() {
    let mut args = std::env::args().skip(1);
    let root: u32 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(std::process::id);
    let secs: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(10);
    let c0 = cpu_seconds();
    let t0 = Instant::now();
    let sampler = Sampler::start(Watch {
        root,
        rss_exclude: Vec::new(),
        server_cpus: vec![0],
        loader_cpus: vec![1],
        perf: false,
    });
    std::thread::sleep(Duration::from_secs(secs));
    let m = sampler.finish();
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - c0;
    println!(
        "sampler: {} samples of {} process(es) in {wall:.1} s; {:.3} s of CPU = {:.3}% of one core",
        m.samples.len(),
        m.pids.len(),
        cpu,
        100.0 * cpu / wall
    );
}
