//! The 100 ms sampler: while a measurement runs, a thread reads the target's process tree
//! (CPU ticks, resident memory) and every core's busy time, and keeps a time series. CPU of a
//! process that exits mid-run is kept (its ticks were counted up to its last sample).
//!
//! The thread runs on the loader's CPUs when those are pinned, so that sampling never costs
//! the server's cores anything.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::procfs::{self, CoreTimes};

/// Sampling period.
pub const INTERVAL: Duration = Duration::from_millis(100);

/// One point of the time series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds since the measurement started.
    pub t: f64,
    /// Server process tree CPU over the last interval, in % of one core.
    pub cpu_pct: f64,
    /// Server resident memory, in KiB.
    pub rss_kb: u64,
    /// Busy share of the server's cores, %.
    pub server_cores_pct: f64,
    /// Busy share of the loader's cores, %.
    pub loader_cores_pct: f64,
}

/// What the sampler measured over a whole measurement.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    pub samples: Vec<Sample>,
    pub wall: Duration,
    /// CPU time of the server's process tree.
    pub tree_cpu: Duration,
    /// Busy time of the server's cores (kernel softirq work included), summed over them.
    pub server_cores_busy: Duration,
    pub server_cores_pct: f64,
    pub loader_cores_pct: f64,
    pub rss_peak_kb: u64,
    pub rss_mean_kb: u64,
    /// Processes seen in the server's tree (excluded from "foreign" CPU).
    pub pids: Vec<u32>,
    /// What the server's tree asked of the kernel during the measurement; `None` where
    /// /proc/PID/io could not be read.
    pub kernel: Option<procfs::KernelCounters>,
    /// With [`Watch::perf`]: the tree's (instructions, cycles), or why they could not be
    /// counted (no hardware counters in this VM, `perf_event_paranoid`).
    pub perf: Option<Result<(u64, u64), String>>,
    /// The tree's system calls during the measurement, counted through tracepoints, or why
    /// they could not be; `None` when not asked for. Filled in by the runner, which holds the
    /// counters (they live as long as the target, not one measurement).
    pub syscalls: Option<Result<crate::syscalls::SyscallCounts, String>>,
}

/// A running sampler; [`Sampler::finish`] stops it and returns the measurement.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Measured>>,
}

/// What to sample.
#[derive(Debug, Clone)]
pub struct Watch {
    pub root: u32,
    pub rss_exclude: Vec<String>,
    pub server_cpus: Vec<usize>,
    pub loader_cpus: Vec<usize>,
    /// Also count the tree's instructions and cycles (`--perf-counters`).
    pub perf: bool,
}

impl Sampler {
    /// Starts sampling now.
    #[must_use]
    pub fn start(watch: Watch) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name("lowlat-sampler".into())
            .spawn(move || sample_loop(&watch, &flag))
            .ok();
        Self { stop, handle }
    }

    /// Takes a last sample and returns the whole measurement.
    #[must_use]
    pub fn finish(mut self) -> Measured {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

struct TreeState {
    /// Last seen ticks per pid; a pid's growth is added to `total` at each sample.
    last: HashMap<u32, u64>,
    total: u64,
    seen: Vec<u32>,
    /// False until the first read, whose ticks are the baseline rather than growth.
    primed: bool,
}

impl TreeState {
    fn read(&mut self, w: &Watch, page_kb: u64) -> (u64, u64) {
        let mut grew = 0;
        let mut rss = 0;
        for pid in procfs::proc_tree(w.root) {
            let Some(s) = procfs::proc_sample(pid) else {
                continue;
            };
            let prev = self.last.insert(pid, s.ticks);
            // A pid first seen mid-run counts from zero (a new worker); one seen at the first
            // read is the baseline.
            let base = if self.primed { 0 } else { s.ticks };
            grew += s.ticks.saturating_sub(prev.unwrap_or(base));
            if !w.rss_exclude.iter().any(|x| x == &s.comm) {
                rss += s.rss_pages * page_kb;
            }
            if !self.seen.contains(&pid) {
                self.seen.push(pid);
            }
        }
        self.total += grew;
        self.primed = true;
        (grew, rss)
    }
}

fn sample_loop(w: &Watch, stop: &AtomicBool) -> Measured {
    if !w.loader_cpus.is_empty() {
        let _ = crate::sys::pin_current_thread(&w.loader_cpus);
    }
    let hz = crate::sys::clock_ticks();
    let page_kb = crate::sys::page_size() / 1024;
    let mut tree = TreeState {
        last: HashMap::new(),
        total: 0,
        seen: Vec::new(),
        primed: false,
    };
    let start = Instant::now();
    let c_start = procfs::core_times();
    tree.read(w, page_kb);
    // Kernel counters at the start and the end only: they are cumulative, and reading every
    // thread's status each 100 ms would cost the server's core what it measures.
    let k_start = tree_counters(w.root);
    let perf = w.perf.then(|| open_perf(w.root));
    let mut c_prev: Vec<CoreTimes> = c_start.clone();
    let mut t_prev = start;
    let mut samples = Vec::new();
    let mut next = start + INTERVAL;
    loop {
        let finishing = stop.load(Ordering::Relaxed);
        if !finishing {
            let now = Instant::now();
            if next > now {
                std::thread::sleep((next - now).min(Duration::from_millis(20)));
                continue;
            }
            next += INTERVAL;
        }
        let now = Instant::now();
        let c_now = procfs::core_times();
        let (grew, rss) = tree.read(w, page_kb);
        let dt = now.duration_since(t_prev).as_secs_f64();
        if dt > 0.005 {
            samples.push(Sample {
                t: now.duration_since(start).as_secs_f64(),
                cpu_pct: 100.0 * grew as f64 / hz as f64 / dt,
                rss_kb: rss,
                server_cores_pct: procfs::busy_pct(&c_prev, &c_now, &w.server_cpus),
                loader_cores_pct: procfs::busy_pct(&c_prev, &c_now, &w.loader_cpus),
            });
        }
        c_prev = c_now;
        t_prev = now;
        if finishing {
            break;
        }
    }
    let wall = start.elapsed();
    let kernel = k_start.map(|k0| {
        let mut total = procfs::KernelCounters::default();
        for (pid, now) in tree_counters(w.root).unwrap_or_default() {
            // A process first seen now (a new worker) counts from zero.
            total.add(&now.since(&k0.get(&pid).copied().unwrap_or_default()));
        }
        total
    });
    let perf = perf.map(|opened| {
        let counters = opened?;
        let mut sums = (0u64, 0u64);
        for (instructions, cycles) in &counters {
            sums.0 += instructions.value().map_err(|e| e.to_string())?;
            sums.1 += cycles.value().map_err(|e| e.to_string())?;
        }
        Ok(sums)
    });
    let busy = procfs::busy_jiffies(&c_start, &c_prev, &w.server_cpus);
    let rss: Vec<u64> = samples.iter().map(|s| s.rss_kb).collect();
    Measured {
        wall,
        tree_cpu: Duration::from_secs_f64(tree.total as f64 / hz as f64),
        server_cores_busy: Duration::from_secs_f64(busy as f64 / hz as f64),
        server_cores_pct: procfs::busy_pct(&c_start, &c_prev, &w.server_cpus),
        loader_cores_pct: procfs::busy_pct(&c_start, &c_prev, &w.loader_cpus),
        rss_peak_kb: rss.iter().copied().max().unwrap_or(0),
        rss_mean_kb: if rss.is_empty() {
            0
        } else {
            rss.iter().sum::<u64>() / rss.len() as u64
        },
        pids: tree.seen,
        samples,
        kernel,
        perf,
        syscalls: None,
    }
}

type PerfPair = (crate::sys::PerfCounter, crate::sys::PerfCounter);

/// Opens an instructions and a cycles counter on every thread of the tree (inherited by the
/// threads and processes they start later).
fn open_perf(root: u32) -> Result<Vec<PerfPair>, String> {
    use crate::sys::{perf_counter, PerfEvent};
    let mut out = Vec::new();
    for pid in procfs::proc_tree(root) {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let open = |e| perf_counter(tid, e).map_err(|err| format!("perf_event_open: {err}"));
            out.push((open(PerfEvent::Instructions)?, open(PerfEvent::Cycles)?));
        }
    }
    Ok(out)
}

/// Every process of the tree with its kernel counters; `None` when the root's cannot be read.
fn tree_counters(root: u32) -> Option<HashMap<u32, procfs::KernelCounters>> {
    procfs::kernel_counters(root)?;
    Some(
        procfs::proc_tree(root)
            .into_iter()
            .filter_map(|pid| Some((pid, procfs::kernel_counters(pid)?)))
            .collect(),
    )
}
