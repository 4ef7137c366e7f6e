//! The environment check (`lowlat bench doctor`, and the start of every run): the kernel and
//! process settings that the seed articles had to tune before their numbers meant anything,
//! each with its value, what this run needs, and a one-line fix when it falls short.
//!
//! It changes nothing: fixes are printed for a person to apply. The result is recorded in the
//! results file, so a reader can tell whether a dip at 1,000 connections was the server or a
//! port range.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::machine::{read_trim, Machine};
use crate::spec::Spec;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Meets what the run needs.
    Ok,
    /// Results may be distorted; the fix says how to avoid it.
    Warn,
    /// The run will fail or measure the wrong thing.
    Fail,
    /// Recorded for the reader; nothing to fix.
    Info,
}

/// One checked setting.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub value: String,
    pub need: String,
    pub status: Status,
    /// One-line fix, when the status is not ok.
    pub fix: Option<String>,
}

/// What a run asks of the machine; derived from a spec, or defaults for a bare `doctor`.
#[derive(Debug, Clone)]
pub struct Needs {
    pub max_connections: u32,
    /// Some scenario opens a connection per request, so TIME_WAIT sockets pile up.
    pub closes_connections: bool,
    pub loader_cpus: Vec<usize>,
    /// (target name, its CPUs, its pid when already running)
    pub targets: Vec<(String, Vec<usize>, Option<u32>)>,
    /// The CPUs the services are pinned to.
    pub service_cpus: Vec<usize>,
    /// System calls are to be counted through tracepoints, with tracefs in this directory
    /// (`None` inside: the usual places); `None`: not counted (`--no-syscalls`).
    pub syscalls: Option<Option<std::path::PathBuf>>,
}

impl Needs {
    /// What `spec` needs.
    #[must_use]
    pub fn of(spec: &Spec) -> Self {
        let max_connections = spec
            .scenarios
            .iter()
            .flat_map(|s| s.levels.iter().copied())
            .max()
            .unwrap_or(1);
        Self {
            max_connections,
            closes_connections: spec.scenarios.iter().any(|s| !s.keepalive),
            loader_cpus: spec.loader.cpus.clone(),
            targets: spec
                .targets
                .iter()
                .map(|t| {
                    let pid = match t.launch {
                        crate::spec::Launch::Pid(p) => Some(p),
                        crate::spec::Launch::Command { .. } => None,
                    };
                    (t.name.clone(), t.cpus.clone(), pid)
                })
                .collect(),
            service_cpus: spec
                .services
                .iter()
                .flat_map(|s| s.process.cpus.iter().copied())
                .collect(),
            syscalls: Some(None),
        }
    }

    /// The seed articles' range: up to 1,000 connections, keep-alive and not.
    #[must_use]
    pub fn default_sweep() -> Self {
        Self {
            max_connections: 1000,
            closes_connections: true,
            loader_cpus: vec![],
            targets: vec![],
            service_cpus: vec![],
            syscalls: Some(None),
        }
    }
}

fn sysctl(name: &str) -> Option<String> {
    read_trim(&format!("/proc/sys/{}", name.replace('.', "/")))
}

fn check(
    name: &str,
    value: impl Into<String>,
    need: impl Into<String>,
    status: Status,
    fix: Option<String>,
) -> Check {
    Check {
        name: name.into(),
        value: value.into(),
        need: need.into(),
        status,
        fix,
    }
}

/// Runs every check against `needs`.
#[must_use]
pub fn run(needs: &Needs, machine: &Machine) -> Vec<Check> {
    let mut out = Vec::new();
    let conns = u64::from(needs.max_connections);

    // Each connection to one server address takes a local port; connections closed by the
    // client wait in TIME_WAIT for 60 s holding theirs, so a close-per-request sweep needs
    // twice the level, and keep-alive needs the level plus the previous round's leftovers.
    let ports_need = conns * 2 + 1000;
    match sysctl("net.ipv4.ip_local_port_range") {
        Some(v) => {
            let mut it = v
                .split_ascii_whitespace()
                .filter_map(|x| x.parse::<u64>().ok());
            let (lo, hi) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
            let have = hi.saturating_sub(lo) + 1;
            let ok = have >= ports_need;
            out.push(check(
                "net.ipv4.ip_local_port_range",
                format!("{lo} {hi} ({have} ports)"),
                format!("≥ {ports_need} ports for {conns} connections"),
                if ok { Status::Ok } else { Status::Fail },
                (!ok).then(|| "sysctl -w net.ipv4.ip_local_port_range=\"1024 65535\"".to_string()),
            ));
        }
        None => out.push(check(
            "net.ipv4.ip_local_port_range",
            "unreadable",
            "readable",
            Status::Warn,
            None,
        )),
    }

    let tw = sysctl("net.ipv4.tcp_tw_reuse").unwrap_or_else(|| "?".into());
    let tw_ok = tw == "1" || tw == "2"; // 2 (the default since Linux 4.20) = loopback only, enough here
    let tw_status = match (tw_ok, needs.closes_connections) {
        (true, _) => Status::Ok,
        (false, true) => Status::Fail,
        (false, false) => Status::Warn,
    };
    out.push(check(
        "net.ipv4.tcp_tw_reuse",
        tw.clone(),
        "1, or 2 (loopback only): reuse TIME_WAIT ports for new outgoing connections",
        tw_status,
        (!tw_ok).then(|| "sysctl -w net.ipv4.tcp_tw_reuse=1".to_string()),
    ));

    match sysctl("net.ipv4.tcp_tw_recycle") {
        Some(v) if v != "0" => out.push(check(
            "net.ipv4.tcp_tw_recycle",
            v,
            "0: it drops connections from clients behind NAT",
            Status::Warn,
            Some("sysctl -w net.ipv4.tcp_tw_recycle=0".into()),
        )),
        Some(v) => out.push(check("net.ipv4.tcp_tw_recycle", v, "0", Status::Ok, None)),
        None => out.push(check(
            "net.ipv4.tcp_tw_recycle",
            "absent",
            "nothing: removed in Linux 4.12 because it broke clients behind NAT; tcp_tw_reuse is the safe setting",
            Status::Info,
            None,
        )),
    }

    let fin = sysctl("net.ipv4.tcp_fin_timeout").and_then(|v| v.parse::<u64>().ok());
    out.push(match fin {
        Some(v) => check(
            "net.ipv4.tcp_fin_timeout",
            format!("{v} s"),
            "≤ 60 s (orphaned FIN_WAIT2 sockets hold ports and memory this long)",
            if v <= 60 { Status::Ok } else { Status::Warn },
            (v > 60).then(|| "sysctl -w net.ipv4.tcp_fin_timeout=15".to_string()),
        ),
        None => check(
            "net.ipv4.tcp_fin_timeout",
            "unreadable",
            "≤ 60 s",
            Status::Warn,
            None,
        ),
    });

    // The listen backlog is capped by somaxconn; a burst of `conns` connects that overflows it
    // turns into SYN retries one second later, which shows up as a latency cliff.
    for (name, fix_name) in [
        ("net.core.somaxconn", "net.core.somaxconn"),
        (
            "net.ipv4.tcp_max_syn_backlog",
            "net.ipv4.tcp_max_syn_backlog",
        ),
    ] {
        let v = sysctl(name).and_then(|v| v.parse::<u64>().ok());
        let want = conns.max(1024);
        out.push(match v {
            Some(v) => check(
                name,
                v.to_string(),
                format!("≥ {want} (a burst of {conns} connects must fit the accept queue)"),
                if v >= conns { Status::Ok } else { Status::Warn },
                (v < conns).then(|| format!("sysctl -w {fix_name}={}", want.next_power_of_two())),
            ),
            None => check(name, "unreadable", format!("≥ {want}"), Status::Warn, None),
        });
    }

    let fd_need = conns + 256;
    let (soft, hard) = crate::sys::nofile_limit();
    let can_raise = hard >= fd_need;
    out.push(check(
        "open files (loader)",
        format!("soft {}, hard {}", fmt_limit(soft), fmt_limit(hard)),
        format!("≥ {fd_need} (one per connection, plus some)"),
        if soft >= fd_need {
            Status::Ok
        } else if can_raise {
            Status::Info
        } else {
            Status::Fail
        },
        if soft >= fd_need {
            None
        } else if can_raise {
            Some("none: lowlat bench raises its soft limit to the hard one at start".into())
        } else {
            Some(format!(
                "ulimit -Hn {} (or raise nofile in /etc/security/limits.conf)",
                fd_need.max(65536)
            ))
        },
    ));
    for (name, _, pid) in &needs.targets {
        if let Some(pid) = pid {
            let v = crate::procfs::nofile_of(*pid);
            out.push(target_nofile(name, v, fd_need));
        }
    }

    out.push(check(
        "CPU",
        format!("{} × {}", machine.cpus, machine.cpu_model),
        "recorded",
        Status::Info,
        None,
    ));
    let smt = machine
        .smt_groups
        .iter()
        .any(|g| g.contains(',') || g.contains('-'));
    out.push(check(
        "SMT siblings",
        if machine.smt_groups.is_empty() {
            "unknown".to_string()
        } else {
            machine.smt_groups.join(" ")
        },
        "server and loader on different physical cores",
        Status::Info,
        None,
    ));
    out.push(if machine.governors.is_empty() {
        check(
            "frequency governor",
            "none exposed (fixed clock or a VM)",
            "performance, when there is one",
            Status::Info,
            None,
        )
    } else {
        let all_perf = machine.governors.iter().all(|g| g == "performance");
        check(
            "frequency governor",
            machine.governors.join(", "),
            "performance (other governors change the clock during a run)",
            if all_perf { Status::Ok } else { Status::Warn },
            (!all_perf).then(|| "cpupower frequency-set -g performance".to_string()),
        )
    });

    // Sharing a core makes the server and the loader compete, and charges one's work to the other's
    // core in µs/request; SMT siblings share a core's execution units the same way.
    for (name, cpus, _) in &needs.targets {
        let lc = &needs.loader_cpus;
        let (value, status, fix) = if cpus.is_empty() || lc.is_empty() {
            ("not pinned".to_string(), Status::Warn, Some("set cpus = [...] on the target and on [loader] (server CPU 0, loader CPU 1 on two cores)".to_string()))
        } else if cpus.iter().any(|c| lc.contains(c)) {
            (
                format!("server {cpus:?}, loader {lc:?}: shared"),
                Status::Warn,
                Some("give the target and the loader disjoint cpus".to_string()),
            )
        } else if smt
            && cpus
                .iter()
                .any(|c| machine.siblings_of(*c).iter().any(|s| lc.contains(s)))
        {
            (
                format!("server {cpus:?}, loader {lc:?}: SMT siblings"),
                Status::Warn,
                Some("pick loader cpus on other physical cores (see SMT siblings)".to_string()),
            )
        } else {
            (format!("server {cpus:?}, loader {lc:?}"), Status::Ok, None)
        };
        out.push(check(
            &format!("shared cores ({name})"),
            value,
            "disjoint physical cores",
            status,
            fix,
        ));
    }
    if let Some(c) = cpu_out_of_range(needs, machine) {
        out.push(c);
    }
    if let Some(dir) = &needs.syscalls {
        out.push(syscall_tracepoints(dir.as_deref()));
    }
    out
}

/// Whether the server's system calls can be counted by kind (tracefs mounted, the tracepoints
/// there, `perf_event_open` allowed). Without them a run goes on and its rows say why they
/// have no syscall figures.
#[must_use]
pub fn syscall_tracepoints(dir: Option<&std::path::Path>) -> Check {
    let need = "tracefs mounted and perf_event_open allowed: system calls per request by kind";
    match crate::syscalls::probe(dir) {
        Ok(tp) => check("syscall tracepoints", tp.describe(), need, Status::Ok, None),
        Err(why) => check(
            "syscall tracepoints",
            why.reason,
            need,
            Status::Warn,
            Some(why.fix),
        ),
    }
}

/// The open-file limit a target runs with (started targets inherit the loader's).
#[must_use]
pub fn target_nofile(name: &str, v: Option<u64>, fd_need: u64) -> Check {
    match v {
        Some(v) => check(
            &format!("open files ({name})"),
            fmt_limit(v),
            format!("≥ {fd_need}"),
            if v >= fd_need { Status::Ok } else { Status::Warn },
            (v < fd_need).then(|| format!("raise the server's limit (ulimit -n {}; or its own setting, e.g. nginx worker_rlimit_nofile)", fd_need.max(65536))),
        ),
        None => check(&format!("open files ({name})"), "unknown (process not readable)", format!("≥ {fd_need}"), Status::Info, None),
    }
}

fn cpu_out_of_range(needs: &Needs, machine: &Machine) -> Option<Check> {
    let all = needs
        .loader_cpus
        .iter()
        .chain(needs.targets.iter().flat_map(|t| t.1.iter()))
        .chain(needs.service_cpus.iter());
    let bad: Vec<usize> = all.copied().filter(|&c| c >= machine.cpus).collect();
    (!bad.is_empty()).then(|| {
        check(
            "CPU numbers",
            format!("{bad:?} do not exist"),
            format!("CPUs 0–{}", machine.cpus - 1),
            Status::Fail,
            Some("edit the spec's cpus lists for this machine".into()),
        )
    })
}

fn fmt_limit(v: u64) -> String {
    if v == u64::MAX || v == libc::RLIM_INFINITY {
        "unlimited".into()
    } else {
        v.to_string()
    }
}

/// True when some check would make the run fail or measure the wrong thing.
#[must_use]
pub fn has_failures(checks: &[Check]) -> bool {
    checks.iter().any(|c| c.status == Status::Fail)
}

/// The checks as an aligned text table with fixes underneath.
#[must_use]
pub fn render(checks: &[Check]) -> String {
    let w = checks
        .iter()
        .map(|c| c.name.chars().count())
        .max()
        .unwrap_or(10);
    let mut s = String::new();
    for c in checks {
        let mark = match c.status {
            Status::Ok => "ok  ",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
            Status::Info => "info",
        };
        if c.status == Status::Info && c.need == "recorded" {
            let _ = writeln!(s, "{mark}  {:w$}  {}", c.name, c.value);
        } else {
            let _ = writeln!(s, "{mark}  {:w$}  {}   (needs {})", c.name, c.value, c.need);
        }
        if let Some(fix) = &c.fix {
            let _ = writeln!(s, "      {:w$}  fix: {fix}", "");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_setting_is_checked() {
        let needs = Needs {
            max_connections: 1000,
            closes_connections: true,
            loader_cpus: vec![1],
            targets: vec![("a".into(), vec![1], None)],
            service_cpus: vec![],
            syscalls: Some(None),
        };
        let checks = run(&needs, &Machine::detect());
        for name in [
            "ip_local_port_range",
            "tcp_tw_reuse",
            "tcp_tw_recycle",
            "tcp_fin_timeout",
            "somaxconn",
            "tcp_max_syn_backlog",
            "open files (loader)",
            "CPU",
            "SMT",
            "governor",
            "shared cores (a)",
            "syscall tracepoints",
        ] {
            assert!(
                checks.iter().any(|c| c.name.contains(name)),
                "{name} missing:\n{}",
                render(&checks)
            );
        }
        let shared = checks
            .iter()
            .find(|c| c.name == "shared cores (a)")
            .unwrap();
        assert_eq!(shared.status, Status::Warn);
        assert!(shared.fix.is_some());
        for c in &checks {
            assert!(
                c.status == Status::Ok
                    || c.status == Status::Info
                    || c.fix.is_some()
                    || c.value.contains("unreadable"),
                "{c:?} has no fix"
            );
        }
    }
}
