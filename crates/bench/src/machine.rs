//! What machine a result came from: CPU model and count, SMT siblings, frequency governor,
//! kernel, memory. Recorded in every results file and shown on the report, because a req/s
//! figure means nothing without the machine it was measured on.

use std::fs;

use serde::{Deserialize, Serialize};

/// The machine description recorded with results.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Machine {
    pub cpu_model: String,
    /// Logical CPUs online.
    pub cpus: usize,
    /// Groups of logical CPUs sharing one physical core (SMT siblings), e.g. `["0,4", "1,5"]`.
    pub smt_groups: Vec<String>,
    /// Frequency governor of each CPU that has cpufreq, e.g. `"performance"`; empty when the
    /// machine exposes none (common in VMs).
    pub governors: Vec<String>,
    pub kernel: String,
    pub memory_mib: u64,
}

impl Machine {
    /// Describes this machine from /proc and /sys.
    #[must_use]
    pub fn detect() -> Self {
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                matches!(k.trim(), "model name" | "Model" | "cpu model")
                    .then(|| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".to_string());
        let cpus = crate::procfs::core_times().len().max(1);
        let mut smt_groups: Vec<String> = (0..cpus)
            .filter_map(|c| {
                read_trim(&format!(
                    "/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list"
                ))
            })
            .collect();
        smt_groups.sort();
        smt_groups.dedup();
        let mut governors: Vec<String> = (0..cpus)
            .filter_map(|c| {
                read_trim(&format!(
                    "/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_governor"
                ))
            })
            .collect();
        governors.dedup();
        let kernel = format!(
            "Linux {} {}",
            read_trim("/proc/sys/kernel/osrelease").unwrap_or_default(),
            read_trim("/proc/sys/kernel/version").unwrap_or_default()
        );
        let memory_mib = fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                let l = m.lines().find(|l| l.starts_with("MemTotal:"))?;
                l.split_ascii_whitespace().nth(1)?.parse::<u64>().ok()
            })
            .map_or(0, |kb| kb / 1024);
        Self {
            cpu_model,
            cpus,
            smt_groups,
            governors,
            kernel,
            memory_mib,
        }
    }

    /// The SMT sibling group holding `cpu`, as CPU numbers.
    #[must_use]
    pub fn siblings_of(&self, cpu: usize) -> Vec<usize> {
        self.smt_groups
            .iter()
            .filter_map(|g| crate::spec::parse_cpu_list(g))
            .find(|g| g.contains(&cpu))
            .unwrap_or_else(|| vec![cpu])
    }

    /// One line: `"2 × Intel(R) Xeon(R) ..., Linux 6.1.0, 24 GiB"`.
    #[must_use]
    pub fn summary(&self) -> String {
        format!(
            "{} × {}, {}, {} MiB",
            self.cpus, self.cpu_model, self.kernel, self.memory_mib
        )
    }
}

pub(crate) fn read_trim(path: &str) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}
