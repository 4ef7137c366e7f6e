//! Reading /proc: a process tree's CPU ticks and memory, every core's busy time, and the CPU
//! spent by everything else on the machine. Pure readers; the sampler decides when to call them.
//!
//! Core busy time comes from /proc/stat and includes irq and softirq time, which is where
//! loopback TCP does much of its work and which no process is charged for; that is why a
//! server's cost is measured on its cores, not only in its own utime + stime.

use std::collections::HashMap;
use std::fs;

/// One process's accounting at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcSample {
    pub pid: u32,
    /// utime + stime, in clock ticks.
    pub ticks: u64,
    /// Resident set, in pages.
    pub rss_pages: u64,
    pub comm: String,
    /// A kernel thread (never part of a server's or a neighbour's user work).
    pub kthread: bool,
}

/// Reads /proc/PID/stat; `None` when the process is gone.
#[must_use]
pub fn proc_sample(pid: u32) -> Option<ProcSample> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(pid, &s)
}

/// Parses a /proc/PID/stat line. The command name sits in parentheses and may itself hold
/// spaces and parentheses, so fields are counted from the last `)`.
#[must_use]
pub fn parse_stat(pid: u32, s: &str) -> Option<ProcSample> {
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let comm = s.get(open + 1..close)?.to_string();
    let f: Vec<&str> = s.get(close + 2..)?.split_ascii_whitespace().collect();
    // After the comm: state(0) ppid(1) ... flags(6) ... utime(11) stime(12) ... rss(21)
    let flags: u64 = f.get(6)?.parse().ok()?;
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    let rss: i64 = f.get(21)?.parse().ok()?;
    Some(ProcSample {
        pid,
        ticks: utime + stime,
        rss_pages: u64::try_from(rss).unwrap_or(0),
        comm,
        kthread: flags & 0x0020_0000 != 0, // PF_KTHREAD
    })
}

/// What the kernel did for one process, cumulative since it started: context switches and
/// page faults. Not its system calls: /proc/PID/io's `syscr`/`syscw` count only the VFS's
/// read- and write-class calls (none for a server that uses `recvfrom`/`sendto`), so every call
/// is counted through the tracepoints instead (`crate::syscalls`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelCounters {
    /// Context switches the process asked for (it blocked: waiting in epoll, on a lock).
    pub voluntary_switches: u64,
    /// Context switches forced on it (preempted).
    pub involuntary_switches: u64,
    /// Page faults served without I/O.
    pub minor_faults: u64,
}

impl KernelCounters {
    /// `self - earlier`, each counter at least 0.
    #[must_use]
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            voluntary_switches: self
                .voluntary_switches
                .saturating_sub(earlier.voluntary_switches),
            involuntary_switches: self
                .involuntary_switches
                .saturating_sub(earlier.involuntary_switches),
            minor_faults: self.minor_faults.saturating_sub(earlier.minor_faults),
        }
    }

    pub fn add(&mut self, o: &Self) {
        self.voluntary_switches += o.voluntary_switches;
        self.involuntary_switches += o.involuntary_switches;
        self.minor_faults += o.minor_faults;
    }
}

/// Reads a process's [`KernelCounters`]: the context switches of every thread
/// (/proc/PID/task/*/status: the process's own status shows its first thread only), and the
/// process-wide minor faults of /proc/PID/stat. `None` when the process is gone.
#[must_use]
pub fn kernel_counters(pid: u32) -> Option<KernelCounters> {
    let field = |text: &str, name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let mut c = KernelCounters::default();
    if let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(st) = fs::read_to_string(t.path().join("status")) {
                c.voluntary_switches += field(&st, "voluntary_ctxt_switches:");
                c.involuntary_switches += field(&st, "nonvoluntary_ctxt_switches:");
            }
        }
    }
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let close = stat.rfind(')')?;
    // After the comm: state(0) ppid(1) pgrp(2) session(3) tty(4) tpgid(5) flags(6) minflt(7)
    c.minor_faults = stat
        .get(close + 2..)?
        .split_ascii_whitespace()
        .nth(7)?
        .parse()
        .ok()?;
    Some(c)
}

fn ppid_of(pid: u32) -> Option<u32> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let close = s.rfind(')')?;
    s.get(close + 2..)?
        .split_ascii_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The process `root` and all its descendants that exist now.
#[must_use]
pub fn proc_tree(root: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![root];
    let mut children_file_works = true;
    while let Some(p) = todo.pop() {
        let Ok(tasks) = fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        out.push(p);
        for t in tasks.flatten() {
            match fs::read_to_string(t.path().join("children")) {
                Ok(c) => todo.extend(
                    c.split_ascii_whitespace()
                        .filter_map(|x| x.parse::<u32>().ok()),
                ),
                Err(_) => children_file_works = false,
            }
        }
    }
    if children_file_works {
        return out;
    }
    // Kernels without CONFIG_PROC_CHILDREN: walk every process's parent link instead.
    let parents: Vec<(u32, u32)> = all_pids()
        .into_iter()
        .filter_map(|p| Some((p, ppid_of(p)?)))
        .collect();
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out.retain(|p| fs::metadata(format!("/proc/{p}")).is_ok());
    out
}

/// Every process id in /proc.
#[must_use]
pub fn all_pids() -> Vec<u32> {
    fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// utime + stime of every user process, for measuring the neighbours' CPU use.
#[must_use]
pub fn all_user_ticks() -> HashMap<u32, (u64, String)> {
    all_pids()
        .into_iter()
        .filter_map(proc_sample)
        .filter(|s| !s.kthread)
        .map(|s| (s.pid, (s.ticks, s.comm)))
        .collect()
}

/// Ticks used between two [`all_user_ticks`] snapshots by processes outside `exclude`, and the
/// three biggest users (ticks, name).
#[must_use]
pub fn foreign_ticks(
    a0: &HashMap<u32, (u64, String)>,
    a1: &HashMap<u32, (u64, String)>,
    exclude: &[u32],
) -> (u64, Vec<(u64, String)>) {
    let mut total = 0;
    let mut top = Vec::new();
    for (pid, (t1, comm)) in a1 {
        if exclude.contains(pid) {
            continue;
        }
        let d = t1.saturating_sub(a0.get(pid).map_or(0, |x| x.0));
        if d > 0 {
            total += d;
            top.push((d, comm.clone()));
        }
    }
    top.sort_unstable_by(|a, b| b.cmp(a));
    top.truncate(3);
    (total, top)
}

/// Busy and total jiffies of one core.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoreTimes {
    pub busy: u64,
    pub total: u64,
}

/// Every core's times from /proc/stat, indexed by CPU number (absent CPUs are zero).
#[must_use]
pub fn core_times() -> Vec<CoreTimes> {
    fs::read_to_string("/proc/stat")
        .map(|s| parse_proc_stat(&s))
        .unwrap_or_default()
}

/// Parses /proc/stat's `cpuN` lines. Busy = everything but idle and iowait (so user, nice,
/// system, irq, softirq and steal count); guest time is already inside user.
#[must_use]
pub fn parse_proc_stat(s: &str) -> Vec<CoreTimes> {
    let mut out: Vec<CoreTimes> = Vec::new();
    for line in s.lines() {
        // `cpu ` (the all-core sum) is skipped: only `cpuN` lines.
        let Some(rest) = line
            .strip_prefix("cpu")
            .filter(|r| r.starts_with(|c: char| c.is_ascii_digit()))
        else {
            continue;
        };
        let mut it = rest.split_ascii_whitespace();
        let Some(Ok(n)) = it.next().map(str::parse::<usize>) else {
            continue;
        };
        let v: Vec<u64> = it.take(8).filter_map(|x| x.parse().ok()).collect();
        if v.len() < 5 {
            continue;
        }
        let total: u64 = v.iter().sum();
        let busy = total - v[3] - v[4];
        if out.len() <= n {
            out.resize(n + 1, CoreTimes::default());
        }
        out[n] = CoreTimes { busy, total };
    }
    out
}

/// Busy share (0–100 %) of `cpus` between two snapshots, averaged over those cores.
#[must_use]
pub fn busy_pct(c0: &[CoreTimes], c1: &[CoreTimes], cpus: &[usize]) -> f64 {
    let (mut busy, mut total) = (0u64, 0u64);
    for &c in cpus {
        let (a, b) = (
            c0.get(c).copied().unwrap_or_default(),
            c1.get(c).copied().unwrap_or_default(),
        );
        busy += b.busy.saturating_sub(a.busy);
        total += b.total.saturating_sub(a.total);
    }
    if total == 0 {
        0.0
    } else {
        100.0 * busy as f64 / total as f64
    }
}

/// Busy jiffies of `cpus` between two snapshots, summed.
#[must_use]
pub fn busy_jiffies(c0: &[CoreTimes], c1: &[CoreTimes], cpus: &[usize]) -> u64 {
    cpus.iter()
        .map(|&c| {
            let (a, b) = (
                c0.get(c).copied().unwrap_or_default(),
                c1.get(c).copied().unwrap_or_default(),
            );
            b.busy.saturating_sub(a.busy)
        })
        .sum()
}

/// The CPUs a process may run on (`Cpus_allowed_list` in /proc/PID/status).
#[must_use]
pub fn cpus_allowed(pid: u32) -> Option<Vec<usize>> {
    let s = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    crate::spec::parse_cpu_list(line)
}

/// A process's soft open-file limit (`Max open files` in /proc/PID/limits).
#[must_use]
pub fn nofile_of(pid: u32) -> Option<u64> {
    let s = fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = s.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line["Max open files".len()..]
        .split_ascii_whitespace()
        .next()?;
    if soft == "unlimited" {
        Some(u64::MAX)
    } else {
        soft.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_awkward_comm() {
        let line = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 2 0 100 1000000 250 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";
        let s = parse_stat(42, line).unwrap();
        assert_eq!(s.comm, "a) b (c)");
        assert_eq!(s.ticks, 10);
        assert_eq!(s.rss_pages, 250);
        assert!(!s.kthread);
    }

    #[test]
    fn proc_stat_busy_includes_softirq() {
        let s = "cpu  10 0 10 100 0 0 0 0 0 0\ncpu0 1 0 2 50 3 4 5 6 0 0\ncpu1 0 0 0 10 0 0 0 0 0 0\nintr 1\n";
        let c = parse_proc_stat(s);
        assert_eq!(c.len(), 2);
        assert_eq!(
            c[0],
            CoreTimes {
                busy: 1 + 2 + 4 + 5 + 6,
                total: 71
            }
        );
        assert!(
            (busy_pct(&[CoreTimes::default(); 2], &c, &[0]) - 100.0 * 18.0 / 71.0).abs() < 1e-9
        );
    }

    #[test]
    fn own_tree_and_limits() {
        let me = std::process::id();
        assert!(proc_tree(me).contains(&me));
        assert!(proc_sample(me).unwrap().ticks < u64::MAX);
        assert!(nofile_of(me).unwrap() > 0);
        assert!(!cpus_allowed(me).unwrap().is_empty());
        assert!(!core_times().is_empty());
    }
}
